"""Workload characterisation: what one training step of a model costs, operator by operator.

`characterise_model` traces one full training step (forward, loss, backward; the optimizer step is
added analytically, see below) under a `TorchDispatchMode`, on the *meta* device by default, so a
model far too large for this machine's memory can be characterised at a realistic batch size
(ConvNeXt-Large at batch 64, RoBERTa-large at sequence 512) without allocating a byte of data.
Every ATen operator that reaches the dispatcher is recorded with

- its category (matmul / conv / attention / elementwise / reduction / normalisation / embedding /
  optimizer / copy; `other` for operators the device model has no rule for — listed as unsupported),
- its FLOPs (`torch.utils.flop_counter`'s formulas for matmuls, convolutions and attention, which
  count a multiply-add as 2 FLOPs; one FLOP per output element for elementwise and reductions),
- the bytes it reads and writes (tensor sizes; views are free and not recorded),
- the shapes and the dtype it computes in, and how well its matmul dimensions are aligned (tensor
  cores need multiples of 8 for 16-bit and 4 for TF32 operands).

Identical calls (same operator, shapes, dtype and phase — the 24 layers of BERT-large) are merged
into one record with a `count`, which keeps the characterisation small (a few hundred records).

Mixed precision. `torch.autocast` does nothing on the meta device, so AMP is *simulated* inside the
dispatch mode with autocast's own rules: matmuls and convolutions run in the low-precision dtype
(the fp32 master weights are cast once per forward and the cast is recorded as a `copy`), the
operators autocast forces to fp32 (softmax, log_softmax, layer/group norm, the losses, exp/log/pow)
get fp32 inputs, everything else runs in whatever dtype its inputs have (type promotion). Autograd
casts the fp16 weight gradients back to the fp32 parameters, and those casts are traced as they
happen on a GPU.

Optimizer. `optimizer.step()` on a GPU is a handful of multi-tensor (`foreach`/fused) kernels; on
meta/CPU tensors PyTorch would take the per-parameter loop instead, which would mislead the launch
count. The step is therefore modelled analytically from the parameter count and the optimizer's
state (bytes read and written per parameter, see `OPTIMIZER_STATE`).

Memory. The activation estimate is the set of distinct tensors autograd saves for backward
(`torch.autograd.graph.saved_tensors_hooks`), excluding parameters; `memory_breakdown` adds weights,
gradients, optimizer state, AMP weight copies, the DDP gradient buckets and the largest backward
temporaries. Units: bytes, FLOPs (not MACs). ResNet-50 at 224x224 is 4.1 GMACs = 8.2 GFLOPs forward.
"""

from __future__ import annotations

import copy
import importlib
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from trainwise._io import cache_root
from trainwise.core.workload import (COMPUTE_CATEGORIES, MEMORY_CATEGORIES,  # noqa: F401 - re-exported
                                     PRECISIONS, Category, OpRecord, Phase, Precision, WorkloadCharacterisation)
from trainwise.errors import TrainwiseError

# Optimizer step per parameter: (bytes read, bytes written) per fp32 element, FLOPs per element,
# and optimizer state bytes kept per element. Read/written = the tensors each algorithm touches
# (parameter, gradient, state buffers), as the fused/foreach CUDA kernels do.
OPTIMIZER_STATE: dict[str, tuple[int, int, int, int]] = {
    # name: (read_bytes, write_bytes, flops, state_bytes)
    "sgd": (8, 4, 2, 0),
    "sgd_momentum": (12, 8, 4, 4),
    "adam": (16, 12, 12, 8),
    "adamw": (16, 12, 13, 8),
    "adadelta": (16, 12, 12, 8),
    "rmsprop": (12, 8, 8, 4),
    "rmsprop_momentum": (16, 12, 10, 8),
    "adagrad": (12, 8, 6, 4),
    "lamb": (16, 12, 20, 8),
    "none": (0, 0, 0, 0),
}
_OPTIMIZER_ALIASES = {"sgd_nesterov": "sgd_momentum", "momentum": "sgd_momentum", "adam_w": "adamw",
                      "lars": "sgd_momentum", "fusedadam": "adam", "fusedlamb": "lamb"}


def normalise_precision(precision: str) -> str:
    key = str(precision).strip().lower().replace("-", "_")
    aliases = {"fp16": "amp_fp16", "amp": "amp_fp16", "mixed": "amp_fp16", "bf16": "amp_bf16", "float32": "fp32",
               "single": "fp32", "amp16": "amp_fp16"}
    key = aliases.get(key, key)
    if key not in PRECISIONS:
        raise TrainwiseError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return key


def normalise_optimizer(name: str | None) -> str:
    key = (name or "sgd_momentum").strip().lower().replace("-", "_")
    key = _OPTIMIZER_ALIASES.get(key, key)
    if key not in OPTIMIZER_STATE:
        raise TrainwiseError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZER_STATE)}")
    return key


def optimizer_name_of(optimizer: Any) -> str:
    """The OPTIMIZER_STATE key for a live torch.optim.Optimizer (used by the profiler hook)."""
    cls = type(optimizer).__name__.lower()
    groups = getattr(optimizer, "param_groups", [{}])
    group = groups[0] if groups else {}
    if cls == "sgd":
        return "sgd_momentum" if group.get("momentum", 0) else "sgd"
    if cls == "rmsprop":
        return "rmsprop_momentum" if group.get("momentum", 0) else "rmsprop"
    return cls if cls in OPTIMIZER_STATE else "adam"


# ------------------------------------------------------------------------------------------------
# operator tables
# ------------------------------------------------------------------------------------------------

def _aten_names(*names: str) -> frozenset[str]:
    return frozenset(names)


