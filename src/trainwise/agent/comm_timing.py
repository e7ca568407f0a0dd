"""Subscribers that time communication: DDP's gradient all-reduce, bucket by bucket, and Hivemind's rounds.

Both read events only (trainwise.agent.events): `trainwise run`'s DDP comm hook emits BucketReady/BucketReduced
around torch's default all-reduce, and its Hivemind optimizer wrapper emits HivemindRound/HivemindAveraging.
Times are wall-clock seconds (ranks and peers compare theirs). Standard library only.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from trainwise.agent.events import (BucketReady, BucketReduced, Event, HivemindAveraging, HivemindRound,
                                    OptimizerStep)


class DdpCommTiming:
    """Subscriber: one record per optimizer step of the gradient buckets all-reduced during it.

    A record: first/last bucket ready, last reduction done, bytes, and per bucket [ready, reduced, bytes];
    `step_end_wall_s` and `iteration` (from `iteration_index()`) when the primary optimizer's step closes it.
    Steps of another optimizer (a GAN's second) do not close it; while `skip_step()` (a resumed run's
    replayed batch), a step discards what was timed. Reductions finish on torch's communication thread."""

    def __init__(self, iteration_index: Callable[[], int | None] = lambda: None,
                 skip_step: Callable[[], bool] = lambda: False, wall_clock: Callable[[], float] | None = None) -> None:
        import time

        self.iteration_index = iteration_index
        self.skip_step = skip_step
        self.wall_clock = wall_clock or time.time
        self.steps: list[dict[str, Any]] = []
        self.primary_optimizer_id: int | None = None
        self._current: dict[str, Any] | None = None
        self._in_flight: dict[int, tuple[dict[str, Any], list]] = {}
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        kind = type(event)
        if kind is BucketReady:
            self._ready(event)
        elif kind is BucketReduced:
            self._reduced(event)
        elif kind is OptimizerStep and not event.in_scaler_step:
            self._step(event)

    def _ready(self, event: BucketReady) -> None:
        with self._lock:
            record = self._current
            if record is None:
                record = self._current = {"first_ready_wall_s": event.wall_s, "last_ready_wall_s": event.wall_s,
                                          "done_wall_s": event.wall_s, "buckets": {}, "bytes": 0}
            record["last_ready_wall_s"] = event.wall_s
            record["bytes"] += event.nbytes
            span = [event.wall_s, None, event.nbytes]
            record["buckets"][str(event.index)] = span
            self._in_flight[event.index] = (record, span)

    def _reduced(self, event: BucketReduced) -> None:
        with self._lock:
            found = self._in_flight.pop(event.index, None)
            if found is None:
                return
            record, span = found
            # The record may already be closed (the step ended first): its spans still complete.
            record["done_wall_s"] = max(record["done_wall_s"], event.wall_s)
            span[1] = event.wall_s

    def _step(self, event: OptimizerStep) -> None:
        if self.skip_step():
            with self._lock:
                self._current = None
            return
        if self.primary_optimizer_id is None:
            self.primary_optimizer_id = event.optimizer_id
        elif event.optimizer_id != self.primary_optimizer_id:
            return
        with self._lock:
            record, self._current = self._current, None
        if record is not None:
            record["step_end_wall_s"] = self.wall_clock()
            record["iteration"] = self.iteration_index()
            self.steps.append(record)


class HivemindTiming:
    """Subscriber: Hivemind's global-epoch updates (`rounds`) and gradient-averaging rounds (`averaging`, also
    kept in `info["averaging"]`, the run record's Hivemind section, once there is one)."""

    def __init__(self, info: dict[str, Any] | None = None) -> None:
        self.rounds: list[dict[str, Any]] = []
        self.averaging: list[dict[str, Any]] = []
        self.info = info if info is not None else {}

    def __call__(self, event: Event) -> None:
        if isinstance(event, HivemindRound):
            self.rounds.append({"epoch": event.epoch, "start_wall_s": event.start_wall_s,
                                "end_wall_s": event.end_wall_s, "blocking_s": event.end_wall_s - event.start_wall_s,
                                "peers": event.peers})
        elif isinstance(event, HivemindAveraging):
            self.averaging.append({"start_wall_s": event.start_wall_s, "end_wall_s": event.end_wall_s,
                                   "seconds": event.end_wall_s - event.start_wall_s, "group": event.group,
                                   "averaged": event.averaged})
            self.info["averaging"] = self.averaging

    def averaged_fraction(self) -> float | None:
        """The share of averaging rounds that averaged with peers (None before any round)."""
        if not self.averaging:
            return None
        return sum(1 for entry in self.averaging if entry["averaged"]) / len(self.averaging)
