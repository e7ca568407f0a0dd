"""What the recorder reads off the live training process for the trace: the model under its wrappers,
the first batch's shapes and dtypes, the precision and memory format it runs at."""

from __future__ import annotations

from typing import Any


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


def model_input_of_batch(batch: Any) -> Any:
    """The input specs a model is likely called with on a DataLoader batch (when its calls cannot be seen): the
    batch if a tensor, the first tensor of a tuple or list ((inputs, targets)), a dict's tensors as keyword inputs;
    None without a tensor."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch_shapes_of((batch,))
    if isinstance(batch, (tuple, list)):
        first = next((item for item in batch if isinstance(item, torch.Tensor)), None)
        return batch_shapes_of((first,)) if first is not None else None
    if isinstance(batch, dict):
        tensors = {key: value for key, value in batch.items() if isinstance(value, torch.Tensor)}
        return batch_shapes_of((), tensors) if tensors else None
    return None


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
