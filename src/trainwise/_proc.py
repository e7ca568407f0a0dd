"""Child processes that do not outlive trainwise.

Jobs are started in their own session (so that a signal to the job's group reaches torchrun's and
DataLoader's workers, not trainwise), which also means nothing stops them when trainwise itself is
killed with SIGKILL: an orphaned job would keep training and writing checkpoints beside the rerun
that resumes from them. On Linux the kernel can send the child a signal when its parent dies
(prctl PR_SET_PDEATHSIG); SIGTERM is the preemption notice the job already handles (checkpoint,
then exit).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A `preexec_fn` for subprocess.Popen that asks the kernel to SIGTERM the child when this
    process dies; None where that is not available (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before the request took effect
            os.kill(os.getpid(), signal.SIGTERM)

    return preexec


# --------------------------------------------------------------------------- signals to trainwise


class Stopped(BaseException):
    """SIGTERM reached trainwise while a job ran. Python's default for SIGTERM ends the process at once,
    skipping every `finally`: the job's helpers and trainwise's temporary files would outlive it. Raised
    instead, it unwinds as Ctrl-C does (a BaseException, so no `except Exception` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return (f"stopped by {signal.Signals(self.signum).name}: the job and every process it started were ended "
                "and trainwise's temporary files removed; nothing was written")


@contextlib.contextmanager
def signals_end_the_job() -> Iterator[None]:
    """Within: SIGTERM raises Stopped and SIGINT KeyboardInterrupt; after the first, both are ignored
    until the block is left, so a second signal cannot cut the cleanup (ending the job, removing files) short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(signum)

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for signum, before in previous.items():
            signal.signal(signum, before)


# --------------------------------------------------------------------------- a job's processes

JOB_ENV = "TRAINWISE_JOB_TOKENS"


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def _stat_fields(pid: int) -> tuple[str, int, int, int, int] | None:
    """(state, ppid, pgid, session, start time in clock ticks after boot) from /proc/PID/stat; None when
    gone or unreadable."""
    data = _read(f"/proc/{pid}/stat")
    if not data:
        return None
    # the command name may hold spaces and parentheses: the fields start after the last ")"
    fields = data[data.rfind(b")") + 2:].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _exited(pids: list[int]) -> bool:
    """Whether every one of `pids` is gone or a zombie. An exiting process drops its memory (and with it the
    environment that marks it as the job's) before it becomes a zombie: membership alone ends too early."""
    return all(fields is None or fields[0] in ("Z", "X") for fields in map(_stat_fields, pids))


def _uptime_ticks() -> int | None:
    data = _read("/proc/uptime")
    try:
        return int(float(data.split()[0]) * os.sysconf("SC_CLK_TCK")) + 1 if data else None
    except (ValueError, OSError, IndexError):
        return None


def _own_lineage() -> set[int]:
    """This process and its ancestors (never signalled by a sweep, whatever tokens they carry)."""
    lineage, pid = set(), os.getpid()
    while pid > 1 and pid not in lineage:
        lineage.add(pid)
        fields = _stat_fields(pid)
        pid = fields[1] if fields else 0
    return lineage


class ProcessJob:
    """The processes trainwise starts for one job, found again however they detach.

    Every process started through it carries a random token in its environment (inherited by the
    training script's DataLoader workers, torchrun's workers and any helper the script starts, also
    one that calls setsid() or double-forks away from the job's process group) and runs in a session
    of its own. end() signals every live process holding the token or in one of those sessions or
    process groups: SIGTERM (the preemption notice the job handles), then SIGKILL after `grace_s`.
    Outside Linux (no /proc) it falls back to the started processes' groups.
    """

    def __init__(self) -> None:
        import secrets

        self.token = secrets.token_hex(12)
        self.roots: list[int] = []

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """`env` plus this job's token (after any tokens of enclosing trainwise jobs)."""
        held = [t for t in env.get(JOB_ENV, "").split(":") if t]
        return {**env, JOB_ENV: ":".join([*held, self.token])}

    def started(self, pid: int) -> None:
        self.roots.append(pid)

    def popen_options(self) -> dict:
        """subprocess.Popen keywords: its own session (a signal to it reaches its group, not trainwise),
        and SIGTERM when trainwise dies."""
        return {"start_new_session": True, "preexec_fn": die_with_parent()}

    def members(self, started_by_ticks: int | None = None) -> list[int]:
        """Live processes of this job (zombies, already dead, excluded): those holding its token, and those
        in a started process's session or group that cleared their environment. A session or group id is
        only matched for processes that started by `started_by_ticks` (when the sweep began): once a whole
        session is gone its id may be a new, unrelated process's."""
        if not os.path.isdir("/proc/self"):
            return [pid for pid in self.roots if _alive(pid)]
        needle = f"{JOB_ENV}=".encode()
        token = self.token.encode()
        roots = set(self.roots)
        skip = _own_lineage()
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            pid = int(entry)
            if pid in skip:
                continue
            fields = _stat_fields(pid)
            if fields is None or fields[0] in ("Z", "X"):
                continue
            if (fields[2] in roots or fields[3] in roots) and (started_by_ticks is None or fields[4] <= started_by_ticks):
                found.append(pid)
                continue
            environ = _read(f"/proc/{pid}/environ")
            if environ and token in environ:
                for variable in environ.split(b"\0"):
                    if variable.startswith(needle) and token in variable[len(needle):].split(b":"):
                        found.append(pid)
                        break
        return found

    def signal(self, signum: int, started_by_ticks: int | None = None) -> list[int]:
        if not os.path.isdir("/proc/self"):  # outside Linux: the groups the started processes lead
            hit = []
            for root in self.roots:
                try:
                    os.killpg(root, signum)
                    hit.append(root)
                except (ProcessLookupError, PermissionError, OSError):
                    pass
            return hit
        hit = []
        for pid in self.members(started_by_ticks):
            try:
                os.kill(pid, signum)
                hit.append(pid)
            except (ProcessLookupError, PermissionError):
                pass
        return hit

    def end(self, grace_s: float = 10.0, poll_s: float = 0.05) -> list[int]:
        """SIGTERM every process of the job, SIGKILL what is left after `grace_s`; return the pids that
        were still running (nothing to do when the job ended cleanly with all its helpers)."""
        import time

        cutoff = _uptime_ticks()
        left = self.signal(signal.SIGTERM, cutoff)
        if not left:
            return []
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not self.members(cutoff) and _exited(left):
                return left
            time.sleep(poll_s)
        self.signal(signal.SIGKILL, cutoff)
        deadline = time.monotonic() + 5.0
        while (self.members(cutoff) or not _exited(left)) and time.monotonic() < deadline:
            time.sleep(poll_s)
        return left


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
