"""Random-number-generator states: capture and restore Python's, NumPy's and torch's (CPU and CUDA).

Captured as tensors, numbers and tuples only, so a checkpoint holding them loads with
`torch.load(weights_only=True)` (NumPy's key array is kept as an int64 tensor, not an ndarray)."""

from __future__ import annotations

import random
from typing import Any


def capture_rng() -> dict[str, Any]:
    import torch

    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    try:
        import numpy as np

        kind, keys, position, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
        state["numpy"] = (str(kind), torch.from_numpy(keys.astype(np.int64)), int(position), int(has_gauss),
                          float(cached_gaussian))
    except ImportError:  # pragma: no cover - numpy is a core dependency
        pass
    if torch.cuda.is_initialized():  # is_available would init CUDA in a CPU job
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def apply_rng(state: dict[str, Any]) -> None:
    import torch

    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    if "numpy" in state:
        import numpy as np

        kind, keys, position, has_gauss, cached_gaussian = state["numpy"]
        np.random.set_state((kind, np.asarray(keys.numpy() if hasattr(keys, "numpy") else keys, dtype=np.uint32),
                             position, has_gauss, cached_gaussian))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def generator_states(loader: Any) -> list[Any]:
    """States of the torch.Generators a DataLoader shuffles with (its own and its sampler's)."""
    states = []
    for generator in _generators(loader):
        states.append(generator.get_state())
    return states


def apply_generator_states(loader: Any, states: list[Any]) -> None:
    for generator, state in zip(_generators(loader), states):
        generator.set_state(state)


def _generators(loader: Any) -> list[Any]:
    seen: list[Any] = []
    for owner in (loader, getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
        generator = getattr(owner, "generator", None)
        if generator is not None and all(generator is not g for g in seen):
            seen.append(generator)
    return seen
