"""Rebuild src/trainwise/predict/data/kernel_latency.csv: per-operator GPU latencies for the kernel model.

Sources (per-kernel calibration data only; end-to-end step times never enter this file):
- NeuSight's public artifact (Lee et al., "Forecasting GPU Performance for Deep Learning Training and
  Inference", ASPLOS 2025; github.com/sitar-lab/NeuSight, MIT licence): the kernels it collected with
  PyTorch 2.1 (fp32, CUDA events) on P4, P100, T4, V100 and A100 under
  scripts/asplos/data/dataset/train/collect/<op>/p2.1.0/<GPU>.csv, and its per-kernel test set
  (scripts/asplos/data/dataset/test/{bmm,linear,elem,ln,softmax}.csv: the operator shapes of the models it evaluates,
  on those GPUs and the L4, H100 and A100 80GB PCIe; source `neusight-test`);
- trainwise's own H100 microbenchmarks (benchmarks/results/gpu_microbench_h100.json);
- any benchmarks/results/kernel_sweep_*.csv written by benchmarks/kernel_sweep.py on a lent GPU;
- with --deepbench, Baidu's DeepBench training results (github.com/baidu-research/DeepBench, Apache-2.0 licence,
  results/train/DeepBench_NV_{V100,T4}.xlsx: CUDA 10.1, cuDNN 7.6, 2019): cuBLAS GEMMs in fp32 and fp16 on tensor
  cores, cuDNN forward convolutions in fp32 (NCHW) and fp16 (NHWC, on tensor cores); source `deepbench`;
- with --vidur, Vidur's compute profiles (Agrawal et al., "Vidur: A Large-Scale Simulation Framework for LLM
  Inference", MLSys 2024; github.com/microsoft/vidur, MIT licence, data/profiling/compute/{a40,a100,h100}/*/mlp.csv):
  the four fp16 GEMMs of a transformer block, each the sum of its CUDA kernels' device times
  under torch.profiler (median of 20 blocks), on an A40, an A100 80GB and an H100 SXM; source `vidur`;
- with --kernelbench, KernelBench's eager timings of its single-operator problems (Ouyang et al., "KernelBench: Can
  LLMs Write Efficient GPU Kernels?", 2025; github.com/ScalingIntelligence/KernelBench, MIT licence): fp32 GEMMs,
  convolutions, activations and softmax (and batch norm, depthwise convolutions) at large shapes on the T4, L4,
  A100 40/80 GB SXM4, A10G, L40S, H100 SXM and PCIe, B200 (tools/kernelbench_rows.py); source `kernelbench`;
- with --xla, XLA's GEMM performance tables (OpenXLA, github.com/openxla/xla, Apache-2.0 licence): bf16 and TF32
  GEMMs on a b x m x n x k grid, median traced kernel time, on the H100 SXM and the B200, read from an XLA GPU build
  such as the `jax-cuda12-pjrt` wheel (tools/xla_rows.py); source `xla`.

Each (operator, GPU) is subsampled deterministically to at most --cap rows so the packaged CSV stays small.
Run: .venv/bin/python tools/build_kernel_dataset.py --neusight /path/to/NeuSight [--commit SHA]
[--deepbench /path/to/DeepBench] [--vidur /path/to/vidur] [--kernelbench /path/to/KernelBench]
[--xla /path/to/jax_cuda12_pjrt-0.12.0.1-*.whl] (any checkout may be a bare git directory: files are read with
`git show`).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import itertools
import json
import math
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "trainwise" / "predict" / "data" / "kernel_latency.csv"
COLLECT = "scripts/asplos/data/dataset/train/collect"
TEST = "scripts/asplos/data/dataset/test"
TEST_FILES = ("bmm", "linear", "elem", "ln", "softmax")  # test/vec.csv (= habitat.csv) is elem, ln and softmax again
# NeuSight device names -> trainwise catalog names
GPU_NAMES = {"Tesla P4": "P4", "Tesla P100-PCIE-16GB": "P100", "Tesla T4": "T4",
             "Tesla V100-PCIE-32GB": "V100-PCIe-32GB", "NVIDIA A100-PCIE-40GB": "A100-PCIe",
             "NVIDIA A100 80GB PCIe": "A100-80GB-PCIe", "NVIDIA L4": "L4", "NVIDIA H100 80GB HBM3": "H100"}
GEMM_OPS = ("bmm", "linear")
VEC_OPS = ("add", "mul", "div", "pow", "addu", "mulu", "divu", "powu", "relu", "gelu", "tanh", "softmax", "ln")
COLUMNS = ("source", "gpu", "op", "dtype", "dims", "latency_us")


class Repo:
    """Files of a checkout (NeuSight's, DeepBench's): a work tree, or a bare git directory read with `git show`."""

    def __init__(self, path: Path, commit: str | None, probe: str = COLLECT):
        self.path, self.commit = path, commit or "HEAD"
        self.bare = not (path / probe).exists()

    def head(self) -> str:
        git = ["git", "--git-dir", str(self.path)] if self.bare else ["git", "-C", str(self.path)]
        return subprocess.run([*git, "rev-parse", self.commit], capture_output=True, text=True, check=True).stdout.strip()

    def list(self, folder: str) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.path)) for p in (self.path / folder).glob("*.csv"))
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "--name-only", self.commit, folder + "/"],
                             capture_output=True, text=True, check=True).stdout
        return sorted(line for line in out.splitlines() if line.endswith(".csv"))

    def list_all(self, folder: str) -> list[str]:
        if not self.bare:
            return sorted(str(p.relative_to(self.path)) for p in (self.path / folder).rglob("*") if p.is_file())
        out = subprocess.run(["git", "--git-dir", str(self.path), "ls-tree", "-r", "--name-only", self.commit, folder + "/"],
                             capture_output=True, text=True, check=True).stdout
        return sorted(out.splitlines())

    def read(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def read_bytes(self, rel: str) -> bytes:
        if not self.bare:
            return (self.path / rel).read_bytes()
        return subprocess.run(["git", "--git-dir", str(self.path), "show", f"{self.commit}:{rel}"],
                              capture_output=True, check=True).stdout


def _neusight_row(op: str, r: dict, gpu: str, source: str) -> dict | None:
    """One NeuSight CSV record as a kernel_latency.csv row (None when a field is missing or the latency is not
    positive)."""
    try:
        latency_ms = float(r["Latency"])
        if op in GEMM_OPS:  # NeuSight: A[b, m, n] x W[n, k]; n is the reduction
            b, m, n, k = (int(r[c]) for c in ("B", "M", "N", "K"))
            dims = (b, m, k, n) if op == "bmm" else (1, b * m, k, n)  # batch, M, N(out), K(reduction)
        elif op == "conv":
            dims = tuple(int(r[c]) for c in ("B", "Input_Channel", "Output_Channel", "Kernel_Szie",
                                              "Input_Size", "Stride", "Padding"))
        else:
            dims = (int(r["B"]), int(r["H"]))
    except (KeyError, ValueError):
        return None
    if not latency_ms > 0:
        return None
    return {"source": source, "gpu": gpu, "op": "mm" if op == "linear" else op, "dtype": "fp32",
            "dims": "x".join(map(str, dims)), "latency_us": f"{latency_ms * 1e3:.4g}"}


def neusight_rows(repo: Repo, cap: int, rng: random.Random) -> list[dict]:
    rows: list[dict] = []
    for op in (*GEMM_OPS, "conv", *VEC_OPS):
        for rel in repo.list(f"{COLLECT}/{op}/p2.1.0"):
            device = Path(rel).stem
            gpu = GPU_NAMES.get(device)
            if gpu is None:
                continue
            records = list(csv.DictReader(io.StringIO(repo.read(rel))))
            rng.shuffle(records)
            kept = 0
            for r in records:
                row = _neusight_row(op, r, gpu, "neusight")
                if row is None:
                    continue
                rows.append(row)
                kept += 1
                if kept >= cap:
                    break
    return rows


def neusight_test_rows(repo: Repo, cap: int, rng: random.Random) -> list[dict]:
    """NeuSight's per-kernel test set (TEST_FILES): the same collection (PyTorch 2.1, fp32, one call between CUDA
    events) at the operator shapes of the models it evaluates, on its five training GPUs and on the L4, H100 and
    A100 80GB PCIe. Per-kernel data like the rest; source `neusight-test`, so an evaluation can leave it out."""
    rows: list[dict] = []
    for name in TEST_FILES:
        by_key: dict[tuple[str, str], list[dict]] = {}
        for r in csv.DictReader(io.StringIO(repo.read(f"{TEST}/{name}.csv"))):
            gpu = GPU_NAMES.get(r.get("Device", ""))
            op = r.get("OPName", "")
            if gpu is not None and (op in GEMM_OPS or op in VEC_OPS):
                by_key.setdefault((op, gpu), []).append(r)
        for (op, gpu), records in sorted(by_key.items()):
            rng.shuffle(records)
            rows += itertools.islice(filter(None, (_neusight_row(op, r, gpu, "neusight-test") for r in records)), cap)
    return rows


def own_microbench_rows(path: Path) -> list[dict]:
    """trainwise's H100 microbenchmarks: GEMMs per precision, 3x3 convolutions, elementwise ops."""
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    gpu = "H100"
    rows = []
    for g in data.get("gemm", []):
        rows.append({"source": "trainwise-h100", "gpu": gpu, "op": "mm", "dtype": g["precision"],
                     "dims": f"1x{g['m']}x{g['n']}x{g['k']}", "latency_us": f"{g['seconds'] * 1e6:.4g}"})
    for c in data.get("conv", []):
        if c.get("layout") != "nhwc":
            continue  # NCHW tensor-core convolutions pay a layout transpose the NeuSight grid never saw
        n, ch, h, _ = c["shape"]
        k = int(c.get("kernel", 3))
        rows.append({"source": "trainwise-h100", "gpu": gpu, "op": "conv", "dtype": "fp16",
                     "dims": f"{n}x{ch}x{ch}x{k}x{h}x1x{k // 2}", "latency_us": f"{c['seconds'] * 1e6:.4g}"})
    for e in data.get("elementwise", []):
        op = {"relu": "relu", "add": "add", "copy_fp32": "copy"}.get(e["op"])
        if op:
            rows.append({"source": "trainwise-h100", "gpu": gpu, "op": op, "dtype": "fp32",
                         "dims": f"1x{e['elements']}", "latency_us": f"{e['seconds'] * 1e6:.4g}"})
    return rows


