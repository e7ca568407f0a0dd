"""Which kind of kernel each ATen operator is (the device model's categories), which operators cost
nothing, and the casting policy of torch.autocast, which the tracer simulates on the meta device."""

from __future__ import annotations

from typing import Any


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
FREE_OPS = _aten_names("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "unsafe_split",
                    "unsafe_split_with_sizes", "unsafe_chunk", "split", "split_with_sizes", "chunk", "unbind", "_local_scalar_dense", "detach", "detach_",
                    "lift_fresh", "lift_fresh_copy", "set_", "resize_", "_resize_output_", "sym_size", "sym_numel",
                    "sym_stride", "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type",
                    "_reshape_alias", "alias", "_version", "record_stream", "is_nonzero", "_assert_async",
                    "_functional_assert_async", "_assert_tensor_metadata", "_nested_tensor_size", "set_.source_Storage",
                    "_make_dep_token", "zero_", "_unsafe_view", "unsqueeze_", "squeeze_", "as_strided_", "t_",
                    "transpose_", "resize_as_", "_propagate_xla_data", "_fused_sdp_choice")
# Autocast (torch.amp) policy, at the level of the torch / torch.nn.functional calls autocast itself
# intercepts (before composite operators decompose): these run in the low-precision dtype ...
AUTOCAST_LOW = frozenset({"linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
                           "conv_transpose3d", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "addmm", "baddbmm",
                           "addbmm", "addmv", "mv", "einsum", "scaled_dot_product_attention", "lstm", "gru",
                           "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
                           "prelu", "chain_matmul", "multi_dot", "_convolution", "convolution", "bilinear"})
# ... and these are forced to fp32.
AUTOCAST_FP32 = frozenset({"softmax", "log_softmax", "layer_norm", "group_norm", "cross_entropy", "nll_loss",
                            "mse_loss", "binary_cross_entropy_with_logits", "exp", "log", "log1p", "expm1", "pow",
                            "rsqrt", "reciprocal", "softplus", "logsumexp", "cumsum", "smooth_l1_loss", "huber_loss",
                            "l1_loss", "norm", "rms_norm", "kl_div", "cosine_similarity", "cdist", "dist"})
LOW_DTYPES = {"amp_fp16": "float16", "amp_bf16": "bfloat16"}


def category_of(name: str, func: Any) -> str:
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