_MATMUL = _aten_names("mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "addmv", "mv", "dot", "_int_mm")
_CONV = _aten_names("convolution", "_convolution", "convolution_backward", "cudnn_convolution",
                    "convolution_overrideable", "_slow_conv2d_forward", "_slow_conv2d_backward",
                    "mkldnn_convolution", "_conv_depthwise2d", "slow_conv3d_forward", "convolution_backward_overrideable")
_NORM = _aten_names("native_batch_norm", "native_batch_norm_backward", "_native_batch_norm_legit",
                    "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
                    "_batch_norm_with_update", "_batch_norm_with_update_functional", "batch_norm_backward",
                    "cudnn_batch_norm", "cudnn_batch_norm_backward", "native_layer_norm", "native_layer_norm_backward",
                    "native_group_norm", "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward",
                    "batch_norm_stats", "batch_norm_elemt", "batch_norm_gather_stats_with_counts",
                    "batch_norm_backward_reduce", "batch_norm_backward_elemt", "_weight_norm_interface")
_REDUCTION = _aten_names("sum", "mean", "amax", "amin", "max", "min", "var", "var_mean", "std", "std_mean", "prod",
                         "norm", "linalg_vector_norm", "_softmax", "_log_softmax", "_softmax_backward_data",
                         "_log_softmax_backward_data", "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward",
                         "nll_loss2d_backward", "logsumexp", "cumsum", "argmax", "argmin", "any", "all",
                         "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "avg_pool2d",
                         "avg_pool2d_backward", "_adaptive_avg_pool2d", "_adaptive_avg_pool2d_backward",
                         "adaptive_max_pool2d", "adaptive_max_pool2d_backward", "max_pool3d_with_indices",
                         "avg_pool3d", "_adaptive_avg_pool3d", "mse_loss", "mse_loss_backward",
                         "binary_cross_entropy_with_logits", "binary_cross_entropy", "binary_cross_entropy_backward",
                         "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss", "huber_loss_backward", "l1_loss",
                         "topk", "sort", "cross_entropy_loss", "_fused_softmax", "max_pool1d", "avg_pool1d")
_EMBEDDING = _aten_names("embedding", "embedding_dense_backward", "_embedding_bag", "_embedding_bag_backward",
                         "_embedding_bag_dense_backward", "index_select", "index", "gather", "scatter", "scatter_add",
                         "index_add", "index_put", "_index_put_impl", "embedding_renorm_", "index_copy", "take",
                         "masked_select", "scatter_reduce", "index_fill", "_unsafe_index", "_unsafe_index_put")
_COPY = _aten_names("_to_copy", "copy", "copy_", "clone", "cat", "stack", "contiguous", "constant_pad_nd",
                    "reflection_pad2d", "replication_pad2d", "repeat", "roll", "flip", "_copy_from",
                    "_copy_from_and_resize", "narrow_copy", "index_copy", "pixel_shuffle", "pixel_unshuffle",
                    "upsample_nearest2d", "upsample_nearest2d_backward", "upsample_bilinear2d",
                    "upsample_bilinear2d_backward", "_upsample_bilinear2d_aa", "col2im", "im2col", "tril", "triu",
                    "slice_scatter", "select_scatter", "diagonal_scatter", "as_strided_scatter",
                    "reflection_pad2d_backward", "constant_pad_nd_backward", "unfold_backward", "_pad_circular",
                    "split_with_sizes_copy", "unbind_copy", "alias_copy", "view_copy", "expand_copy",
                    "permute_copy", "transpose_copy", "t_copy", "select_backward",
                    "slice_backward", "as_strided_backward", "diagonal_backward", "index_select_backward",
                    "expand_backward", "unsqueeze_copy", "squeeze_copy")
_ATTENTION_PREFIXES = ("_scaled_dot_product", "_flash_attention", "_efficient_attention", "scaled_dot_product",
                       "_cudnn_attention", "flex_attention")
# Operators with no kernel (allocation, metadata, RNG state): free, not recorded.
_FREE = _aten_names("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "unsafe_split",
                    "unsafe_split_with_sizes", "unsafe_chunk", "split", "split_with_sizes", "chunk", "unbind", "_local_scalar_dense", "detach", "detach_",
                    "lift_fresh", "lift_fresh_copy", "set_", "resize_", "_resize_output_", "sym_size", "sym_numel",
                    "sym_stride", "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type",
                    "_reshape_alias", "alias", "_version", "record_stream", "is_nonzero", "_assert_async",
                    "_functional_assert_async", "_assert_tensor_metadata", "_nested_tensor_size", "set_.source_Storage",
                    "_make_dep_token", "zero_", "_unsafe_view", "unsqueeze_", "squeeze_", "as_strided_", "t_",
                    "transpose_", "resize_as_", "_propagate_xla_data", "_fused_sdp_choice")
# Autocast (torch.amp) policy, at the level of the torch / torch.nn.functional calls autocast itself
# intercepts (before composite operators decompose): these run in the low-precision dtype ...
_AUTOCAST_LOW = frozenset({"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                           "conv_transpose3d", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm",
                           "addbmm", "addmv", "mv", "einsum", "scaled_dot_product_attention", "lstm", "gru",
                           "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
                           "prelu", "chain_matmul", "multi_dot", "_convolution", "convolution", "bilinear"})
# ... and these are forced to fp32.
_AUTOCAST_FP32 = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm", "cross_entropy", "nll_loss",
                            "mse_loss", "binary_cross_entropy_with_logits", "exp", "log", "log1p", "expm1", "pow",
                            "rsqrt", "reciprocal", "softplus", "logsumexp", "cumsum", "smooth_l1_loss", "huber_loss",
                            "l1_loss", "norm", "rms_norm", "kl_div", "cosine_similarity", "cdist", "dist"})
_LOW_DTYPES = {"amp_fp16": "float16", "amp_bf16": "bfloat16"}


def _category_of(name: str, func: Any) -> Category:
    if name in _MATMUL:
        return "matmul"
    if name in _CONV:
        return "conv"
    if name.startswith(_ATTENTION_PREFIXES):
        return "attention"
    if name in _NORM:
        return "normalisation"
    if name in _EMBEDDING:
        return "embedding"
    if name in _REDUCTION:
        return "reduction"
    if name in _COPY:
        return "copy"
    try:
        import torch

        tags = getattr(func, "tags", ())
        if torch.Tag.pointwise in tags:
            return "elementwise"
    except Exception:  # pragma: no cover - torch without tags
        pass
    base = name.rstrip("_")
    if base in _ELEMENTWISE_EXTRA or base.endswith("_backward") and base[: -len("_backward")] in _ELEMENTWISE_EXTRA:
        return "elementwise"
    return "other"


# Pointwise operators without the `pointwise` tag (their backward kernels and RNG/fill kernels).
_ELEMENTWISE_EXTRA = frozenset({
    "threshold", "threshold_backward", "gelu", "gelu_backward", "silu", "silu_backward", "hardswish",
    "hardswish_backward", "hardsigmoid", "hardsigmoid_backward", "elu", "elu_backward", "leaky_relu",
    "leaky_relu_backward", "hardtanh", "hardtanh_backward", "sigmoid_backward", "tanh_backward", "native_dropout",
    "native_dropout_backward", "bernoulli", "uniform", "normal", "fill", "zeros", "ones", "full", "zeros_like",
    "ones_like", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor", "arange", "rand", "randn", "rand_like", "randn_like", "where",
    "masked_fill", "clamp", "clamp_min", "clamp_max", "mish", "mish_backward", "softplus_backward",
    "_masked_scale", "prelu", "_prelu_kernel", "_prelu_kernel_backward", "glu", "glu_backward", "rrelu_with_noise",
    "lerp", "addcmul", "addcdiv", "_foreach_add", "_foreach_mul", "linspace", "randint", "randperm", "logit",
    "sgn", "nan_to_num", "bitwise_and", "bitwise_or", "logical_and", "logical_not", "ne", "eq", "gt", "lt", "ge",
    "le", "isnan", "isinf", "softshrink", "hardshrink", "celu", "selu", "relu6", "log_sigmoid_forward",
    "log_sigmoid_backward", "_thnn_fused_lstm_cell", "_thnn_fused_lstm_cell_backward_impl",
    "_thnn_fused_gru_cell", "_thnn_fused_gru_cell_backward",
})


