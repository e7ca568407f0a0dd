"""Why rnn_sa_lstm speeds up along its own run: `torch.sqrt` on zeros, and Adam's state that starts at zero.

1. Element-wise square root of 2.56 M float32 (the size of the LSTM workload's 20,000 x 128 embedding)
   on one thread: zeros, normal values, denormals, half zeros; `torch.sqrt` beside numpy's and beside
   `torch.rsqrt`, with denormals flushed and not (interleaved repeats, medians).
2. The LSTM workload itself (batch 16, Adam, one thread, denormals flushed, trainwise's allocator
   settings expected in the environment): `torch.profiler` over steps 20-59 and over steps 340-379 of one
   run, the per-step self time of each operator. Adam's `exp_avg_sq.sqrt()` runs over every embedding row,
   and a row no batch has touched yet still holds zeros.

Headline (summary): the zeros / normal-values time ratio of `torch.sqrt`, and the LSTM's `aten::sqrt` and
whole-step time in the early window vs the late one.

Run: .venv/bin/python benchmarks/sqrt_zeros.py [--cpu 1] [--repeats 7]
Writes benchmarks/results/sqrt_zeros.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch
from rich.console import Console

from _machine import machine

from trainwise._io import atomic_write_text
from trainwise.allocator import TUNED_VARIABLES

RESULTS = Path(__file__).parent / "results" / "sqrt_zeros.json"
ELEMENTS = 20_000 * 128  # rnn_sa_lstm's embedding: vocabulary x width
CALLS_PER_REPEAT = 20
EARLY_WINDOW = (20, 60)  # steps [start, end) profiled early in the run
LATE_WINDOW = (340, 380)


def time_call(fn, x) -> float:
    """Mean seconds of one call over CALLS_PER_REPEAT calls (after 3 warm-up calls)."""
    for _ in range(3):
        fn(x)
    start = time.perf_counter()
    for _ in range(CALLS_PER_REPEAT):
        fn(x)
    return (time.perf_counter() - start) / CALLS_PER_REPEAT


def elementwise(repeats: int) -> dict:
    inputs = {
        "zeros": np.zeros(ELEMENTS, np.float32),
        "normal (1.0)": np.ones(ELEMENTS, np.float32),
        "small normal (1e-11, Adam-state size)": np.full(ELEMENTS, 1e-11, np.float32),
        "denormal (1e-39)": np.full(ELEMENTS, 1e-39, np.float32),
        "half zeros, half 1e-9 (random)": np.where(np.random.default_rng(0).random(ELEMENTS) < 0.5, 0.0, 1e-9)
        .astype(np.float32),
    }
    functions = {"torch.sqrt": lambda t: torch.sqrt(t), "torch.rsqrt": lambda t: torch.rsqrt(t),
                 "numpy.sqrt": None}
    samples: dict[str, list[float]] = {}
    for _ in range(repeats):  # interleaved: every (input, function, flush) once per repeat
        for flush in (False, True):
            torch.set_flush_denormal(flush)
            for input_name, array in inputs.items():
                tensor = torch.from_numpy(array)
                for fn_name, fn in functions.items():
                    if fn_name == "numpy.sqrt":
                        if flush:
                            continue  # numpy does not read torch's flush setting
                        seconds = time_call(np.sqrt, array)
                    else:
                        seconds = time_call(fn, tensor)
                    samples.setdefault(f"{fn_name} | {input_name} | flush={flush}", []).append(seconds)
    torch.set_flush_denormal(True)
    return {key: {"median_ms": round(statistics.median(v) * 1e3, 3), "min_ms": round(min(v) * 1e3, 3),
                  "max_ms": round(max(v) * 1e3, 3), "repeats": len(v)} for key, v in samples.items()}


def lstm_windows() -> dict:
    import torch.nn as nn
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.data import DataLoader

    from trainwise.workloads import rnn_sa_lstm as workload

    torch.manual_seed(0)
    train, _, _ = workload.build_datasets(16 * (LATE_WINDOW[1] + 5), 16, seed=0)
    model = workload.build_model()
    optimizer = workload.build_optimizer(model)
    criterion = nn.BCEWithLogitsLoss()
    loader = DataLoader(train, batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(0))
    embedding = model.embedding.weight
    windows: dict[str, dict] = {}
    profiler = None
    for step, (tokens, labels) in enumerate(loader):
        for name, (start, end) in (("early", EARLY_WINDOW), ("late", LATE_WINDOW)):
            if step == start:
                profiler = profile(activities=[ProfilerActivity.CPU])
                profiler.__enter__()
                wall_start = time.perf_counter()
        optimizer.zero_grad()
        criterion(model(tokens), labels).backward()
        optimizer.step()
        for name, (start, end) in (("early", EARLY_WINDOW), ("late", LATE_WINDOW)):
            if step == end - 1 and profiler is not None:
                wall_s = time.perf_counter() - wall_start
                profiler.__exit__(None, None, None)
                steps = end - start
                per_op_ms = {e.key: e.self_cpu_time_total / 1e3 / steps for e in profiler.key_averages()}
                state = optimizer.state[embedding]["exp_avg_sq"]
                windows[name] = {
                    "steps": [start, end], "step_wall_ms": round(wall_s / steps * 1e3, 2),
                    "aten_sqrt_ms_per_step": round(per_op_ms.get("aten::sqrt", 0.0), 3),
                    "embedding_adam_state_zero_fraction": round(float((state == 0).float().mean()), 4),
                    "top_ops_ms_per_step": dict(sorted(((k, round(v, 3)) for k, v in per_op_ms.items()),
                                                       key=lambda kv: -kv[1])[:8]),
                }
                profiler = None
        if step >= LATE_WINDOW[1] - 1:
            break
    return windows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", type=int, default=None, help="pin this process to one CPU")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    torch.set_num_threads(1)
    console = Console()
    allocator_env = {k: os.environ.get(k) for k in TUNED_VARIABLES}
    started = time.time()
    with console.status("element-wise square roots"):
        ops = elementwise(args.repeats)
    with console.status("rnn_sa_lstm: profiling an early and a late window"):
        windows = lstm_windows()
    zeros = ops["torch.sqrt | zeros | flush=True"]["median_ms"]
    normal = ops["torch.sqrt | normal (1.0) | flush=True"]["median_ms"]
    summary = {
        "torch_sqrt_zeros_ms": zeros, "torch_sqrt_normal_ms": normal,
        "torch_sqrt_zeros_over_normal": round(zeros / normal, 2),
        "numpy_sqrt_zeros_ms": ops["numpy.sqrt | zeros | flush=False"]["median_ms"],
        "lstm_aten_sqrt_ms_per_step": {w: windows[w]["aten_sqrt_ms_per_step"] for w in windows},
        "lstm_step_ms": {w: windows[w]["step_wall_ms"] for w in windows},
        "lstm_embedding_adam_state_zero_fraction": {w: windows[w]["embedding_adam_state_zero_fraction"]
                                                    for w in windows},
        "elements": ELEMENTS,
    }
    result = {"benchmark": "sqrt_zeros", "created_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
              "machine": machine(pinned_cpu=args.cpu, allocator_environment=allocator_env),
              "summary": summary, "elementwise": ops, "lstm_windows": windows,
              "benchmark_wall_s": round(time.time() - started, 1)}
    atomic_write_text(RESULTS, json.dumps(result, indent=1))
    console.print_json(json.dumps(summary))
    console.print(f"written {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
