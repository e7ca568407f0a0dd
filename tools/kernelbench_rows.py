"""KernelBench's single-operator timings as kernel_latency.csv rows (tools/build_kernel_dataset.py --kernelbench).

KernelBench (Ouyang, Guo, Arora, Zhang, Hu, Ré, Mirhoseini, "KernelBench: Can LLMs Write Efficient GPU Kernels?",
2025; github.com/ScalingIntelligence/KernelBench, MIT licence) times its level-1 reference problems, each one PyTorch
operator at a fixed shape, in eager PyTorch 2.5 (fp32; TF32 on for convolutions only, PyTorch's default), one call
between two CUDA events, mean of 100 trials, on many GPUs: `results/timing/<machine>/baseline_time_torch.json`. The
problems grew between releases, so each timing file is read with the problem sources of the commit that wrote it.
Only problems that are one operator the kernel model knows are kept (GEMMs, square convolutions, three activations,
softmax; batch norm and depthwise convolutions for the kernel data's other users), and only timings of at least
MIN_US: a shorter one carries the host's launch gap (a few microseconds) as a visible share. A timing file with a
kernel faster than its roofline on the catalog GPU was not timed on the problems of its commit, and is skipped whole
(the A6000's files, timed on the smaller problems of an earlier release).
"""

from __future__ import annotations

import ast
import json
import operator
import subprocess
from pathlib import Path
from typing import Any, Callable

TIMING = "results/timing"
PROBLEMS = "KernelBench/level1"
MIN_US = 200.0
# KernelBench's device names -> catalog names (machines whose GPU the catalog lacks are skipped)
GPU_NAMES = {"Tesla T4": "T4", "NVIDIA L4": "L4", "NVIDIA A100-SXM4-40GB": "A100", "NVIDIA A100-SXM4-80GB": "A100-80GB",
             "NVIDIA A10G": "A10G", "NVIDIA L40S": "L40S", "NVIDIA H100 80GB HBM3": "H100",
             "NVIDIA H100 PCIe": "H100-PCIe", "NVIDIA B200": "B200", "NVIDIA RTX A6000": "A6000"}

Dims = Callable[[dict], "tuple[int, ...] | None"]


def _square(c: dict, build: Callable[[dict], tuple[int, ...]]) -> tuple[int, ...] | None:
    """A convolution or batch norm over a square input (the kernel data's dims carry one side)."""
    return build(c) if c.get("width") == c.get("height") and c.get("dim1", 0) == c.get("dim2", 0) else None


_MM: Dims = lambda c: (1, c["M"], c["N"], c["K"])  # noqa: E731 - batch, M, N(out), K(reduction)
# problem number -> (op, the forward's return expression it must have, dims from the module's constants)
PROBLEM_OPS: dict[int, tuple[str, str, Dims]] = {
    1: ("mm", "torch.matmul(A, B)", lambda c: (1, c["N"], c["N"], c["N"])),
    2: ("mm", "torch.matmul(A, B)", _MM),
    3: ("bmm", "torch.bmm(A, B)", lambda c: (c["batch_size"], c["m"], c["n"], c["k"])),
    4: ("mm", "torch.matmul(A, B)", lambda c: (1, c["M"], 1, c["K"])),
    6: ("mm", "torch.matmul(A, B)", _MM),
    7: ("mm", "torch.matmul(A, B)", _MM),
    8: ("mm", "torch.matmul(A, B)", _MM),
    9: ("mm", "torch.matmul(A, B)", lambda c: (1, c["M"], c["M"], c["N"])),
    10: ("mm", "torch.matmul(A, B)", lambda c: (1, c["N"] * c["M"], c["L"], c["K"])),
    11: ("mm", 'torch.einsum("bijl,lk->bijk", A, B)', lambda c: (1, c["b"] * c["i"] * c["j"], c["k"], c["l"])),
    13: ("mm", "torch.matmul(A, B)", lambda c: (1, c["N"], c["N"], c["N"])),
    16: ("mm", "torch.matmul(A.T, B)", _MM),
    17: ("mm", "torch.matmul(A, B.T)", _MM),
    18: ("mm", "torch.matmul(A.T, B.T)", _MM),
    5: ("mulu", "A * s", lambda c: (c["M"], c["N"])),
    19: ("relu", "torch.relu(x)", lambda c: (c["batch_size"], c["dim"])),
    22: ("tanh", "torch.tanh(x)", lambda c: (c["batch_size"], c["dim"])),
    26: ("gelu", "torch.nn.functional.gelu(x)", lambda c: (c["batch_size"], c["dim"])),
    23: ("softmax", "torch.softmax(x, dim=1)", lambda c: (c["batch_size"], c["dim"])),
    # not 40 (layer norm): 16 rows of 4 M elements, a kernel as parallel as its 16 rows (30-130x its roofline on
    # every GPU) that the model's vector-op inputs (elements, bytes) cannot tell from a well-shaped one
    33: ("bn", "self.bn(x)", lambda c: _square(c, lambda d: (d["batch_size"], d["features"], d["dim1"]))),
    # batch, in, out, kernel, input side, stride, padding (stride 1 and padding 0 unless the module sets them)
    63: ("conv", "self.conv2d(x)", lambda c: _square(c, lambda d: (d["batch_size"], d["in_channels"], d["out_channels"],
                                                                  d["kernel_size"], d["width"], 1, 0))),
    87: ("conv", "self.conv1d(x)", lambda c: _square(c, lambda d: (d["batch_size"], d["in_channels"], d["out_channels"],
                                                                  1, d["width"], 1, 0))),
    82: ("dwconv", "self.conv2d(x)", lambda c: _square(c, lambda d: (d["batch_size"], d["in_channels"], d["in_channels"],
                                                                    d["kernel_size"], d["width"], d.get("stride", 1),
                                                                    d.get("padding", 0)))),
}
_BINOPS = {ast.Mult: operator.mul, ast.Add: operator.add, ast.Sub: operator.sub, ast.FloorDiv: operator.floordiv}


