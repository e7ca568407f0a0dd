"""Per-operator time of the device model's roofline rule (the formula is in `device_model`'s docstring).

`op_features` resolves a characterisation's records against one accelerator once (`compute_peak`: the peak
each operator gets; `wave_utilisation`: how well its tiles fill the SMs) and `time_of` evaluates the rule at
any constants, so the calibration fit can call it thousands of times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.predict.accelerator_features import generation_of
from trainwise.core.workload import COMPUTE_CATEGORIES, WorkloadCharacterisation
from trainwise.predict.device_params import COMPUTE_CLASSES, MEMORY_CATEGORIES, DeviceModelParams
from trainwise.predict.gemm import gemm_dims

PEAK_REF = 100e12  # FLOP/s: the efficiency power law's reference peak


@dataclass(frozen=True)
class _Peaks:
    fp32: float
    tf32: float | None
    fp16: float | None
    bf16: float | None
    fp16_vector: float
    bandwidth: float
    is_tpu: bool


def _peaks(acc: Any) -> _Peaks:
    tpu = getattr(acc, "kind", "") == "tpu"
    bf16 = acc.bf16_tflops
    fp32 = acc.fp32_tflops or (bf16 / 4 if bf16 else None)
    if fp32 is None:
        raise TrainwiseError(f"accelerator {acc.name} has no FP32 or BF16 peak in the catalog: it cannot be modelled")
    bw = acc.memory_bw_gbs
    if not bw:
        raise TrainwiseError(f"accelerator {acc.name} has no memory bandwidth in the catalog: it cannot be modelled")
    return _Peaks(fp32=fp32 * 1e12, tf32=(acc.tf32_tflops or 0) * 1e12 or None, fp16=(acc.fp16_tflops or 0) * 1e12 or None,
                  bf16=(bf16 or 0) * 1e12 or None,
                  fp16_vector=max(acc.fp16_nontensor_tflops or 0, fp32) * 1e12, bandwidth=bw * 1e9, is_tpu=tpu)


def compute_peak(acc: Any, precision: str, category: str, dtype: str, align: int, groups: int,
                 peaks: _Peaks | None = None) -> tuple[float, str]:
    """(peak FLOP/s, efficiency class) an operator of this dtype/shape gets on `acc`."""
    p = peaks or _peaks(acc)
    if p.is_tpu:
        return (p.bf16 or p.fp32), "tpu"
    # depthwise (1 channel per group) convolutions never use tensor cores; grouped ones with >= 4
    # channels per group do (cuDNN pads the group), dense operators need multiples of 8 (16-bit)
    depthwise = groups > 1 and align < 4
    tc_ok = align % 8 == 0 or (groups > 1 and align % 4 == 0)
    if dtype in ("float16", "bfloat16"):
        tensor = p.fp16 if dtype == "float16" else p.bf16
        if tensor and tc_ok and not depthwise:
            return tensor, "tc16"
        return (p.fp16_vector if dtype == "float16" else p.fp32), "fp32"
    if dtype == "float32" and p.tf32 and not depthwise and align % 4 == 0:
        if precision == "tf32" or (category == "conv" and precision in ("fp32", "tf32")):
            return p.tf32, "tf32"
    return p.fp32, "fp32"


WAVE_TILE = 128  # output tile edge of a large GEMM/implicit-GEMM kernel (cuBLAS/cuDNN/CUTLASS 128x128 class)
# A library splits a long reduction over several thread blocks when the output has too few tiles to
# fill the GPU (split-K / stream-K: a weight gradient of [256 x 5M] x [5M x 256] has 4 output tiles
# but runs near peak); each split keeps at least this much of the reduction.
SPLIT_K_MIN = 512


def work_units(record: Any) -> tuple[int, int] | None:
    """(output tiles, reduction length) of a compute operator, from its shapes (`gemm_dims`); None
    when its layout is not one this knows. GEMMs and convolutions: M x N output tiles of
    `WAVE_TILE` per batch entry, reduction K. Fused attention: one tile per 128 queries of each
    (batch, head), no split."""
    tile = lambda n: max(1, math.ceil(n / WAVE_TILE))  # noqa: E731
    if "scaled_dot_product_attention" in record.op:
        try:
            q = record.shapes[0]
            return math.prod(q[:-2]) * tile(q[-2]), 1
        except (IndexError, TypeError):
            return None
    dims = gemm_dims(record)
    if dims is None:
        return None
    batch, m, n, k = dims
    return batch * tile(m) * tile(n), k


# Tile padding (NVIDIA's "tile quantization"): a tile computes its whole 128-wide N and a main-loop step its
# whole 32-deep K, so the padding of a small or odd dimension is work thrown away. M (batch x pixels or
# tokens) is left out: it is large in training and its padding is negligible (fit cost 91.09 with it,
# 91.06 without). The widths are this model's tile (WAVE_TILE); on the calibration set the fit's own
# cost is lowest at N = 128 (91.06; 91.76 at 64, 91.78 at 256, 92.10 without padding), so it is not a
# free knob tuned on held-out error.
PAD_N = WAVE_TILE
PAD_K = 32


def _padded(n: int, tile: int) -> float:
    return n / (math.ceil(n / tile) * tile)


def padding_utilisation(record: Any) -> float:
    """Useful fraction of the padded tiles: N padded to `PAD_N`, K to `PAD_K` (NVIDIA's "tile
    quantization"); 1 for grouped convolutions (their own efficiency), attention and unknown shapes."""
    dims = None if getattr(record, "groups", 1) != 1 else gemm_dims(record)
    if dims is None:
        return 1.0
    _, _, n, k = dims
    n, k = int(n), int(k)
    if n <= 0 or k <= 0:
        return 1.0
    return _padded(n, PAD_N) * _padded(k, PAD_K)


def wave_utilisation(record: Any, slots: int | None) -> float:
    """Fraction of the SMs busy over a kernel's waves, units / (waves x SMs), where the units are the
    output tiles times the reduction splits a library would use to fill the SMs, times the useful
    fraction of the padded tiles (`padding_utilisation`); 1 when unknown."""
    if not slots or record.category not in COMPUTE_CATEGORIES:
        return 1.0
    work = work_units(record)
    if not work:
        return 1.0
    tiles, reduction = work
    splits = max(1, min(slots // tiles, int(reduction) // SPLIT_K_MIN)) if tiles < slots else 1
    units = tiles * splits
    return units / (math.ceil(units / slots) * slots) * padding_utilisation(record)


_CLASS_INDEX = {c: i for i, c in enumerate(COMPUTE_CLASSES)}
_CAT_INDEX = {c: i for i, c in enumerate(COMPUTE_CATEGORIES)}
_MEM_INDEX = {c: i for i, c in enumerate(MEMORY_CATEGORIES)}
_FUSED_ON_TPU = ("elementwise", "normalisation", "copy", "reduction")
# memory-bound categories a software stack can fuse (depthwise convolutions and embeddings are
# kernels of their own, not chains of eager elementwise launches)
FUSABLE_CATEGORIES = ("elementwise", "normalisation", "copy", "reduction", "optimizer")


@dataclass
class OpFeatures:
    """The records of one characterisation resolved against one accelerator, as numpy arrays.

    Everything the fitted constants multiply is kept apart, so `time_of` evaluates the model for
    any parameter values (the calibration fit calls it thousands of times).
    """

    count: Any          # calls per record
    flops: Any
    bytes: Any
    compute_index: Any  # class x category index into e_compute, -1 for memory-bound categories
    memory_index: Any   # index into e_memory (compute records use "elementwise" for their memory side)
    peak: Any           # FLOP/s for compute records (1 elsewhere)
    fusion: Any         # TPU: XLA fusion factor applies (1/0)
    backward: Any       # 1 for backward records
    conv: Any           # 1 for convolution records
    grouped: Any        # 1 for grouped (groups > 1) convolutions
    nchw_bytes: Any     # bytes of 16-bit tensor-core convolutions in NCHW layout (transposed by cuDNN)
    fusable: Any        # 1 for memory-bound records a software stack can fuse (FUSABLE_CATEGORIES)
    wave: Any           # wave utilisation of compute records (wave_utilisation; 1 elsewhere, and on TPUs)
    category: list[str]
    bandwidth: float
    launch: float       # 1 = pays t_launch per kernel, 0 = TPU
    kernels: int
    accelerator: str
    generation: str
    is_tpu: bool


def op_features(char: WorkloadCharacterisation, acc: Any, precision: str) -> OpFeatures:
    import numpy as np

    peaks = _peaks(acc)
    n = len(char.records)
    count = np.empty(n)
    flops = np.empty(n)
    nbytes = np.empty(n)
    cidx = np.full(n, -1, dtype=np.int64)
    midx = np.empty(n, dtype=np.int64)
    peak = np.ones(n)
    fusion = np.zeros(n)
    backward = np.zeros(n)
    conv = np.zeros(n)
    grouped = np.zeros(n)
    nchw = np.zeros(n)
    fusable = np.zeros(n)
    wave = np.ones(n)
    # SMs of a GPU; TPUs (systolic MXUs fed by XLA's own tiling) and unknown counts: no quantisation
    slots = None if peaks.is_tpu else getattr(acc, "cores", None)
    nchw_layout = getattr(char, "memory_format", "nchw") == "nchw" and not peaks.is_tpu
    # Channels-last training batch norm runs cuDNN's persistent kernel (PyTorch picks
    # CUDNN_BATCHNORM_SPATIAL_PERSISTENT for channels-last inputs): the activation is read once, kept on
    # chip for the statistics and the normalisation, so it streams like an elementwise op rather than
    # the two passes (statistics, then normalise) the normalisation efficiency stands for. The fitted
    # ratio of the two efficiencies (~1.46) is about that second read.
    single_pass_bn = getattr(char, "memory_format", "nchw") == "nhwc" and not peaks.is_tpu
    cats = []
    for i, r in enumerate(char.records):
        count[i] = r.count
        flops[i] = r.flops
        nbytes[i] = r.bytes_read + r.bytes_written
        backward[i] = 1.0 if r.phase == "backward" else 0.0
        conv[i] = 1.0 if r.category == "conv" else 0.0
        cats.append(r.category)
        if r.category in COMPUTE_CATEGORIES:
            pk, cls = compute_peak(acc, precision, r.category, r.dtype, r.align, r.groups, peaks)
            peak[i] = pk
            cidx[i] = _CLASS_INDEX[cls] * len(COMPUTE_CATEGORIES) + _CAT_INDEX[r.category]
            midx[i] = _MEM_INDEX["elementwise"]
            wave[i] = wave_utilisation(r, slots)
            if r.category == "conv":
                grouped[i] = 1.0 if r.groups > 1 else 0.0
                if r.groups > 1 and r.align < 4:  # depthwise: its own (poor) memory efficiency
                    midx[i] = _MEM_INDEX["depthwise"]
                if nchw_layout and cls == "tc16":
                    nchw[i] = nbytes[i]
        else:
            midx[i] = _MEM_INDEX.get(r.category, _MEM_INDEX["other"])
            if single_pass_bn and "batch_norm" in r.op and r.dtype in ("float16", "bfloat16"):
                midx[i] = _MEM_INDEX["elementwise"]
            fusion[i] = 1.0 if (peaks.is_tpu and r.category in _FUSED_ON_TPU) else 0.0
            fusable[i] = 1.0 if r.category in FUSABLE_CATEGORIES else 0.0
    return OpFeatures(count=count, flops=flops, bytes=nbytes, compute_index=cidx, memory_index=midx, peak=peak,
                      fusion=fusion, backward=backward, conv=conv, grouped=grouped,
                      nchw_bytes=nchw, fusable=fusable, wave=wave, category=cats, bandwidth=peaks.bandwidth,
                      launch=0.0 if peaks.is_tpu else 1.0, kernels=host_dispatched_kernels(char.records), accelerator=acc.name,
                      generation=generation_of(acc), is_tpu=peaks.is_tpu)


# Kernels a library launches from C++ inside one Python-dispatched call (cuDNN's recurrent time
# steps): they cost device launch time like any kernel, but no host (Python/dispatcher) time each.
LIBRARY_INTERNAL_OPS = frozenset({"fused.rnn_step"})


def host_dispatched_kernels(records: Sequence[Any]) -> int:
    """Kernels the host dispatches one by one (the host-bound floor counts these)."""
    return int(sum(r.count for r in records if r.op not in LIBRARY_INTERNAL_OPS))


def param_arrays(params: DeviceModelParams) -> tuple[Any, Any]:
    import numpy as np

    ec = np.array([params.e_compute[c][k] for c in COMPUTE_CLASSES for k in COMPUTE_CATEGORIES])
    defaults = DeviceModelParams().e_memory
    em = np.array([params.e_memory.get(k, defaults[k]) for k in MEMORY_CATEGORIES])
    return ec, em


def time_of(f: OpFeatures, ec: Any, em: Any, g_acc: float, g_mem: float, t_launch: float, tpu_fusion: float,
            g_grouped: float = 1.0, nchw_penalty: float = 0.0, alpha: Sequence[float] | None = None,
            stack_fusion: float = 1.0, wave_exponent: float = 0.0) -> tuple[Any, Any]:
    """Per-record seconds (count included) and whether each record is compute-bound."""
    import numpy as np

    is_compute = f.compute_index >= 0
    e_c = np.where(is_compute, ec[np.maximum(f.compute_index, 0)], 1.0) * g_acc * np.where(
        f.grouped > 0, g_grouped, 1.0)
    if alpha is not None:
        cat_of = np.maximum(f.compute_index, 0) % len(COMPUTE_CATEGORIES)
        e_c = e_c * np.where(is_compute, (f.peak / PEAK_REF) ** (-np.asarray(alpha)[cat_of]), 1.0)
    if wave_exponent:
        e_c = e_c * np.where(is_compute, f.wave ** wave_exponent, 1.0)
    t_c = np.where(is_compute, f.flops / (f.peak * e_c), 0.0)
    fuse = np.where(f.fusion > 0, tpu_fusion, 1.0)
    fuse = fuse / np.where(f.fusable > 0, stack_fusion, 1.0)
    t_m = fuse * f.bytes / (f.bandwidth * em[f.memory_index] * g_mem)
    t = np.maximum(t_c, t_m) + nchw_penalty * f.nchw_bytes / (f.bandwidth * em[_MEM_INDEX["copy"]] * g_mem)
    return f.count * (t + t_launch * f.launch), is_compute & (t_c >= t_m)
