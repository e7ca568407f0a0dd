"""Per-operator (kernel) latency model learned from measurements on many GPUs.

The model predicts how far below the roofline a kernel runs: for a kernel with `flops` and `bytes` on a
GPU with peak P (for the kernel's dtype and tensor-core eligibility) and memory bandwidth B,

    t_roofline = max(flops / P, bytes / B)        t_kernel = max(t_roofline, t_base x exp(f(x)))

t_base is the roofline, except for a GEMM on CUDA cores, whose t_base adds its tiles' operand traffic to its FLOPs
(`tile_operand_bytes`, `base_seconds`).

where f is a gradient-boosted regression (scikit-learn) of log(t_measured / t_base) on the kernel's
shape features (tiles of a 128x128 output tile, waves of tiles over the SMs, the tail wave's and tile
padding's utilisation, arithmetic intensity, sizes) and, where the selection split prefers it
(`FEATURE_SETS`), the kernel's bytes against the GPU's L2 and the GPU's specs (SMs, peak per SM, bandwidth, machine
balance, TDP per peak FLOP/s: a power-capped part cannot hold its boost clock; FP32 lanes per SM, boost clock, L2).
Predicting utilisation bounded by the roofline from tile/wave features is the method of NeuSight
(Lee et al., "Forecasting GPU Performance for Deep Learning Training and Inference", ASPLOS 2025); the
wave quantisation is Habitat's (Yu et al., "Habitat: A Runtime-Based Computational Performance Predictor
for Deep Learning Training", USENIX ATC 2021). This is an independent implementation.

Training data (`data/kernel_latency.csv`): NeuSight's published per-kernel latencies (its grid on the P4, P100, T4,
V100, A100, its test set's model-sized kernels on those and the L4, H100, A100 80GB; fp32, each less its host dispatch
gap: `kernel_fit.dispatch_gaps`), DeepBench's cuBLAS/cuDNN kernels on a V100 and a T4 (fp32, fp16 on tensor cores),
Vidur's fp16 transformer GEMMs on an A40, A100 80GB and H100 (device times under torch.profiler), KernelBench's eager
single-operator timings on ten GPUs, XLA's bf16/TF32 GEMM tables for the H100 and B200 (median traced kernel time),
trainwise's own H100 microbenchmarks and its H100/H200 kernel sweeps (less the rows that timed the host:
`kernel_fit.host_bound`); end-to-end step times never enter it. The trained regressor is packaged as JSON trees
(`data/kernel_model.json`) and evaluated with numpy; rebuild it with `REBUILD_COMMAND` (the fit: `kernel_fit`).
Operators without kernel data (attention kernels, grouped/depthwise convolutions, unknown operators) and regimes the
model did not earn on the per-kernel split (`kernel_fit.rule_regimes`) are left to the roofline core of
`device_model` and listed.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.predict.gemm import gemm_dims

DATA_DIR = Path(__file__).with_name("data")
ARTIFACT_PATH = DATA_DIR / "kernel_model.json"
DATASET_PATH = DATA_DIR / "kernel_latency.csv"
# Bump when the feature vector or the artifact layout changes: an older artifact is refused.
ARTIFACT_VERSION = 3
REBUILD_COMMAND = ".venv/bin/python tools/train_kernel_model.py"

TILE = 128
# A CUDA-core (non-tensor-core) GEMM fetches, per TILE x TILE output tile, a TILE-row panel of A and a TILE-column
# panel of B over the whole reduction: 2 TILE^2 K FLOPs per 2 TILE K operands, 32 FLOP/B in fp32. A GPU whose FP32
# peak per byte of bandwidth is above that (the L4: 101 FLOP/B; the T4, P4: 27-29) cannot feed its FP32 units: its
# GEMMs run at 27-44 % of the FP32 peak where the A100, V100 and H100 reach 68-86 %. The model's base time for such a
# GEMM is its compute time plus that traffic's time (fetch and math not overlapped; the tree learns the overlap), on
# every GPU within 0.8-1.2x of the measured time where the FLOPs alone are 1.2-3.7x off. Tile-level compute and
# traffic are the quantities of NeuSight (Lee et al., ASPLOS 2025); tensor-core kernels, with larger tiles and
# operands shared through L2 and thread-block clusters, run 1.6-2.2x faster than this traffic allows on the
# H100/H200 sweeps and keep the roofline as their base.
# kernel classes of the training data; each trainwise category maps onto one (`record_kernel`)
CLASSES = ("gemm", "conv", "elementwise", "softmax", "norm")
_CLASS_INDEX = {c: i for i, c in enumerate(CLASSES)}
OP_CLASS = {"mm": "gemm", "bmm": "gemm", "conv": "conv", "softmax": "softmax", "ln": "norm",
            **{op: "elementwise" for op in ("add", "mul", "div", "pow", "addu", "mulu", "divu", "powu", "relu", "gelu",
                                            "tanh", "copy")}}
BINARY_OPS = frozenset({"add", "mul", "div", "pow"})
TRANSCENDENTAL_OPS = frozenset({"pow", "powu", "gelu", "tanh", "softmax"})
DTYPE_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2}
FEATURES = ("class", "inputs", "transcendental", "tensor_core", "log_flops", "log_bytes", "log_intensity",
            "log_t_compute_us", "log_t_memory_us", "log_t_roofline_us", "log2_batch", "log2_m", "log2_n", "log2_k",
            "log2_tiles", "log2_waves", "tail_utilisation", "pad_utilisation", "log2_elements", "log2_elem_waves",
            "kernel_size", "sms", "peak_per_sm_gflops", "log_peak", "log_bandwidth", "balance", "tdp_per_tflops",
            "bandwidth_per_sm", "log2_bytes_per_l2", "fp32_lanes_per_sm", "clock_ghz", "log2_l2_mib", "log_t_tile_us")
# The GPU's specs as tree inputs. Without them the GPU still enters through the roofline (its peak for the kernel's
# dtype, its bandwidth: `log_t_*_us`, `tensor_core`) and its SM count (tiles, waves, tail); the tools/train_kernel_model.py
# selection split decides between the two sets (`FEATURE_SETS`), held-out GPU family by family.
GPU_SPEC_FEATURES = ("sms", "peak_per_sm_gflops", "log_peak", "log_bandwidth", "balance", "tdp_per_tflops",
                     "bandwidth_per_sm", "fp32_lanes_per_sm", "clock_ghz", "log2_l2_mib")
# The kernel's bytes against the GPU's L2 (a working set that stays in L2 is not bound by DRAM bandwidth: the L4's
# 48 MB): a kernel-relative input like the waves, tried with and without (`FEATURE_SETS`).
L2_FEATURES = ("log2_bytes_per_l2",)
FEATURE_SETS = {"kernel+gpu": FEATURES,
                "kernel+l2": tuple(f for f in FEATURES if f not in GPU_SPEC_FEATURES),
                "kernel": tuple(f for f in FEATURES if f not in GPU_SPEC_FEATURES + L2_FEATURES)}
# the catalog fields each input needs beyond the peaks, bandwidth, SMs and TDP every set reads
FEATURE_CATALOG_FIELDS = {"log2_bytes_per_l2": ("l2_cache_mib",), "fp32_lanes_per_sm": ("boost_clock_mhz",),
                          "clock_ghz": ("boost_clock_mhz",), "log2_l2_mib": ("l2_cache_mib",)}


@dataclass(frozen=True)
class Kernel:
    """One kernel in the model's terms: GEMM dims (batch, M, N out, K reduction) or elements."""

    op: str
    dtype: str
    flops: float
    bytes: float
    batch: int = 1
    m: int = 1
    n: int = 1
    k: int = 1
    elements: float = 0.0
    kernel_size: int = 0

    @property
    def kind(self) -> str:
        return OP_CLASS[self.op]


