"""Device model: a training iteration's time on any catalog accelerator, from a characterisation.

For every operator record of a `WorkloadCharacterisation` (see trainwise.agent.trace):

    t_op = max( FLOPs / (peak x e_compute[class, category] x (peak / 100 TFLOP/s)^-alpha[category]
                         x wave_utilisation^wave_exponent x g_acc[accelerator] x g_grouped^[grouped conv]),
                bytes / (bandwidth x e_memory[category] x g_mem[generation]) )
           + nchw_penalty x bytes / (bandwidth x e_memory[copy])   [16-bit NCHW convolutions only]
           + t_launch

where `peak` comes from the catalog's accelerators.csv (dense, boost clock): the FP16/BF16 tensor
peak for 16-bit matmuls/convolutions whose dimensions are multiples of 8 (or grouped convolutions
with >= 4 channels per group), TF32 for fp32 operands under `tf32` — and for convolutions under
plain `fp32` too, because PyTorch enables TF32 for cuDNN by default on Ampere and later — and the
FP32 (or FP16 non-tensor) vector peak otherwise: misaligned shapes and depthwise convolutions run
off the tensor cores. The efficiency falls with the size of the peak (`alpha`: a bigger GPU is
harder to fill — Habitat's "wave scaling" observation, as one fitted exponent per category) and with
the size of the operator (`wave_utilisation`: a GEMM, convolution or attention kernel is split into
128x128 output tiles, one per SM at a time; the last wave leaves SMs idle, so 1.1 waves of tiles take
as long as 2 — small operators run far below peak; and a tile's padding is wasted too: N, the output
channels, is padded to the 128-wide tile and K to the 32-deep main-loop step, so a 64-channel convolution
uses half of each tile (`padding_utilisation`, NVIDIA's "tile quantization"); `wave_exponent`, fitted,
says how much of both survives cuBLAS/cuDNN picking smaller tiles or split-K for small problems), and a
per-accelerator multiplier absorbs what the spec sheet misses (clocks under power limits, memory
subsystem). cuDNN transposes NCHW tensors for tensor-core convolutions (`memory_format`); NHWC
(channels_last) avoids it. TPUs use their per-chip (or per-board) MXU peak for every
matmul/convolution (XLA's default precision is one bf16 pass), pay no per-kernel launch, and XLA's
fusion (`tpu_fusion`) removes part of the elementwise traffic.

The step is the sum over operators, bounded below by the host: PyTorch eager dispatches each
kernel from Python (`t_host_op` per kernel), so a small model is CPU-bound whatever the GPU:

    T_device = sum_ops count x t_op        T_host = kernels x t_host_op
    T_step   = smooth_max(T_device, T_host) + t_step (+ t_step_tensorflow for Keras/TF measurements)
             + host_overhead_s (measured in the profile: data-loading wait etc.)

Data parallel over `count` devices (per-device batch fixed): the gradients (fp32, see
`gradient_bytes`) are all-reduced with a ring, 2(n-1)/n x bytes / link bandwidth, overlapped with
the backward pass as DDP does (at most `ddp_overlap` of the backward hides communication). The link
is NVLink where the accelerator has it, else PCIe peer-to-peer; `link="host"` (NCCL_P2P_DISABLE=1)
goes through host memory over PCIe and a fitted fraction of it hides (`ddp_overlap_host`), whatever the
backward pass (Lambda's P2P-disabled rows: 8x V100 BERT-large FP32 exposes all of its exchange). More
than `HOST_PATH_GPUS_PER_SOCKET` devices on that path span two CPU sockets (8-GPU servers are
dual-socket): the ring's socket-crossing hop runs over the inter-socket link and the remote socket's
memory, and the whole ring moves at that hop's pace, a fitted fraction of the PCIe figure
(`host_cross_socket`).

Software stack: the whole iteration is divided by a per-stack throughput factor
(`stack_factors[stack]`, fitted per publisher family of the calibration data; stock PyTorch eager,
`REFERENCE_STACK`, is 1 by definition), and the memory-bound time of the fusable operators
(`FUSABLE_CATEGORIES`) by a per-stack fusion factor (`stack_fusion[stack]`: a stack with fused layer
norms, bias+activation kernels and multi-tensor optimizers moves fewer bytes than the eager trace).
Predictions are made at the reference stack unless a stack is named: the same model on the same GPU is
published up to 1.56x apart by different software stacks.

Per-operator core (`core`, `CORES`): "roofline" is the rule above for every operator; "kernel" replaces it, for
every operator whose regime the kernel data covers on two or more GPU families, by the learned kernel model
(`kernel_model`: NeuSight-style utilisation below the roofline from tile/wave and GPU-spec features), and lists
the operators left to the rule (`roofline_fallback_ops`, band widened by their time share).

The efficiencies e_compute/e_memory, the per-accelerator and per-generation multipliers and the
overhead constants are fitted on published measurements (`calibration.py`,
`data/calibration.csv`); the packaged fit is `data/device_model_params.json`. The error band of a
prediction comes from the leave-one-model-out residuals of that fit, for the accelerator (or its
generation) and the kind of workload, widened for operators the model has no rule for.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise.agent.trace.step import normalise_precision
from trainwise.core.workload import COMPUTE_CATEGORIES, WorkloadCharacterisation
from trainwise.errors import TrainwiseError
from trainwise.predict.gemm import gemm_dims

DATA_DIR = Path(__file__).with_name("data")
PARAMS_PATH = DATA_DIR / "device_model_params.json"

COMPUTE_CLASSES = ("fp32", "tf32", "tc16", "tpu")
MEMORY_CATEGORIES = ("elementwise", "reduction", "normalisation", "embedding", "optimizer", "copy", "other", "depthwise")
GIB = 2**30
PEAK_REF = 100e12  # FLOP/s: the efficiency power law's reference peak
# Published numbers of one model on one GPU differ by up to 1.56x between software stacks (NVIDIA's
# fused/DALI/apex DeepLearningExamples vs Lambda's stock PyTorch): the stack is a term of the model,
# and stock PyTorch eager is the reference every prediction is made at unless a stack is named.
REFERENCE_STACK = "pytorch-eager"


class DeviceModelParams(BaseModel):
    """Fitted constants of the device model (JSON: data/device_model_params.json)."""

    model_config = ConfigDict(extra="forbid")

    e_compute: dict[str, dict[str, float]] = Field(default_factory=lambda: {
        "fp32": {"matmul": 0.75, "conv": 0.65, "attention": 0.5},
        "tf32": {"matmul": 0.55, "conv": 0.5, "attention": 0.4},
        "tc16": {"matmul": 0.55, "conv": 0.45, "attention": 0.35},
        "tpu": {"matmul": 0.5, "conv": 0.4, "attention": 0.35},
    })
    e_memory: dict[str, float] = Field(default_factory=lambda: {
        "elementwise": 0.7, "reduction": 0.5, "normalisation": 0.5, "embedding": 0.3, "optimizer": 0.7,
        "copy": 0.6, "other": 0.5, "depthwise": 0.3})
    g_compute: dict[str, float] = Field(default_factory=dict, description="per accelerator (canonical name), default 1")
    g_compute_twin: dict[str, float] = Field(default_factory=dict, description=(
        "per compute twin (`compute_twin_key`: same die, peaks and power limit, e.g. V100 16/32 GB, A100 40/80 GB, "
        "RTX 6000/8000): the fit shares one compute multiplier between twins, and an accelerator without its own "
        "entry in g_compute takes its twin's"))
    g_generation: dict[str, float] = Field(default_factory=dict, description="compute multiplier per generation, default 1")
    g_memory: dict[str, float] = Field(default_factory=dict, description="memory-efficiency multiplier per generation")
    t_launch_s: float = 4e-6
    t_host_op_s: float = 12e-6
    t_step_s: float = 1.5e-3
    t_step_tensorflow_s: float = 4e-3
    alpha: dict[str, float] = Field(default_factory=lambda: {"matmul": 0.1, "conv": 0.2, "attention": 0.1},
                                    description="efficiency falls as (peak / 100 TFLOP/s)^-alpha: the larger the peak, "
                                                "the harder a category's kernels fill it")
    wave_exponent: float = Field(default=0.5, description=(
        "compute efficiency x wave_utilisation^this: 1 = the full tail-wave and tile-padding quantisation of "
        "128x128 output tiles over the SMs, 0 = none (libraries shrink tiles or split K for small problems, which softens it)"))
    g_grouped: float = Field(default=0.5, description="efficiency multiplier of grouped (not depthwise) convolutions")
    nchw_penalty: float = Field(default=2.0, description="layout-transpose passes per byte of a 16-bit NCHW convolution "
                                "(prior 2: cuDNN transposes each activation in and out, one read + one write per byte)")
    tensorflow_efficiency: float = Field(default=1.0, description="efficiency multiplier for Keras/TensorFlow "
                                         "measurements; not fitted (1): TensorFlow rows belong to TensorFlow "
                                         "stacks, whose stack_factors/stack_fusion carry it")
    t_step_tpu_s: float = Field(default=0.02, description="per-step host<->TPU cost (infeed, outfeed, dispatch)")
    link_efficiency: float = Field(default=1.0, description="achieved fraction of the all-reduce link bandwidth")
    t_allreduce_s: float = Field(default=1e-3, description="fixed cost of a data-parallel step's gradient synchronisation")
    ddp_overlap: float = 0.7
    ddp_overlap_host: float = Field(default=0.5, description=(
        "fraction of the all-reduce that hides when gradients go through host memory (link 'host': peer-to-peer "
        "disabled; the exposed time is ring x (1 - this)); fitted on Lambda's multi-GPU rows, which all ran "
        "with NCCL_P2P_DISABLE=1: their exposed exchange does not shrink with a longer backward pass (8x V100 "
        "BERT-large FP32 exposes all of it, AMP about half)"))
    host_cross_socket: float = Field(default=1.0, description=(
        "fraction of the host-path all-reduce bandwidth left when the devices span two CPU sockets (link 'host', "
        "count > HOST_PATH_GPUS_PER_SOCKET): the ring's socket-crossing hop sets its pace; fitted on Lambda's "
        "8-GPU P2P-disabled rows (8x A100 80GB BERT-large exposes ~2.5x the exchange of 4x)"))
    tpu_fusion: float = 0.5
    stack_factors: dict[str, float] = Field(default_factory=dict, description=(
        "throughput multiplier per software stack (source family) of the calibration data; the reference stack, "
        f"{REFERENCE_STACK!r} (stock PyTorch eager, Lambda's benchmarks), is 1 by definition and so is any stack not "
        "listed: a user's own profile is predicted at the reference stack unless told otherwise"))
    stack_fusion: dict[str, float] = Field(default_factory=dict, description=(
        "per software stack: how much faster it runs the fusable memory-bound operators (FUSABLE_CATEGORIES: "
        "fused layer norm, bias+activation, multi-tensor optimizers) than the eager trace; 1 for the reference "
        "and any stack not listed"))
    bands: dict[str, Any] = Field(default_factory=dict, description="expected |relative error| by accelerator/generation/kind")
    fitted_on: dict[str, Any] = Field(default_factory=dict)


@lru_cache(maxsize=4)
def _load_params_cached(path: str, mtime: float) -> DeviceModelParams:
    return DeviceModelParams.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))


# A step whose host dispatch time exceeds this share of its device time depends on the host's speed.
HOST_SENSITIVE_SHARE = 0.3

PARAMS_ENV = "TRAINWISE_DEVICE_PARAMS"


def load_params(path: str | Path | None = None) -> DeviceModelParams:
    """The fit at `path`; else the one $TRAINWISE_DEVICE_PARAMS names (a user's own fit, `trainwise device
    calibrate --add`); else the packaged fit, or defaults (uncalibrated priors) when it is missing."""
    if path is None and os.environ.get(PARAMS_ENV):
        path = os.environ[PARAMS_ENV]
    p = Path(path) if path is not None else PARAMS_PATH
    if not p.is_file():
        if path is not None:
            raise TrainwiseError(f"device-model parameters {p} do not exist: fit them with `trainwise device calibrate "
                                 f"--add MY_ROWS.csv --output {p}` (or unset {PARAMS_ENV})")
        return DeviceModelParams()
    try:
        return _load_params_cached(str(p), p.stat().st_mtime)
    except (ValueError, OSError) as exc:
        raise TrainwiseError(f"device-model parameters {p} are not a trainwise fit ({type(exc).__name__}): "
                             "write them with `trainwise device calibrate --output`") from None


