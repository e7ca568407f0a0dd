"""The device model's learned per-operator core: the kernel model's time for every operator its data covers,
the roofline rule for the rest, and the error band of such a prediction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.core.workload import WorkloadCharacterisation
from trainwise.predict.device_params import DeviceModelParams

CORES = ("kernel", "roofline")
# The per-operator core: "kernel" = the learned kernel model (`kernel_model`) for every operator whose regime its
# data covers, the roofline-with-efficiencies rule for the rest; "roofline" = the rule for every operator. The
# default stays the rule: on GPUs held out of its fit the kernel core is further off trainwise's own H100/H200 steps
# (docs/accuracy.md): its fp16 GEMMs now beat the rule per kernel (six families), but 16-bit batch norm and
# tensor-core convolutions have kernel data on Hopper only (TF32 ones a few per GPU elsewhere), and the rule's slow
# GEMMs no longer hide what they miss.
DEFAULT_CORE = "roofline"


@dataclass
class KernelCore:
    """What the kernel core did to one prediction: the operators it left to the roofline rule, and the device
    time per kernel class (for the band)."""

    fallback_ops: list[str]
    fallback_s: float
    class_s: dict[str, float]
    note: str | None = None
    # of `fallback_s`, the time of the operators that have a kernel class but no kernel data in their regime
    fallback_class_s: dict[str, float] = field(default_factory=dict)


def apply_kernel_core(char: WorkloadCharacterisation, acc: Any, precision: str, per: Any, model: Any = None
                      ) -> KernelCore:
    """Replace `per` (per-record seconds, count included) by the kernel model's prediction for every record it
    covers, in place; the others keep the roofline rule and are listed."""
    from trainwise.predict import kernel_model as km

    if getattr(acc, "kind", "") != "gpu":
        return KernelCore(sorted({r.op for r in char.records}), float(per.sum()), {},
                          f"{acc.name} is not a GPU: the kernel model has no data for it, the roofline rule is used")
    idx, kernels, fallback = _record_kernels(char, precision)
    fallback = set(fallback)
    try:  # an accelerator whose catalog row lacks a spec the model reads keeps the rule, and says which
        seconds = km.predict_seconds(kernels, km.GpuSpec.of(acc), model)
    except TrainwiseError as exc:
        return KernelCore(sorted({r.op for r in char.records}), float(per.sum()), {}, f"{exc}; the roofline rule is used")
    class_s: dict[str, float] = {}
    fallback_class_s: dict[str, float] = {}
    covered = set()
    for i, c, t in zip(idx, kernels.cls, seconds):
        if not math.isfinite(t):  # a regime without kernel data on enough GPUs: the roofline rule stays
            fallback.add(char.records[i].op + f" ({char.records[i].dtype})")
            kind = km.CLASSES[int(c)]
            fallback_class_s[kind] = fallback_class_s.get(kind, 0.0) + float(per[i])
            continue
        covered.add(i)
        per[i] = char.records[i].count * float(t)
        kind = km.CLASSES[int(c)]
        class_s[kind] = class_s.get(kind, 0.0) + per[i]
    fallback_s = float(sum(per[i] for i in range(len(per)) if i not in covered))
    return KernelCore(sorted(fallback), fallback_s, class_s, fallback_class_s=fallback_class_s)


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


# The roofline rule's band counts at least this much on the operators the kernel model leaves to it and has no
# kernel class for (attention, grouped convolutions, other operators).
FALLBACK_BAND_MIN = 0.3


def kernel_band(kcore: KernelCore, roofline_band: float, device_s: float, count: int, params: DeviceModelParams,
                kernel_model: Any = None) -> tuple[float, list[str]]:
    """The 80 % band of a kernel-core prediction: per kernel class, the split-conformal quantile over GPU families
    of the kernel model's systematic (time-weighted) error on a family held out of its fit, weighted by the
    class's share of device time; the operators left to the roofline rule count, per kernel class, with the
    same quantile of the rule's own systematic error on the per-kernel data (`fallback_band80_by_class`,
    `kernel_rule`), and without a kernel class with the roofline band (at least FALLBACK_BAND_MIN)."""
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
    rule_by_class = model.meta.get("fallback_band80_by_class", {})
    classed = {c: t for c, t in kcore.fallback_class_s.items() if c in rule_by_class}
    band += sum(t / device_s * float(rule_by_class[c]) for c, t in classed.items())
    band += max(kcore.fallback_s - sum(classed.values()), 0.0) / device_s * max(roofline_band, FALLBACK_BAND_MIN)
    if count > 1:
        band += float((params.bands or {}).get("data_parallel_extra", 0.10))
    if kcore.fallback_ops and not kcore.note:
        notes.append(f"roofline fallback for operators without kernel data ({share:.0%} of device time, band widened): "
                     + ", ".join(kcore.fallback_ops))
    return band, notes