def kernel_from_dims(op: str, dtype: str, dims: tuple[int, ...]) -> Kernel:
    """The `Kernel` of a row of data/kernel_latency.csv (its `dims` column, see tools/build_kernel_dataset.py)."""
    size = DTYPE_BYTES.get(dtype, 4)
    if OP_CLASS[op] == "gemm":
        b, m, n, k = dims
        return Kernel(op, dtype, 2.0 * b * m * n * k, size * b * (m * k + k * n + m * n), b, m, n, k)
    if op == "conv":
        b, cin, cout, ks, size_in, stride, pad = dims
        out = (size_in + 2 * pad - ks) // stride + 1
        m, n, k = b * out * out, cout, cin * ks * ks
        nbytes = size * (b * cin * size_in * size_in + cout * cin * ks * ks + b * cout * out * out)
        return Kernel(op, dtype, 2.0 * m * n * k, nbytes, 1, m, n, k, kernel_size=ks)
    rows, cols = dims
    elements = float(rows) * cols
    tensors = 3 if op in BINARY_OPS else 2
    return Kernel(op, dtype, elements, size * elements * tensors, elements=elements)


@dataclass(frozen=True)
class GpuSpec:
    """The accelerator specs the model reads (from the catalog's accelerators.csv)."""

    name: str
    sms: int
    fp32: float        # FLOP/s
    tf32: float | None
    fp16: float | None
    bf16: float | None
    bandwidth: float   # B/s
    tdp_w: float
    clock_hz: float | None = None   # datasheet boost clock
    l2_bytes: float | None = None

    @staticmethod
    def of(acc: Any) -> "GpuSpec":
        missing = [f for f in ("cores", "fp32_tflops", "memory_bw_gbs", "tdp_w") if not getattr(acc, f, None)]
        if missing:
            raise TrainwiseError(f"accelerator {acc.name} lacks {', '.join(missing)} in the catalog: the kernel model "
                                 "needs them (add them to the accelerator's specs)")
        t = lambda v: (v or 0) * 1e12 or None  # noqa: E731
        clock, l2 = getattr(acc, "boost_clock_mhz", None), getattr(acc, "l2_cache_mib", None)
        return GpuSpec(acc.name, int(acc.cores), acc.fp32_tflops * 1e12, t(acc.tf32_tflops), t(acc.fp16_tflops),
                       t(acc.bf16_tflops), acc.memory_bw_gbs * 1e9, float(acc.tdp_w), clock * 1e6 if clock else None,
                       l2 * 2**20 if l2 else None)

    def gpu_columns(self) -> tuple[float, float, float]:
        """(fp32 lanes per SM per clock, clock GHz, log2 L2 MiB); NaN where the catalog lacks the clock or L2."""
        nan = float("nan")
        lanes = self.fp32 / (2 * self.sms * self.clock_hz) if self.clock_hz else nan
        clock_ghz = self.clock_hz / 1e9 if self.clock_hz else nan
        return lanes, clock_ghz, math.log2(self.l2_bytes / 2**20) if self.l2_bytes else nan

    def peak(self, kernel: Kernel, conv_tf32: bool = True) -> tuple[float, bool]:
        """(FLOP/s, tensor cores) for `kernel`: fp16/bf16 GEMMs and convolutions on tensor cores, TF32 when asked
        (and for fp32 convolutions, which cuDNN runs in TF32 by default on Ampere and later)."""
        if kernel.kind in ("gemm", "conv"):
            if kernel.dtype in ("fp16", "bf16"):
                tensor = self.fp16 if kernel.dtype == "fp16" else (self.bf16 or self.fp16)
                if tensor:
                    return tensor, True
            if self.tf32 and (kernel.dtype == "tf32" or (kernel.kind == "conv" and kernel.dtype == "fp32" and conv_tf32)):
                return self.tf32, True
        return self.fp32, False