# ------------------------------------------------------------------------------------------------
# accelerator features
# ------------------------------------------------------------------------------------------------

def generation_of(acc: Any) -> str:
    """Coarse family + die class: volta, turing, ampere_ga100, ampere_ga10x, hopper, tpu_v3, ..."""
    arch = (getattr(acc, "architecture", None) or "").lower()
    name = getattr(acc, "name", "").lower()
    if getattr(acc, "kind", "") == "tpu" or "tpu" in arch:
        m = re.search(r"v(\d)", arch or name)
        return f"tpu_v{m.group(1)}" if m else "tpu"
    for key, gen in (("kepler", "kepler"), ("maxwell", "maxwell"), ("volta", "volta"), ("turing", "turing"),
                     ("ada", "ada"), ("hopper", "hopper"), ("blackwell", "blackwell"), ("trainium", "trainium"),
                     ("gaudi", "gaudi")):
        if key in arch:
            return gen
    if "pascal" in arch:
        return "pascal_gp100" if "gp100" in arch else "pascal_gp10x"
    if "ampere" in arch:
        return "ampere_ga100" if "ga100" in arch else "ampere_ga10x"
    return "unknown"


# How gradients travel between the devices of one machine (`link`): "auto" uses the fastest path the
# accelerator has (NVLink where present, else peer-to-peer over PCIe); "nvlink" and "pcie" force one;
# "host" is the path NCCL takes with peer-to-peer disabled (NCCL_P2P_DISABLE=1, as every Lambda PyTorch
# benchmark exports, or GPUs without P2P): each byte goes device -> host memory -> device over PCIe,
# whatever NVLink the machine has, and it hides behind the backward pass less (`ddp_overlap_host`).
LINKS = ("auto", "nvlink", "pcie", "host")
# Devices one CPU socket hosts in the servers the calibration data ran on (8-GPU servers: two sockets,
# four GPUs each); more than this on the host path crosses sockets (`host_cross_socket`).
HOST_PATH_GPUS_PER_SOCKET = 4


