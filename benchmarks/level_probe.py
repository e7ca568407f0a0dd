"""Could a fixed CPU probe beside the sampled steps say which way this host's speed level will go?

A sampled profile sees about a second of steps; on a shared VM the host's speed level moves for
seconds to minutes at a time (`trainwise host-noise`), so that second's level differs from the full
run's mean level (the same-machine benchmark's `same_steps_floor`). A probe of fixed work
(`trainwise.profile.host_noise.probe_samples`, the host-noise probe) run right before and after the
window would measure the window's level; scaling the window by (the probe's long-run mean level /
its level at the window) would then correct it — if the job's speed follows the probe's.

This measures that, in one process pinned to one CPU: a training step loop timed in 1-s windows, each
between two 0.1-s probes, for a few minutes. Per window: the job's mean step time and the probe's
level. Headline (summary): the correlation of the two, the slope of the job's relative level on the
probe's, and the median / 90th-percentile |window mean step − run mean step| / run mean step, raw and
corrected by the probe. The correction uses the probe's mean over the same run as its reference: the
best case (a real profile would have to take the reference from an earlier `trainwise host-noise`).

Run: .venv/bin/python benchmarks/level_probe.py [--cpu 1] [--seconds 150]
Writes benchmarks/results/level_probe.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import Progress

from _machine import machine

from trainwise._io import atomic_write_text
from trainwise.profile.host_noise import probe_samples

RESULTS = Path(__file__).parent / "results" / "level_probe.json"
WINDOW_S = 1.0
PROBE_S = 0.1


def build(workload: str):
    """A small training step like the reference workloads': mnist_cnn's shape, nn_twins_mlp's shape."""
    torch.manual_seed(0)
    if workload == "cnn":
        model = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.Conv2d(32, 64, 3),
                                    torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                    torch.nn.Linear(9216, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
        x, y = torch.randn(16, 1, 28, 28), torch.randint(0, 10, (16,))
    else:
        model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                                    torch.nn.ReLU(), torch.nn.Linear(512, 2))
        x, y = torch.randn(32, 256), torch.randint(0, 2, (32,))
    optimizer = torch.optim.Adam(model.parameters())

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def probe_level_s() -> float:
    """Seconds per probe sample (compute + memory), averaged over PROBE_S of samples."""
    samples = probe_samples(PROBE_S)
    return statistics.fmean(s["compute_s"] + s["memory_s"] for s in samples)


def measure(workload: str, seconds: float, progress: Progress) -> dict:
    step = build(workload)
    for _ in range(20):  # warm-up, outside the windows
        step()
    windows = []
    task = progress.add_task(workload, total=seconds)
    started = time.perf_counter()
    while (elapsed := time.perf_counter() - started) < seconds:
        before = probe_level_s()
        window_start = time.perf_counter()
        steps = 0
        while time.perf_counter() - window_start < WINDOW_S:
            step()
            steps += 1
        step_s = (time.perf_counter() - window_start) / steps
        after = probe_level_s()
        windows.append({"t_s": elapsed, "step_s": step_s, "probe_s": (before + after) / 2})
        progress.update(task, completed=min(seconds, elapsed))
    job = np.array([w["step_s"] for w in windows])
    probe = np.array([w["probe_s"] for w in windows])
    raw = np.abs(job / job.mean() - 1)
    corrected = np.abs(job * (probe.mean() / probe) / job.mean() - 1)
    slope, _ = np.polyfit(probe / probe.mean(), job / job.mean(), 1)
    return {"workload": workload, "windows": len(windows), "correlation": float(np.corrcoef(probe, job)[0, 1]),
            "slope": float(slope), "job_cv": float(job.std() / job.mean()), "probe_cv": float(probe.std() / probe.mean()),
            "window_error_raw": {"median": float(np.median(raw)), "p90": float(np.percentile(raw, 90))},
            "window_error_corrected": {"median": float(np.median(corrected)), "p90": float(np.percentile(corrected, 90))},
            "per_window": windows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=None, help="pin to this CPU")
    parser.add_argument("--seconds", type=float, default=150.0, help="seconds per workload")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    console = Console()
    started = time.time()
    with Progress(console=console) as progress:
        rows = [measure(w, args.seconds, progress) for w in ("cnn", "mlp")]
    for r in rows:
        console.print(f"{r['workload']}: correlation {r['correlation']:.2f}, slope {r['slope']:.2f}; |window error| median "
                      f"{r['window_error_raw']['median']:.1%} raw, {r['window_error_corrected']['median']:.1%} corrected; "
                      f"p90 {r['window_error_raw']['p90']:.1%} raw, {r['window_error_corrected']['p90']:.1%} corrected")
    summary = {
        "correlation_median": statistics.median(r["correlation"] for r in rows),
        "window_error_raw_median": statistics.median(r["window_error_raw"]["median"] for r in rows),
        "window_error_corrected_median": statistics.median(r["window_error_corrected"]["median"] for r in rows),
        "window_error_raw_p90_max": max(r["window_error_raw"]["p90"] for r in rows),
        "window_error_corrected_p90_max": max(r["window_error_corrected"]["p90"] for r in rows),
        "meaning": ("|1-s window's mean step − the run's mean step| / the run's mean step, raw and scaled by the host-noise "
                    "probe's (run mean level / level beside the window); the reference is the same run's probe mean, "
                    "the best case"),
    }
    result = {"benchmark": "level_probe", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "summary": summary, "window_s": WINDOW_S, "probe_s": PROBE_S,
              "seconds_per_workload": args.seconds, "benchmark_wall_s": time.time() - started, "rows": rows}
    atomic_write_text(RESULTS, json.dumps(result, indent=1) + "\n")
    console.print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
