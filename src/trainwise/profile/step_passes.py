"""How many forward/backward passes of the traced input one optimizer step runs, from what the recorder counted.

The trace covers one pass of the model on the input it first saw; a step may run several in sequence: gradient
accumulation without a DataLoader (nanoGPT's micro-steps), a closure optimizer's evaluations (LBFGS), a policy
called once per action before one backward (REINFORCE, actor-critic). The device model must see them all (a GPU
runs each pass's kernels again), so the characterisation is repeated that many times (`with_passes`); with a
DataLoader, its batches per step are the passes (gradient accumulation), or a closure's evaluations of each batch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StepPasses:
    passes: int
    forwards_per_backward: float
    new_samples: bool  # each pass on other samples (not a closure's evaluations of one batch)
    source: str  # how they were counted, for the profile's note


def _median_of_tally(tally: dict[str, int]) -> float | None:
    counts = sorted((int(calls), int(n)) for calls, n in tally.items() if int(n) > 0 and int(calls) > 0)
    total = sum(n for _, n in counts)
    if not total:
        return None
    # the median of the iterations' counts without listing one value per iteration (a --full run holds millions)
    lower, upper, seen = None, None, 0
    for calls, n in counts:
        seen += n
        if lower is None and seen >= (total + 1) // 2:
            lower = calls
        if seen >= total // 2 + 1:
            upper = calls
            break
    return (lower + upper) / 2


def step_passes(raw: dict[str, Any], iterations: Any, loader_batches: bool) -> StepPasses | None:
    """The passes per optimizer step (None when one): the model's training calls per iteration without a training
    DataLoader; with one, its batches per iteration, or a closure optimizer's backward passes per batch. Medians over the iterations after the
    first (the recorder counts calls from the second on)."""
    backwards = [n for n in list(iterations.column("backward_passes"))[1:] if n]
    closure = (raw.get("model") or {}).get("closure_evaluation_cap") is not None
    if not loader_batches:
        forwards = _median_of_tally(raw.get("forward_passes") or {})
        if forwards is None or round(forwards) < 2:
            return None
        per_backward = forwards / statistics.median(backwards) if backwards else 1.0
        return StepPasses(int(round(forwards)), max(1.0, per_backward), not closure,
                          "the closure's model calls per optimizer step" if closure else
                          "the model's training calls per optimizer step")
    batches = list(iterations.column("batches"))[1:]
    if not closure:
        # gradient accumulation: each of the step's batches is a pass (the trace is one of them)
        per_step = statistics.median([n for n in batches if n]) if any(batches) else 1
        if round(per_step) < 2:
            return None
        return StepPasses(int(round(per_step)), 1.0, True, "the DataLoader's batches per optimizer step")
    per_batch = [b / n for b, n in zip(list(iterations.column("backward_passes"))[1:], batches) if b and n]
    if not per_batch or round(statistics.median(per_batch)) < 2:
        return None
    return StepPasses(int(round(statistics.median(per_batch))), 1.0, False, "the closure's backward passes per batch")
