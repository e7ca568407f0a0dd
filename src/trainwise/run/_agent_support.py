"""Helpers of the run agent and its mixins (module level, so that the mixins need not import
trainwise.run._child)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# Exit code of a job whose checkpoint does not match it (trainwise.run.result reads it).
RESUME_MISMATCH_EXIT = 75
# Exit code of a resumed job that failed right after an epoch its resume ended at once.
RESUME_SKIP_FAILED_EXIT = 76
# Exit code of a job that could not write a checkpoint (a full disk, a file-size limit, permissions).
CHECKPOINT_WRITE_EXIT = 77


def _placing_on_device(frame: Any) -> bool:
    """True when `frame` is accelerate wrapping a fresh optimizer (AcceleratedOptimizer.__init__ reloads
    the optimizer's own state to move it to the device, as the HF Trainer's setup does): not a resume."""
    return (frame is not None and frame.f_code.co_name == "__init__"
            and str(frame.f_globals.get("__name__", "")).startswith("accelerate."))


def _fetches_ahead() -> bool:
    """True when the DataLoader being iterated is driven by accelerate's DataLoaderShard (the HF
    Trainer's loader), which requests each next batch before it yields the current one to training."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if owner is not None and type(owner).__module__.startswith("accelerate.") and frame.f_code.co_name == "__iter__":
            return hasattr(owner, "end_of_dataloader")
        frame = frame.f_back
    return False


def _consumed_all(iterator: Any, batches: int) -> bool:
    """Whether `batches` is the whole pass (a checkpoint at the epoch's end); False when unknown."""
    try:
        return batches >= len(iterator)
    except Exception:  # noqa: BLE001 - an iterable-style data set without a length
        return False

# A message dropped by the DHT process: its sender had exited before the message could be read.
_DROPPED_MESSAGE = ("_trainwise_dropped_message", [], {})


def _sender_gone(exc: BaseException) -> bool:
    """True for the error of unpickling a message whose reply pipe was shared by a process that has
    exited: multiprocessing's resource sharer of that process is gone (its socket file removed, or
    closed mid-handshake)."""
    import traceback

    if not isinstance(exc, (EOFError, OSError)):
        return False
    return any(frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "resource_sharer.py"))
               for frame, _ in traceback.walk_tb(exc.__traceback__))


class _SenderTolerantPipe:
    """The DHT process's end of its request pipe. hivemind.Optimizer.shutdown() stops the averager
    processes while requests they sent to the DHT are still queued; each carries a reply pipe that
    only the exited averager could hand over, so reading it fails: a FileNotFoundError hivemind logs
    with its traceback, or an EOFError that ends the DHT's loop with one ("Process DHT-1: ...
    EOFError", then "Task was destroyed but it is pending!"), at the end of every run. Nobody waits
    for those replies; such a request is dropped, any other error is hivemind's to handle."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    def recv(self) -> Any:
        try:
            return self._pipe.recv()
        except (EOFError, OSError) as exc:
            if _sender_gone(exc):
                return _DROPPED_MESSAGE
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)

# A joining peer's p2p daemon gives up when no bootstrap peer answers in time — on a busy 2-core
# host, peer 0 training flat out answered too late in 2 of 4 local 2-peer runs ("Daemon failed to
# start: failed to connect to bootstrap peers"). The peer is there: ask again, a little later.
DHT_START_ATTEMPTS = 3
DHT_RETRY_PAUSE_S = 2.0


def start_with_retries(start: Any, attempts: int = DHT_START_ATTEMPTS, pause_s: float = DHT_RETRY_PAUSE_S,
                       sleep: Any = time.sleep) -> Any:
    """`start()`, again after pause_s × attempt when it failed to reach its bootstrap peers."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:  # noqa: BLE001 - hivemind raises P2PDaemonError through the DHT process
            if "bootstrap" not in str(exc) or attempt == attempts:
                raise
            print(f"trainwise: hivemind could not reach its bootstrap peers ({exc}); retrying "
                  f"({attempt + 1}/{attempts})", file=sys.stderr, flush=True)
            sleep(pause_s * attempt)
    raise AssertionError("unreachable")


def _quiet_shutdown_dht_class():
    import hivemind

    class QuietShutdownDHT(hivemind.DHT):
        def run(self) -> None:
            # In the DHT process (a fork): only its reading end is wrapped.
            self._inner_pipe = _SenderTolerantPipe(self._inner_pipe)
            super().run()

        async def _trainwise_dropped_message(self) -> None:
            return None

    return QuietShutdownDHT


def _silence_pending_task_warnings() -> None:
    """After hivemind has shut down, at exit: its progress tracker's loop is closed with a DHT store
    still pending, and asyncio reports "Task was destroyed but it is pending!" when the interpreter
    collects it. Only that message, only from now on, is dropped."""
    import logging

    class PendingTaskAtExit(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith("Task was destroyed but it is pending!")

    logging.getLogger("asyncio").addFilter(PendingTaskAtExit())