def _log2(x: float) -> float:
    return math.log2(max(x, 1.0))


def tile_operand_bytes(kernel: Kernel) -> float:
    """Bytes a GEMM or convolution moves when each TILE x TILE output tile reads its own panels of the operands over
    the whole reduction (no reuse between tiles), plus its output once (`TILE`)."""
    size = DTYPE_BYTES.get(kernel.dtype, 4)
    tiles = kernel.batch * math.ceil(kernel.m / TILE) * math.ceil(kernel.n / TILE)
    return size * (tiles * 2 * TILE * kernel.k + kernel.batch * kernel.m * kernel.n)


def base_seconds(x: Any) -> Any:
    """The model's base time of each feature row: the roofline, or for a GEMM on CUDA cores its compute time plus its
    tiles' operand traffic time (`TILE`); the prediction is max(roofline, base x exp(f))."""
    import numpy as np

    x = np.atleast_2d(x)
    col = FEATURES.index
    simt_gemm = (x[:, col("class")] == _CLASS_INDEX["gemm"]) & (x[:, col("tensor_core")] == 0)
    sec = lambda c: 10.0 ** x[:, col(c)] / 1e6  # noqa: E731
    return np.where(simt_gemm, sec("log_t_compute_us") + sec("log_t_tile_us"), sec("log_t_roofline_us"))


