"""The optimizer step's cost per parameter, by optimizer: the tracer models the step analytically
(a GPU runs it as a few multi-tensor kernels, not the per-parameter loop meta tensors would take)."""

from __future__ import annotations

from typing import Any

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