def crosses_sockets(link: str | None, count: int) -> bool:
    """Whether a host-path (peer-to-peer disabled) all-reduce over `count` devices crosses CPU sockets."""
    return link == "host" and count > HOST_PATH_GPUS_PER_SOCKET


def normalise_link(link: str | None, what: str = "link") -> str:
    """`link` lower-cased, "auto" for None/empty; an unknown one raises naming `what` (e.g. "--link")."""
    value = (link or "auto").strip().lower()
    if value not in LINKS:
        raise TrainwiseError(f"unknown {what} {link!r}: use one of {', '.join(LINKS)} "
                             "(host: peer-to-peer disabled, e.g. NCCL_P2P_DISABLE=1)")
    return value


def _pcie_bandwidth_gbs(text: str, acc: Any) -> float:
    """Effective per-device all-reduce GB/s over PCIe (through host memory), by PCIe generation."""
    if "gen5" in text:
        return 40.0
    if "gen4" in text:
        return 20.0
    if getattr(acc, "granularity", "") == "per_die":
        return 6.0  # two dies share one Gen3 slot
    return 10.0


def compute_twin_key(acc: Any) -> str:
    """Accelerators with one key have the same silicon at the same clocks and power limit (they differ
    in memory only, which the model prices separately), so they share one fitted compute multiplier:
    a per-accelerator multiplier would otherwise absorb which publisher happened to measure which twin."""
    fields = ("kind", "granularity", "architecture", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "tdp_w")
    return "|".join(str(getattr(acc, f, None)) for f in fields)


