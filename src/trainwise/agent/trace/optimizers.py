"""The optimizer step's cost per parameter, by optimizer: the tracer models the step analytically
(a GPU runs it as a few multi-tensor kernels, not the per-parameter loop meta tensors would take)."""

from __future__ import annotations

from typing import Any

from trainwise.errors import TrainwiseError

# Optimizer step per parameter: (bytes read, bytes written) per fp32 element, FLOPs per element,
# and optimizer state bytes kept per element. Read/written = the tensors one fused kernel touches
# (parameter, gradient, state buffers): torch's `fused=True` path, apex's fused optimizers.
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
# torch.optim's default on CUDA tensors is the foreach path (`_default_to_fused_or_foreach`): one multi-tensor
# kernel per `torch._foreach_*` call of its `_multi_tensor_<name>` function, each streaming whole tensors, so the
# step moves several times the fused traffic. (read bytes, written bytes, foreach calls) per fp32 element, counted
# from those functions at their defaults (no amsgrad/nesterov/centered, AdamW's weight decay 0.01, Adam's 0; a
# tensor read twice by one call counted once; Adam: lerp_, mul_, addcmul_, sqrt, div_, add_, addcdiv_).
FOREACH_TRAFFIC: dict[str, tuple[int, int, int]] = {
    "sgd": (8, 4, 1),
    "sgd_momentum": (20, 12, 3),
    "adam": (44, 28, 7),
    "adamw": (48, 32, 8),
    "adadelta": (64, 44, 11),
    "rmsprop": (32, 20, 5),
    "rmsprop_momentum": (44, 28, 7),
    "adagrad": (32, 20, 5),
}
# `<name>_fused`: the same optimizer as one kernel per group of tensors (OPTIMIZER_STATE's traffic): torch's
# `fused=True` (SGD, Adam, AdamW), or TensorFlow's per-variable `ResourceApply*` kernels
FUSED_SUFFIX = "_fused"
for _name in FOREACH_TRAFFIC:
    OPTIMIZER_STATE[_name + FUSED_SUFFIX] = OPTIMIZER_STATE[_name]


def fused_variant(name: str) -> str:
    """The fused key of an optimizer (itself when it has no foreach path)."""
    return name + FUSED_SUFFIX if name in FOREACH_TRAFFIC else name
_OPTIMIZER_ALIASES = {"sgd_nesterov": "sgd_momentum", "momentum": "sgd_momentum", "adam_w": "adamw",
                      "lars": "sgd_momentum", "fusedadam": "adam_fused", "fusedlamb": "lamb"}


def step_traffic(name: str) -> tuple[int, int, int]:
    """(bytes read, bytes written, kernels per group of tensors) per element of one optimizer step: torch's
    foreach path unless the name is a fused one (or has no foreach path: LAMB)."""
    if name in FOREACH_TRAFFIC:
        return FOREACH_TRAFFIC[name]
    read_b, write_b, _, _ = OPTIMIZER_STATE[name]
    return read_b, write_b, 1


def normalise_optimizer(name: str | None) -> str:
    key = (name or "sgd_momentum").strip().lower().replace("-", "_")
    key = _OPTIMIZER_ALIASES.get(key, key)
    if key not in OPTIMIZER_STATE:
        raise TrainwiseError(f"unknown optimizer {name!r}: use one of {', '.join(OPTIMIZER_STATE)}")
    return key


def optimizer_name_of(optimizer: Any) -> str:
    """The OPTIMIZER_STATE key for a live torch.optim.Optimizer (used by the profiler hook); `_fused` when it
    runs torch's fused kernels."""
    cls = type(optimizer).__name__.lower()
    groups = getattr(optimizer, "param_groups", [{}])
    group = groups[0] if groups else {}
    if cls == "sgd":
        name = "sgd_momentum" if group.get("momentum", 0) else "sgd"
    elif cls == "rmsprop":
        name = "rmsprop_momentum" if group.get("momentum", 0) else "rmsprop"
    else:
        name = cls if cls in OPTIMIZER_STATE else "adam"
    return fused_variant(name) if group.get("fused") else name
