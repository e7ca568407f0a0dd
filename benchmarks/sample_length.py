"""How long a sampled profile should sample, judged on one long run: profiles that stop at the first steady
verdict (`--averaging-seconds 0`: ~3 s of steps) and profiles that average up to 30 s of steps (the default),
alternating, then the run itself, plain (no trainwise), whose launch → exit time is the truth.

A host whose speed wanders over tens of seconds (the 2-core VM; the lent GPU machines' CPUs) makes a 3-s sample
catch one level of it. Each prediction is kept with and without the host-level correction.
Writes benchmarks/results/sample_length.json; `summary`: per arm (short, averaging) the median and max error,
with and without the correction, the spread of the arm's predictions (max/min − 1) and its median sampled seconds.
Run: PYTHONPATH=src .venv/bin/python benchmarks/sample_length.py [--loop gan_two_optimizers] [--epochs 8]
     [--scale 100] [--repeats 3]   (the default: a ~20-minute run on the 2-core VM, 25 minutes in all)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.predict.same_machine import predict_total, relative_error, sampled_steps_s
from trainwise.profile.runner import ProfileOptions, run_profile
from _machine import machine
from client_scripts import LOOPS, command, plain_run_s

RESULTS = Path(__file__).parent / "results"
ARMS = {"short": 0.0, "averaging": ProfileOptions.averaging_seconds}


def profile_row(argv: list[str], arm: str) -> dict:
    profile = run_profile(argv, ProfileOptions(averaging_seconds=ARMS[arm]), workload="sample_length", quiet=True)
    epochs = profile.script_epochs.epochs
    return {"arm": arm, "averaging_seconds": ARMS[arm], "at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "profile_wall_s": profile.process_wall_s, "sampled_s": sampled_steps_s(profile),
            "steady_step_ms": profile.steady_state.iteration.mean_s * 1e3,
            "sampling_stopped_by": profile.steady_state.sampling_stopped_by,
            "predicted_s": predict_total(profile, epochs).total_s,
            "predicted_uncorrected_s": predict_total(profile, epochs, level_correction=False).total_s}


def summary_of(rows: list[dict]) -> dict:
    out = {}
    for arm in ARMS:
        mine = [r for r in rows if r["arm"] == arm]
        for suffix, key in (("", "error"), ("_uncorrected", "error_uncorrected")):
            errors = [r[key] for r in mine]
            out[f"{arm}_median_abs_error{suffix}"] = statistics.median(errors)
            out[f"{arm}_max_abs_error{suffix}"] = max(errors)
        predicted = [r["predicted_uncorrected_s"] for r in mine]
        out[f"{arm}_spread_uncorrected"] = max(predicted) / min(predicted) - 1
        out[f"{arm}_median_sampled_s"] = statistics.median(r["sampled_s"] for r in mine)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--loop", default="gan_two_optimizers", choices=sorted(LOOPS))
    parser.add_argument("--epochs", type=int, default=8, help="the loop's epoch count (its own flag)")
    parser.add_argument("--scale", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=3, help="profiles per arm")
    parser.add_argument("--results", type=Path, default=RESULTS / "sample_length.json")
    args = parser.parse_args()
    if not 0 < args.scale <= 100 or not 1 <= args.epochs <= 100 or not 1 <= args.repeats <= 10:
        sys.exit("error: --scale must be in (0, 100], --epochs in [1, 100] and --repeats in [1, 10]")
    if not LOOPS[args.loop][1]:
        sys.exit(f"error: {args.loop}'s size flag is its epoch count: choose a loop with an epoch flag of its own")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="trainwise-sample-length-") as workdir:
        epoch_flag = LOOPS[args.loop][1][0]
        argv = command(args.loop, args.scale, workdir) + [epoch_flag, str(args.epochs)]  # argparse keeps the last
        rows = []
        for k in range(args.repeats):
            for arm in (("short", "averaging") if k % 2 == 0 else ("averaging", "short")):
                rows.append(profile_row(argv, arm))
                print({key: rows[-1][key] for key in ("arm", "sampled_s", "steady_step_ms", "predicted_s")}, flush=True)
        actual_s = plain_run_s(argv)
    for row in rows:
        row.update(actual_s=actual_s, error=relative_error(actual_s, row["predicted_s"]),
                   error_uncorrected=relative_error(actual_s, row["predicted_uncorrected_s"]))
    result = {"benchmark": "sample_length", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "command": [Path(argv[1]).name, *argv[2:]], "actual_s": actual_s,
              "summary": summary_of(rows), "rows": rows, "benchmark_wall_s": time.time() - started}
    atomic_write_text(args.results, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result["summary"], indent=2))


if __name__ == "__main__":
    main()