def sweep_rows(folder: Path) -> list[dict]:
    """The kernel sweeps' rows. A GPU swept both ways keeps its CUDA-graph sweep (`kernel_sweep_<GPU>_graph.csv`,
    the kernels' own times) instead of its eager one, whose rows agree with it where the GPU was the slower side
    (graph / eager 0.97-1.0 for kernels of 100 us or more on the H200) and time the host below ~20 us."""
    rows = []
    paths = sorted(folder.glob("kernel_sweep_*.csv"))
    graphed = {p.name.replace("_graph.csv", ".csv") for p in paths if p.name.endswith("_graph.csv")}
    for path in (p for p in paths if p.name not in graphed):
        with path.open(encoding="utf-8") as fh:
            for r in csv.DictReader(fh):
                if r["gpu"] == "cpu-dry-run":
                    continue  # a CPU smoke run, not kernel data
                rows.append({k: r[k] for k in COLUMNS})
    return rows


# DeepBench's training result workbooks with the catalog GPU each ran on (a DGX-1's V100 SXM2; a T4), and the two
# sheets read: fp32, and fp16 inputs on tensor cores (cuBLAS CUBLAS_TENSOR_OP_MATH, cuDNN NHWC). The other NVIDIA
# workbooks ran CUDA 8/9-era libraries (2017) or GPUs the catalog lacks (GTX 1080 Ti, Titan X/Xp, M40).
DEEPBENCH_FILES = {"results/train/DeepBench_NV_V100.xlsx": "V100", "results/train/DeepBench_NV_T4.xlsx": "T4"}
DEEPBENCH_SHEETS = {"Results FP32": "fp32", "Results - FP16 ip, Mixed math": "fp16"}
# DeepBench times 300-400 back-to-back C++ calls with a wall clock and truncates the mean to whole microseconds: a
# kernel shorter than the host's launch rate (a few us a call) times the launch, and a few-us figure carries a
# quantisation of tens of per cent. Rows under this are left out.
DEEPBENCH_MIN_US = 10.0


