"""Ranking speed: `plan()` over ≥ 100,000 candidate (offering × market × batch size × epoch option) rows.

The packaged catalog's single-accelerator offerings (on-demand and spot prices: the two markets),
replicated into --zones synthetic zones each (a catalog of ~4,500 single-GPU offerings, the size
of a multi-cloud catalog with every zone listed), are crossed with synthetic profiles "measured"
on each of their accelerators at --batch-sizes batch sizes and with the epoch options 5, 10, 20:
about 102,000 candidates with the defaults (--rows is the minimum; zones are added to reach it). The timed call
is the whole pure planner — runtime sources, the cost model (billing, provisioning, spot
expectation), constraints, the weighted (PRESTO) score, ranking, the Pareto sets and the
robustness flags — with a deadline constraint and a weighted objective, the heaviest path. The
profiles and the catalog are built before the clock starts. `rank_only_seconds` times the
vectorised core alone (constraints + score + rank + Pareto) on the candidate frame.

Writes benchmarks/results/plan_ranking.json (summary.rank_100k_seconds = median of --repeats).
Run: .venv/bin/python benchmarks/plan_ranking.py [--rows 100000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from trainwise._io import atomic_write_text
from trainwise.catalog import Catalog, load_catalog
from trainwise.plan import Constraints, Objective, PlanOptions, plan
from trainwise.plan.feasibility import apply_constraints
from trainwise.plan.pareto import pareto_mask_grouped
from trainwise.plan.ranking import rank_candidates
from trainwise.plan.synthetic import synthetic_profile
from _machine import machine

RESULTS = Path(__file__).parent / "results"
EPOCH_OPTIONS = (5, 10, 20)
THRESHOLD_S = 1.0



def build(rows_wanted: int, n_batch_sizes: int = 4):
    packaged = load_catalog("packaged")
    offerings = packaged.offerings
    single = offerings[(offerings["accelerator_count"] == 1.0) & offerings["accelerator"].notna()]
    priced_markets = int(single["price_per_hour"].notna().sum() + single["spot_price_per_hour"].notna().sum())
    per_zone = priced_markets * len(EPOCH_OPTIONS) * n_batch_sizes
    zones = max(1, math.ceil(rows_wanted / per_zone))
    copies = []
    for z in range(zones):
        copy = single.copy()
        copy["offering_id"] = copy["offering_id"] + f"#z{z + 1}"
        copy["zone"] = copy["zone"].fillna(copy["region"]) + f"-synthetic{z + 1}"
        copies.append(copy)
    catalog = Catalog(name="packaged-x-zones", snapshot_date=packaged.snapshot_date, source=packaged.source,
                      offerings=pd.concat(copies, ignore_index=True), accelerators=packaged.accelerators,
                      egress=packaged.egress, origin=f"packaged snapshot, single-accelerator rows x {zones} synthetic zones")
    batch_sizes = [32 * (i + 1) for i in range(n_batch_sizes)]
    accelerators = sorted(single["accelerator"].unique())
    profiles = []
    for a_index, accelerator in enumerate(accelerators):
        for b_index, batch in enumerate(batch_sizes):
            profiles.append((f"{accelerator} b{batch}", synthetic_profile(
                host=f"bench-{accelerator}", device_name=accelerator, batch_size=batch,
                iteration_s=0.01 * (1 + a_index % 7) * (1 + 0.1 * b_index), batches_per_epoch=max(1, 50_000 // batch),
                jitter=0.05)))
    return catalog, profiles, batch_sizes, accelerators, zones


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch-sizes", type=int, default=4)
    parser.add_argument("--output", type=Path, default=RESULTS / "plan_ranking.json")
    args = parser.parse_args()

    started = time.perf_counter()
    catalog, profiles, batch_sizes, accelerators, zones = build(args.rows, args.batch_sizes)
    objective = Objective(kind="weighted", weights={"time": 1.0, "cost": 1.0, "risk": 0.5})
    constraints = Constraints(deadline_s=30 * 86400.0)
    options = PlanOptions(this_host="benchmark-host-not-matching")

    def run():
        return plan(profiles, catalog, objective, constraints, epoch_options=EPOCH_OPTIONS, options=options)

    result = run()  # warm-up (imports, caches)
    rows = len(result.plans)
    timings = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        run()
        timings.append(time.perf_counter() - t0)

    # The vectorised core alone, on a fresh copy of the candidate frame each time.
    base = result.plans.copy()
    core_timings = []
    for _ in range(args.repeats):
        frame = base.drop(columns=["feasible", "excluded_by", "rank", "score", "pareto"]).copy()
        frame["_seq"] = np.arange(len(frame))
        frame["_spot"] = (frame["market"] == "spot").to_numpy()
        t0 = time.perf_counter()
        apply_constraints(frame, constraints, set(), set(), set(), max(EPOCH_OPTIONS))
        rank_candidates(frame, objective)
        feasible = frame["feasible"].to_numpy()
        pareto_mask_grouped(frame["wall_s"].to_numpy()[feasible], frame["total_cost"].to_numpy()[feasible],
                            frame["epochs"].to_numpy()[feasible])
        core_timings.append(time.perf_counter() - t0)

    median = statistics.median(timings)
    summary = {
        "rank_100k_seconds": round(median, 4),
        "candidate_rows": rows,
        "repetitions": args.repeats,
        "min_seconds": round(min(timings), 4),
        "max_seconds": round(max(timings), 4),
        "rank_only_seconds": round(statistics.median(core_timings), 4),
        "threshold_seconds": THRESHOLD_S,
        "meets_threshold": median < THRESHOLD_S and rows >= 100_000,
        "what_is_timed": "plan() end to end: runtime sources, cost model, constraints, weighted score, ranking, Pareto, flags",
    }
    payload = {
        "benchmark": "plan_ranking",
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(numpy=np.__version__, pandas=pd.__version__),
        "summary": summary,
        "setup": {"catalog": catalog.caption, "offerings_in_catalog": len(catalog.offerings), "synthetic_zones": zones,
                  "profiles": len(profiles),
                  "accelerators": accelerators, "batch_sizes": batch_sizes, "epoch_options": list(EPOCH_OPTIONS),
                  "objective": objective.model_dump(), "constraints": constraints.model_dump(),
                  "feasible_rows": int(result.plans["feasible"].sum()), "pareto_rows": int(result.plans["pareto"].sum())},
        "timings_seconds": [round(t, 5) for t in timings],
        "rank_only_timings_seconds": [round(t, 5) for t in core_timings],
        "benchmark_wall_s": round(time.perf_counter() - started, 2),
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
    }
    atomic_write_text(args.output, json.dumps(payload, indent=1))
    print(f"{rows:,} candidate rows: plan() median {median:.3f} s over {args.repeats} runs "
          f"(min {min(timings):.3f}, max {max(timings):.3f}); core {summary['rank_only_seconds']:.3f} s "
          f"-> {'OK' if summary['meets_threshold'] else 'SLOWER THAN'} {THRESHOLD_S:g} s; written to {args.output}")


if __name__ == "__main__":
    main()