def features(kernel: Kernel, gpu: GpuSpec) -> tuple[list[float], float]:
    """(feature vector in `FEATURES` order, roofline seconds: max(FLOPs / peak, bytes / bandwidth), no tile-level
    term) of `kernel` on `gpu`."""
    peak, tensor = gpu.peak(kernel)
    t_c = kernel.flops / peak
    t_m = kernel.bytes / gpu.bandwidth
    roof = max(t_c, t_m, 1e-9)
    t_tile = tile_operand_bytes(kernel) / gpu.bandwidth if kernel.kind in ("gemm", "conv") else t_m
    tiles = waves = tail = pad = 1.0
    if kernel.kind in ("gemm", "conv"):
        tiles = kernel.batch * math.ceil(kernel.m / TILE) * math.ceil(kernel.n / TILE)
        waves = tiles / gpu.sms
        tail = tiles / (math.ceil(waves) * gpu.sms)
        pad = (kernel.n / (math.ceil(kernel.n / TILE) * TILE)) * (kernel.k / (math.ceil(kernel.k / 32) * 32))
    elements = kernel.elements or kernel.batch * kernel.m * kernel.n
    elem_waves = elements / (gpu.sms * 2048 * 4)  # 2048 resident threads per SM, 4 elements per thread
    us = lambda s: math.log10(max(s * 1e6, 1e-6))  # noqa: E731
    x = [
        _CLASS_INDEX[kernel.kind], 2.0 if kernel.op in BINARY_OPS else 1.0, 1.0 if kernel.op in TRANSCENDENTAL_OPS else 0.0,
        1.0 if tensor else 0.0, math.log10(max(kernel.flops, 1.0)), math.log10(max(kernel.bytes, 1.0)),
        math.log10(max(kernel.flops, 1.0) / max(kernel.bytes, 1.0)), us(t_c), us(t_m), us(roof),
        _log2(kernel.batch), _log2(kernel.m), _log2(kernel.n), _log2(kernel.k), _log2(tiles), math.log2(max(waves, 1e-6)),
        tail, pad, _log2(elements), math.log2(max(elem_waves, 1e-6)), float(kernel.kernel_size), float(gpu.sms),
        peak / gpu.sms / 1e9, math.log10(peak), math.log10(gpu.bandwidth), peak / gpu.bandwidth,
        gpu.tdp_w / (peak / 1e12), gpu.bandwidth / gpu.sms / 1e9,
        math.log2(max(kernel.bytes, 1.0) / gpu.l2_bytes) if gpu.l2_bytes else float("nan"), *gpu.gpu_columns(),
        us(t_tile),
    ]
    return x, roof


_DTYPE_CODE = {"fp32": 0, "tf32": 1, "fp16": 2, "bf16": 3}


