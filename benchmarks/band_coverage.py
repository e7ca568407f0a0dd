"""Would a different host-noise measurement have held the actual totals? Re-scores committed accuracy rows.

trainwise's band adds, in quadrature, (iterations + validation) × the host's 90th-percentile stray for a
window as long as the profile's sampled steps (trainwise.predict.same_machine.trainwise_estimate). A
benchmark row keeps its band, the stray its profile carried (`host_stray`) and the seconds of steps it
sampled (`sampled_steps_s`), so the band it would have had with another measurement — here the envelope
of several (trainwise.profile.host_noise.envelope, what profiles carry now) — follows without rerunning:

    other = sqrt(half² − (base × stray_then)²);  half_now = sqrt(other² + (base × stray_now)²)

with half the band's symmetric half-width (its narrower side: the optimizer-state model only widens one)
and base the row's iterations + validation where it keeps the prediction's parts (the integrations
benchmark), else its predicted total: that leaves the init (1–3 % of these runs) in, overstating the host
term by as much. The asymmetric parts move with the band unchanged.

Writes benchmarks/results/band_coverage.json. Run:
    .venv/bin/python benchmarks/band_coverage.py --rows same_machine_prediction.json \
        --host-noise host_noise_20261125_2020.json host_noise.json
(file names relative to benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import math
from datetime import datetime, timezone
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.profile import host_noise
from _machine import machine

RESULTS = Path(__file__).parent / "results"


def rescored_band(row: dict, stray_now: float) -> tuple[float, float]:
    """The row's band with its host term taken at stray_now instead of the stray its profile carried."""
    low, high = row["band_s"]
    predicted = row["predicted_s"]
    total_s = predicted["trainwise"] if isinstance(predicted, dict) else predicted
    parts = row.get("predicted_breakdown_s")
    base_s = parts["iterations_s"] + parts["validation_s"] if parts else total_s
    half = min(total_s - low, high - total_s)  # the symmetric part: the optimizer-state model only widens one side
    other = math.sqrt(max(0.0, half ** 2 - (base_s * row["host_stray"]) ** 2))
    delta = math.hypot(other, base_s * stray_now) - half
    return low - delta, high + delta


def rescore(rows: list[dict], noise: host_noise.HostNoise) -> dict:
    scored = []
    for row in rows:
        if not row.get("band_s") or row.get("host_stray") is None or row.get("sampled_steps_s") is None:
            continue
        stray_now = noise.stray_fraction(max(row["sampled_steps_s"], 1e-3))
        low, high = rescored_band(row, stray_now)
        actual = row["actual_s"]
        scored.append({"workload": row.get("integration") or row["workload"], "batch_size": row["batch_size"], "actual_s": actual,
                       "band_then_s": row["band_s"], "stray_then": row["host_stray"],
                       "inside_then": row["band_s"][0] <= actual <= row["band_s"][1],
                       "band_now_s": [low, high], "stray_now": stray_now, "inside_now": low <= actual <= high})
    return {"rows": scored, "inside_then": sum(r["inside_then"] for r in scored),
            "inside_now": sum(r["inside_now"] for r in scored), "of": len(scored)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", required=True, help="accuracy results JSON(s) under benchmarks/results/")
    parser.add_argument("--host-noise", nargs="+", required=True,
                        help="host_noise benchmark JSON(s) under benchmarks/results/: their envelope is used")
    args = parser.parse_args()
    measurements = [host_noise.HostNoise.model_validate(json.loads((RESULTS / name).read_text())["host_noise"])
                    for name in args.host_noise]
    noise = host_noise.envelope(measurements)
    per_file = {name: rescore(json.loads((RESULTS / name).read_text())["rows"], noise) for name in args.rows}
    summary = {"inside_then": sum(v["inside_then"] for v in per_file.values()),
               "inside_now": sum(v["inside_now"] for v in per_file.values()),
               "rows": sum(v["of"] for v in per_file.values()),
               "envelope_of": args.host_noise,
               "meaning": "actual totals inside trainwise's band: 'then' with the host noise the profiles carried, 'now' "
                          "with the envelope of the given measurements (what profiles carry since the store keeps them all)"}
    result = {"benchmark": "band_coverage", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "summary": summary, "files": per_file}
    atomic_write_text(RESULTS / "band_coverage.json", json.dumps(result, indent=1))
    for name, scored in per_file.items():
        print(f"{name}: {scored['inside_then']}/{scored['of']} inside then, {scored['inside_now']}/{scored['of']} with the envelope")
        for row in scored["rows"]:
            print(f"  {row['workload']} {row['batch_size']}: actual {row['actual_s']:.0f} s, band "
                  f"{row['band_then_s'][0]:.0f}–{row['band_then_s'][1]:.0f} (±{row['stray_then']:.1%}) → "
                  f"{row['band_now_s'][0]:.0f}–{row['band_now_s'][1]:.0f} (±{row['stray_now']:.1%})")


if __name__ == "__main__":
    main()
