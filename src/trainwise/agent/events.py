"""Typed events the torch patches emit, and the bus that hands them to subscribers.

Times are seconds on the agent's clock (time since the launcher started the process). A subscriber is
any callable taking one event; it is called synchronously, in subscription order, in the thread that
produced the event, and must be cheap: it runs inside the user's training step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Union


@dataclass(frozen=True)
class ModelForward:
    """The model (the module owning the most parameters) was called."""
    t_s: float
    grad_enabled: bool
    training: bool


@dataclass(frozen=True)
class BackwardEnd:
    """A backward pass ended; `reaches_parameters` when its graph reaches a trainable nn.Parameter."""
    t_s: float
    reaches_parameters: bool


@dataclass(frozen=True)
class OptimizerBuilt:
    t_s: float
    optimizer_id: int


@dataclass(frozen=True)
class OptimizerStep:
    t_s: float
    optimizer_id: int


@dataclass(frozen=True)
class IterationEnd:
    """One training iteration ended (from whichever source delimits iterations in this process)."""
    t_s: float
    index: int
    source: str  # "optimizer", "autograd", "explicit", "framework"


@dataclass(frozen=True)
class CheckpointSave:
    t_s: float
    path: str | None


@dataclass(frozen=True)
class ProcessExit:
    t_s: float
    status: Any = None


Event = Union[ModelForward, BackwardEnd, OptimizerBuilt, OptimizerStep, IterationEnd, CheckpointSave, ProcessExit]
Subscriber = Callable[[Event], None]


class EventBus:
    """Hands each event to every subscriber. A subscriber that raises is dropped with a note: the
    user's training must never fail because an observer did."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self.notes: list[str] = []

    def subscribe(self, subscriber: Subscriber) -> Subscriber:
        self._subscribers.append(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        if subscriber in self._subscribers:
            self._subscribers.remove(subscriber)

    def emit(self, event: Event) -> None:
        for subscriber in list(self._subscribers):
            try:
                subscriber(event)
            except Exception as exc:  # noqa: BLE001 - an observer's bug must not break the job
                self.unsubscribe(subscriber)
                self.notes.append(f"agent subscriber {getattr(subscriber, '__qualname__', subscriber)!r} "
                                  f"dropped after it failed: {exc!r}")