def _align_of(*dims: int) -> int:
    for a in (16, 8, 4, 2):
        if all(int(d) % a == 0 for d in dims):
            return a
    return 1


# ------------------------------------------------------------------------------------------------
# the tracer
# ------------------------------------------------------------------------------------------------

class _Tracer:
    """Holds the state of one trace; the TorchDispatchMode subclass is built lazily (torch import)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision
        self.low_dtype_name = _LOW_DTYPES.get(precision)
        self.phase: Phase = "forward"
        self.records: dict[tuple, dict[str, Any]] = {}
        self.unsupported: dict[str, int] = {}
        self.cast_cache: dict[int, Any] = {}
        self.cast_keepalive: list[Any] = []
        self.amp_weight_copy_bytes = 0
        self.param_ids: set[int] = set()
        self.peak_temporary_bytes = 0

    # -- bookkeeping --
    def add(self, op: str, category: str, flops: float, read: float, written: float, dtype: str,
            shapes: list[list[int]], align: int = 16, groups: int = 1, phase: str | None = None) -> None:
        phase = phase or self.phase
        key = (op, category, phase, dtype, tuple(tuple(s) for s in shapes), align, groups, round(flops), round(read),
               round(written))
        entry = self.records.get(key)
        if entry is None:
            self.records[key] = {"op": op, "category": category, "phase": phase, "count": 1, "flops": float(flops),
                                 "bytes_read": float(read), "bytes_written": float(written), "dtype": dtype,
                                 "shapes": [list(s) for s in shapes], "align": align, "groups": groups}
        else:
            entry["count"] += 1


def _tensor_bytes(t: Any) -> float:
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


# Replay repeated operator calls from a cache (see _make_mode); False traces every call afresh (the
# reference the tests compare the cache against).
DISPATCH_CACHE = True


def _make_mode(tracer: _Tracer):
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten
    from torch.utils.flop_counter import flop_registry

    meta = torch.device("meta")
    # A recurrent layer or a stack of identical blocks dispatches the same operator on the same shapes
    # thousands of times (an LSTM over 300 steps: ~19,000 calls), and each meta kernel is a Python
    # reference implementation (~0.3 ms). For a functional operator on meta tensors the output's
    # metadata and the operator's cost depend only on the inputs' metadata and the other arguments, so
    # both are computed once per distinct call and replayed: the same records, several times faster.
    cache: dict[tuple, tuple] = {}
    kinds: dict[Any, str | None] = {}
    use_cache = DISPATCH_CACHE

    def cache_kind(func) -> str | None:
        """"functional" (fresh tensor outputs), "inplace" (returns its mutated first argument), or None."""
        if func in kinds:
            return kinds[func]
        schema = func._schema
        returns, arguments = list(schema.returns), list(schema.arguments)
        kind = None
        if not schema.is_mutable and returns and all(r.alias_info is None for r in returns) \
                and all(str(r.type) in ("Tensor", "Tensor[]") for r in returns):
            kind = "functional"
        elif len(returns) == 1 and returns[0].alias_info is not None and arguments \
                and arguments[0].alias_info is not None and arguments[0].alias_info.is_write \
                and returns[0].alias_info.before_set == arguments[0].alias_info.before_set \
                and not any(a.alias_info is not None and a.alias_info.is_write for a in arguments[1:]):
            kind = "inplace"
        kinds[func] = kind
        return kind

    def describe(value):
        """A hashable description of one argument, or raise TypeError (the call is not cached)."""
        if isinstance(value, torch.Tensor):
            if value.device != meta or value.is_sparse or value.is_nested:
                raise TypeError("not a dense meta tensor")
            # Not the storage offset (neither an output's metadata nor an operator's cost depends on it:
            # an LSTM's per-step slices differ only there), but the storage size: bytes read are capped
            # by it (an expanded tensor reads only its storage).
            return ("T", tuple(value.shape), value.stride(), value.dtype, value.untyped_storage().nbytes())
        if isinstance(value, (list, tuple)):
            return (type(value).__name__, tuple(describe(v) for v in value))
        if value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.layout,
                                               torch.memory_format)):
            return (type(value).__name__, value)
        raise TypeError(f"unhashable argument {type(value).__name__}")

    def outputs_meta(out):
        if isinstance(out, torch.Tensor):
            if out.device != meta:
                raise TypeError("output not on meta")
            spec = ("T", tuple(out.shape), out.stride(), out.dtype)
            # Replayed outputs are fresh tensors: cache only outputs such a tensor reproduces exactly.
            if out.storage_offset() != 0 or rebuild(spec).untyped_storage().nbytes() != out.untyped_storage().nbytes():
                raise TypeError("output is not a fresh tensor")
            return spec
        if isinstance(out, (list, tuple)):
            return (type(out).__name__, tuple(outputs_meta(o) for o in out))
        raise TypeError("output is not a tensor")

    def rebuild(spec):
        if spec[0] == "T":
            _, shape, stride, dtype = spec
            return torch.empty_strided(shape, stride, dtype=dtype, device=meta)
        items = [rebuild(s) for s in spec[1]]
        return tuple(items) if spec[0] == "tuple" else items

    class _Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: C901 - one dispatcher
            kwargs = kwargs or {}
            packet = func._overloadpacket
            name = packet.__name__ if hasattr(packet, "__name__") else str(packet).split(".")[-1]
            name = str(name).split(".")[-1]
            if name in _FREE or func.is_view:
                return func(*args, **kwargs)
            kind = cache_kind(func) if use_cache else None
            key = None
            if kind is not None:
                try:
                    key = (func, describe(args), describe(tuple(sorted(kwargs.items()))))
                except TypeError:
                    key = None
            hit = cache.get(key) if key is not None else None
            if hit is not None:
                out_spec, added = hit
                self._replay(added)
                return args[0] if kind == "inplace" else rebuild(out_spec)
            # An in-place operator's argument, before the call (to check it kept its metadata).
            before = (describe(args[0]), args[0].storage_offset()) if kind == "inplace" and key is not None else None
            out = func(*args, **kwargs)
            added: list[tuple] = []
            try:
                self._record(func, name, args, kwargs, out, added)
            except Exception as exc:  # a cost rule must never break the trace
                tracer.unsupported[f"{func} (cost rule failed: {type(exc).__name__})"] = tracer.unsupported.get(str(func), 0) + 1
                key = None
            if key is not None:
                try:
                    if kind == "inplace":
                        # Only an in-place operator that left its argument's metadata alone (not resize_,
                        # squeeze_, as_strided_ …) can be replayed by returning the argument.
                        if out is not args[0] or before != (describe(args[0]), args[0].storage_offset()):
                            raise TypeError("in-place operator changed its argument's metadata")
                        cache[key] = (None, added)
                    else:
                        cache[key] = (outputs_meta(out), added)
                except TypeError:
                    pass
            return out

        def _replay(self, added: list[tuple]) -> None:
            for kind, payload in added:
                if kind == "unsupported":
                    tracer.unsupported[payload] = tracer.unsupported.get(payload, 0) + 1
                else:
                    tracer.add(*payload)
                    if tracer.phase == "backward":
                        tracer.peak_temporary_bytes = max(tracer.peak_temporary_bytes, int(payload[4]))

        def _record(self, func, name, args, kwargs, out, added: list[tuple]) -> None:
            category = _category_of(name, func)
            flat_in, _ = tree_flatten((args, kwargs))
            tensors_in = [t for t in flat_in if isinstance(t, torch.Tensor)]
            flat_out, _ = tree_flatten(out)
            tensors_out = [t for t in flat_out if isinstance(t, torch.Tensor)]
            mutable = bool(func._schema.is_mutable) or name.endswith("_")
            read = sum(_tensor_bytes(t) for t in tensors_in)
            written = sum(_tensor_bytes(t) for t in tensors_out)
            if mutable and not tensors_out:
                written = _tensor_bytes(tensors_in[0]) if tensors_in else 0.0
            floats = [t for t in tensors_in if t.is_floating_point()]
            dtype = str((floats[0] if floats else (tensors_out[0] if tensors_out else None)).dtype).replace("torch.", "") \
                if (floats or tensors_out) else "none"
            shapes = [list(t.shape) for t in tensors_in[:3]]
            flops = 0.0
            align = 16
            groups = 1
            if category in ("matmul", "conv", "attention"):
                formula = flop_registry.get(packet_of(func))
                if category == "conv":
                    flops = _conv_flops(name, args, tensors_out)
                elif formula is not None:
                    flops = float(formula(*args, **kwargs, out_val=out))
                elif category == "attention":
                    flops = _attention_flops(name, tensors_in)
                else:
                    added.append(("unsupported", name))
                align, groups = _alignment(name, category, args, tensors_in)
            elif category == "other":
                added.append(("unsupported", name))
                flops = float(sum(t.numel() for t in tensors_out))
            else:
                flops = float(sum(t.numel() for t in tensors_out)) if category != "copy" else 0.0
            added.append(("add", (str(func), category, flops, read, written, dtype, shapes, align, groups)))
            self._replay(added)

    def packet_of(func):
        return func._overloadpacket

    return _Mode()


def _make_function_mode(tracer: _Tracer, fused_attention: bool):
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
                if name in _AUTOCAST_LOW:
                    args, kwargs = tree_map(lambda t: self._cast(t, low), (args, kwargs))
                elif name in _AUTOCAST_FP32:
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
                tracer.amp_weight_copy_bytes += int(_tensor_bytes(casted))
                return casted
            return t.to(dtype)

    return _Fn()


def _fused_attention(tracer: _Tracer, query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0,
                     is_causal: bool = False, scale: Any = None, enable_gqa: bool = False) -> Any:
    """SDPA as one fused kernel (flash / memory-efficient attention), forward and backward.

    FLOPs: 4 x B x H x Sq x Sk x D forward (two matmuls; half when causal), 2.5x that backward
    (five matmuls, the scores are recomputed). Bytes: Q, K, V (+ mask) read and O written forward;
    Q, K, V, O, dO read and dQ, dK, dV written backward. Values are not computed (meta tensors).
    """
    import torch

    def nbytes(*ts: Any) -> float:
        return float(sum(_tensor_bytes(t) for t in ts if isinstance(t, torch.Tensor)))

    *batch, sq, d = query.shape
    sk = key.shape[-2]
    b = math.prod(int(x) for x in batch) if batch else 1
    fwd_flops = 4.0 * b * sq * sk * d * (0.5 if is_causal else 1.0)
    dtype = str(query.dtype).replace("torch.", "")
    align = _align_of(int(d))
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


def _fused_rnn(tracer: _Tracer, name: str, input: Any, hx: Any, weights: Sequence[Any], has_biases: bool,
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
                       m * n * es + extra_written, dtype, [[m, k], [k, n]], _align_of(m, k, n), phase=op_phase)

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


def _conv_flops(name: str, args: Sequence[Any], outputs: list[Any]) -> float:
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


def _attention_flops(name: str, tensors: list[Any]) -> float:
    if len(tensors) < 3:
        return 0.0
    q, k = tensors[0], tensors[1]
    *batch, lq, d = q.shape
    lk = k.shape[-2]
    b = math.prod(batch) if batch else 1
    fwd = 4.0 * b * lq * lk * d
    return fwd * 2.5 if "backward" in name else fwd


def _alignment(name: str, category: str, args: Sequence[Any], tensors: list[Any]) -> tuple[int, int]:
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
            return _align_of(cout // max(groups, 1), cin_per_group), groups
        if category == "matmul":
            mats = [t for t in tensors if t.dim() >= 2]
            dims = []
            for t in mats[-2:]:
                dims.extend(int(d) for d in t.shape[-2:])
            return (_align_of(*dims) if dims else 16), 1
        if category == "attention" and tensors:
            return _align_of(int(tensors[0].shape[-1])), 1
    except Exception:
        pass
    return 16, 1


# ------------------------------------------------------------------------------------------------
# public API
# ------------------------------------------------------------------------------------------------

InputSpec = Any  # a tensor (any device), or (shape, dtype) / (shape, dtype, "index", high)


def _materialise_inputs(example_inputs: Any, device: str) -> Any:
    """Meta (or CPU) tensors from tensors / (shape, dtype) specs; integer inputs get valid index values on CPU."""
    import torch

    def one(spec: Any) -> Any:
        if isinstance(spec, torch.Tensor):
            if device == "meta":
                return torch.empty(spec.shape, dtype=spec.dtype, device="meta")
            return spec.detach().to("cpu")
        if (isinstance(spec, (tuple, list)) and len(spec) >= 2 and isinstance(spec[0], (tuple, list, torch.Size))
                and all(isinstance(x, int) for x in spec[0]) and isinstance(spec[1], (str, torch.dtype))):
            shape = tuple(int(s) for s in spec[0])
            dtype = spec[1] if len(spec) > 1 else torch.float32
            if isinstance(dtype, str):
                dtype = getattr(torch, dtype.replace("torch.", ""))
            high = int(spec[3]) if len(spec) > 3 else 2
            if device == "meta":
                return torch.empty(shape, dtype=dtype, device="meta")
            if dtype.is_floating_point:
                return torch.randn(shape, dtype=dtype)
            return torch.randint(0, max(high, 1), shape, dtype=dtype)
        if isinstance(spec, dict):
            return {k: one(v) for k, v in spec.items()}
        if isinstance(spec, (tuple, list)):
            return type(spec)(one(v) for v in spec)
        return spec

    return one(example_inputs)


def _default_loss(output: Any) -> Any:
    """A surrogate loss for a traced step: cross-entropy for (N, C) logits, else the mean."""
    import torch
    import torch.nn.functional as F

    if isinstance(output, dict):
        output = output.get("loss", output.get("logits", next(iter(output.values()))))
    if isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise TrainwiseError("the model's output is not a tensor: pass loss_fn= to characterise_model")
    if output.dim() == 0:
        return output
    if output.dim() == 2 and output.shape[1] > 1 and output.is_floating_point():
        target = torch.empty(output.shape[0], dtype=torch.long, device=output.device)
        if output.device.type != "meta":
            target = target.fill_(0)
        return F.cross_entropy(output, target)
    return output.float().mean()


def meta_copy(model: Any) -> Any:
    """A copy of `model` whose parameters and buffers live on the meta device, without copying data.

    Uses deepcopy with a memo that maps every parameter and buffer to an empty meta tensor, so a
    20 GB model on a GPU costs nothing to copy. Hooks and plain attributes are copied as usual.
    """
    import torch

    memo: dict[int, Any] = {}
    for p in model.parameters():
        if id(p) not in memo:
            memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in model.buffers():
        if id(b) not in memo:
            memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


_TRACE_LOCK = threading.Lock()


def infer_batch_size(model: Any, flat_inputs: Sequence[Any]) -> int:
    """The batch size of a step's first input tensor: its dim 0, except for a sequence-first model (every
    recurrent layer or transformer layer built with batch_first=False, PyTorch's default for nn.LSTM/GRU/RNN and
    nn.Transformer*), whose (seq, batch, ...) inputs carry the batch in dim 1."""
    import torch

    if not flat_inputs or flat_inputs[0].dim() == 0:
        return 1
    first = flat_inputs[0]
    seq_layers = (torch.nn.RNNBase, torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer,
                  torch.nn.MultiheadAttention)
    flags = [bool(getattr(m, "batch_first", False)) for m in model.modules() if isinstance(m, seq_layers)]
    if flags and not any(flags) and first.dim() >= 2:
        return int(first.shape[1])
    return int(first.shape[0])


def characterise_model(model: Any, example_inputs: Any, loss_fn: Callable[..., Any] | None = None,
                       optimizer_name: str = "sgd_momentum", precision: str = "fp32", *, model_name: str = "model",
                       per_device_batch: int | None = None, device: Literal["meta", "cpu"] = "meta",
                       seq_len: int | None = None, image_size: int | None = None,
                       copy_model: bool = True, memory_format: str = "nchw") -> WorkloadCharacterisation:
    """Trace one training step of `model` and return its characterisation.

    - `example_inputs`: the model's positional input(s) for one step at the per-device batch — a
      tensor (any device: only its shape and dtype are used on meta), a (shape, dtype) pair, or a
      tuple/list/dict of those. Integer inputs are token ids.
    - `loss_fn(output) -> scalar`: defaults to cross-entropy on (N, C) logits, else the mean of the output.
    - `optimizer_name`: a key of OPTIMIZER_STATE (sgd, sgd_momentum, adam, adamw, ...).
    - `precision`: fp32, tf32, amp_fp16 or amp_bf16 (AMP is simulated, see the module docstring).
    - `device="meta"` (default) never allocates data; `"cpu"` runs the step for real (small models,
      or models whose forward needs real values).
    - The model is not modified: a meta copy is traced (`copy_model=False` traces `model` itself,
      which must then already live on `device`).
    """
    import torch

    precision = normalise_precision(precision)
    optimizer_name = normalise_optimizer(optimizer_name)
    started = time.perf_counter()
    if copy_model:
        traced = meta_copy(model) if device == "meta" else copy.deepcopy(model).to("cpu")
    else:
        traced = model
    traced.train()
    inputs = _materialise_inputs(example_inputs, device)
    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    kwargs: dict[str, Any] = {}
    if isinstance(inputs, dict):
        args, kwargs = (), inputs
    flat_inputs = [t for t in (list(args) + list(kwargs.values())) if isinstance(t, torch.Tensor)]
    batch = per_device_batch or infer_batch_size(traced, flat_inputs)

    params = [p for p in traced.parameters()]
    trainable = [p for p in params if p.requires_grad]
    tracer = _Tracer(precision)
    tracer.param_ids = {id(p) for p in params}
    saved: dict[int, tuple[Any, int]] = {}

    def pack(t: Any) -> Any:
        base = t._base if t._base is not None else t
        if id(base) in tracer.param_ids or isinstance(base, torch.nn.Parameter):
            return t
        if any(entry[1] is base for entry in tracer.cast_cache.values()):
            return t  # autocast's weight copies are counted in amp_weight_copy_bytes
        if id(base) not in saved:
            saved[id(base)] = (base, int(_tensor_bytes(base)))
        return t

    mode = _make_mode(tracer)
    autocast = _make_function_mode(tracer, fused_attention=(device == "meta"))
    with _TRACE_LOCK:
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with mode:
                    tracer.phase = "forward"
                    with autocast:
                        output = traced(*args, **kwargs)
                        loss = (loss_fn or _default_loss)(output)
                    tracer.phase = "backward"
                    loss.backward()
        except TrainwiseError:
            raise
        except Exception as exc:
            raise TrainwiseError(
                f"tracing one training step of {model_name} on the {device} device failed "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                + ("a forward pass that needs real values (data-dependent shapes, .item()) cannot be traced on meta: "
                   "retry with device='cpu' at a small batch" if device == "meta" else
                   "the captured inputs do not fit the model's forward (e.g. a model called with extra arguments): "
                   "the device model cannot predict this job from its operators")) from None
        finally:
            tracer.phase = "forward"

    n_params = sum(p.numel() for p in params)
    n_trainable = sum(p.numel() for p in trainable)
    param_bytes = int(sum(_tensor_bytes(p) for p in params))
    grad_bytes = int(sum(p.numel() * 4 if p.is_floating_point() else 0 for p in trainable))
    read_b, write_b, flops_pe, state_pe = OPTIMIZER_STATE[optimizer_name]
    opt_state = int(n_trainable * state_pe)
    n_tensors = len(trainable)
    if optimizer_name != "none" and n_trainable:
        # foreach/fused kernels: a few multi-tensor launches per group of tensors
        launches = max(1, math.ceil(n_tensors / 64)) * 4
        per_launch = n_trainable / launches
        tracer.add(f"optimizer.{optimizer_name}", "optimizer", flops_pe * per_launch, read_b * per_launch,
                   write_b * per_launch, "float32", [[n_trainable]], phase="optimizer")
        tracer.records[next(reversed(tracer.records))]["count"] = launches
    if precision == "amp_fp16" and n_trainable:
        # GradScaler: unscale + inf check over all gradients (one foreach pass), and the scale update
        launches = max(1, math.ceil(n_tensors / 64))
        per_launch = n_trainable / launches
        tracer.add("amp.unscale_", "optimizer", per_launch, 4 * per_launch, 4 * per_launch, "float32",
                   [[n_trainable]], phase="optimizer")
        tracer.records[next(reversed(tracer.records))]["count"] = launches
    records = [OpRecord(**r) for r in tracer.records.values()]
    activation_bytes = int(sum(b for _, b in saved.values()))
    inputs_desc = [f"{'x'.join(str(int(s)) for s in t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in flat_inputs]
    notes = []
    if tracer.unsupported:
        notes.append("operators without a cost rule are modelled as memory-bound and widen the error band")
    return WorkloadCharacterisation(
        model=model_name, per_device_batch=batch, precision=precision, optimizer=optimizer_name, inputs=inputs_desc,
        seq_len=seq_len, image_size=image_size, memory_format="nhwc" if memory_format in ("nhwc", "channels_last") else "nchw",
        records=records, parameters=int(n_params),
        trainable_parameters=int(n_trainable), parameter_tensors=len(params), parameter_bytes=param_bytes,
        gradient_bytes=grad_bytes, optimizer_state_bytes=opt_state, activation_bytes=activation_bytes,
        amp_weight_copy_bytes=int(tracer.amp_weight_copy_bytes), peak_temporary_bytes=int(tracer.peak_temporary_bytes),
        unsupported_ops=sorted(tracer.unsupported), trace_device=device,
        trace_seconds=round(time.perf_counter() - started, 3), torch_version=torch.__version__, notes=notes)


def unwrap_model(model: Any) -> Any:
    """The user's module under DistributedDataParallel / DataParallel / FSDP-less wrappers and torch.compile."""
    for _ in range(4):
        inner = getattr(model, "_orig_mod", None)  # torch.compile's OptimizedModule
        if inner is None and type(model).__name__ in ("DistributedDataParallel", "DataParallel"):
            inner = getattr(model, "module", None)
        if inner is None:
            return model
        model = inner
    return model