@dataclass
class KernelArrays:
    """Many kernels as numpy columns, so their features for a GPU are computed at once (`features_matrix`)."""

    cls: Any
    inputs: Any
    transcendental: Any
    dtype: Any
    flops: Any
    bytes: Any
    batch: Any
    m: Any
    n: Any
    k: Any
    elements: Any
    kernel_size: Any

    @staticmethod
    def of(kernels: list[Kernel]) -> "KernelArrays":
        import numpy as np

        col = lambda f: np.array([f(k) for k in kernels], dtype=float)  # noqa: E731
        return KernelArrays(
            cls=col(lambda k: _CLASS_INDEX[k.kind]), inputs=col(lambda k: 2.0 if k.op in BINARY_OPS else 1.0),
            transcendental=col(lambda k: 1.0 if k.op in TRANSCENDENTAL_OPS else 0.0),
            dtype=col(lambda k: _DTYPE_CODE.get(k.dtype, 0)), flops=col(lambda k: k.flops), bytes=col(lambda k: k.bytes),
            batch=col(lambda k: k.batch), m=col(lambda k: k.m), n=col(lambda k: k.n), k=col(lambda k: k.k),
            elements=col(lambda k: k.elements or k.batch * k.m * k.n), kernel_size=col(lambda k: k.kernel_size))


def features_matrix(a: KernelArrays, gpu: GpuSpec, conv_tf32: bool = True) -> tuple[Any, Any]:
    """(features [kernels, FEATURES], roofline seconds) of many kernels on `gpu`; the same values as `features`."""
    import numpy as np

    mmconv = (a.cls == _CLASS_INDEX["gemm"]) | (a.cls == _CLASS_INDEX["conv"])
    is_conv = a.cls == _CLASS_INDEX["conv"]
    peak = np.full(len(a.cls), gpu.fp32)
    tensor = np.zeros(len(a.cls), dtype=bool)
    bf16 = gpu.bf16 or gpu.fp16
    if gpu.tf32:
        use = mmconv & ((a.dtype == 1) | (is_conv & (a.dtype == 0) & conv_tf32))
        peak[use], tensor[use] = gpu.tf32, True
    if gpu.fp16:
        use = mmconv & (a.dtype == 2)
        peak[use], tensor[use] = gpu.fp16, True
    if bf16:
        use = mmconv & (a.dtype == 3)
        peak[use], tensor[use] = bf16, True
    t_c = a.flops / peak
    t_m = a.bytes / gpu.bandwidth
    roof = np.maximum(np.maximum(t_c, t_m), 1e-9)
    ceil = np.ceil
    tiles = np.where(mmconv, a.batch * ceil(a.m / TILE) * ceil(a.n / TILE), 1.0)
    waves = np.where(mmconv, tiles / gpu.sms, 1.0)
    tail = np.where(mmconv, tiles / (ceil(waves) * gpu.sms), 1.0)
    pad = np.where(mmconv, (a.n / (ceil(a.n / TILE) * TILE)) * (a.k / (ceil(a.k / 32) * 32)), 1.0)
    elem_waves = a.elements / (gpu.sms * 2048 * 4)
    size = np.where((a.dtype == 2) | (a.dtype == 3), 2.0, 4.0)
    tile_bytes = size * (a.batch * ceil(a.m / TILE) * ceil(a.n / TILE) * 2 * TILE * a.k + a.batch * a.m * a.n)
    t_tile = np.where(mmconv, tile_bytes / gpu.bandwidth, t_m)
    lg2 = lambda v: np.log2(np.maximum(v, 1.0))  # noqa: E731
    us = lambda sec: np.log10(np.maximum(sec * 1e6, 1e-6))  # noqa: E731
    f1 = np.maximum(a.flops, 1.0)
    b1 = np.maximum(a.bytes, 1.0)
    ones = np.ones(len(a.cls))
    cols = [a.cls, a.inputs, a.transcendental, tensor.astype(float), np.log10(f1), np.log10(b1), np.log10(f1 / b1),
            us(t_c), us(t_m), us(roof), lg2(a.batch), lg2(a.m), lg2(a.n), lg2(a.k), lg2(tiles),
            np.log2(np.maximum(waves, 1e-6)), tail, pad, lg2(a.elements), np.log2(np.maximum(elem_waves, 1e-6)),
            a.kernel_size, ones * gpu.sms, peak / gpu.sms / 1e9, np.log10(peak), ones * math.log10(gpu.bandwidth),
            peak / gpu.bandwidth, gpu.tdp_w / (peak / 1e12), ones * (gpu.bandwidth / gpu.sms / 1e9),
            np.log2(b1 / gpu.l2_bytes) if gpu.l2_bytes else ones * np.nan, *(ones * v for v in gpu.gpu_columns()),
            us(t_tile)]
    return np.column_stack(cols), roof