def constants(source: str) -> dict[str, int]:
    """A problem module's integer constants (`batch_size = 16`, `M = 1024 * 2`, `K = N * 4`), read without running it."""
    out: dict[str, int] = {}

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
            return node.value
        if isinstance(node, ast.Name) and node.id in out:
            return out[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            try:
                return _BINOPS[type(node.op)](value(node.left), value(node.right))
            except ZeroDivisionError:
                raise ValueError("division by zero") from None
        raise ValueError("not an integer expression")

    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = value(node.value)
            except ValueError:
                continue
    return out


def problem_row(number: int, source: str) -> tuple[str, tuple[int, ...]] | None:
    """(op, dims) of a level-1 problem the kernel data can hold; None when it is not one of PROBLEM_OPS, its forward
    is no longer the expected call, or a constant it needs is missing."""
    if number not in PROBLEM_OPS:
        return None
    op, call, dims = PROBLEM_OPS[number]
    if not any(line.split("#")[0].strip() == f"return {call}" for line in source.splitlines()):
        return None
    try:
        got = dims(constants(source))
    except KeyError:
        return None
    return None if got is None else (op, tuple(int(d) for d in got))


class _Git:
    def __init__(self, git_dir: Path, bare: bool):
        self.cmd = ["git", "--git-dir", str(git_dir)] if bare else ["git", "-C", str(git_dir)]

    def __call__(self, *args: str) -> str:
        return subprocess.run([*self.cmd, *args], capture_output=True, text=True, check=True).stdout


def kernelbench_rows(path: Path) -> list[dict]:
    """Rows of every eager timing file in KernelBench's history (a checkout or a bare git directory), each with the
    problem sources of its own commit; a file's latest version per machine."""
    from trainwise.catalog import load_catalog

    catalog = load_catalog()  # once: every row's roofline check reads it
    git = _Git(path, bare=not (path / ".git").exists() and not (path / "KernelBench").exists())
    names = git("log", "--all", "--format=", "--name-only", "--diff-filter=AM", "--", TIMING).split()
    rows: list[dict] = []
    for rel in sorted({n for n in names if n.endswith("/baseline_time_torch.json")}):
        commit = git("log", "--all", "-1", "--format=%H", "--diff-filter=AM", "--", rel).strip()
        got = timing_rows(json.loads(git("show", f"{commit}:{rel}")),
                          lambda name, c=commit: git("show", f"{c}:{PROBLEMS}/{name}"))
        if any(below_roofline(r, catalog) for r in got):
            print(f"kernelbench: {rel} skipped: a kernel below its roofline (timed on other problem sizes)")
            continue
        rows += got
    return rows


def below_roofline(row: dict, catalog: Any = None) -> bool:
    """Whether a row's latency is under its kernel's roofline on the catalog GPU (an operator the kernel model has
    no class for is not checked); pass `catalog` when checking many rows."""
    from trainwise.predict import kernel_model as km

    if row["op"] not in km.OP_CLASS:
        return False
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    kernel = km.kernel_from_dims(row["op"], row["dtype"], tuple(int(d) for d in row["dims"].split("x")))
    roofline_s = km.features(kernel, km.GpuSpec.of(catalog.accelerator(row["gpu"])))[1]
    return float(row["latency_us"]) * 1e-6 < roofline_s


def timing_rows(timing: dict, read_problem: Callable[[str], str]) -> list[dict]:
    """One timing file's level-1 entries as rows; `read_problem(file name)` gives the problem's source."""
    rows = []
    for name, entry in sorted((timing.get("level1") or {}).items()):
        if not isinstance(entry, dict):
            continue  # a problem the machine failed to time
        gpu = GPU_NAMES.get(str(entry.get("hardware", "")))
        number = name.split("_", 1)[0]
        mean_ms = entry.get("mean")
        if gpu is None or not number.isdigit() or not isinstance(mean_ms, (int, float)) or mean_ms * 1e3 < MIN_US:
            continue
        try:
            got = problem_row(int(number), read_problem(name))
        except subprocess.CalledProcessError:
            continue  # the problem file is not at that commit
        if got is not None:
            op, dims = got
            rows.append({"source": "kernelbench", "gpu": gpu, "op": op, "dtype": "fp32",
                         "dims": "x".join(map(str, dims)), "latency_us": f"{mean_ms * 1e3:.4g}"})
    return rows
