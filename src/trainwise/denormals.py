"""Flushing denormal floats to zero in the jobs trainwise launches (profile, run), and recording it.

Why: on x86 CPUs an arithmetic instruction that reads or produces a denormal (subnormal) float is
handled in microcode, tens to a hundred times slower than a normal one. Training produces them in
bursts (saturated sigmoid/tanh gates, decaying optimizer moments, tiny gradients), and how many it
produces changes as the weights move, so a CPU step's time depends on where training is: a slow
start, then drift that a short profile cannot see. Measured on an Intel Xeon host
(benchmarks/results/flush_denormal.json, 2 interleaved A/B pairs of 200 iterations): rnn_sa_lstm
at batch 16 runs 13x faster with denormals flushed (median iteration 784 ms -> 61 ms, the same in
both pairs) and steady (50-iteration window means drift 22 % plain, 5 % flushed); nn_twins_mlp 11 %
and mnist_cnn 6 % faster; seismic_fcn within noise (2 %). Flush-to-zero / denormals-are-zero is what GPUs' fast paths and TensorFlow's CPU
executor already do; the numerical effect is below float32's normal range (< 1.2e-38).

The launcher asks for it through an environment variable; the recorder inside the launched process
applies it right after the script imports torch (`torch.set_flush_denormal`, which sets the x86
FTZ/DAZ bits of the calling thread; threads torch starts afterwards inherit them) and the profile
records it (`Environment.flush_denormal`). It changes the job's numerics, and a profiler must not change
the job it measures unless asked: it is opt-in (`--flush-denormal` on `trainwise profile` and `trainwise
run`; profile and run the same way for the prediction to hold). A user who launches the job without
trainwise and profiled with `--flush-denormal` calls `torch.set_flush_denormal(True)` at the top of the script.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FLUSH_ENV = "TRAINWISE_FLUSH_DENORMAL"


def launch_environment(base: Mapping[str, str], flush: bool = False) -> dict[str, str]:
    """`base` plus the request to flush denormals (or not). The option decides, whatever the
    variable was in `base` (a shell's leftover must not override `--no-flush-denormal`)."""
    env = dict(base)
    env[FLUSH_ENV] = "1" if flush else "0"
    return env


def apply_in_process(torch_module: Any, environ: Mapping[str, str]) -> bool | None:
    """Inside the launched process, once torch is imported: flush denormals if the launcher asked.

    Returns whether they are flushed (False when asked but the CPU cannot: no SSE3 / not x86), or
    None when no trainwise launcher set the variable (nothing is changed then)."""
    value = environ.get(FLUSH_ENV)
    if value is None:
        return None
    if value == "1":
        return bool(torch_module.set_flush_denormal(True))
    return False


def describe(flushed: bool | None) -> str:
    if flushed is None:
        return "not recorded (profile made before trainwise set it)"
    return "flushed to zero (torch.set_flush_denormal(True))" if flushed else "kept (IEEE default)"
