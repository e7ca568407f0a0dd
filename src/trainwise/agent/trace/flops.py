"""FLOPs, bytes and tensor-core alignment of one traced operator call."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def tensor_bytes(t: Any) -> float:
    try:
        n = t.numel() * t.element_size()
        try:
            storage = t.untyped_storage().nbytes()
            if storage > 0:
                n = min(n, storage)
        except Exception:
            pass
        return float(n)
    except Exception:
        return 0.0


def align_of(*dims: int) -> int:
    for a in (16, 8, 4, 2):
        if all(int(d) % a == 0 for d in dims):
            return a
    return 1


def conv_flops(name: str, args: Sequence[Any], outputs: list[Any]) -> float:
    """2 x batch x C_out x output positions x (C_in / groups) x kernel size, per convolution pass.

    torch.utils.flop_counter ignores `groups` in the backward formula (a depthwise 7x7 backward of
    ConvNeXt counts C times too many FLOPs), so convolutions are counted here. Backward: one forward's
    worth for the input gradient and one for the weight gradient, as requested by `output_mask`.
    """
    if name == "convolution_backward":
        grad_out, weight = args[0], args[2]
        mask = args[10] if len(args) > 10 else (True, True, True)
        out_positions = math.prod(int(d) for d in grad_out.shape[2:])
        per_pass = 2.0 * int(grad_out.shape[0]) * int(weight.shape[0]) * out_positions * math.prod(
            int(d) for d in weight.shape[1:])
        return per_pass * (int(bool(mask[0])) + int(bool(mask[1])))
    weight = args[1]
    out = outputs[0]
    transposed = bool(args[6]) if len(args) > 6 else False
    if transposed:  # weight is (C_in, C_out/groups, k...): the work is the same as the forward of its adjoint
        inp = args[0]
        positions = math.prod(int(d) for d in inp.shape[2:])
        return 2.0 * int(inp.shape[0]) * int(weight.shape[0]) * positions * math.prod(int(d) for d in weight.shape[1:])
    positions = math.prod(int(d) for d in out.shape[2:])
    return 2.0 * int(out.shape[0]) * int(weight.shape[0]) * positions * math.prod(int(d) for d in weight.shape[1:])


def attention_flops(name: str, tensors: list[Any]) -> float:
    if len(tensors) < 3:
        return 0.0
    q, k = tensors[0], tensors[1]
    *batch, lq, d = q.shape
    lk = k.shape[-2]
    b = math.prod(batch) if batch else 1
    fwd = 4.0 * b * lq * lk * d
    return fwd * 2.5 if "backward" in name else fwd


def alignment(name: str, category: str, args: Sequence[Any], tensors: list[Any]) -> tuple[int, int]:
    """Alignment of the dimensions tensor cores tile over, and conv groups."""
    try:
        if category == "conv":
            if name == "convolution_backward":
                weight = args[2]
                groups = int(args[9]) if len(args) > 9 else 1
            else:
                weight = args[1]
                groups = int(args[8]) if len(args) > 8 else 1
            cout, cin_per_group = int(weight.shape[0]), int(weight.shape[1])
            return align_of(cout // max(groups, 1), cin_per_group), groups
        if category == "matmul":
            mats = [t for t in tensors if t.dim() >= 2]
            dims = []
            for t in mats[-2:]:
                dims.extend(int(d) for d in t.shape[-2:])
            return (align_of(*dims) if dims else 16), 1
        if category == "attention" and tensors:
            return align_of(int(tensors[0].shape[-1])), 1
    except Exception:
        pass
    return 16, 1
