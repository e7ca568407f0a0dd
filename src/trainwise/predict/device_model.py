"""Device model: a training iteration's time on any catalog accelerator, from a characterisation.

For every operator record of a `WorkloadCharacterisation` (see `characterise.py`):

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

Per-operator core (`core`, `kernel_core.CORES`): "roofline" is the rule above for every operator; "kernel" replaces it, for
every operator whose regime the kernel data covers on two or more GPU families, by the learned kernel model
(`kernel_model`: NeuSight-style utilisation below the roofline from tile/wave features), and lists
the operators left to the rule (`roofline_fallback_ops`, band widened by their time share).

The efficiencies e_compute/e_memory, the per-accelerator and per-generation multipliers and the
overhead constants are fitted on published measurements (`calibration_fit.py`,
`data/calibration.csv`); the packaged fit is `data/device_model_params.json`. The error band of a
prediction comes from the leave-one-model-out residuals of that fit, for the accelerator (or its
generation) and the kind of workload, widened for operators the model has no rule for.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError
from trainwise.predict.accelerator_features import (
    compute_multiplier,
    crosses_sockets,
    generation_of,
    link_bandwidth_gbs,
    normalise_link,
)
from trainwise.agent.trace.step import normalise_precision
from trainwise.core.workload import COMPUTE_CATEGORIES, WorkloadCharacterisation
from trainwise.predict.device_params import DeviceModelParams, load_params
from trainwise.predict.kernel_core import CORES, DEFAULT_CORE, KernelCore, apply_kernel_core, kernel_band
from trainwise.predict.operator_time import op_features, param_arrays, time_of

GIB = 2**30

# A step whose host dispatch time exceeds this share of its device time depends on the host's speed.
HOST_SENSITIVE_SHARE = 0.3


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


def _device_time(char: WorkloadCharacterisation, acc: Any, params: DeviceModelParams, precision: str,
                 framework: str = "pytorch", stack: str | None = None, core: str = "roofline", kernel_model: Any = None
                 ) -> tuple[float, dict[str, float], float, float, int, KernelCore | None]:
    """(device seconds, per-category seconds, compute-bound seconds, backward seconds, kernels, kernel-core info)."""
    f = op_features(char, acc, precision)
    ec, em = param_arrays(params)
    g_fw = params.tensorflow_efficiency if framework in ("tensorflow", "keras", "tf") else 1.0
    g_acc = compute_multiplier(params, acc) * params.g_generation.get(f.generation, 1.0) * g_fw
    g_mem = params.g_memory.get(f.generation, 1.0) * g_fw
    per, bound = time_of(f, ec, em, g_acc, g_mem, params.t_launch_s, params.tpu_fusion, params.g_grouped,
                         params.nchw_penalty, [params.alpha[c] for c in COMPUTE_CATEGORIES],
                         params.stack_fusion.get(stack, 1.0) if stack else 1.0, params.wave_exponent)
    info = apply_kernel_core(char, acc, precision, per, kernel_model) if core == "kernel" else None
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
        band, kernel_notes = kernel_band(kcore, band, device_s, count, params, kernel_model)
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
