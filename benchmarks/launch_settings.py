"""Launch settings trainwise applies to the jobs it starts: step time and its drift, on vs off.

`--setting allocator`: trainwise's glibc malloc thresholds vs glibc's defaults (trainwise.allocator).
`--setting flush-denormal`: denormal floats flushed to zero vs IEEE arithmetic (trainwise.denormals).

For each reference workload, interleaved pairs (off, on, on, off, ...) of sampled profiles that
time a fixed number of training iterations each; the other setting stays at trainwise's default.
Per run: the median iteration after warm-up, and the spread of 50-iteration window means (max/min -
1: the drift a short profile cannot see). Headline: the median over workloads of the per-pair ratio
on/off of median iteration time, and the window spread with and without the setting.

Run: .venv/bin/python benchmarks/launch_settings.py --setting allocator|flush-denormal [--cpu 1]
     [--iterations 300] [--pairs 2] [--quick]
Writes benchmarks/results/allocator.json or benchmarks/results/flush_denormal.json.
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
from trainwise.denormals import FLUSH_ENV
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.workloads import command_for

RESULTS_DIR = Path(__file__).parent / "results"
# setting -> (ProfileOptions field, label of the "on" arm, results file, what "on" means)
SETTINGS = {
    "allocator": ("tune_allocator", "tuned", "allocator.json", TUNED_VARIABLES),
    "flush-denormal": ("flush_denormal", "flushed", "flush_denormal.json",
                       {FLUSH_ENV: "1", "effect": "torch.set_flush_denormal(True) once the script imports torch"}),
}
WINDOW = 50
WORKLOADS = [  # (workload, batch size, dataset sizes large enough for the iterations timed)
    ("rnn_sa_lstm", 16, {"train_samples": 18048, "val_samples": 512}),
    ("seismic_fcn", 16, {"train_samples": 18224, "val_samples": 256}),
    ("mnist_cnn", 16, {}),
    ("nn_twins_mlp", 32, {}),
]


def one_run(name: str, batch: int, sizes: dict, iterations: int, setting: str, on: bool, cpu: int | None) -> dict:
    command = command_for(name, batch_size=batch, epochs=2, threads=1, **sizes)
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    options = ProfileOptions(min_iterations=iterations, max_iterations=iterations, max_profile_seconds=600,
                             target_relative_ci=1e-9, validation_batches=0, epoch2_iterations=0,
                             characterise=False, **{SETTINGS[setting][0]: on})
    profile = run_profile(command, options, workload=name, quiet=True)
    times = [it.wall_s for it in profile.iterations]
    steady = times[5:]
    windows = [statistics.fmean(steady[i:i + WINDOW]) for i in range(0, len(steady) - WINDOW + 1, WINDOW)]
    return {SETTINGS[setting][1]: on, "allocator_env": profile.environment.allocator_env,
            "flush_denormal": profile.environment.flush_denormal, "iterations": len(times),
            "median_iteration_s": statistics.median(steady), "first_window_mean_s": windows[0],
            "window_means_s": windows, "window_spread": max(windows) / min(windows) - 1,
            "first_window_excess": windows[0] / statistics.median(windows) - 1,
            "peak_rss_bytes": profile.memory.peak_rss_bytes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), required=True)
    parser.add_argument("--cpu", type=int, default=None, help="pin every run to this CPU")
    parser.add_argument("--iterations", type=int, default=300)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 pair, 110 iterations (a smoke test)")
    args = parser.parse_args()
    if args.setting == "allocator" and not uses_glibc():
        sys.exit("error: --setting allocator measures glibc's allocator; run it on Linux with glibc")
    if args.quick:
        args.pairs, args.iterations = 1, 110
    _, on_label, results_name, on_means = SETTINGS[args.setting]
    started = time.time()
    rows = []
    with Progress() as progress:
        task = progress.add_task(f"{args.setting} A/B", total=len(WORKLOADS) * args.pairs * 2)
        for name, batch, sizes in WORKLOADS:
            runs = []
            for pair in range(args.pairs):
                # Alternate which setting goes first so a drifting host favours neither.
                order = (False, True) if pair % 2 == 0 else (True, False)
                for on in order:
                    runs.append(one_run(name, batch, sizes, args.iterations, args.setting, on, args.cpu))
                    progress.advance(task)
            plain = [r for r in runs if not r[on_label]]
            tuned = [r for r in runs if r[on_label]]
            ratios = [t["median_iteration_s"] / p["median_iteration_s"] for p, t in zip(plain, tuned)]
            rows.append({"workload": name, "batch_size": batch, "runs": runs,
                         f"{on_label}_over_plain_iteration_ratio": statistics.median(ratios),
                         "pair_ratios": ratios,
                         "window_spread_plain": statistics.median(r["window_spread"] for r in plain),
                         f"window_spread_{on_label}": statistics.median(r["window_spread"] for r in tuned),
                         "first_window_excess_plain": statistics.median(r["first_window_excess"] for r in plain),
                         f"first_window_excess_{on_label}": statistics.median(r["first_window_excess"] for r in tuned),
                         "peak_rss_ratio": statistics.median(t["peak_rss_bytes"] / p["peak_rss_bytes"]
                                                             for p, t in zip(plain, tuned))})
    ratio_key = f"{on_label}_over_plain_iteration_ratio"
    summary = {
        f"median_{ratio_key}": statistics.median(r[ratio_key] for r in rows),
        "per_workload_ratio": {r["workload"]: round(r[ratio_key], 4) for r in rows},
        "median_window_spread_plain": statistics.median(r["window_spread_plain"] for r in rows),
        f"median_window_spread_{on_label}": statistics.median(r[f"window_spread_{on_label}"] for r in rows),
        f"{on_label}_means": on_means,
        "method": f"{args.pairs} interleaved plain/{on_label} pairs per workload, {args.iterations} iterations "
                  f"each, threads=1; ratio = median over pairs of {on_label}/plain median iteration; window "
                  f"spread = max/min of {WINDOW}-iteration window means - 1 (median over runs)",
    }
    result = {"benchmark": results_name.removesuffix(".json"),
              "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine(pinned_cpu=args.cpu), "summary": summary, "rows": rows,
              "quick": args.quick, "benchmark_wall_s": time.time() - started}
    print(json.dumps(summary, indent=1))
    if args.quick:
        return
    path = RESULTS_DIR / results_name
    atomic_write_text(path, json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