def batch_shapes_of(args: Any, kwargs: dict[str, Any] | None = None) -> Any:
    """(shape, dtype) specs of a forward call's tensor arguments (what the recorder's pre-hook keeps)."""
    import torch

    def one(v: Any) -> Any:
        if isinstance(v, torch.Tensor):
            return (tuple(int(s) for s in v.shape), str(v.dtype).replace("torch.", ""))
        if isinstance(v, (tuple, list)):
            return type(v)(one(x) for x in v)
        if isinstance(v, dict):
            return {k: one(x) for k, x in v.items()}
        return v

    if kwargs:
        return one(dict(kwargs))
    return one(tuple(args))


def detect_precision(device_type: str = "cuda") -> str:
    """The precision the current code runs at (call inside the model's forward, e.g. from a pre-hook)."""
    import torch

    try:
        if torch.is_autocast_enabled(device_type):
            dtype = torch.get_autocast_dtype(device_type)
            return "amp_bf16" if dtype == torch.bfloat16 else "amp_fp16"
    except (TypeError, RuntimeError, AttributeError):  # older signatures
        pass
    try:
        if torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
    except AttributeError:
        pass
    return "fp32"


def detect_memory_format(args: Any) -> str:
    import torch

    for v in (args if isinstance(args, (tuple, list)) else (args,)):
        if isinstance(v, torch.Tensor) and v.dim() == 4:
            return "nhwc" if v.is_contiguous(memory_format=torch.channels_last) and not v.is_contiguous() else "nchw"
    return "nchw"


