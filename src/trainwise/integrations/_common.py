"""What the framework callbacks share besides the sink they report to (trainwise.agent.sink; the profile's is
trainwise.profile.framework_sink): reading dtypes and batch sizes without importing a framework."""

from __future__ import annotations

from typing import Any


def dtype_name(dtype: Any) -> str:
    """'float32' for torch.float32, numpy float32, 'float32' strings and Keras variable dtypes."""
    return str(dtype).replace("torch.", "").replace("<dtype: '", "").replace("'>", "")


def dtype_bytes(dtype: Any) -> int:
    name = dtype_name(dtype)
    for token, size in (("64", 8), ("32", 4), ("16", 2), ("8", 1)):
        if token in name:
            return size
    return 4
