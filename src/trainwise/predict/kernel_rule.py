"""The roofline rule's systematic error on the per-kernel data: the band of the operators the kernel core leaves
to the rule.

The kernel core (`kernel_core`) predicts an operator with the learned model only where the kernel data cover its
regime on `kernel_model.MIN_FAMILIES` GPU families; the others keep the roofline rule of `device_model`. Their
band was the rule's leave-one-model-out band on published step throughputs, floored at 0.3: a band for GPUs the
rule was fitted on, with a guessed floor. Here the rule, whose constants are fitted on step throughputs and never
on kernels, predicts every kernel of the per-kernel data (`kernel_fit.load_dataset`); per GPU family and kernel
class its time-weighted mean log-residual is its systematic error there, and the band of a class is the
split-conformal quantile of those errors over the families (`kernel_fit.bands_without`), exactly as the kernel
model's own classes are calibrated. No end-to-end step time is read.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

from trainwise.predict.accelerator_features import compute_multiplier
from trainwise.predict.kernel_model import CLASSES, OP_CLASS, family, regimes
from trainwise.predict.operator_time import op_features, param_arrays, time_of

# each kernel class's stand-in in the rule: (trace category, ATen overload)
_RULE_OP = {"mm": ("matmul", "aten.mm.default"), "bmm": ("matmul", "aten.bmm.default"),
            "conv": ("conv", "aten.convolution.default"), "softmax": ("reduction", "aten._softmax.default"),
            "ln": ("normalisation", "aten.native_layer_norm.default"), "copy": ("copy", "aten.copy_.default")}
# a kernel's dtype -> (the precision the rule is asked for, the operands' torch dtype)
_PRECISION = {"fp32": ("fp32", "float32"), "tf32": ("tf32", "float32"), "fp16": ("amp_fp16", "float16"),
              "bf16": ("amp_bf16", "bfloat16")}
# a class needs this many kernels in a family for that family's systematic error (as `kernel_fit.holdout_errors`)
MIN_CLASS_ROWS = 20


def kernel_record(kernel: Any, tf32_conv: bool = True) -> SimpleNamespace:
    """One kernel as a trace record the rule prices (`operator_time.op_features`). `tf32_conv` False: an fp32
    convolution that ran on the FP32 units (the rule otherwise prices fp32 convolutions in TF32, PyTorch's
    default), told to the rule by an alignment that keeps it off the tensor cores."""
    category, op = _RULE_OP.get(kernel.op, ("elementwise", f"aten.{kernel.op}.Tensor"))
    dtype = _PRECISION.get(kernel.dtype, ("fp32", "float32"))[1]
    if category == "matmul":
        b, m, n, k = kernel.batch, kernel.m, kernel.n, kernel.k
        shapes = [[m, k], [k, n]] if kernel.op == "mm" else [[b, m, k], [b, k, n]]
        align = math.gcd(16, m, n, k)
    elif category == "conv":
        # gemm_dims reads N = shapes[1][0] and K = prod(shapes[1][1:]), M = flops / (2 N K)
        shapes = [[kernel.m, kernel.k], [kernel.n, kernel.k]]
        align = math.gcd(16, kernel.n, kernel.k)
        if kernel.dtype == "fp32" and not tf32_conv:
            align = math.gcd(2, align)
    else:
        shapes, align = [[int(kernel.elements)]], 16
    return SimpleNamespace(op=op, category=category, phase="forward", count=1, flops=kernel.flops,
                           bytes_read=kernel.bytes, bytes_written=0.0, dtype=dtype, shapes=shapes, align=align,
                           groups=1)


def rule_seconds(kernels: list[Any], acc: Any, params: Any, tf32_conv: list[bool] | None = None) -> Any:
    """The roofline rule's seconds for each kernel on `acc` (stock PyTorch eager, NCHW, launch included), as
    `device_model.predict_iteration` prices an operator the kernel core leaves to it."""
    import numpy as np

    tf32_conv = tf32_conv if tf32_conv is not None else [True] * len(kernels)
    out = np.empty(len(kernels))
    ec, em = param_arrays(params)
    alpha = [params.alpha[c] for c in ("matmul", "conv", "attention")]
    by_precision: dict[str, list[int]] = {}
    for i, k in enumerate(kernels):
        by_precision.setdefault(_PRECISION.get(k.dtype, ("fp32",))[0], []).append(i)
    for precision, idx in by_precision.items():
        char = SimpleNamespace(records=[kernel_record(kernels[i], tf32_conv[i]) for i in idx], memory_format="nchw")
        f = op_features(char, acc, precision)
        g_acc = compute_multiplier(params, acc) * params.g_generation.get(f.generation, 1.0)
        g_mem = params.g_memory.get(f.generation, 1.0)
        per, _ = time_of(f, ec, em, g_acc, g_mem, params.t_launch_s, params.tpu_fusion, params.g_grouped,
                         params.nchw_penalty, alpha, 1.0, params.wave_exponent)
        out[np.array(idx)] = per
    return out


def rule_biases(data: Any, catalog: Any = None, params: Any = None) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """The rule's systematic error on the per-kernel data `data` (a `kernel_fit.KernelDataset` loaded with its
    kernels), grouped twice from one pricing: ({kernel class: {GPU family: time-weighted mean log(rule /
    measured)}}, the same by `kernel_model.regimes` (class, tensor cores, operand width)); a family counts for a
    group where it has `MIN_CLASS_ROWS` kernels of it."""
    import numpy as np

    from trainwise.predict.device_params import load_params
    from trainwise.predict.kernel_fit import conv_tf32, systematic_error

    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    params = params or load_params()
    if data.kernels is None:
        raise ValueError("rule_biases needs a dataset loaded with its kernels")
    pred = np.empty(len(data.gpus))
    gpus = np.array(data.gpus)
    sources = data.sources or [""] * len(data.gpus)
    for g in sorted(set(data.gpus)):
        idx = np.flatnonzero(gpus == g)
        pred[idx] = rule_seconds([data.kernels[i] for i in idx], catalog.accelerator(g), params,
                                 [conv_tf32(sources[i]) for i in idx])
    fam = np.array([family(g) for g in data.gpus])
    by_class = np.array([OP_CLASS[op] for op in data.ops])
    by_regime = np.array(regimes(data.x, data.dtype_code))
    out: tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]] = ({c: {} for c in CLASSES}, {})
    for f in sorted(set(fam)):
        sel = fam == f
        for grouped, labels in zip(out, (by_class, by_regime)):
            for c, bias in systematic_error(pred[sel], data.latency[sel], labels[sel], MIN_CLASS_ROWS).items():
                grouped.setdefault(c, {})[f] = round(bias, 5)
    return {c: v for c, v in out[0].items() if v}, dict(sorted(out[1].items()))