# Models up to this size are traced for real on the CPU when the meta trace fails (seconds, < 1 GB).
CPU_TRACE_MAX_PARAMETERS = 50_000_000


def trace_training_step(model: Any, batch_shapes: Any, *, precision: str = "fp32", optimizer_name: str = "sgd_momentum",
                        model_name: str | None = None, memory_format: str = "nchw") -> WorkloadCharacterisation | None:
    """The profiler's entry point: characterise a live model from the shapes/dtypes of its first batch.

    `batch_shapes` is what the recorder captured in a forward pre-hook (`batch_shapes_of(args, kwargs)`):
    (shape, dtype) pairs (or the tensors themselves), a tuple for positional inputs or a dict for
    keyword inputs. The live model is never modified or copied in memory: a meta copy (parameters
    replaced by meta tensors through deepcopy's memo) is traced. Wrappers (DDP, torch.compile) are
    unwrapped. Returns None instead of raising, so a model the tracer cannot handle never breaks a
    profile (the reason is issued as a RuntimeWarning).
    """
    import warnings

    inner = unwrap_model(model)
    name = model_name or type(inner).__name__
    try:
        return characterise_model(inner, batch_shapes, None, optimizer_name, precision,
                                  model_name=name, memory_format=memory_format)
    except Exception as exc:  # noqa: BLE001 - a profile must survive a failed characterisation
        meta_error = exc
    # A forward that needs real values (HF models call .item() on masks, data-dependent shapes)
    # cannot run on meta: run the step for real on the CPU when the model is small enough for that
    # to take seconds (random inputs, integer inputs in {0, 1}; the live model is not touched).
    parameters = sum(p.numel() for p in inner.parameters())
    if parameters <= CPU_TRACE_MAX_PARAMETERS:
        try:
            char = characterise_model(inner, batch_shapes, None, optimizer_name, precision, model_name=name,
                                      memory_format=memory_format, device="cpu")
            char.notes.append(f"traced on the CPU with random inputs: the meta trace failed ({meta_error})")
            return char
        except Exception as exc:  # noqa: BLE001
            meta_error = exc
    warnings.warn(f"trainwise: workload characterisation skipped: {meta_error}", RuntimeWarning, stacklevel=2)
    return None


