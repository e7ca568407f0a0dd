"""Measure the kernel model's operator grid on the GPU at hand, so every lent GPU hour grows the kernel data.

The grid covers the kernel classes of src/trainwise/predict/data/kernel_latency.csv (GEMMs `mm`/`bmm`,
convolutions, elementwise ops, softmax, layer norm) in fp32, TF32, fp16 and bf16, plus operators the NeuSight
data lacks (channels-last convolutions `convcl`, depthwise convolutions `dwconv`, training-mode batch norm `bn`
and channels-last `bncl` (dims: batch, channels, size), fused attention `sdpa`, embedding gathers `embedding`,
foreach Adam steps `adam`), which the kernel model skips until it has a class for them. The grid is shuffled
(seeded), so a run stopped by --budget-s keeps every class. Each kernel is timed with CUDA events
(warm-up, then the median of `--repeats` timed runs of `--inner` back-to-back calls), NeuSight's way. Eager calls
cost the host 7-15 us each on the lent H100/H200: a kernel faster than that times the host, and the kernel fit
censors such rows (`kernel_fit.host_bound`: about half of the first sweeps' rows). `--graph` times the GPU instead:
the `--inner` calls are captured once in a CUDA graph (torch.cuda.graph) and the graph is replayed between the events,
so no Python call or dispatch stands between two kernels (source `trainwise-sweep-graph-<GPU>`, files
kernel_sweep_<GPU>_graph.*). An operator that cannot be captured (a CPU-side step counter: Adam without
`capturable=True`, which the graph grid uses) is listed in `skipped`.

Writes benchmarks/results/kernel_sweep_<GPU>.csv in kernel_latency.csv's columns (source, gpu, op, dtype, dims,
latency_us; dims as in tools/build_kernel_dataset.py) and benchmarks/results/kernel_sweep_<GPU>.json (summary,
machine: GPU, driver, CUDA, torch). Rebuild the data and the model afterwards:
    .venv/bin/python tools/build_kernel_dataset.py --neusight PATH --deepbench PATH
    .venv/bin/python tools/train_kernel_model.py
Run on a GPU: .venv/bin/python benchmarks/kernel_sweep.py [--gpu H100] [--budget-s 420] [--graph]
Smoke test on CPU: .venv/bin/python benchmarks/kernel_sweep.py --dry-run --output-dir /tmp/sweep
"""

from __future__ import annotations

import argparse
import csv
import io
import itertools
import json
import platform
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

RESULTS = Path(__file__).parent / "results"
COLUMNS = ("source", "gpu", "op", "dtype", "dims", "latency_us")
DTYPES = ("fp32", "tf32", "fp16", "bf16")
ELEMENTWISE = ("add", "mul", "div", "pow", "addu", "mulu", "divu", "powu", "relu", "gelu", "tanh")


