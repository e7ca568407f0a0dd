"""The matrix multiply an operator record runs: its (batch, M, N, K), shared by the roofline rule of
`device_model` and the learned kernel model."""

from __future__ import annotations

import math
from typing import Any


def gemm_dims(record: Any) -> tuple[int, float, int, int] | None:
    """(batch, M, N, K) of the GEMM a matmul or convolution record runs, from its shapes; None for
    other operators and for layouts this does not know.

    mm, addmm: one [M x K] x [K x N]; bmm, baddbmm: `batch` of them. Convolutions run as implicit
    GEMMs with M = batch x output pixels, N = output channels and K = input channels per group x
    kernel (the backward record holds the data- and weight-gradient kernels, approximated by the
    forward's GEMM)."""
    shapes, op = record.shapes, record.op
    try:
        if op in ("aten.mm.default", "fused.rnn_gemm", "fused.rnn_step"):
            a, b = shapes[0], shapes[1]
            return 1, a[-2], b[-1], a[-1]
        if op == "aten.addmm.default":
            a, b = shapes[1], shapes[2]
            return 1, a[-2], b[-1], a[-1]
        if op in ("aten.bmm.default", "aten.baddbmm.default"):
            a, b = (shapes[0], shapes[1]) if op == "aten.bmm.default" else (shapes[1], shapes[2])
            return a[0], a[-2], b[-1], a[-1]
        if op == "aten.convolution.default":
            out_channels = shapes[1][0]
            reduction = math.prod(shapes[1][1:])  # input channels per group x kernel
            return 1, record.flops / (2.0 * out_channels * reduction), out_channels, reduction
        if op == "aten.convolution_backward.default":
            grad_out = shapes[0]  # [N, C_out, *spatial]
            return 1, grad_out[0] * math.prod(grad_out[2:]), grad_out[1], math.prod(shapes[2][1:])
    except (IndexError, TypeError, ZeroDivisionError):
        return None
    return None
