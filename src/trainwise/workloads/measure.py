"""Measure the steady-state seconds per training iteration of the reference workloads.

    python -m trainwise.workloads.measure [NAME ...] [--iters 3] [--warmup 1] [--half-only|--full-only]

For each workload and for its seed default batch size and half of it, this builds the model, the
datasets and the optimizer exactly as the script does, then times ``warmup + iters`` iterations of the
same loop (DataLoader ``next`` + forward + backward + ``optimizer.step()``), and reports the median
of the timed ones (robust to a shared machine). The figures feed
``trainwise.workloads.MEASURED_CPU_ITERATION_S``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from trainwise.workloads import WORKLOADS, get_workload


def seconds_per_iteration(name: str, batch_size: int, iters: int = 3, warmup: int = 1, seed: int = 0) -> float:
    spec = get_workload(name)
    mod = importlib.import_module(spec.module)
    torch.manual_seed(seed)
    train_ds, _, _ = mod.build_datasets(batch_size * (warmup + iters), batch_size, seed=seed)
    model = mod.build_model()
    optimizer = mod.build_optimizer(model, spec.hyperparameters["lr"])
    criterion = nn.BCEWithLogitsLoss() if name == "rnn_sa_lstm" else nn.CrossEntropyLoss()
    loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model.train()
    times = []
    start = time.perf_counter()
    for x, y in loader:
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        loss.item()
        now = time.perf_counter()
        times.append(now - start)
        start = now
    timed = sorted(times[warmup:])
    mid = len(timed) // 2
    return timed[mid] if len(timed) % 2 else (timed[mid - 1] + timed[mid]) / 2


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", default=list(WORKLOADS))
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--half-only", action="store_true")
    group.add_argument("--full-only", action="store_true")
    args = p.parse_args(argv)
    results: dict[str, dict[int, float]] = {}
    for name in args.names:
        spec = get_workload(name)
        batches = [spec.default_batch_size, max(1, spec.default_batch_size // 2)]
        if args.half_only:
            batches = batches[1:]
        elif args.full_only:
            batches = batches[:1]
        results[name] = {}
        for b in batches:
            s = seconds_per_iteration(name, b, iters=args.iters, warmup=args.warmup)
            results[name][b] = round(s, 4)
            print(f"{name:18s} batch {b:5d}: {s:8.4f} s/it  (threads={torch.get_num_threads()})", flush=True)
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
