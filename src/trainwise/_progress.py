"""One progress display for phases that can take more than a couple of seconds (the plan's steps,
the default job's slice profile, a local launch): a spinner with the phase and the
time so far, on stderr — never in the output a script reads — and off when stderr is not a terminal
or the user asked for quiet (`trainwise --quiet`, or TRAINWISE_QUIET=1)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

QUIET_ENV = "TRAINWISE_QUIET"
_quiet = False  # not an environment variable: the jobs trainwise starts must not inherit it


def enabled() -> bool:
    if _quiet or os.environ.get(QUIET_ENV, "") not in ("", "0"):
        return False
    return sys.stderr.isatty()


def set_quiet(quiet: bool) -> None:
    global _quiet
    _quiet = bool(quiet)


@contextmanager
def phase(description: str) -> Iterator[None]:
    """Show `description` with a spinner and the elapsed time while the block runs (transient)."""
    if not enabled():
        yield
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                        console=Console(stderr=True), transient=True)
    with progress:
        progress.add_task(description, total=None)
        yield
