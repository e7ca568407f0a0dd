"""The TorchFunctionMode of a traced step: autocast's casting policy (autocast ignores meta tensors),
and SDPA and cuDNN recurrent layers as the fused kernels a GPU runs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from trainwise.agent.trace.categories import AUTOCAST_FP32, AUTOCAST_LOW
from trainwise.agent.trace.dispatch import Tracer
from trainwise.agent.trace.flops import align_of, tensor_bytes


def make_function_mode(tracer: Tracer, fused_attention: bool):
    """A TorchFunctionMode that (a) applies autocast's casting policy to meta/CPU tensors (autocast
    ignores meta) and (b) on meta, turns F.scaled_dot_product_attention into one fused attention
    operator (what SDPA runs on a GPU: flash / memory-efficient kernels), instead of the math
    fallback's materialised S x S scores."""
    import torch
    import torch.nn.functional as F
    from torch.overrides import TorchFunctionMode
    from torch.utils._pytree import tree_map

    low = getattr(torch, tracer.low_dtype_name) if tracer.low_dtype_name else None

    class _Fn(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            name = getattr(func, "__name__", "")
            if low is not None:
                if name in AUTOCAST_LOW:
                    args, kwargs = tree_map(lambda t: self._cast(t, low), (args, kwargs))
                elif name in AUTOCAST_FP32:
                    args, kwargs = tree_map(lambda t: self._cast(t, torch.float32), (args, kwargs))
            if fused_attention and func is F.scaled_dot_product_attention:
                return _fused_attention(tracer, *args, **kwargs)
            if fused_attention and name in _FUSED_RNNS and _is_padded_rnn_call(args):
                return _fused_rnn(tracer, name, *args)
            if name == "multi_head_attention_forward":
                return self._multi_head_attention(func, args, kwargs)
            return func(*args, **kwargs)

        def _multi_head_attention(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
            # F.multi_head_attention_forward (nn.MultiheadAttention: ViT, DETR, ...) is Python, and a
            # mode never sees the calls nested in a call it handles: its projections would trace in
            # fp32 under AMP and its SDPA as the unfused math fallback. Autocast would run those
            # projections and the attention in the low dtype, so its inputs are cast here (the weight
            # copies are counted once, as for linear), and its SDPA is routed to the fused operator.
            if low is not None:
                args, kwargs = tree_map(lambda t: self._cast(t, low), (args, kwargs))
            if not fused_attention:
                return func(*args, **kwargs)
            saved = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = lambda *a, **k: _fused_attention(tracer, *a, **k)
            try:
                return func(*args, **kwargs)
            finally:
                F.scaled_dot_product_attention = saved

        def _cast(self, t: Any, dtype: Any) -> Any:
            if not isinstance(t, torch.Tensor) or not t.is_floating_point() or t.dtype == dtype:
                return t
            if dtype != torch.float32 and t.dtype != torch.float32:
                return t  # autocast only narrows fp32
            if isinstance(t, torch.nn.Parameter) or id(t) in tracer.param_ids:
                cached = tracer.cast_cache.get(id(t))
                if cached is not None and cached[0] is t:
                    return cached[1]
                casted = t.to(dtype)
                tracer.cast_cache[id(t)] = (t, casted)
                tracer.amp_weight_copy_bytes += int(tensor_bytes(casted))
                return casted
            return t.to(dtype)

    return _Fn()


def _fused_attention(tracer: Tracer, query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                     is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    """SDPA as one fused kernel (flash / memory-efficient attention), forward and backward.

    FLOPs: 4 x B x H x Sq x Sk x D forward (two matmuls; half when causal), 2.5x that backward
    (five matmuls, the scores are recomputed). Bytes: Q, K, V (+ mask) read and O written forward;
    Q, K, V, O, dO read and dQ, dK, dV written backward. Values are not computed (meta tensors).
    """
    import torch

    def nbytes(*ts: Any) -> float:
        return float(sum(tensor_bytes(t) for t in ts if isinstance(t, torch.Tensor)))

    *batch, sq, d = query.shape
    sk = key.shape[-2]
    b = math.prod(int(x) for x in batch) if batch else 1
    fwd_flops = 4.0 * b * sq * sk * d * (0.5 if is_causal else 1.0)
    dtype = str(query.dtype).replace("torch.", "")
    align = align_of(int(d))
    shapes = [list(query.shape), list(key.shape), list(value.shape)]
    out_shape = (*query.shape[:-1], value.shape[-1])

    class _Attention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):  # noqa: D401 - autograd protocol
            out = q.new_empty(out_shape)
            tracer.add("fused.scaled_dot_product_attention", "attention", fwd_flops, nbytes(q, k, v, attn_mask),
                       nbytes(out) + 4.0 * b * sq, dtype, shapes, align, phase="forward")
            ctx.save_for_backward(q, k, v, out)
            return out

        @staticmethod
        def backward(ctx, grad_out):  # noqa: D401 - autograd protocol
            q, k, v, out = ctx.saved_tensors
            tracer.add("fused.scaled_dot_product_attention_backward", "attention", 2.5 * fwd_flops,
                       nbytes(q, k, v, out, grad_out), nbytes(q, k, v), dtype, shapes, align, phase="backward")
            return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    return _Attention.apply(query, key, value)


# Recurrent layers cuDNN runs whole (nn.LSTM / nn.GRU / nn.RNN on a GPU): gates per hidden unit.
_FUSED_RNNS = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def _is_padded_rnn_call(args: Sequence[Any]) -> bool:
    """`_VF.lstm(input, hx, weights, has_biases, layers, dropout, train, bidirectional, batch_first)`
    (and gru/rnn_*), not the packed-sequence overload (input, batch_sizes, hx, weights, ...)."""
    return len(args) >= 9 and isinstance(args[2], (list, tuple)) and isinstance(args[3], bool)


def _fused_rnn(tracer: Tracer, name: str, input: Any, hx: Any, weights: Sequence[Any], has_biases: bool,
               num_layers: int, dropout: float, train: bool, bidirectional: bool, batch_first: bool) -> Any:
    """A whole recurrent layer stack as cuDNN runs it on a GPU, instead of the per-time-step ATen
    decomposition the meta device traces (an LSTM over 300 steps decomposed into ~10,000 small
    kernels: a host-bound step no GPU runs).

    Per layer and direction, forward: one GEMM projecting the inputs of all T steps
    ([T*B x I] x [I x G*H], G gates), then T recurrent steps, each a [B x H] x [H x G*H] GEMM with
    the gate nonlinearities and the cell update fused into it (the gates are kept for backward).
    Backward: T recurrent data-gradient GEMMs, one input data-gradient GEMM and the two weight
    gradient GEMMs over all steps. Dropout between layers is left out.
    """
    import torch

    gates = _FUSED_RNNS[name]
    directions = 2 if bidirectional else 1
    groups = max(1, num_layers * directions)
    per_group = len(weights) // groups
    unbatched = input.dim() == 2
    steps = int(input.shape[1 if batch_first and not unbatched else 0])
    batch = 1 if unbatched else int(input.shape[0 if batch_first else 1])
    es = float(input.element_size())
    dtype = str(input.dtype).replace("torch.", "")
    plan: list[tuple[int, int, int]] = []  # (gates x hidden, input size, recurrent size) per layer-direction
    for g in range(groups):
        w_ih, w_hh = weights[g * per_group], weights[g * per_group + 1]
        plan.append((int(w_ih.shape[0]), int(w_ih.shape[1]), int(w_hh.shape[1])))
    hidden_out = plan[0][2]
    state = list(hx) if isinstance(hx, (list, tuple)) else [hx]

    def gemm(op_phase: str, m: int, k: int, n: int, count: int = 1, extra_read: float = 0.0, extra_written: float = 0.0) -> None:
        # the per-time-step kernels are launched by cuDNN from C++ ("fused.rnn_step": no host dispatch each)
        op = "fused.rnn_step" if count > 1 else "fused.rnn_gemm"
        for _ in range(count):
            tracer.add(op, "matmul", 2.0 * m * k * n, (m * k + k * n) * es + extra_read,
                       m * n * es + extra_written, dtype, [[m, k], [k, n]], align_of(m, k, n), phase=op_phase)

    def record(op_phase: str) -> None:
        for gh, i, h in plan:
            hidden = gh // gates
            cell = 4.0 * batch * hidden  # the fp32 cell state read and written each step
            if op_phase == "forward":
                gemm("forward", steps * batch, i, gh)
                gemm("forward", batch, h, gh, steps, extra_read=batch * gh * es + cell, extra_written=batch * gh * es + cell)
            else:
                gemm("backward", batch, gh, h, steps, extra_read=2 * batch * gh * es + cell, extra_written=batch * gh * es + cell)
                gemm("backward", steps * batch, gh, i)
                gemm("backward", i, steps * batch, gh)
                gemm("backward", h, steps * batch, gh)

    out_shape = (*input.shape[:-1], directions * hidden_out)
    n_state = len(state)

    class _Rnn(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, *tensors):  # noqa: D401 - autograd protocol
            record("forward")
            ctx.shapes = [t.shape for t in tensors]
            ctx.dtypes = [t.dtype for t in tensors]
            outs = [x.new_empty(out_shape)] + [t.new_empty(t.shape) for t in tensors[:n_state]]
            return tuple(outs)

        @staticmethod
        def backward(ctx, *grads):  # noqa: D401 - autograd protocol
            record("backward")
            return (torch.empty(input.shape, dtype=input.dtype, device=input.device),
                    *[torch.empty(s, dtype=d, device=input.device) for s, d in zip(ctx.shapes, ctx.dtypes)])

    return _Rnn.apply(input, *state, *weights)