# A kernel is predicted only in a regime (class, tensor cores or not, 16- or 32-bit operands for GEMMs and
# convolutions; memory-bound classes move bytes whatever their dtype) that the training data covers on at least
# MIN_FAMILIES GPU families: from one family the fit cannot tell the regime's effect from that GPU's.
MIN_FAMILIES = 2


def regimes(x: Any, dtype_code: Any) -> list[str]:
    """Regime key of each kernel, from its feature rows and dtype codes (`_DTYPE_CODE`)."""
    cls_col, tc_col = FEATURES.index("class"), FEATURES.index("tensor_core")
    out = []
    for c, tc, d in zip(x[:, cls_col], x[:, tc_col], dtype_code):
        kind = CLASSES[int(c)]
        if kind in ("gemm", "conv"):
            out.append(f"{kind}|{'tensor' if tc else 'simt'}|{'16' if d >= 2 else '32'}")
        else:
            out.append(kind)
    return out


def regime_coverage(data: Any) -> dict[str, list[str]]:
    """GPU families each regime of `data` (a `kernel_fit.KernelDataset`) was measured on."""
    cover: dict[str, set[str]] = {}
    for regime, gpu in zip(regimes(data.x, data.dtype_code), data.gpus):
        cover.setdefault(regime, set()).add(family(gpu))
    return {k: sorted(v) for k, v in sorted(cover.items())}


# ------------------------------------------------------------------------------------------------
# the packaged artifact: gradient-boosted trees as JSON, evaluated with numpy
# ------------------------------------------------------------------------------------------------

@dataclass
class TreeEnsemble:
    """Gradient-boosted regression trees, flattened into one node table: all trees walked at once with numpy.
    Leaves point to themselves (threshold +inf), so a fixed number of steps reaches every leaf."""

    init: float
    learning_rate: float
    feature: Any     # [nodes] int (0 at leaves)
    threshold: Any   # [nodes] (+inf at leaves)
    left: Any        # [nodes] global index of the left child (itself at leaves)
    right: Any
    value: Any
    roots: Any       # [trees] global index of each tree's root
    depth: int
    meta: dict
    _table: Any = None

    def predict(self, x: Any) -> Any:
        import numpy as np

        x = np.ascontiguousarray(x, dtype=float)
        if self._table is None:  # one row per node: one gather per step instead of four
            self._table = np.column_stack([self.feature, self.threshold, self.left, self.right])
        out = np.empty(len(x))
        for start in range(0, len(x), 256):  # small blocks keep the gathers in cache
            block = x[start:start + 256]
            n, width = block.shape
            node = np.broadcast_to(self.roots, (n, len(self.roots))).copy()
            base = (np.arange(n) * width)[:, None]
            flat = block.ravel()
            for _ in range(self.depth):
                rec = self._table[node]
                go_left = flat[base + rec[..., 0].astype(np.int64)] <= rec[..., 1]
                node = np.where(go_left, rec[..., 2], rec[..., 3]).astype(np.int64)
            out[start:start + n] = self.value[node].sum(axis=1)
        return self.init + self.learning_rate * out