def compute_multiplier(params: "DeviceModelParams", acc: Any) -> float:
    """The fitted per-accelerator compute multiplier: its own, else its compute twin's, else 1."""
    if acc.name in params.g_compute:
        return params.g_compute[acc.name]
    return params.g_compute_twin.get(compute_twin_key(acc), 1.0)


def link_bandwidth_gbs(acc: Any, link: str | None = None) -> float:
    """Effective per-device all-reduce bandwidth (GB/s) between devices of one machine.

    `link`: None/"auto" (NVLink where the accelerator has it, else PCIe), "nvlink", "pcie", or "host"
    (peer-to-peer disabled: through host memory over PCIe; see LINKS)."""
    link = normalise_link(link)
    text = (getattr(acc, "interconnect", None) or "").lower()
    name = getattr(acc, "name", "").lower()
    gen = generation_of(acc)
    if gen.startswith("tpu"):
        return {"tpu_v2": 60.0, "tpu_v3": 80.0, "tpu_v4": 120.0, "tpu_v5": 180.0, "tpu_v6": 300.0}.get(gen, 80.0)
    if link in ("pcie", "host"):
        return _pcie_bandwidth_gbs(text, acc)
    # "no NVLink" (T4, A10, L4 ...) must not read as NVLink; a 2-way bridge joins pairs only
    has_nvlink = "nvlink" in text and "no nvlink" not in text and "pcie" not in name and "bridge" not in text
    if has_nvlink:
        m = re.search(r"nvlink (\d)", text)
        version = int(m.group(1)) if m else 2
        return {1: 60.0, 2: 130.0, 3: 230.0, 4: 360.0, 5: 700.0}.get(version, 130.0)
    return _pcie_bandwidth_gbs(text, acc)


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


# ------------------------------------------------------------------------------------------------
# prediction
# ------------------------------------------------------------------------------------------------

