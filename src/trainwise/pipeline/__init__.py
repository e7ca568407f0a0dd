"""Input-pipeline strategy optimiser for PyTorch (PRESTO, Erben et al., SIGMOD 2022).

Split a preprocessing pipeline into an offline part (materialised once to WebDataset tar shards) and
an online part (run every epoch in a DataLoader), profile the strategies, and pick one with PRESTO's
objective, a cloud-price variant, or a keep-up-with-the-accelerator constraint.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use: the `trainwise pipeline` commands are registered with the CLI on every
# invocation, and the strategy module pulls in pandas and pydantic.
_LAZY = {"FileSource": "spec", "Pipeline": "spec", "SequenceSource": "spec", "Source": "spec", "Step": "spec",
         "StepError": "spec", "step": "spec", "Strategy": "strategy", "enumerate_strategies": "strategy"}

__all__ = ["FileSource", "Pipeline", "SequenceSource", "Source", "Step", "StepError", "step", "Strategy", "enumerate_strategies",
           "apply", "load_spec", "make_dataloader"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"trainwise.pipeline.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def apply(pipeline: Pipeline, strategy: Strategy | str, root, *, rebuild: bool = False, skip_errors: bool = False, **loader_kwargs):
    """Materialise `strategy` (resuming or reusing earlier work) and return a ready DataLoader."""
    from trainwise.pipeline.loader import make_dataloader as _make
    from trainwise.pipeline.materialise import materialise
    from trainwise.pipeline.strategy import Strategy

    chosen = Strategy.parse(strategy) if isinstance(strategy, str) else strategy
    if chosen.materialised:
        materialise(pipeline, chosen, root, rebuild=rebuild, skip_errors=skip_errors)
    return _make(pipeline, chosen, root, **loader_kwargs)


def load_spec(spec: str, **kwargs):
    from trainwise.pipeline.resolve import load_spec as _load

    return _load(spec, **kwargs)


def make_dataloader(pipeline: Pipeline, strategy: Strategy | str, root=None, **kwargs):
    from trainwise.pipeline.loader import make_dataloader as _make
    from trainwise.pipeline.strategy import Strategy

    return _make(pipeline, Strategy.parse(strategy) if isinstance(strategy, str) else strategy, root, **kwargs)