def grid(dry_run: bool, seed: int = 0) -> list[tuple[str, str, tuple[int, ...]]]:
    """(op, dtype, dims) to measure; dims follow kernel_latency.csv (GEMM: batch, M, N out, K reduction; conv:
    batch, C in, C out, kernel, input size, stride, padding; vector ops: rows, cols)."""
    rng = random.Random(seed)
    sizes = (8, 64) if dry_run else (64, 128, 256, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192)
    out: list[tuple[str, str, tuple[int, ...]]] = []
    n_gemm = 1 if dry_run else 120
    for dtype in (("fp32", "bf16") if dry_run else DTYPES):
        for _ in range(n_gemm):
            m, n, k = (rng.choice(sizes) + rng.choice((0, 0, 0, 8, 24)) for _ in range(3))
            out.append(("mm", dtype, (1, m, n, k)))
            b = rng.choice((1, 2) if dry_run else (4, 12, 16, 32, 64, 96))
            out.append(("bmm", dtype, (b, rng.choice(sizes), rng.choice(sizes), rng.choice((8, 64) if dry_run else (64, 128)))))
        for _ in range(1 if dry_run else 40):
            c = rng.choice((4, 8) if dry_run else (32, 64, 128, 256, 512))
            size = rng.choice((8,) if dry_run else (7, 14, 28, 56, 112))
            ks = rng.choice((1, 3))
            b = rng.choice((2,) if dry_run else (16, 32, 64, 128))
            conv = (b, c, rng.choice((c, 2 * c)), ks, size, 1, ks // 2)
            out.append(("conv", dtype, conv))
            out.append(("convcl", dtype, conv))
            out.append(("dwconv", dtype, (b, c, c, 3, size, 1, 1)))
            if dtype != "tf32":  # batch norm has no TF32 path
                out.append(("bn", dtype, (b, c, size)))
                out.append(("bncl", dtype, (b, c, size)))
    vec_rows = (4,) if dry_run else (256, 1024, 4096, 16384, 65536)
    vec_cols = (8,) if dry_run else (128, 512, 1024, 4096, 8192)
    ops = ELEMENTWISE[:2] if dry_run else ELEMENTWISE
    for dtype in (("fp32",) if dry_run else ("fp32", "fp16", "bf16")):
        for rows, cols in itertools.product(vec_rows, vec_cols):
            for op in (*ops, "softmax", "ln"):
                out.append((op, dtype, (rows, cols)))
        for b, heads, seq in ([(1, 2, 16)] if dry_run else [(8, 12, 512), (4, 16, 1024), (2, 16, 2048), (16, 8, 256)]):
            out.append(("sdpa", dtype, (b, heads, seq, 64)))
        for rows in ((16,) if dry_run else (4096, 16384)):
            out.append(("embedding", dtype, (rows, 8 if dry_run else 1024, 1000 if dry_run else 50000)))
        out.append(("adam", dtype, (1, 1000 if dry_run else 25_000_000)))
    rng.shuffle(out)  # a run cut short by --budget-s keeps every operator class, not the first few
    return out


def make_call(op: str, dtype: str, dims: tuple[int, ...], device: str, capturable: bool = False) -> Callable[[], Any]:
    import torch
    import torch.nn.functional as F

    tdtype = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    if device == "cpu" and tdtype == torch.float16:
        tdtype = torch.bfloat16  # CPU smoke runs only check the code path
    new = lambda *shape: torch.randn(*shape, device=device, dtype=tdtype)  # noqa: E731
    if op == "mm":
        _, m, n, k = dims
        a, b = new(m, k), new(k, n)
        return lambda: a @ b
    if op == "bmm":
        bt, m, n, k = dims
        a, b = new(bt, m, k), new(bt, k, n)
        return lambda: torch.bmm(a, b)
    layout = torch.channels_last if op in ("convcl", "bncl") else torch.contiguous_format
    if op in ("conv", "convcl", "dwconv"):
        b, cin, cout, ks, size, stride, pad = dims
        x = new(b, cin, size, size).to(memory_format=layout)
        w = new(cout, cin if op != "dwconv" else 1, ks, ks).to(memory_format=layout)
        groups = cin if op == "dwconv" else 1
        return lambda: F.conv2d(x, w, stride=stride, padding=pad, groups=groups)
    if op in ("bn", "bncl"):  # training-mode batch norm forward (batch statistics), as in a training step
        b, c, size = dims
        x = new(b, c, size, size).to(memory_format=layout)
        weight, bias = torch.ones(c, device=device, dtype=tdtype), torch.zeros(c, device=device, dtype=tdtype)
        return lambda: F.batch_norm(x, None, None, weight, bias, training=True)
    if op == "sdpa":
        b, h, s, d = dims
        q, k, v = new(b, h, s, d), new(b, h, s, d), new(b, h, s, d)
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    if op == "embedding":
        rows, width, vocab = dims
        table = new(vocab, width)
        idx = torch.randint(0, vocab, (rows,), device=device)
        return lambda: F.embedding(idx, table)
    if op == "adam":
        _, n = dims
        p = [torch.zeros(n, device=device, dtype=torch.float32)]
        for t in p:
            t.grad = torch.randn_like(t)
        # capturable: the step counter lives on the GPU, so the step can be replayed from a CUDA graph
        opt = torch.optim.Adam(p, lr=1e-3, foreach=True, capturable=capturable)
        return opt.step
    rows, cols = dims
    x, y = new(rows, cols), new(rows, cols)
    unary = {"addu": lambda: x + 0.5, "mulu": lambda: x * 0.5, "divu": lambda: x / 0.5, "powu": lambda: x ** 0.5,
             "relu": lambda: torch.relu(x), "gelu": lambda: F.gelu(x), "tanh": lambda: torch.tanh(x),
             "softmax": lambda: torch.softmax(x, dim=-1), "ln": lambda: F.layer_norm(x, (cols,))}
    binary = {"add": lambda: x + y, "mul": lambda: x * y, "div": lambda: x / y, "pow": lambda: torch.pow(x.abs(), y)}
    return unary.get(op) or binary[op]


def graph_of(fn: Callable[[], Any], inner: int) -> Any:
    """`inner` calls of `fn` captured in one CUDA graph (warmed up on a side stream first, as torch.cuda.graph asks)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(inner):
            fn()
    return graph


def time_graph(fn: Callable[[], Any], repeats: int, inner: int) -> float:
    """Median seconds per call: CUDA events around one replay of a graph of `inner` calls (no host between kernels).
    A kernel of a millisecond or more keeps the GPU the slower side when called eagerly: timed so, without a graph."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn()
    start.record()
    fn()
    end.record()
    end.synchronize()
    if start.elapsed_time(end) > 1.0:
        return time_call(fn, "cuda", repeats, inner)
    graph = graph_of(fn, inner)
    graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    del graph
    return statistics.median(samples)


def time_call(fn: Callable[[], Any], device: str, repeats: int, inner: int) -> float:
    """Median seconds per call: CUDA events around `inner` back-to-back calls (perf_counter on CPU)."""
    import torch

    for _ in range(3):
        fn()
    if device == "cuda":  # a slow kernel (a big fp32 convolution: 0.1-0.3 s) is timed alone, three times
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > 5.0:
            repeats, inner = min(repeats, 3), 1
    samples = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) / 1e3 / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def machine(device: str) -> dict[str, Any]:
    import torch

    info: dict[str, Any] = {"torch": torch.__version__, "python": platform.python_version(), "platform": platform.platform(),
                            "device": device}
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        info["cuda"] = torch.version.cuda
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gpu", help="catalog name of this GPU (default: from torch.cuda.get_device_name)")
    ap.add_argument("--dry-run", action="store_true", help="tiny grid on the CPU: checks the code path, measures nothing useful")
    ap.add_argument("--budget-s", type=float, default=420.0, help="stop measuring after this many seconds (bounded run)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--output-dir", type=Path, default=RESULTS)
    ap.add_argument("--graph", action="store_true", help="replay each operator's calls from a CUDA graph (times the GPU, "
                    "not the host's dispatch; needs a GPU)")
    args = ap.parse_args(argv)
    import torch

    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA GPU here: run on a GPU, or pass --dry-run for the CPU smoke test", file=sys.stderr)
        return 2
    if args.graph and args.dry_run:
        print("error: --graph needs a GPU (CUDA graphs); drop --dry-run or --graph", file=sys.stderr)
        return 2
    if args.budget_s <= 0 or args.repeats < 1 or args.inner < 1:
        print("error: --budget-s, --repeats and --inner must be positive", file=sys.stderr)
        return 2
    gpu = args.gpu or ("cpu-dry-run" if args.dry_run else None)
    if gpu is None:
        from trainwise.catalog import load_catalog
        from trainwise.errors import TrainwiseError
        from trainwise.predict.measure import accelerator_of_device_name

        try:  # `NVIDIA H100 80GB HBM3` -> `H100`
            gpu = accelerator_of_device_name(torch.cuda.get_device_name(), load_catalog())
        except TrainwiseError as exc:
            print(f"error: {exc}; or pass --gpu NAME", file=sys.stderr)
            return 2
    source = f"trainwise-sweep-graph-{gpu}" if args.graph else f"trainwise-sweep-{gpu}"
    rows, skipped, t_start = [], [], time.perf_counter()
    for op, dtype, dims in grid(args.dry_run):
        if time.perf_counter() - t_start > args.budget_s:
            skipped.append("budget")
            break
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        torch.backends.cudnn.allow_tf32 = dtype == "tf32"
        try:
            call = make_call(op, dtype, dims, device, capturable=args.graph)
            seconds = (time_graph(call, args.repeats, args.inner) if args.graph
                       else time_call(call, device, args.repeats, args.inner))
        except (RuntimeError, ValueError) as exc:  # unsupported dtype/op on this device, out of memory, not capturable
            skipped.append(f"{op}/{dtype}/{dims}: {type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}")
            if args.graph:
                try:
                    torch.cuda.synchronize()  # a failed capture leaves no graph behind; the next operator starts clean
                except RuntimeError:
                    skipped.append("the CUDA context failed after that capture: sweep stopped")
                    break
            continue
        rows.append({"source": source, "gpu": gpu, "op": op, "dtype": dtype, "dims": "x".join(map(str, dims)),
                     "latency_us": f"{seconds * 1e6:.4g}"})
    args.output_dir.mkdir(parents=True, exist_ok=True)
    stem = f"kernel_sweep_{gpu}_graph" if args.graph else f"kernel_sweep_{gpu}"
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    summary = {"kernels": len(rows), "skipped": len(skipped), "gpu": gpu, "dry_run": args.dry_run,
               "seconds": round(time.perf_counter() - t_start, 1), "timing": "CUDA graph replay" if args.graph else "eager calls",
               "provenance": "measured here (CUDA events)"
               if device == "cuda" else "CPU smoke run: not kernel data"}
    for path, text in ((args.output_dir / f"{stem}.csv", buf.getvalue()),
                       (args.output_dir / f"{stem}.json", json.dumps({"summary": summary, "machine": machine(device),
                                                                       "skipped": skipped[:50]}, indent=1))):
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