# ------------------------------------------------------------------------------------------------
# named models: torchvision builders, hf: configs, trainwise reference workloads
# ------------------------------------------------------------------------------------------------

# Input resolution of torchvision builders that do not train at 224x224 by default.
_TORCHVISION_SIZES = {"inception_v3": 299, "efficientnet_b1": 240, "efficientnet_b2": 260, "efficientnet_b3": 300,
                      "efficientnet_b4": 380, "efficientnet_b5": 456, "efficientnet_b6": 528, "efficientnet_b7": 600,
                      "efficientnet_v2_s": 384, "efficientnet_v2_m": 480, "efficientnet_v2_l": 480}

# Reference workloads: input spec per sample (shape, dtype, "index", high) and optimizer (the seeds').
_WORKLOAD_INPUTS: dict[str, tuple[tuple[int, ...], str, int]] = {
    "mnist_cnn": ((1, 28, 28), "float32", 0),
    "seismic_fcn": ((1, 64, 64), "float32", 0),
    "resnet50_cifar10": ((3, 32, 32), "float32", 0),
    "inceptionv3_dr": ((3, 256, 256), "float32", 0),
    "nn_twins_mlp": ((5,), "float32", 0),
    "rnn_sa_lstm": ((300,), "int64", 20_000),
}
_WORKLOAD_OPTIMIZERS = {"mnist_cnn": "adadelta", "seismic_fcn": "sgd_momentum", "resnet50_cifar10": "sgd_momentum",
                        "inceptionv3_dr": "adam", "nn_twins_mlp": "rmsprop_momentum", "rnn_sa_lstm": "adam"}


