"""glibc malloc settings trainwise applies to the jobs it launches (profile, run), and records.

Why: glibc serves allocations above its mmap threshold (128 KiB at start, raised dynamically as
mmapped chunks are freed) with fresh mmap/munmap calls, and gives memory at the top of the heap
back to the kernel past its trim threshold. A CPU training step allocates and frees many tensors of
a few hundred KiB to a few MiB, so each step pays page faults and zeroing for memory it just
released, and how much it pays changes as the dynamic threshold creeps up: a slow start, then
drift. Raising both thresholds keeps freed tensors in the heap for reuse. Measured here
(benchmarks/results/allocator.json, interleaved A/B pairs): rnn_sa_lstm at batch 16 runs ~24 %
faster in every pair (peak RSS +11 %), nn_twins_mlp ~20 % faster; mnist_cnn and seismic_fcn within
this host's noise. Memory held by the process may grow by up to the trim threshold.

The effect is not always a gain: in issue 34 an LBFGS closure loop ran 65 % slower with these settings
than without them, while another job ran 36 % faster. A profiler must not change the job it measures,
so the settings are opt-in (`--tune-allocator` for profile and run alike, default off); the profile
records the allocator variables the job ran with (`Environment.allocator_env`), and a prediction is only
valid for a launch with the same settings.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Mapping

# 256 MiB: above any single activation/gradient tensor of the reference workloads at their batch
# sizes, far below this machine's memory.
TUNED_THRESHOLD_BYTES = 256 * 1024 * 1024
TUNED_VARIABLES: dict[str, str] = {
    "MALLOC_MMAP_THRESHOLD_": str(TUNED_THRESHOLD_BYTES),
    "MALLOC_TRIM_THRESHOLD_": str(TUNED_THRESHOLD_BYTES),
}
# Every glibc tunable that changes the allocator's behaviour in ways that matter for step time.
RECORDED_PREFIXES = ("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD")


def uses_glibc() -> bool:
    return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def launch_environment(base: Mapping[str, str], tune: bool = False) -> dict[str, str]:
    """`base` plus trainwise's allocator settings, when asked and on glibc. A variable the user
    already set wins: it is their choice, and the profile records it."""
    env = dict(base)
    if tune and uses_glibc():
        for name, value in TUNED_VARIABLES.items():
            env.setdefault(name, value)
    return env


def recorded_settings(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allocator-related variables a process runs with (kept in its profile)."""
    environ = os.environ if environ is None else environ
    return {name: value for name, value in sorted(environ.items())
            if any(name.startswith(prefix) for prefix in RECORDED_PREFIXES)}


def describe(settings: Mapping[str, str]) -> str:
    if not settings:
        return "glibc malloc defaults"
    return " ".join(f"{name}={value}" for name, value in settings.items())