def _number(v: object) -> float | None:
    """A numeric cell as a float; None for an empty (NaN) or text cell ('N/A*')."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def deepbench_rows(repo: Repo) -> list[dict]:
    """DeepBench's GEMMs and forward convolutions (square inputs and filters, equal strides and pads) on the V100
    and T4, fp32 and fp16. fp16 shapes the benchmark padded for the tensor cores (a dimension not a multiple of 8)
    are left out: the timed kernel is not the listed one. fp16 convolutions ran in NHWC: op `convcl`, like the
    channels-last rows of benchmarks/kernel_sweep.py."""
    import pandas as pd  # pandas.read_excel needs openpyxl (the [test] extra)

    rows: list[dict] = []
    for rel, gpu in DEEPBENCH_FILES.items():
        sheets = pd.read_excel(io.BytesIO(repo.read_bytes(rel)), sheet_name=None, header=None)
        for sheet, dtype in DEEPBENCH_SHEETS.items():
            section = None
            for rec in sheets[sheet].itertuples(index=False):
                v = list(rec) + [None] * 24
                if isinstance(v[0], str):
                    section = v[0]
                    continue
                if section == "Dense Matrix Multiplication":
                    m, n, k, t_ms = (_number(x) for x in (v[2], v[3], v[4], v[8]))
                    if None in (m, n, k, t_ms) or (dtype == "fp16" and any(int(d) % 8 for d in (m, n, k))):
                        continue
                    op, dims = "mm", (1, int(m), int(n), int(k))
                elif section == "Convolution":
                    w, h, c, b, kout, s, r, pw, ph, sw, sh, t_ms = (_number(x) for x in v[2:14])
                    if None in (w, h, c, b, kout, s, r, pw, ph, sw, sh, t_ms) or w != h or s != r or pw != ph \
                            or sw != sh or (dtype == "fp16" and (int(c) % 8 or int(kout) % 8)):
                        continue
                    op = "convcl" if dtype == "fp16" else "conv"
                    dims = (int(b), int(c), int(kout), int(s), int(w), int(sw), int(pw))
                else:
                    continue
                if t_ms * 1e3 < DEEPBENCH_MIN_US:
                    continue
                rows.append({"source": "deepbench", "gpu": gpu, "op": op, "dtype": dtype,
                             "dims": "x".join(map(str, dims)), "latency_us": f"{t_ms * 1e3:.4g}"})
    return rows


# Vidur's device folders -> catalog names. Its README lists the A100 80GB both as a DGX (SXM4) and as 4xA100 80GB
# PCIe nodes and says compute profiles depend on the SKU only; SXM4 is assumed (the family, held out as one, is the
# same). Its H100 is the H100 DGX's (SXM5).
VIDUR_GPUS = {"a40": "A40", "a100": "A100-80GB", "h100": "H100"}
VIDUR_COMPUTE = "data/profiling/compute"


def _vidur_kernels(r: dict, adds: bool = False) -> list[tuple[str, str, float]]:
    """One row of a Vidur mlp.csv (one model, token count and tensor-parallel degree) as (op, dims, latency_us): the
    block's four GEMMs (`batch x M x N(out) x K(reduction)`, M = tokens, each GPU's 1/TP share of N or K). Its vector
    operators are left out: the RMSNorm, rotary and SiLU-and-mul are custom kernels PyTorch does not run, and its
    residual adds (`adds`: a block with a post-attention norm adds two `tokens x hidden` tensors), fitted with the
    rest, made the held-out elementwise kernels of other sources worse (`--vidur-adds`, then
    `tools/source_ablation.py vidur --op add`: an A100 family held out, median |error| 0.119 -> 0.165; docs/accuracy.md)."""
    heads, kv, hidden, ffn, tokens, tp = (int(r[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd",
                                                              "num_tokens", "num_tensor_parallel_workers"))
    head_dim = hidden // heads
    gated = r["use_gated_mlp"].strip().lower() == "true"
    gemms = {"attn_pre_proj": ((heads + 2 * kv) * head_dim // tp, hidden),
             "attn_post_proj": (hidden, heads * head_dim // tp),
             "mlp_up_proj": ((2 if gated else 1) * ffn // tp, hidden),
             "mlp_down_proj": (hidden, ffn // tp)}
    out = [("mm", f"1x{tokens}x{n}x{k}", _vidur_ms(r, name)) for name, (n, k) in gemms.items()]
    if adds and _vidur_ms(r, "post_attention_layernorm") is not None:  # without one the add sums three tensors
        out.append(("add", f"{tokens}x{hidden}", _vidur_ms(r, "add")))
    return [(op, dims, ms * 1e3) for op, dims, ms in out if ms is not None]


def _vidur_ms(r: dict, name: str) -> float | None:
    """An operator's median time in ms; None when the column is absent, empty or not positive."""
    try:
        ms = float(r.get(f"time_stats.{name}.median") or "nan")
    except ValueError:
        return None
    return ms if math.isfinite(ms) and ms > 0 else None


