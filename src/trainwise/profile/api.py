"""Explicit markers for training loops the automatic hooks cannot see (custom loops, no optimizer
object, several optimizer steps per logical iteration).

They cost one attribute lookup when the script is not being profiled, so they can stay in the code::

    import trainwise.profile as twp
    for batch in batches:
        with twp.iteration(samples=len(batch)):
            train_step(batch)

or call ``twp.step(samples=...)`` at the end of each iteration. Once either is used, optimizer steps
no longer delimit iterations in that process.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from trainwise.profile import _child


def step(samples: int | None = None) -> None:
    """Mark the end of one training iteration (and the start of the next)."""
    recorder = _child.current()
    if recorder is not None:
        recorder.explicit_step(samples)


@contextmanager
def iteration(samples: int | None = None) -> Iterator[None]:
    """Time the enclosed block as one training iteration."""
    recorder = _child.current()
    if recorder is not None:
        recorder.explicit_iteration_start()
    yield
    if recorder is not None:
        recorder.explicit_step(samples)


def is_profiling() -> bool:
    """True inside a process started by `trainwise profile`."""
    return _child.current() is not None
