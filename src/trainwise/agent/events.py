"""Typed events the torch patches emit, and the bus that hands them to subscribers.

Times are seconds on the agent's clock (time since the launcher started the process). A subscriber is
any callable taking one event; it is called synchronously, in subscription order, in the thread that
produced the event, and must be cheap: it runs inside the user's training step.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Union

# Events that carry the object they are about (a module, an optimizer) hold it only while subscribers run:
# a subscriber that keeps it must keep a weak reference (the agent must not keep the user's objects alive).
_OBJECT = dict(default=None, compare=False, repr=False)


@dataclass(slots=True)  # emitted every iteration: no frozen __setattr__ cost
class ModelForward:
    """The model (the module owning the most parameters) was called."""
    t_s: float
    grad_enabled: bool
    training: bool


@dataclass(slots=True)  # emitted every iteration: no frozen __setattr__ cost
class BackwardEnd:
    """A backward pass ended; `reaches_parameters` when its graph reaches a trainable nn.Parameter."""
    t_s: float
    reaches_parameters: bool


@dataclass(frozen=True)
class TorchImportStarted:
    t_s: float


@dataclass(frozen=True)
class TorchImported:
    """The script's `import torch` completed and the agent's patches are in place."""
    t_s: float


@dataclass(frozen=True)
class ModuleBuilt:
    """An nn.Module's __init__ begins (every module, submodules included)."""
    t_s: float
    module: Any = field(**_OBJECT)


@dataclass(frozen=True)
class LoaderBuilt:
    """A DataLoader's __init__ begins."""
    t_s: float


@dataclass(frozen=True)
class LoaderIteratorBuilt:
    """A DataLoader iterator was built (a pass begins at its first batch request)."""
    t_s: float
    iterator: Any = field(**_OBJECT)
    loader: Any = field(**_OBJECT)


@dataclass(frozen=True)
class OptimizerBuilding:
    """An optimizer's __init__ begins (the first pays torch's lazy imports)."""
    t_s: float


@dataclass(frozen=True)
class OptimizerBuilt:
    t_s: float
    optimizer_id: int
    optimizer: Any = field(**_OBJECT)


@dataclass(frozen=True)
class OptimizerStateLoad:
    """optimizer.load_state_dict() is called; `caller` is the calling frame (who loads: the script, accelerate)."""
    t_s: float
    optimizer: Any = field(**_OBJECT)
    caller: Any = field(**_OBJECT)


@dataclass(slots=True)  # emitted every iteration: no frozen __setattr__ cost
class OptimizerStep:
    """An optimizer step ended. Inside GradScaler.step (`in_scaler_step`), the scaler's own event follows
    when it returns (`via_scaler`: it may have skipped the step on inf/NaN gradients); count one of the two."""
    t_s: float
    optimizer_id: int
    optimizer: Any = field(**_OBJECT)
    in_scaler_step: bool = False
    via_scaler: bool = False


@dataclass(frozen=True)
class SchedulerBuilt:
    t_s: float
    scheduler: Any = field(**_OBJECT)


@dataclass(frozen=True)
class ScalerBuilt:
    t_s: float
    scaler: Any = field(**_OBJECT)


@dataclass(frozen=True)
class TrainModeSet:
    """The outermost Module.train(mode) call returned (eval() is train(False))."""
    t_s: float
    training: bool


@dataclass(frozen=True)
class DdpBuilt:
    """A DistributedDataParallel wrapper was built."""
    t_s: float
    module: Any = field(**_OBJECT)


@dataclass(frozen=True)
class BucketReady:
    """DDP: a gradient bucket is ready and its all-reduce starts (wall clock: ranks compare their times)."""
    wall_s: float
    index: int
    nbytes: int
    last: bool = False


@dataclass(frozen=True)
class BucketReduced:
    """DDP: a gradient bucket's all-reduce completed."""
    wall_s: float
    index: int


@dataclass(frozen=True)
class HivemindRound:
    """Hivemind: one global-epoch update (the collaboration's step) ran; `blocking_s` of it held training."""
    epoch: int
    start_wall_s: float
    end_wall_s: float
    peers: int


@dataclass(frozen=True)
class HivemindAveraging:
    """Hivemind: one gradient-averaging round; `averaged` False when the peer stepped on its own gradients."""
    start_wall_s: float
    end_wall_s: float
    group: bool
    averaged: bool


@dataclass(slots=True)  # emitted every iteration: no frozen __setattr__ cost
class IterationEnd:
    """One training iteration ended (from whichever source delimits iterations in this process)."""
    t_s: float
    index: int
    source: str  # "optimizer", "autograd", "explicit", "framework"