def vidur_rows(repo: Repo, cap: int, rng: random.Random, adds: bool = False) -> list[dict]:
    """Vidur's fp16 GEMMs (and with `adds` its residual adds) on the A40, A100 80GB and H100, at most `cap` per
    (operator, GPU)."""
    by_key: dict[tuple[str, str], list[dict]] = {}
    for rel in repo.list_all(VIDUR_COMPUTE):
        parts = rel.split("/")
        gpu = VIDUR_GPUS.get(parts[3]) if len(parts) > 4 and parts[-1] == "mlp.csv" else None
        if gpu is None:
            continue
        for r in csv.DictReader(io.StringIO(repo.read(rel))):
            for op, dims, latency_us in _vidur_kernels(r, adds):
                by_key.setdefault((op, gpu), []).append({"source": "vidur", "gpu": gpu, "op": op, "dtype": "fp16",
                                                         "dims": dims, "latency_us": f"{latency_us:.4g}"})
    rows: list[dict] = []
    for _, records in sorted(by_key.items()):
        rng.shuffle(records)
        rows += records[:cap]
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--neusight", type=Path, required=True, help="NeuSight checkout or bare git directory")
    ap.add_argument("--commit", default=None, help="NeuSight commit to read (default HEAD)")
    ap.add_argument("--deepbench", type=Path, default=None, help="DeepBench checkout or bare git directory")
    ap.add_argument("--deepbench-commit", default=None, help="DeepBench commit to read (default HEAD)")
    ap.add_argument("--vidur", type=Path, default=None, help="Vidur checkout or bare git directory")
    ap.add_argument("--vidur-commit", default=None, help="Vidur commit to read (default HEAD)")
    ap.add_argument("--vidur-adds", action="store_true",
                    help="also Vidur's residual adds (left out of the packaged data: see tools/source_ablation.py)")
    ap.add_argument("--kernelbench", type=Path, default=None,
                    help="KernelBench checkout or bare git directory (its whole history is read: tools/kernelbench_rows.py)")
    ap.add_argument("--xla", type=Path, default=None,
                    help="an XLA GPU build holding its GEMM performance table (the jax-cuda12-pjrt wheel, its .so) or "
                         "the .txtpb itself (tools/xla_rows.py)")
    ap.add_argument("--cap", type=int, default=900, help="rows kept per (operator, GPU)")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not args.neusight.exists():
        print(f"error: {args.neusight} does not exist: clone github.com/sitar-lab/NeuSight first", file=sys.stderr)
        return 2
    if args.deepbench is not None and not args.deepbench.exists():
        print(f"error: {args.deepbench} does not exist: clone github.com/baidu-research/DeepBench first", file=sys.stderr)
        return 2
    if args.vidur is not None and not args.vidur.exists():
        print(f"error: {args.vidur} does not exist: clone github.com/microsoft/vidur first", file=sys.stderr)
        return 2
    if args.kernelbench is not None and not args.kernelbench.exists():
        print(f"error: {args.kernelbench} does not exist: clone github.com/ScalingIntelligence/KernelBench first",
              file=sys.stderr)
        return 2
    if args.xla is not None and not args.xla.is_file():
        print(f"error: {args.xla} is not a file: pip download jax-cuda12-pjrt==0.12.0.1 --no-deps first", file=sys.stderr)
        return 2
    if args.deepbench is not None:
        try:
            import openpyxl  # noqa: F401  (pandas.read_excel reads .xlsx with it)
        except ImportError:
            print("error: reading DeepBench's .xlsx workbooks needs openpyxl: pip install -e '.[test]'", file=sys.stderr)
            return 2
    try:
        return _build(args)
    except subprocess.CalledProcessError as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        print(f"error: git {' '.join(map(str, exc.cmd[-2:]))} failed ({err.strip()[:200]}): is that a checkout at "
              "the right commit?", file=sys.stderr)
    except OSError as exc:
        print(f"error: {exc}: is that a checkout of the right repository?", file=sys.stderr)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
    except KeyError as exc:
        print(f"error: a DeepBench workbook lacks the sheet {exc}: is that github.com/baidu-research/DeepBench?",
              file=sys.stderr)
    return 2


