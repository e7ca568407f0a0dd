"""glibc malloc settings: step time and its drift with trainwise's tuning vs glibc's defaults.

For each reference workload, interleaved pairs (plain, tuned, plain, tuned, ...) of sampled
profiles that time a fixed number of training iterations each. Per run: the median iteration
after warm-up, and the spread of 50-iteration window means (max/min - 1: the drift a short profile
cannot see). Headline: the median over workloads of the per-pair ratio tuned/plain of median
iteration time, and the window spread with and without tuning.

Run: .venv/bin/python benchmarks/allocator.py [--cpu 1] [--iterations 300] [--pairs 2] [--quick]
Writes benchmarks/results/allocator.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from rich.progress import Progress

from _machine import machine

from trainwise._io import atomic_write_text
from trainwise.allocator import TUNED_VARIABLES, uses_glibc
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.workloads import command_for

RESULTS = Path(__file__).parent / "results" / "allocator.json"
WINDOW = 50
WORKLOADS = [  # (workload, batch size, dataset sizes large enough for the iterations timed)
    ("rnn_sa_lstm", 16, {"train_samples": 18048, "val_samples": 512}),
    ("seismic_fcn", 16, {"train_samples": 18224, "val_samples": 256}),
    ("mnist_cnn", 16, {}),
    ("nn_twins_mlp", 32, {}),
]


def one_run(name: str, batch: int, sizes: dict, iterations: int, tune: bool, cpu: int | None) -> dict:
    command = command_for(name, batch_size=batch, epochs=2, threads=1, **sizes)
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    options = ProfileOptions(min_iterations=iterations, max_iterations=iterations, max_profile_seconds=600,
                             target_relative_ci=1e-9, validation_batches=0, epoch2_iterations=0,
                             characterise=False, tune_allocator=tune)
    profile = run_profile(command, options, workload=name, quiet=True)
    times = [it.wall_s for it in profile.iterations]
    steady = times[5:]
    windows = [statistics.fmean(steady[i:i + WINDOW]) for i in range(0, len(steady) - WINDOW + 1, WINDOW)]
    return {"tuned": tune, "allocator_env": profile.environment.allocator_env, "iterations": len(times),
            "median_iteration_s": statistics.median(steady), "first_window_mean_s": windows[0],
            "window_means_s": windows, "window_spread": max(windows) / min(windows) - 1,
            "first_window_excess": windows[0] / statistics.median(windows) - 1,
            "peak_rss_bytes": profile.memory.peak_rss_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu", type=int, default=None, help="pin every run to this CPU")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 pair, 110 iterations (a smoke test)")
    args = parser.parse_args()
    if not uses_glibc():
        sys.exit("error: this benchmark measures glibc's allocator; run it on Linux with glibc")
    if args.quick:
        args.pairs, args.iterations = 1, 110
    started = time.time()
    rows = []
    with Progress() as progress:
        task = progress.add_task("allocator A/B", total=len(WORKLOADS) * args.pairs * 2)
        for name, batch, sizes in WORKLOADS:
            runs = []
            for pair in range(args.pairs):
                # Alternate which setting goes first so a drifting host favours neither.
                order = (False, True) if pair % 2 == 0 else (True, False)
                for tune in order:
                    runs.append(one_run(name, batch, sizes, args.iterations, tune, args.cpu))
                    progress.advance(task)
            plain = [r for r in runs if not r["tuned"]]
            tuned = [r for r in runs if r["tuned"]]
            ratios = [t["median_iteration_s"] / p["median_iteration_s"] for p, t in zip(plain, tuned)]
            rows.append({"workload": name, "batch_size": batch, "runs": runs,
                         "tuned_over_plain_iteration_ratio": statistics.median(ratios),
                         "pair_ratios": ratios,
                         "window_spread_plain": statistics.median(r["window_spread"] for r in plain),
                         "window_spread_tuned": statistics.median(r["window_spread"] for r in tuned),
                         "first_window_excess_plain": statistics.median(r["first_window_excess"] for r in plain),
                         "first_window_excess_tuned": statistics.median(r["first_window_excess"] for r in tuned),
                         "peak_rss_ratio": statistics.median(t["peak_rss_bytes"] / p["peak_rss_bytes"]
                                                             for p, t in zip(plain, tuned))})
    summary = {
        "median_tuned_over_plain_iteration_ratio": statistics.median(r["tuned_over_plain_iteration_ratio"] for r in rows),
        "per_workload_ratio": {r["workload"]: round(r["tuned_over_plain_iteration_ratio"], 4) for r in rows},
        "median_window_spread_plain": statistics.median(r["window_spread_plain"] for r in rows),
        "median_window_spread_tuned": statistics.median(r["window_spread_tuned"] for r in rows),
        "tuned_variables": TUNED_VARIABLES,
        "method": f"{args.pairs} interleaved plain/tuned pairs per workload, {args.iterations} iterations each, "
                  f"threads=1; ratio = median over pairs of tuned/plain median iteration; window spread = "
                  f"max/min of {WINDOW}-iteration window means - 1 (median over runs)",
    }
    result = {"benchmark": "allocator", "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(pinned_cpu=args.cpu), "summary": summary, "rows": rows,
              "quick": args.quick, "benchmark_wall_s": time.time() - started}
    if args.quick:
        print(json.dumps(summary, indent=1))
        return
    atomic_write_text(RESULTS, json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
