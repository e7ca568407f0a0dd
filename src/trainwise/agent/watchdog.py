"""A script in which no training iteration is seen is told so within seconds, not after its whole run.

Time the job spends compiling (torch.compile: dynamo's frame conversion, inductor's code generation) does not
count: on the 2-core VM nanoGPT's first compiled steps took over 30 s with an empty inductor cache, and the job
was stopped as one that never trains.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable

DEFAULT_NO_ITERATION_LIMIT_S = 30.0
# Files on a thread's stack only while torch.compile compiles (running compiled code passes through neither)
COMPILING_FILES = tuple(os.sep + os.path.join("torch", *parts) for parts in
                        (("_dynamo", "convert_frame.py"), ("_inductor", "compile_fx.py")))
MAX_STACK_DEPTH = 500


def a_thread_is_compiling(skip_ident: int | None = None) -> bool:
    """Some thread of this process (other than `skip_ident`) is inside torch.compile's compiler now."""
    for ident, frame in sys._current_frames().items():
        if ident == skip_ident:
            continue
        depth = 0
        while frame is not None and depth < MAX_STACK_DEPTH:
            if frame.f_code.co_filename.endswith(COMPILING_FILES):
                return True
            frame, depth = frame.f_back, depth + 1
    return False


class NoIterationWatchdog:
    """Calls `on_expired()` once, `limit_s` seconds after `start()`, unless `has_iterations()` is true by
    then; the poll intervals in which `compiling()` was true do not count. A daemon thread: it never keeps
    the process alive."""

    def __init__(self, limit_s: float, has_iterations: Callable[[], bool], on_expired: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic, poll_s: float = 0.25,
                 compiling: Callable[[], bool] | None = None) -> None:
        self.limit_s = limit_s
        self.has_iterations = has_iterations
        self.on_expired = on_expired
        self.clock = clock
        self.poll_s = poll_s
        self.compiling = compiling if compiling is not None else self._another_thread_compiling
        self.started_s: float | None = None
        self.compiling_s = 0.0  # time not counted
        self._checked_s: float | None = None
        self.expired = False
        self._thread: threading.Thread | None = None

    def _another_thread_compiling(self) -> bool:
        return a_thread_is_compiling(skip_ident=threading.get_ident())

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
        now = self.clock()
        if self.compiling():  # the interval since the last check was (as far as one look tells) compilation
            self.compiling_s += now - (self._checked_s if self._checked_s is not None else self.started_s)
        self._checked_s = now
        if now - self.started_s - self.compiling_s >= self.limit_s:
            self.expired = True
            self.on_expired()
        return self.expired

    def _watch(self) -> None:
        while not self.has_iterations() and not self.expired:
            if self.check():
                return
            time.sleep(self.poll_s)