# Published benchmark models that torchvision has no builder name for, built from its classes.
_EXTRA_BUILDERS: dict[str, Callable[[], Any]] = {}


def _resnext101_32x4d() -> Any:
    from torchvision.models.resnet import Bottleneck, ResNet

    return ResNet(Bottleneck, [3, 4, 23, 3], groups=32, width_per_group=4)


_EXTRA_BUILDERS["resnext101_32x4d"] = _resnext101_32x4d  # NVIDIA DeepLearningExamples' ResNeXt101-32x4d


def _ncf() -> Any:
    """NVIDIA DeepLearningExamples' NCF (NeuMF) on MovieLens-20m: 138,493 users, 26,744 items,
    GMF factors 64, MLP layers 256-256-128-64 (DLE defaults: --factors 64 --layers 256 256 128 64)."""
    import torch
    from torch import nn

    class NeuMF(nn.Module):
        def __init__(self, users: int = 138_493, items: int = 26_744, factors: int = 64,
                     layers: tuple[int, ...] = (256, 256, 128, 64)) -> None:
            super().__init__()
            self.mf_user, self.mf_item = nn.Embedding(users, factors), nn.Embedding(items, factors)
            self.mlp_user, self.mlp_item = nn.Embedding(users, layers[0] // 2), nn.Embedding(items, layers[0] // 2)
            self.mlp = nn.Sequential(*[m for a, b in zip(layers, layers[1:]) for m in (nn.Linear(a, b), nn.ReLU())])
            self.final = nn.Linear(factors + layers[-1], 1)

        def forward(self, user: Any, item: Any) -> Any:
            mf = self.mf_user(user) * self.mf_item(item)
            mlp = self.mlp(torch.cat([self.mlp_user(user), self.mlp_item(item)], dim=1))
            return self.final(torch.cat([mf, mlp], dim=1)).squeeze(-1)

    return NeuMF()


def _bce_loss(out: Any) -> Any:
    import torch.nn.functional as F

    return F.binary_cross_entropy_with_logits(out, out.detach())


# Non-image models: name -> (builder, inputs(batch), loss, default optimizer)
_EXTRA_MODELS: dict[str, tuple[Callable[[], Any], Callable[[int], Any], Callable[[Any], Any] | None, str]] = {
    "ncf": (_ncf, lambda b: (((b,), "int64", "index", 26_744), ((b,), "int64", "index", 26_744)), _bce_loss, "adam"),
}


def _build_torchvision(name: str) -> Any:
    import torchvision

    if name in _EXTRA_BUILDERS:
        return _EXTRA_BUILDERS[name]()
    available = set(torchvision.models.list_models(module=torchvision.models))
    if name not in available:
        return None
    kwargs: dict[str, Any] = {"weights": None}
    if name == "inception_v3":
        kwargs.update(aux_logits=True, init_weights=False)
    if name == "googlenet":
        kwargs.update(aux_logits=False, init_weights=False)
    return torchvision.models.get_model(name, **kwargs)


def model_kinds() -> dict[str, str]:
    """Names `characterise_named` understands, by kind (for error messages and `--help`)."""
    from trainwise.predict import hf_models
    from trainwise.workloads import workload_names

    return {"workload": ", ".join(workload_names()), "hf": ", ".join(f"hf:{n}" for n in hf_models.config_names()),
            "torchvision": "any torchvision.models builder name (resnet50, convnext_large, inception_v3, vit_b_16, ...)"}


MEMORY_FORMATS = {"nchw": "nchw", "channels_first": "nchw", "contiguous": "nchw", "nhwc": "nhwc", "channels_last": "nhwc"}


def normalise_memory_format(value: str) -> str:
    """"nchw" or "nhwc" from any of MEMORY_FORMATS' spellings (any case)."""
    layout = MEMORY_FORMATS.get(str(value).strip().lower())
    if layout is None:
        raise TrainwiseError(f"unknown memory format {value!r} (--memory-format): use nchw or nhwc (channels_last)")
    return layout


def characterise_named(model_name: str, per_device_batch: int, precision: str = "fp32", seq_len: int | None = None,
                       *, image_size: int | None = None, optimizer: str | None = None, task: str | None = None,
                       num_classes: int | None = None, memory_format: str = "nchw") -> WorkloadCharacterisation:
    """Build `model_name` directly on the meta device and characterise one training step.

    `model_name` is a torchvision builder (`resnet50`, `convnext_large`), a Hugging Face config
    prefixed `hf:` (`hf:roberta-base`, from the configs packaged in trainwise/predict/data/hf_configs,
    or a path to a config.json after `hf:`), or a trainwise reference workload (`resnet50_cifar10`).
    """
    layout = normalise_memory_format(memory_format)
    check_step_options(seq_len, image_size, task)
    args = (str(model_name).strip(), int(per_device_batch), normalise_precision(precision), seq_len, image_size,
            optimizer, task, num_classes, layout)
    path = _disk_cache_path(args)
    if path is not None and path.is_file():
        try:
            return WorkloadCharacterisation.model_validate_json(path.read_text(encoding="utf-8"))
        except Exception:  # a stale or truncated cache entry is simply rebuilt
            pass
    char = _characterise_named_cached(*args)
    if path is not None:
        try:
            char.save(path)
        except OSError:
            pass
    return char


def _disk_cache_path(args: tuple) -> Path | None:
    """Cache of named characterisations (they are deterministic for a torch/trainwise version).

    $TRAINWISE_CACHE_DIR or ~/.cache/trainwise; TRAINWISE_NO_CACHE=1 disables it.
    """
    import hashlib

    root = cache_root()
    if root is None:
        return None
    if str(args[0]).startswith("hf:") and str(args[0]).endswith(".json"):
        return None  # a user config file may change under the same name
    try:
        import torch

        from trainwise import __version__
    except Exception:  # pragma: no cover
        return None
    root = root / "characterisations"
    key = json.dumps([list(map(str, args)), torch.__version__, __version__, _tracer_digest()])
    return root / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".json")


@lru_cache(maxsize=1)
def _tracer_digest() -> str:
    """A digest of the tracer's and the model builders' source: any change to how a step is traced
    or built invalidates the cache (a hand-bumped revision number was forgotten once)."""
    import hashlib

    from trainwise.predict import hf_models

    digest = hashlib.sha256()
    for module_file in (__file__, hf_models.__file__):
        try:
            digest.update(Path(module_file).read_bytes())
        except OSError:
            digest.update(str(module_file).encode())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=64)
