"""trainwise's intra-node all-reduce models against XLA's measured NCCL all-reduces on 8-GPU H100 and B200 machines.

A data-parallel prediction on one machine prices the gradient all-reduce twice over: `trainwise plan` and
`predict_ddp` with `data_parallel.allreduce_time_s` over `intra_node_link` (ring or double binary tree, the
catalog's effective NVLink bandwidth per device, 5 µs a hop: the plan's `algorithm="auto"`), and the device model's
whole-machine step with one ring all-reduce of the gradient at the fitted link efficiency plus a fitted constant
(`device_model.predict_iteration`). Neither was fitted on a measured collective. XLA's table
(`benchmarks/data/xla_collectives.csv`, tools/xla_collectives.py: one f32 all-reduce per size from 1 KiB to 2 GiB,
over one group of 8, two of 4 and four of 2 GPUs, median of 20 runs through XLA's NCCL backend) is the evaluation:
every row is held out.

Headline (`summary`): median |error| of the plan's all-reduce on the sizes DDP sends (its buckets: 1-100 MiB) over
all eight GPUs of each machine (`allreduce_median_abs_error`), and the same for every grouping; the device model's
term on whole gradients (16 MiB - 2 GiB); the bus bandwidth the machines reached at 1 GiB against the catalog's
effective figure (the device model's ring at its fitted link efficiency, `device_model_wire_*`; its fitted per-step
constant, `t_allreduce_s`, stands for all of a step's DDP work, not one all-reduce, so it is reported apart); the
small-message floor (XLA's run time of an all-reduce under 64 KiB, launch included).
Run: .venv/bin/python benchmarks/collectives.py (a second; reads no GPU).
"""

from __future__ import annotations

import csv
import json
import statistics
from datetime import datetime, timezone
from pathlib import Path

from _machine import machine

from trainwise._io import atomic_write_text
from trainwise.catalog import load_catalog
from trainwise.predict import data_parallel as dp
from trainwise.predict.accelerator_features import link_bandwidth_gbs
from trainwise.predict.device_params import load_params

ROOT = Path(__file__).resolve().parent
DATA = ROOT / "data" / "xla_collectives.csv"
RESULTS = ROOT / "results"
MIB = 1 << 20
DDP_BYTES = (1 * MIB, 100 * MIB)        # DDP's first bucket (1 MiB) to a few of its 25-MiB buckets
GRADIENT_BYTES = (16 * MIB, 2048 * MIB)  # a whole model's gradient, as the device model reduces it


def load_rows(path: Path = DATA) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return [{**r, "bytes": int(r["bytes"]), "devices_per_group": int(r["devices_per_group"]),
             "time_s": float(r["time_us"]) * 1e-6} for r in rows if r["op"] == "all-reduce"]


def predictions(row: dict, catalog, params) -> dict:
    acc = catalog.accelerator(row["gpu"])
    k, nbytes = row["devices_per_group"], row["bytes"]
    link = dp.intra_node_link(acc)
    device_bps = link_bandwidth_gbs(acc) * 1e9 * params.link_efficiency
    wire_s = 2.0 * (k - 1) / k * nbytes / device_bps
    return {"plan_auto_s": dp.allreduce_time_s(nbytes, k, link, "auto"),
            "ring_s": dp.allreduce_time_s(nbytes, k, link, "ring"),
            "device_model_wire_s": wire_s, "device_model_s": wire_s + params.t_allreduce_s}


def _median_abs(errors: list[float]) -> float | None:
    return round(statistics.median(abs(e) for e in errors), 4) if errors else None


def evaluate(rows: list[dict]) -> dict:
    catalog, params = load_catalog(), load_params()
    out_rows = []
    for r in rows:
        pred = predictions(r, catalog, params)
        out_rows.append({"gpu": r["gpu"], "devices": r["devices_per_group"], "groups": int(r["groups"]),
                         "bytes": r["bytes"], "measured_s": r["time_s"],
                         **{k: round(v, 9) for k, v in pred.items()},
                         **{k.replace("_s", "_error"): round(v / r["time_s"] - 1, 4) for k, v in pred.items()}})

    def pick(lo: int, hi: int, devices: int | None = None, gpu: str | None = None) -> list[dict]:
        return [r for r in out_rows if lo <= r["bytes"] <= hi and (devices is None or r["devices"] == devices)
                and (gpu is None or r["gpu"] == gpu)]

    ddp8 = pick(*DDP_BYTES, devices=8)
    summary = {
        "allreduce_median_abs_error": _median_abs([r["plan_auto_error"] for r in ddp8]),
        "allreduce_rows": len(ddp8),
        "allreduce_median_error_signed": round(statistics.median(r["plan_auto_error"] for r in ddp8), 4),
        "allreduce_median_abs_error_by_gpu": {g: _median_abs([r["plan_auto_error"] for r in pick(*DDP_BYTES, 8, g)])
                                              for g in sorted({r["gpu"] for r in out_rows})},
        "allreduce_median_abs_error_by_devices": {k: _median_abs([r["plan_auto_error"] for r in pick(*DDP_BYTES, k)])
                                                  for k in (2, 4, 8)},
        "allreduce_ring_median_abs_error": _median_abs([r["ring_error"] for r in ddp8]),
        "device_model_wire_median_abs_error": _median_abs(
            [r["device_model_wire_error"] for r in pick(*GRADIENT_BYTES, devices=8)]),
        "device_model_wire_median_abs_error_by_gpu": {
            g: _median_abs([r["device_model_wire_error"] for r in pick(*GRADIENT_BYTES, 8, g)])
            for g in sorted({r["gpu"] for r in out_rows})},
        "device_model_with_step_constant_median_abs_error": _median_abs(
            [r["device_model_error"] for r in pick(*GRADIENT_BYTES, devices=8)]),
        "device_model_step_constant_ms": round(params.t_allreduce_s * 1e3, 3),
        "busbw_gbs_at_1gib": {r["gpu"]: round(r["bytes"] / r["measured_s"] * 2 * 7 / 8 / 1e9, 1)
                              for r in out_rows if r["bytes"] == 1024 * MIB and r["devices"] == 8},
        "catalog_effective_gbs": {g: link_bandwidth_gbs(catalog.accelerator(g))
                                  for g in sorted({r["gpu"] for r in out_rows})},
        "small_message_floor_us": {g: round(statistics.median(r["measured_s"] for r in out_rows if r["gpu"] == g
                                                              and r["bytes"] < 64 * 1024) * 1e6, 1)
                                   for g in sorted({r["gpu"] for r in out_rows})},
        "held_out": "every row: neither all-reduce model was fitted or set on a measured collective",
    }
    return {"summary": summary, "rows": out_rows}


def main() -> int:
    result = evaluate(load_rows())
    result["summary"]["machine"] = machine()
    payload = {"benchmark": "collectives", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "data": str(DATA.relative_to(ROOT.parent)), **result}
    out = RESULTS / "collectives.json"
    atomic_write_text(out, json.dumps(payload, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result["summary"].items() if k != "machine"}, indent=1))
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
