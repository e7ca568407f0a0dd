"""Child processes that do not outlive trainwise.

Jobs are started in their own session (so that a signal to the job's group reaches torchrun's and
DataLoader's workers, not trainwise), which also means nothing stops them when trainwise itself is
killed with SIGKILL: an orphaned job would keep training and writing checkpoints beside the rerun
that resumes from them. On Linux the kernel can send the child a signal when its parent dies
(prctl PR_SET_PDEATHSIG); SIGTERM is the preemption notice the job already handles (checkpoint,
then exit).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

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
