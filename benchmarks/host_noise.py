"""How steady is this host's speed? `trainwise host-noise`'s fixed probe, with its per-second levels kept.

The same-machine accuracy benchmarks profile a job for a few seconds and predict a run of minutes;
that only works while the host runs at one speed level. This records the level directly, with work
that never changes (trainwise.profile.host_noise: a 256×256 matmul and an in-place multiply over
16 MB, one torch thread), and summarises how far a window of 1/3/10/30 s strays from the probe's
mean: the floor any profile of that many seconds of steps has on this host.

Writes benchmarks/results/host_noise.json (summary + every per-second level). Run alone:
    .venv/bin/python benchmarks/host_noise.py --cpu 1 --seconds 180
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import Progress

from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.profile import host_noise
from _machine import machine

RESULTS = Path(__file__).parent / "results"
console = Console()


def summary_of(noise: host_noise.HostNoise) -> dict:
    def stray(levels: host_noise.ProbeLevels, window_s: int, key: str) -> float | None:
        return next((getattr(w, key) for w in levels.windows if w.window_s == window_s), None)

    return {
        "window_3s_stray_median": {"compute": stray(noise.compute, 3, "median"), "memory": stray(noise.memory, 3, "median")},
        "window_3s_stray_p90": {"compute": stray(noise.compute, 3, "p90"), "memory": stray(noise.memory, 3, "p90")},
        "band_stray_for_3s_of_steps": noise.stray_fraction(3.0),
        "p90_over_p10": {"compute": noise.compute.p90_over_p10, "memory": noise.memory.p90_over_p10},
        "correlation_length_s": {"compute": noise.compute.correlation_length_s,
                                 "memory": noise.memory.correlation_length_s},
        "meaning": "stray: |mean speed level over a window − the whole probe's mean| / the latter, over every window "
                   "of that length; what a profile of that many seconds of steps misses on this host when the work "
                   "itself never changes. band_stray_for_3s_of_steps: what trainwise's estimator widens its band by "
                   "for a profile with 3 s of sampled steps",
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=host_noise.DEFAULT_PROBE_SECONDS)
    parser.add_argument("--cpu", type=int, default=None, help="pin the probe to this CPU")
    parser.add_argument("--out", default="host_noise.json", help="file name under benchmarks/results/")
    parser.add_argument("--save", action="store_true",
                        help="also keep the measurement in the trainwise cache, as `trainwise host-noise` does")
    args = parser.parse_args()
    try:
        host_noise.check_seconds(args.seconds)
    except TrainwiseError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("probing the host", total=args.seconds)
        samples = host_noise.probe_samples(args.seconds, lambda done: progress.update(task, completed=done))
    noise = host_noise.measure(args.seconds, samples=samples)
    result = {"benchmark": "host_noise", "started_at": started_at, "machine": machine(), "summary": summary_of(noise),
              "host_noise": noise.model_dump(), "samples": len(samples),
              "levels_per_second_s": {key: host_noise.per_second_levels(samples, f"{key}_s")
                                      for key in ("compute", "memory")}}
    atomic_write_text(RESULTS / args.out, json.dumps(result, indent=1))
    if args.save:
        console.print(f"kept for profiles on this host: {host_noise.save(noise)}")
    for name, levels in (("compute", noise.compute), ("memory", noise.memory)):
        console.print(f"{name}: median {levels.median_s * 1e3:.2f} ms, p90/p10 {levels.p90_over_p10:.2f}, one level lasts "
                      f"~{levels.correlation_length_s} s; stray " + ", ".join(
                          f"{w.window_s} s: median {w.median:.1%} p90 {w.p90:.1%} max {w.max:.1%}" for w in levels.windows))
    console.print(f"wrote {RESULTS / args.out}")


if __name__ == "__main__":
    main()