class DevicePrediction(BaseModel):
    """A modelled training iteration on one accelerator type (x count, data parallel)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator: str
    count: int
    per_device_batch: int
    precision: str
    iteration_s: float
    samples_per_s: float
    relative_error: float = Field(description="expected |relative error| (the band is iteration_s x (1 ± relative_error))")
    low_s: float
    high_s: float
    device_s: float = Field(description="sum of the operators' device time")
    host_bound_s: float = Field(description="kernels x host dispatch time: the CPU-side floor")
    communication_s: float = Field(description="exposed all-reduce time (count > 1)")
    overhead_s: float = Field(description="per-step constant plus the host overhead passed in")
    breakdown_s: dict[str, float] = Field(description="device time per operator category")
    compute_bound_fraction: float
    fits_memory: bool
    memory_required_gib: float
    memory_available_gib: float | None
    memory_breakdown_gib: dict[str, float]
    unsupported_ops: list[str]
    provenance: str
    notes: list[str] = Field(default_factory=list)
    core: str = Field(default="roofline", description="per-operator model used: kernel (learned) or roofline")
    roofline_fallback_ops: list[str] = Field(default_factory=list, description=(
        "operators the kernel model has no data for, predicted by the roofline rule (band widened by their time share)"))


def usable_memory_gib(acc: Any) -> float | None:
    if not acc.memory_gib:
        return None
    if getattr(acc, "kind", "") == "tpu":
        return acc.memory_gib * 0.95
    return acc.memory_gib * 0.94 - 0.6  # ECC/reserved, CUDA context + cuDNN/cuBLAS workspaces


def memory_required_gib(char: WorkloadCharacterisation, count: int = 1) -> tuple[float, dict[str, float]]:
    parts = char.memory_breakdown(count)
    gib = {k: round(v / GIB, 3) for k, v in parts.items()}
    return parts["total"] * 1.10 / GIB, gib  # caching-allocator fragmentation


def _smooth_max(a: float, b: float, p: float = 6.0) -> float:
    if a <= 0 or b <= 0:
        return max(a, b)
    m = max(a, b)
    return m * ((a / m) ** p + (b / m) ** p) ** (1 / p)


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


CORES = ("kernel", "roofline")
# The per-operator core: "kernel" = the learned kernel model (`kernel_model`) for every operator whose regime its
# data covers, the roofline-with-efficiencies rule for the rest; "roofline" = the rule for every operator. The
# default stays the rule: the kernel data (NeuSight's fp32 kernels on P4..A100, 40 H100 GEMMs) covers no
# tensor-core regime on two GPU families yet, and AMP/TF32 training runs there (benchmarks/kernel_sweep.py grows it).
DEFAULT_CORE = "roofline"


@dataclass
class _KernelCore:
    """What the kernel core did to one prediction: the operators it left to the roofline rule, and the device
    time per kernel class (for the band)."""

    fallback_ops: list[str]
    fallback_s: float
    class_s: dict[str, float]
    note: str | None = None


def _apply_kernel_core(char: WorkloadCharacterisation, acc: Any, precision: str, per: Any, model: Any = None
                       ) -> _KernelCore:
    """Replace `per` (per-record seconds, count included) by the kernel model's prediction for every record it
    covers, in place; the others keep the roofline rule and are listed."""
    from trainwise.predict import kernel_model as km

    if getattr(acc, "kind", "") != "gpu":
        return _KernelCore(sorted({r.op for r in char.records}), float(per.sum()), {},
                           f"{acc.name} is not a GPU: the kernel model has no data for it, the roofline rule is used")
    try:
        gpu = km.GpuSpec.of(acc)
    except TrainwiseError as exc:
        return _KernelCore(sorted({r.op for r in char.records}), float(per.sum()), {}, f"{exc}; the roofline rule is used")
    idx, kernels, fallback = _record_kernels(char, precision)
    fallback = set(fallback)
    seconds = km.predict_seconds(kernels, gpu, model)
    class_s: dict[str, float] = {}
    covered = set()
    for i, c, t in zip(idx, kernels.cls, seconds):
        if not math.isfinite(t):  # a regime without kernel data on enough GPUs: the roofline rule stays
            fallback.add(char.records[i].op + f" ({char.records[i].dtype})")
            continue
        covered.add(i)
        per[i] = char.records[i].count * float(t)
        kind = km.CLASSES[int(c)]
        class_s[kind] = class_s.get(kind, 0.0) + per[i]
    fallback_s = float(sum(per[i] for i in range(len(per)) if i not in covered))
    return _KernelCore(sorted(fallback), fallback_s, class_s)


_KERNEL_CACHE: list[tuple[Any, str, tuple]] = []


def _record_kernels(char: WorkloadCharacterisation, precision: str) -> tuple[list[int], list[Any], set[str]]:
    """(record indices, their kernels, operators without one) of a characterisation; the last few are cached
    (predicting every catalog accelerator maps the same records each time)."""
    from trainwise.predict import kernel_model as km

    for cached_char, cached_precision, value in _KERNEL_CACHE:
        if cached_char is char and cached_precision == precision:
            return value
    idx, kernels, fallback = [], [], set()
    for i, r in enumerate(char.records):
        k = km.record_kernel(r, precision)
        if k is None:
            fallback.add(r.op)
        else:
            idx.append(i)
            kernels.append(k)
    value = (idx, km.KernelArrays.of(kernels), fallback)
    _KERNEL_CACHE.insert(0, (char, precision, value))
    del _KERNEL_CACHE[4:]
    return value


def _device_time(char: WorkloadCharacterisation, acc: Any, params: DeviceModelParams, precision: str,
                 framework: str = "pytorch", stack: str | None = None, core: str = "roofline", kernel_model: Any = None
                 ) -> tuple[float, dict[str, float], float, float, int, _KernelCore | None]:
    """(device seconds, per-category seconds, compute-bound seconds, backward seconds, kernels, kernel-core info)."""
    f = op_features(char, acc, precision)
    ec, em = param_arrays(params)
    g_fw = params.tensorflow_efficiency if framework in ("tensorflow", "keras", "tf") else 1.0
    g_acc = compute_multiplier(params, acc) * params.g_generation.get(f.generation, 1.0) * g_fw
    g_mem = params.g_memory.get(f.generation, 1.0) * g_fw
    per, bound = time_of(f, ec, em, g_acc, g_mem, params.t_launch_s, params.tpu_fusion, params.g_grouped,
                         params.nchw_penalty, [params.alpha[c] for c in COMPUTE_CATEGORIES],
                         params.stack_fusion.get(stack, 1.0) if stack else 1.0, params.wave_exponent)
    info = _apply_kernel_core(char, acc, precision, per, kernel_model) if core == "kernel" else None
    by_cat: dict[str, float] = {}
    for cat, t in zip(f.category, per):
        by_cat[cat] = by_cat.get(cat, 0.0) + float(t)
    return float(per.sum()), by_cat, float(per[bound].sum()), float((per * f.backward).sum()), f.kernels, info


def _band(params: DeviceModelParams, acc: Any, compute_fraction: float, unsupported_share: float,
          count: int) -> tuple[float, list[str]]:
    bands = params.bands or {}
    notes: list[str] = []
    gen = generation_of(acc)
    by_acc = bands.get("by_accelerator", {})
    by_gen = bands.get("by_generation", {})
    default = float(bands.get("global", 0.25))
    if acc.name in by_acc:
        band = float(by_acc[acc.name])
    elif gen in by_gen:
        band = float(by_gen[gen])
        notes.append(f"no calibration measurement on {acc.name}: error band of its generation ({gen})")
    else:
        band = default * 1.5
        notes.append(f"no calibration measurement on {acc.name} or its generation ({gen}): band widened x1.5")
    kind = "compute" if compute_fraction >= 0.5 else "memory"
    kind_band = bands.get("by_kind", {}).get(kind)
    if kind_band is not None:
        band = max(band, 0.5 * (band + float(kind_band)))
    if count > 1:
        band += float(bands.get("data_parallel_extra", 0.10))
    if unsupported_share > 0:
        band += unsupported_share
    return band, notes


# The roofline rule's band counts at least this much on the operators the kernel model leaves to it.
FALLBACK_BAND_MIN = 0.3


def _kernel_band(kcore: _KernelCore, roofline_band: float, device_s: float, count: int, params: DeviceModelParams,
                 kernel_model: Any = None) -> tuple[float, list[str]]:
    """The 80 % band of a kernel-core prediction: per kernel class, the split-conformal quantile of held-out GPUs'
    systematic (time-weighted) error, weighted by the class's share of device time; the roofline-rule operators
    count with the roofline band (at least FALLBACK_BAND_MIN)."""
    from trainwise.predict import kernel_model as km

    notes: list[str] = []
    if kcore.note:
        notes.append(kcore.note)
    if device_s <= 0:
        return roofline_band, notes
    model = kernel_model or km.load_kernel_model()
    by_class = model.meta.get("band80_by_class", {})
    default = max(by_class.values(), default=0.25)
    band = sum(t / device_s * float(by_class.get(c, default)) for c, t in kcore.class_s.items())
    share = kcore.fallback_s / device_s
    band += share * max(roofline_band, FALLBACK_BAND_MIN)
    if count > 1:
        band += float((params.bands or {}).get("data_parallel_extra", 0.10))
    if kcore.fallback_ops and not kcore.note:
        notes.append(f"roofline fallback for operators without kernel data ({share:.0%} of device time, band widened): "
                     + ", ".join(kcore.fallback_ops))
    return band, notes


def predict_iteration(characterisation: WorkloadCharacterisation, accelerator: Any, count: int = 1,
                      precision: str | None = None, host_overhead_s: float = 0.0, *,
                      params: DeviceModelParams | None = None, framework: str = "pytorch",
                      gradient_accumulation: int = 1, stack: str | None = None,
                      link: str | None = None, core: str | None = None, kernel_model: Any = None) -> DevicePrediction:
    """Model one training iteration of `characterisation` on `count` x `accelerator` (data parallel).

    `accelerator` is a catalog `Accelerator` (resolve names with `resolve_accelerator`). `precision`
    defaults to the characterisation's; a different 16-bit/32-bit choice needs a new characterisation
    (dtypes change), but fp32 <-> tf32 only changes the peak used. `host_overhead_s` is per-iteration
    host time that does not overlap the device (e.g. the data wait measured in a profile). `stack`
    names the software stack (a key of `params.stack_factors`, e.g. "nvidia-dle"); None or an unknown
    stack predicts at the reference stack (stock PyTorch eager). `link` is how gradients travel between
    the devices ("auto", "nvlink", "pcie", "host": see `LINKS`). `core` picks the per-operator model
    (`CORES`, default `DEFAULT_CORE`); `kernel_model` overrides the packaged kernel model (a held-out fit).
    """
    params = params or load_params()
    core = core or DEFAULT_CORE
    if core not in CORES:
        raise TrainwiseError(f"unknown device-model core {core!r}: use one of {', '.join(CORES)}")
    link = normalise_link(link)
    count = int(count)
    if count < 1:
        raise TrainwiseError(f"accelerator count must be at least 1 (got {count})")
    prec = normalise_precision(precision or characterisation.precision)
    if prec.startswith("amp") != characterisation.precision.startswith("amp") or (
            prec.startswith("amp") and prec != characterisation.precision):
        raise TrainwiseError(f"the characterisation was traced at {characterisation.precision}; "
                             f"re-characterise at {prec} (AMP changes the operators' dtypes)")
    device_s, by_cat, compute_s, backward_s, kernels, kcore = _device_time(
        characterisation, accelerator, params, prec, framework.lower(), stack, core, kernel_model)
    is_tpu = getattr(accelerator, "kind", "") == "tpu"
    host_s = 0.0 if is_tpu else kernels * params.t_host_op_s
    step = params.t_step_s + (params.t_step_tensorflow_s if framework.lower() in ("tensorflow", "keras", "tf") else 0.0)
    if is_tpu:
        step += params.t_step_tpu_s
    overhead = step + max(0.0, float(host_overhead_s))
    compute_time = _smooth_max(device_s, host_s)
    comm_exposed = 0.0
    if count > 1:
        link_bps = link_bandwidth_gbs(accelerator, link) * 1e9 * params.link_efficiency
        if crosses_sockets(link, count):
            link_bps *= params.host_cross_socket
        ring = 2.0 * (count - 1) / count * characterisation.gradient_bytes / link_bps + params.t_allreduce_s
        if link == "host":
            # staged through host memory: a fitted fraction of the exchange hides, whatever the backward
            exposed = ring * (1.0 - params.ddp_overlap_host)
        else:  # device-to-device: DDP's buckets hide behind up to ddp_overlap of the backward pass
            exposed = max(ring - params.ddp_overlap * backward_s, 0.1 * ring)
        comm_exposed = exposed / max(1, int(gradient_accumulation))
    iteration = compute_time + comm_exposed + overhead
    if stack:  # a faster (fused) or slower stack scales the whole step
        iteration /= params.stack_factors.get(stack, 1.0)
    samples = count * characterisation.per_device_batch / iteration
    unsupported_s = by_cat.get("other", 0.0)
    unsupported_share = unsupported_s / device_s if device_s > 0 else 0.0
    compute_fraction = compute_s / device_s if device_s > 0 else 0.0
    band, notes = _band(params, accelerator, compute_fraction, unsupported_share, count)
    fallback_ops: list[str] = []
    if kcore is not None:
        band, kernel_notes = _kernel_band(kcore, band, device_s, count, params, kernel_model)
        notes.extend(kernel_notes)
        fallback_ops = kcore.fallback_ops
    needed, parts = memory_required_gib(characterisation, count)
    available = usable_memory_gib(accelerator)
    fits = available is None or needed <= available
    if not fits:
        notes.append(f"out of memory: needs ~{needed:.1f} GiB per device, {accelerator.name} has ~{available:.1f} GiB usable")
    if host_s > device_s:
        notes.append("host-bound: kernels are too small to keep the accelerator busy (the CPU dispatch rate sets the pace)")
    if host_s > HOST_SENSITIVE_SHARE * device_s:
        # The fitted dispatch cost comes from publishers' bare-metal hosts; a lent cloud VM measured ~4x it
        # (benchmarks/results/gpu_throughput.json), and the band is not derived from such steps.
        notes.append(f"host-sensitive: dispatching {kernels:,} kernels takes {host_s * 1e3:.1f} ms at the fitted "
                     f"{params.t_host_op_s * 1e6:.0f} µs each vs {device_s * 1e3:.1f} ms of device time; a slower host "
                     "(a cloud VM measured ~50 µs) makes this step slower than the band says: measure it there with "
                     "`trainwise device measure` or use a larger batch")
    if characterisation.unsupported_ops:
        notes.append("operators without a cost rule (modelled as memory-bound, band widened by their time share "
                     f"{unsupported_share:.0%}): {', '.join(characterisation.unsupported_ops)}")
    return DevicePrediction(
        accelerator=accelerator.name, count=count, per_device_batch=characterisation.per_device_batch, precision=prec,
        iteration_s=iteration, samples_per_s=samples, relative_error=round(band, 4),
        low_s=iteration * max(0.05, 1 - band), high_s=iteration * (1 + band), device_s=device_s, host_bound_s=host_s,
        communication_s=comm_exposed, overhead_s=overhead, breakdown_s={k: round(v, 6) for k, v in by_cat.items()},
        compute_bound_fraction=round(compute_fraction, 4), fits_memory=fits, memory_required_gib=round(needed, 3),
        memory_available_gib=None if available is None else round(available, 3), memory_breakdown_gib=parts,
        unsupported_ops=list(characterisation.unsupported_ops), provenance=f"modelled ±{band * 100:.0f} %", notes=notes,
        core=core, roofline_fallback_ops=fallback_ops)


def resolve_accelerator(name: str, catalog: Any = None) -> Any:
    """The catalog Accelerator for `name` (any alias); unknown names raise with the nearest names."""
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    return catalog.accelerator(name)


def predict_all(characterisation: WorkloadCharacterisation, catalog: Any = None, count: int = 1,
                host_overhead_s: float = 0.0, params: DeviceModelParams | None = None,
                link: str | None = None, core: str | None = None) -> list[DevicePrediction]:
    """Predictions for every catalog accelerator the model can handle, fastest first (`link`: see LINKS)."""
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    params = params or load_params()
    link = normalise_link(link)  # before the loop: its per-accelerator errors are skipped
    out = []
    for acc in catalog.accelerators.values():
        try:
            out.append(predict_iteration(characterisation, acc, count, None, host_overhead_s, params=params, link=link,
                                         core=core))
        except TrainwiseError:
            continue
    return sorted(out, key=lambda p: p.iteration_s)


def tpu_per_device_batch(per_core_batch: int, accelerator: Any) -> int:
    """The per-device batch of a TPU unit under Künas' convention (thesis and paper).

    The global batch is the per-core batch x the TensorCores in use; a catalog TPU unit is a chip
    (2 cores on v2/v3/v4/v5p, 1 on v5e/v6e) or a 4-chip v2-8/v3-8 board (8 cores): e.g. IC-DR's
    per-core 32 on a TPU-v3-8 board is a per-device batch of 256.
    """
    cores = int(getattr(accelerator, "cores", None) or 1)
    return int(per_core_batch) * cores


def check_host_overhead(seconds: float) -> None:
    """The per-iteration host time is a finite number of seconds >= 0: the model clamps a negative one
    to 0 and max(0, NaN) is 0 too, so a typo would silently predict without it."""
    if not math.isfinite(seconds) or seconds < 0:
        raise TrainwiseError(f"the host overhead (--host-overhead) must be a finite number of seconds >= 0 (got {seconds:g})")


def host_overhead_from_profile(profile: Any) -> float:
    """Per-iteration host time that a faster accelerator does not remove: the mean data wait.

    In a profile the training process waits `steady_state.data_wait.mean_s` per iteration for its
    DataLoader; that wait does not shrink on a faster accelerator (it can only grow). Pass it to
    `predict_iteration(host_overhead_s=...)`.
    """
    try:
        return float(profile.steady_state.data_wait.mean_s)
    except AttributeError:
        return 0.0