def _characterise_named_cached(model_name: str, batch: int, precision: str, seq_len: int | None,
                               image_size: int | None, optimizer: str | None, task: str | None,
                               num_classes: int | None, memory_format: str = "nchw") -> WorkloadCharacterisation:
    char = _characterise_named_uncached(model_name, batch, precision, seq_len, image_size, optimizer, task, num_classes)
    return char.model_copy(update={"memory_format": memory_format}) if memory_format != char.memory_format else char


@dataclass(frozen=True)
class NamedStep:
    """One training step of a named model, described once for both tracing and measuring it.

    `build()` returns the nn.Module (call it under `torch.device("meta")` to allocate nothing),
    `inputs` is the per-device batch as `_materialise_inputs` specs, `loss` maps the output to a
    scalar (None: `_default_loss`), `optimizer` is an OPTIMIZER_STATE key. The characteriser traces
    exactly this step on meta; `trainwise.predict.measure` runs exactly this step on a real device.
    """

    model_name: str
    per_device_batch: int
    build: Callable[[], Any]
    inputs: Any
    loss: Callable[[Any], Any] | None
    optimizer: str
    seq_len: int | None = None
    image_size: int | None = None


def check_step_options(seq_len: int | None, image_size: int | None, task: str | None) -> None:
    """Refuse a sequence length, image size or hf: head that no step can have (before a cache lookup
    or a trace): `seq_len or 512` would take 0 for "not given", a negative size fails deep in torch."""
    for value, what in ((seq_len, "sequence length (--seq-len)"), (image_size, "image size (--image-size)")):
        if value is not None and value < 1:
            raise TrainwiseError(f"the {what} must be a positive whole number (got {value})")
    if task is not None:
        from trainwise.predict import hf_models

        hf_models.task_of({}, task)


def named_step(model_name: str, batch: int, seq_len: int | None = None, image_size: int | None = None,
               optimizer: str | None = None, task: str | None = None) -> NamedStep:
    """The training step of a torchvision builder, an hf: config or a trainwise reference workload."""
    if batch <= 0:
        raise TrainwiseError(f"per-device batch must be positive (got {batch})")
    check_step_options(seq_len, image_size, task)
    if model_name.startswith("hf:"):
        from trainwise.predict import hf_models

        config = hf_models.load_config(model_name[3:])
        head = hf_models.task_of(config, task)
        # 512 unless the model has fewer positions (a user config.json); a given length must fit them:
        # the one check that predicting, characterising, measuring and calibrating all pass through
        seq = int(seq_len or min(512, hf_models.max_seq_len(config) or 512))
        hf_models.check_seq_len(model_name, config, seq)
        inputs = ((batch, seq), "int64", "index", int(config.get("vocab_size", 30522)))
        return NamedStep(model_name, batch, lambda: hf_models.build(config, task=head), inputs,
                         hf_models.loss_for(head), optimizer or "adamw", seq_len=seq)
    from trainwise.workloads import WORKLOADS

    if model_name in _EXTRA_MODELS:
        builder, inputs_of, loss, default_opt = _EXTRA_MODELS[model_name]
        return NamedStep(model_name, batch, builder, inputs_of(batch), loss, optimizer or default_opt)
    if model_name in WORKLOADS:
        spec = WORKLOADS[model_name]
        shape, dtype, high = _WORKLOAD_INPUTS.get(model_name, (tuple(spec.hyperparameters.get("input_shape", ())), "float32", 0))
        if not shape:
            raise TrainwiseError(f"workload {model_name} does not declare its input shape")
        return NamedStep(model_name, batch, lambda: importlib.import_module(spec.module).build_model(),
                         ((batch, *shape), dtype, "index", high), _workload_loss(model_name),
                         optimizer or _WORKLOAD_OPTIMIZERS.get(model_name, "sgd_momentum"),
                         image_size=shape[-1] if len(shape) == 3 else None)
    from trainwise.optional import require

    torchvision = require("torchvision", f"characterising {model_name} (a torchvision model)")

    if model_name not in _EXTRA_BUILDERS and model_name not in torchvision.models.list_models(module=torchvision.models):
        import difflib

        from trainwise.predict import hf_models
        from trainwise.workloads import workload_names

        candidates = list(torchvision.models.list_models(module=torchvision.models)) + list(_EXTRA_BUILDERS) + list(_EXTRA_MODELS) + workload_names() + [
            f"hf:{n}" for n in hf_models.config_names()]
        near = difflib.get_close_matches(model_name, candidates, n=3, cutoff=0.6)
        hint = f"did you mean {', '.join(near)}?" if near else "use a torchvision builder name, hf:<config> or a trainwise workload"
        raise TrainwiseError(f"unknown model {model_name!r}: {hint}")
    size = int(image_size or _TORCHVISION_SIZES.get(model_name, 224))
    loss = _inception_loss if model_name == "inception_v3" else None
    return NamedStep(model_name, batch, lambda: _build_torchvision(model_name), ((batch, 3, size, size), "float32"), loss,
                     optimizer or "sgd_momentum", image_size=size)


def _characterise_named_uncached(model_name: str, batch: int, precision: str, seq_len: int | None,
                                 image_size: int | None, optimizer: str | None, task: str | None,
                                 num_classes: int | None) -> WorkloadCharacterisation:
    import torch

    step = named_step(model_name, batch, seq_len, image_size, optimizer, task)
    with torch.device("meta"):
        try:
            model = step.build()
        except TrainwiseError:
            raise
        except Exception as exc:
            raise TrainwiseError(f"building model {model_name!r} failed: {exc}") from None
    return characterise_model(model, step.inputs, step.loss, step.optimizer, precision, model_name=model_name,
                              per_device_batch=batch, seq_len=step.seq_len, image_size=step.image_size, copy_model=False)


def _inception_loss(output: Any) -> Any:
    logits = output[0] if isinstance(output, (tuple, list)) else getattr(output, "logits", output)
    aux = output[1] if isinstance(output, (tuple, list)) and len(output) > 1 else getattr(output, "aux_logits", None)
    loss = _default_loss(logits)
    if aux is not None:
        loss = loss + 0.4 * _default_loss(aux)
    return loss


def _workload_loss(name: str) -> Callable[[Any], Any] | None:
    import torch.nn.functional as F

    if name == "rnn_sa_lstm":
        return lambda out: F.binary_cross_entropy_with_logits(out, out.detach())
    if name == "seismic_fcn":
        def seg_loss(out: Any) -> Any:
            import torch

            target = torch.empty((out.shape[0], *out.shape[2:]), dtype=torch.long, device=out.device)
            if target.device.type != "meta":
                target.zero_()  # a real step (trainwise.predict.measure) needs valid class indices
            return F.cross_entropy(out, target)
        return seg_loss
    return None


def characterisation_to_json(char: WorkloadCharacterisation) -> str:
    return json.dumps(char.model_dump(mode="json"))