def ensemble_to_json(model: Any, meta: dict) -> dict:
    """A fitted sklearn HistGradientBoostingRegressor (or a `kernel_fit.FittedModel` around one) as the packaged
    artifact's JSON (its trees' split features as indices into `FEATURES`, thresholds, children and leaf values; the
    leaf values already carry the learning rate). The trees are read
    from the fitted model's predictors; tests/test_kernel_model.py checks the JSON reproduces `model.predict`."""
    columns = getattr(model, "columns", None)  # a `kernel_fit.FittedModel` fitted on some of FEATURES' columns
    model = getattr(model, "regressor", model)
    column = (lambda f: int(columns[f])) if columns is not None else int  # the JSON indexes the whole feature vector
    trees = []
    for (predictor,) in model._predictors:
        nodes = predictor.nodes
        leaf = nodes["is_leaf"].astype(bool)
        trees.append({"feature": [-1 if lf else column(f) for lf, f in zip(leaf, nodes["feature_idx"])],
                      "threshold": [float(v) for v in nodes["num_threshold"]],
                      "left": [int(v) for v in nodes["left"]], "right": [int(v) for v in nodes["right"]],
                      "value": [float(f"{v:.7g}") for v in nodes["value"]]})
    init = float(__import__("numpy").ravel(model._baseline_prediction)[0])
    return {"format": "trainwise.kernel_model", "version": ARTIFACT_VERSION, "features": list(FEATURES),
            "init": init, "learning_rate": 1.0, "max_depth": int(max(p[0].nodes["depth"].max() for p in model._predictors)),
            "trees": trees, "meta": meta}


def ensemble_from_json(data: dict, path: Path | str = ARTIFACT_PATH) -> TreeEnsemble:
    import numpy as np

    if data.get("format") != "trainwise.kernel_model":
        raise TrainwiseError(f"{path} is not a trainwise kernel model: rebuild it with `{REBUILD_COMMAND}`")
    if data.get("version") != ARTIFACT_VERSION or data.get("features") != list(FEATURES):
        raise TrainwiseError(f"the kernel model {path} is version {data.get('version')}, this trainwise needs version "
                             f"{ARTIFACT_VERSION} (features changed): rebuild it with `{REBUILD_COMMAND}`")
    trees = data["trees"]
    feature, threshold, left, right, value, roots = [], [], [], [], [], []
    for t in trees:
        offset = len(feature)
        roots.append(offset)
        for f, th, lc, rc, v in zip(t["feature"], t["threshold"], t["left"], t["right"], t["value"]):
            leaf = f < 0
            me = len(feature)
            feature.append(0 if leaf else f)
            threshold.append(np.inf if leaf else th)
            left.append(me if leaf else offset + lc)
            right.append(me if leaf else offset + rc)
            value.append(v)
    return TreeEnsemble(init=float(data["init"]), learning_rate=float(data["learning_rate"]),
                        feature=np.array(feature, dtype=np.int64), threshold=np.array(threshold, dtype=float),
                        left=np.array(left, dtype=np.int64), right=np.array(right, dtype=np.int64),
                        value=np.array(value, dtype=float), roots=np.array(roots, dtype=np.int64),
                        depth=int(data["max_depth"]) + 1, meta=data.get("meta", {}))


@lru_cache(maxsize=4)
def _load_cached(path: str, mtime: float) -> TreeEnsemble:
    return ensemble_from_json(json.loads(Path(path).read_text(encoding="utf-8")), path)


def load_kernel_model(path: str | Path | None = None) -> TreeEnsemble:
    """The packaged kernel model (or the artifact at `path`); a missing or outdated one raises with the
    rebuild command."""
    p = Path(path) if path is not None else ARTIFACT_PATH
    if not p.is_file():
        raise TrainwiseError(f"kernel model {p} does not exist: build it with `{REBUILD_COMMAND}`")
    try:
        return _load_cached(str(p), p.stat().st_mtime)
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise TrainwiseError(f"kernel model {p} is unreadable ({type(exc).__name__}): rebuild it with "
                             f"`{REBUILD_COMMAND}`") from None


def missing_catalog_fields(model: TreeEnsemble, x: Any) -> list[str]:
    """The catalog fields behind the inputs the model reads that are missing (NaN) in the feature rows `x`."""
    import numpy as np

    used = FEATURE_SETS.get(model.meta.get("settings", {}).get("features", "kernel+gpu"), FEATURES)
    if not len(x):
        return []
    return sorted({field for f in used if f in FEATURE_CATALOG_FIELDS and np.isnan(x[0, FEATURES.index(f)])
                   for field in FEATURE_CATALOG_FIELDS[f]})


