"""trainwise's intra-node all-reduce models against XLA's measured NCCL all-reduces on 8-GPU H100 and B200 machines.

A data-parallel plan on one machine prices the gradient all-reduce with `data_parallel.allreduce_time_s(...,
"node")` over `intra_node_link`: a floor per call plus the ring's bytes at a fraction of the catalog's effective
NVLink bandwidth, both per group size (`data_parallel.NODE_ALLREDUCE`). Those constants come from XLA's table
(`benchmarks/data/xla_collectives.csv`, tools/xla_collectives.py: one f32 all-reduce per size from 1 KiB to 2 GiB,
over one group of 8, two of 4 and four of 2 GPUs, median of 20 runs through XLA's NCCL backend): per group size the
median time under 64 KiB and the bus bandwidth at 1 GiB over the catalog's figure, geometric mean over the machines
(`--fit` prints them). Held out machine by machine: each machine's rows are predicted with the constants fitted on
the other alone (`allreduce_*`). Also scored, never fitted on a collective: the idealised ring/tree the plan used
before (`idealised_auto_*`, the ring alone) and the device model's ring at its fitted link efficiency
(`device_model_wire_*`; its fitted per-step constant, `t_allreduce_s`, stands for all of a step's DDP work, not one
all-reduce, so it is reported apart).

Headline (`summary`): `allreduce_median_abs_error` on the sizes DDP sends (its buckets: 1-100 MiB) over all eight
GPUs of each machine, by machine and by group size; the bus bandwidth reached at 1 GiB against the catalog's
effective figure; the small-message floor.
Run: .venv/bin/python benchmarks/collectives.py [--fit] (a second; reads no GPU).
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


def fit_node(rows: list[dict], gpus: set[str], catalog) -> dict[int, tuple[float, float]]:
    """`data_parallel.NODE_ALLREDUCE` from the machines `gpus`: per group size, the median time of an all-reduce
    under 64 KiB and the bus bandwidth at 1 GiB over the catalog's effective link figure; geometric mean over them."""
    out = {}
    for k in sorted({r["devices_per_group"] for r in rows}):
        floors, fractions = [], []
        for g in sorted(gpus):
            mine = [r for r in rows if r["gpu"] == g and r["devices_per_group"] == k]
            floors.append(statistics.median(r["time_s"] for r in mine if r["bytes"] < 64 * 1024))
            big = next(r for r in mine if r["bytes"] == 1024 * MIB)
            busbw = big["bytes"] / big["time_s"] * 2 * (k - 1) / k
            fractions.append(busbw / (link_bandwidth_gbs(catalog.accelerator(g)) * 1e9))
        out[k] = (round(statistics.geometric_mean(floors), 7), round(statistics.geometric_mean(fractions), 3))
    return out


def node_time_s(nbytes: int, k: int, link_bytes_per_s: float, table: dict[int, tuple[float, float]]) -> float:
    floor_s, efficiency = dp.node_allreduce_terms(k, table)
    return floor_s + 2.0 * (k - 1) / k * nbytes / (link_bytes_per_s * efficiency)


def predictions(row: dict, catalog, params, held_out_table: dict[int, tuple[float, float]]) -> dict:
    acc = catalog.accelerator(row["gpu"])
    k, nbytes = row["devices_per_group"], row["bytes"]
    link = dp.intra_node_link(acc)
    device_bps = link_bandwidth_gbs(acc) * 1e9 * params.link_efficiency
    wire_s = 2.0 * (k - 1) / k * nbytes / device_bps
    return {"node_held_out_s": node_time_s(nbytes, k, link.bandwidth_bps / 8, held_out_table),
            "plan_node_s": dp.allreduce_time_s(nbytes, k, link, "node"),
            "plan_auto_s": dp.allreduce_time_s(nbytes, k, link, "auto"),
            "ring_s": dp.allreduce_time_s(nbytes, k, link, "ring"),
            "device_model_wire_s": wire_s, "device_model_s": wire_s + params.t_allreduce_s}


def _median_abs(errors: list[float]) -> float | None:
    return round(statistics.median(abs(e) for e in errors), 4) if errors else None


def evaluate(rows: list[dict]) -> dict:
    catalog, params = load_catalog(), load_params()
    gpus = {r["gpu"] for r in rows}
    held_out = {g: fit_node(rows, gpus - {g}, catalog) for g in gpus}  # each machine from the other(s) alone
    out_rows = []
    for r in rows:
        pred = predictions(r, catalog, params, held_out[r["gpu"]])
        out_rows.append({"gpu": r["gpu"], "devices": r["devices_per_group"], "groups": int(r["groups"]),
                         "bytes": r["bytes"], "measured_s": r["time_s"],
                         **{k: round(v, 9) for k, v in pred.items()},
                         **{k.replace("_s", "_error"): round(v / r["time_s"] - 1, 4) for k, v in pred.items()}})

    def pick(lo: int, hi: int, devices: int | None = None, gpu: str | None = None) -> list[dict]:
        return [r for r in out_rows if lo <= r["bytes"] <= hi and (devices is None or r["devices"] == devices)
                and (gpu is None or r["gpu"] == gpu)]

    ddp8 = pick(*DDP_BYTES, devices=8)
    summary = {
        "allreduce_median_abs_error": _median_abs([r["node_held_out_error"] for r in ddp8]),
        "allreduce_method": "the plan's node all-reduce (data_parallel.NODE_ALLREDUCE) with its constants fitted on "
                            "the other machine only, on DDP's bucket sizes (1-100 MiB) over all 8 GPUs",
        "allreduce_rows": len(ddp8),
        "allreduce_median_error_signed": round(statistics.median(r["node_held_out_error"] for r in ddp8), 4),
        "allreduce_median_abs_error_by_gpu": {g: _median_abs([r["node_held_out_error"] for r in pick(*DDP_BYTES, 8, g)])
                                              for g in sorted(gpus)},
        "allreduce_median_abs_error_by_devices": {k: _median_abs([r["node_held_out_error"] for r in pick(*DDP_BYTES, k)])
                                                  for k in (2, 4, 8)},
        "node_constants_in_sample_median_abs_error": _median_abs([r["plan_node_error"] for r in ddp8]),
        "node_constants_fitted": {str(k): list(v) for k, v in fit_node(rows, gpus, catalog).items()},
        "node_constants_shipped": {str(k): list(v) for k, v in dp.NODE_ALLREDUCE.items()},
        "idealised_auto_median_abs_error": _median_abs([r["plan_auto_error"] for r in ddp8]),
        "idealised_auto_median_abs_error_by_devices": {
            k: _median_abs([r["plan_auto_error"] for r in pick(*DDP_BYTES, k)]) for k in (2, 4, 8)},
        "idealised_auto_median_abs_error_by_gpu": {
            g: _median_abs([r["plan_auto_error"] for r in pick(*DDP_BYTES, 8, g)]) for g in sorted(gpus)},
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
        "held_out": "allreduce_*: each machine's rows predicted with constants fitted on the other machine alone; "
                    "idealised_auto_*, ring, device_model_*: never fitted on a collective; "
                    "node_constants_in_sample_*: the shipped constants, fitted on both machines (in-sample)",
    }
    return {"summary": summary, "rows": out_rows}


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="print data_parallel.NODE_ALLREDUCE fitted on both machines")
    args = ap.parse_args(argv)
    if args.fit:
        print(fit_node(load_rows(), {"H100", "B200"}, load_catalog()))
        return 0
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
