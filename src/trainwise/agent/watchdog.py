"""A script in which no training iteration is seen is told so within seconds, not after its whole run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

DEFAULT_NO_ITERATION_LIMIT_S = 30.0


class NoIterationWatchdog:
    """Calls `on_expired()` once, `limit_s` seconds after `start()`, unless `has_iterations()` is true by
    then. A daemon thread: it never keeps the process alive."""

    def __init__(self, limit_s: float, has_iterations: Callable[[], bool], on_expired: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.25) -> None:
        self.limit_s = limit_s
        self.has_iterations = has_iterations
        self.on_expired = on_expired
        self.clock = clock
        self.poll_s = poll_s
        self.started_s: float | None = None
        self.expired = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self.started_s is not None or self.limit_s <= 0:
            return
        self.started_s = self.clock()
        self._thread = threading.Thread(target=self._watch, name="trainwise-no-iteration-watchdog", daemon=True)
        self._thread.start()

    def check(self) -> bool:
        """True (once the callback has run) when the limit passed without an iteration."""
        if self.expired or self.started_s is None or self.has_iterations():
            return self.expired
        if self.clock() - self.started_s >= self.limit_s:
            self.expired = True
            self.on_expired()
        return self.expired

    def _watch(self) -> None:
        while not self.has_iterations() and not self.expired:
            if self.check():
                return
            time.sleep(self.poll_s)