def _build(args: argparse.Namespace) -> int:
    repo = Repo(args.neusight, args.commit)
    commit = repo.head()
    rng = random.Random(0)
    rows = neusight_rows(repo, args.cap, rng)
    rows += own_microbench_rows(ROOT / "benchmarks" / "results" / "gpu_microbench_h100.json")
    rows += sweep_rows(ROOT / "benchmarks" / "results")
    rows += neusight_test_rows(repo, args.cap, random.Random(1))  # appended: the rows above stay as they were
    header = f"# NeuSight kernels: github.com/sitar-lab/NeuSight@{commit} (MIT licence); see README.md\n"
    if args.deepbench is not None:
        deepbench = Repo(args.deepbench, args.deepbench_commit, probe="results")
        rows += deepbench_rows(deepbench)  # appended after the rest, like the test set
        header += (f"# DeepBench kernels: github.com/baidu-research/DeepBench@{deepbench.head()} (Apache-2.0 licence);"
                   " see README.md\n")
    if args.vidur is not None:
        vidur = Repo(args.vidur, args.vidur_commit, probe=VIDUR_COMPUTE)
        rows += vidur_rows(vidur, args.cap, random.Random(2), adds=args.vidur_adds)  # appended last: the rows above stay as they were
        header += f"# Vidur kernels: github.com/microsoft/vidur@{vidur.head()} (MIT licence); see README.md\n"
    if args.kernelbench is not None:
        from kernelbench_rows import kernelbench_rows  # tools/, beside this script

        kernelbench = Repo(args.kernelbench, None, probe="KernelBench")
        rows += kernelbench_rows(args.kernelbench)  # appended last: the rows above stay as they were
        header += (f"# KernelBench kernels: github.com/ScalingIntelligence/KernelBench@{kernelbench.head()} "
                   "(MIT licence); see README.md\n")
    if args.xla is not None:
        from xla_rows import xla_rows  # tools/, beside this script

        rows += xla_rows(args.xla)  # appended last: the rows above stay as they were
        digest = hashlib.sha256(args.xla.read_bytes()).hexdigest()
        header += (f"# XLA kernels: the GEMM performance table in {args.xla.name} (sha256 {digest[:16]}; OpenXLA, "
                   "Apache-2.0 licence); see README.md\n")
    buf = io.StringIO()
    buf.write(header)
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    tmp = args.output.with_suffix(".csv.tmp")
    tmp.write_text(buf.getvalue(), encoding="utf-8")
    tmp.replace(args.output)
    print(f"{len(rows)} kernel rows -> {args.output} (NeuSight {commit[:12]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