@dataclass(frozen=True)
class CheckpointSave:
    """torch.save to a path (or a framework's checkpoint, reported through trainwise.agent.sink)."""
    t_s: float
    path: str | None


@dataclass(frozen=True)
class CheckpointLoad:
    t_s: float
    path: str | None


@dataclass(slots=True)  # emitted every iteration: no frozen __setattr__ cost
class IterationBoundary:
    """The training DataLoader's next batch request: the previous iteration (optimizer step, scheduler
    step, zero_grad) is complete. `global_batches`: training batches consumed so far in this run."""
    t_s: float
    global_batches: int


@dataclass(frozen=True)
class SigtermReceived:
    """The process was asked to stop (preemption, a time limit): subscribers save what they must."""
    t_s: float


@dataclass(frozen=True)
class AcceleratorQueried:
    """The job asked torch whether (or which) accelerator it has (`query`, e.g. torch.cuda.is_available), first from
    `caller` (file:line): it would use one where there is one (trainwise.agent.accelerator_queries)."""
    t_s: float
    query: str
    caller: str


@dataclass(frozen=True)
class ProcessExit:
    t_s: float
    status: Any = None


Event = Union[ModelForward, BackwardEnd, TorchImportStarted, TorchImported, ModuleBuilt, LoaderBuilt, LoaderIteratorBuilt,
              OptimizerBuilding, OptimizerBuilt, OptimizerStateLoad, OptimizerStep, SchedulerBuilt, ScalerBuilt,
              TrainModeSet, DdpBuilt, BucketReady, BucketReduced, HivemindRound, HivemindAveraging, IterationEnd,
              CheckpointSave, CheckpointLoad, IterationBoundary, SigtermReceived, AcceleratorQueried, ProcessExit]
Subscriber = Callable[[Event], None]


# What a subscriber returns to be taken off the bus: one with nothing left to decide costs the job nothing more
UNSUBSCRIBE = object()


class EventBus:
    """Hands each event to the subscribers that take its type. A subscriber that raises is dropped with
    a note: the user's training must never fail because an observer did."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        # Subscribers whose failure is the job's (a checkpoint that cannot be written must not pass silently)
        self._strict: set[int] = set()
        self._event_types: dict[int, tuple[type, ...] | None] = {}
        # Per event type, the subscribers that take it: built on first use (events fire every iteration); read-only
        # outside, a type absent is not built yet (an emitter on every step may skip an event no one takes)
        self.targets: dict[type, tuple[Subscriber, ...]] = {}
        self.notes: list[str] = []

    def subscribe(self, subscriber: Subscriber, *, strict: bool = False,
                  events: tuple[type, ...] | None = None) -> Subscriber:
        """Add `subscriber`; with `strict`, an exception it raises propagates to the code that emitted the
        event (the user's training step) instead of dropping it. `events` (default: the subscriber's
        `event_types` attribute, else every event) are the event types it is handed."""
        self._subscribers.append(subscriber)
        self._event_types[id(subscriber)] = events if events is not None else getattr(subscriber, "event_types", None)
        if strict:
            self._strict.add(id(subscriber))
        self.targets.clear()
        return subscriber

    @contextlib.contextmanager
    def muted(self) -> Iterator[None]:
        """No subscriber hears what is emitted inside: the observer's own probes (a copy of the job's optimizer
        stepped to time it) are not the job's iterations."""
        saved, self._subscribers = self._subscribers, []
        self.targets.clear()
        try:
            yield
        finally:
            self._subscribers = saved + self._subscribers
            self.targets.clear()

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)
            self._event_types.pop(id(subscriber), None)
            self.targets.clear()

    def _targets_of(self, kind: type) -> tuple[Subscriber, ...]:
        targets = tuple(s for s in self._subscribers
                        if (wanted := self._event_types.get(id(s))) is None or issubclass(kind, wanted))
        self.targets[kind] = targets
        return targets

    def emit(self, event: Event) -> None:
        targets = self.targets.get(type(event))
        if targets is None:
            targets = self._targets_of(type(event))
        for subscriber in targets:
            try:
                if subscriber(event) is UNSUBSCRIBE:
                    self.unsubscribe(subscriber)
            except Exception as exc:  # noqa: BLE001 - an observer's bug must not break the job
                if id(subscriber) in self._strict:
                    raise
                self.unsubscribe(subscriber)
                self.notes.append(f"agent subscriber {getattr(subscriber, '__qualname__', subscriber)!r} "
                                  f"dropped after it failed: {exc!r}")