def predict_seconds(kernels: "list[Kernel] | KernelArrays", gpu: GpuSpec, model: TreeEnsemble | None = None) -> Any:
    """Predicted seconds of each kernel on `gpu` (never faster than its roofline); NaN for a kernel whose regime
    the model's training data covers on fewer than MIN_FAMILIES GPU families (`regimes`), or where the model did
    not beat the roofline rule on the per-kernel split (`meta["rule_regimes"]`, `kernel_fit.rule_regimes`): the
    caller falls back to the rule."""
    import numpy as np

    arrays = kernels if isinstance(kernels, KernelArrays) else KernelArrays.of(kernels)
    if not len(arrays.cls):
        return np.zeros(0)
    model = model or load_kernel_model()
    x, roof = features_matrix(arrays, gpu)
    lacking = missing_catalog_fields(model, x)
    if lacking:
        raise TrainwiseError(f"accelerator {gpu.name} lacks {', '.join(lacking)} in the catalog: the kernel model "
                             "reads them (add them to the accelerator's specs)")
    coverage, to_rule = model.meta.get("coverage", {}), set(model.meta.get("rule_regimes", ()))
    covered = np.array([len(coverage.get(r, ())) >= MIN_FAMILIES and r not in to_rule for r in regimes(x, arrays.dtype)],
                       dtype=bool)
    out = np.full(len(roof), np.nan)
    if covered.any():
        out[covered] = np.maximum(roof[covered], base_seconds(x[covered]) * np.exp(model.predict(x[covered])))
    return out


# ------------------------------------------------------------------------------------------------
# trainwise operator records -> kernels
# ------------------------------------------------------------------------------------------------

_RECORD_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}
# memory-bound categories and the kernel class standing in for them: softmax-like reductions, layer/batch
# norms, and everything that streams tensors element by element (optimizer steps, embeddings' gathers, copies)
_MEMORY_OP = {"elementwise": "add", "copy": "copy", "optimizer": "add", "embedding": "copy", "reduction": "softmax",
              "normalisation": "ln"}


def record_kernel(record: Any, precision: str) -> Kernel | None:
    """The kernel one trainwise operator record runs, in the model's terms; None when the kernel data has no
    class for it (attention kernels, grouped/depthwise convolutions, other/unknown operators): those keep the
    roofline core's rule."""
    dtype = _RECORD_DTYPES.get(record.dtype)
    if dtype is None:
        return None
    nbytes = float(record.bytes_read + record.bytes_written)
    if record.category in ("matmul", "conv"):
        if record.category == "conv" and getattr(record, "groups", 1) != 1:
            return None
        dims = gemm_dims(record)
        if dims is None:
            return None
        batch, m, n, k = dims
        if dtype == "fp32" and precision == "tf32":
            dtype = "tf32"
        op = "mm" if record.category == "matmul" else "conv"
        ks = 0
        if op == "conv":
            try:
                ks = int(record.shapes[1][-1])
            except (IndexError, TypeError):
                ks = 0
        return Kernel(op, dtype, float(record.flops), nbytes, int(batch), max(1, int(m)), max(1, int(n)),
                      max(1, int(k)), kernel_size=ks)
    op = _MEMORY_OP.get(record.category)
    if op is None:
        return None
    size = DTYPE_BYTES[dtype]
    tensors = 3 if op in BINARY_OPS else 2
    return Kernel(op, dtype, float(record.flops), nbytes, elements=max(nbytes / (size * tensors), 1.0))


_FAMILY = re.compile(r"G?(A100|V100|P100|H100|H200|T4|P4|L4)(?![0-9A-Z])")


def family(gpu: str) -> str:
    """GPUs that share a die and clocks (A100 PCIe 40/80 GB; V100 16/32 GB; H100, H200 and GH200's GPU) are held out
    together. The name must start with the die's (an L40S is not an L4, a P40 not a P4)."""
    g = gpu.upper()
    match = _FAMILY.match(g)
    if match is None:
        return g
    return "H100" if match.group(1) == "H200" else match.group(1)
