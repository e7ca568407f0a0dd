"""Epochs and validation of a loop without a DataLoader, from the model's calls.

A call of the model with gradients off or in eval mode, after training began, opens a validation
region; the next call with gradients on in train mode closes it. Without a training DataLoader (whose
exhaustion marks an epoch), the region's start ends an epoch and its end starts the next: the common
`for epoch: train(); evaluate()` loop.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from trainwise.agent.events import UNSUBSCRIBE, Event, IterationEnd, ModelForward


@dataclass
class ValidationRegion:
    start_s: float
    batch_starts_s: list[float] = field(default_factory=list)
    end_s: float | None = None
    record: dict | None = None  # what a subscriber made of it (the profile's validation record)


class EvalRegions:
    """Subscriber: validation regions (and, with `epochs_from_regions`, epoch boundaries).

    Callbacks: `on_region_start(region)` when a validation region opens, `on_region_end(region)` when
    training resumes after it. Calls before the first iteration are not validation (the loop has not
    begun training; a look at the model's output at start-up)."""

    event_types = (IterationEnd, ModelForward)  # what the bus hands it

    def __init__(self, on_region_start=None, on_region_end=None) -> None:
        self.on_region_start = on_region_start
        self.on_region_end = on_region_end
        self.iterations = 0
        self.current: ValidationRegion | None = None
        # The latest regions (a long run has one per epoch, or per iteration for a metric under no_grad)
        self.regions: deque[ValidationRegion] = deque(maxlen=64)
        self.count = 0

    def on_first_iteration(self, event: IterationEnd) -> object:
        """A subscriber of IterationEnd alone, beside the regions' own subscription to ModelForward: only the first
        iteration matters to them (training began), so it leaves the bus then and the job's later steps skip it."""
        self.iterations += 1
        return UNSUBSCRIBE

    def __call__(self, event: Event) -> None:
        if isinstance(event, IterationEnd):
            self.iterations += 1
            return
        if not isinstance(event, ModelForward) or self.iterations == 0:
            return
        evaluating = (not event.grad_enabled) or (not event.training)
        if evaluating:
            if self.current is None:
                self.current = ValidationRegion(start_s=event.t_s)
                self.regions.append(self.current)
                self.count += 1
                if self.on_region_start is not None:
                    self.on_region_start(self.current)
            self.current.batch_starts_s.append(event.t_s)
        elif self.current is not None:
            region, self.current = self.current, None
            region.end_s = event.t_s
            if self.on_region_end is not None:
                self.on_region_end(region)
