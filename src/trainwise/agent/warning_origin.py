"""Warnings the job's libraries raise name the job's code, as in a plain run, not the agent's wrappers.

A library warning with `stacklevel=2` names the caller of the function that warns; once the agent wraps that
function (a DataLoader iterator's `__init__`, its `__next__` through the interceptors), the caller is the
wrapper, and `python train.py` under the agent printed "trainwise/agent/torch_patch.py:216: UserWarning:
'pin_memory' ..." where the plain run names torch's dataloader.py. `warnings.warn` is wrapped once: a warning
raised outside trainwise whose named frame is trainwise's moves one frame out per trainwise frame, so it names
what the plain run names and its once-per-location registry is that frame's. Nothing else changes: warnings
raised by C code (`PyErr_WarnEx`) or by modules that bound `warn` before the agent installed keep their
location. A warning the agent itself causes (torch.compile's about global module hooks: the agent's are the only
ones) is dropped by a predicate registered with `suppress`. Standard library only: this runs in the training process.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from collections.abc import Callable
from typing import Any

PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Predicates of a warning's message: True drops it (a warning the plain run would not print)
_SUPPRESSORS: list[Callable[[Any], bool]] = []


def suppress(predicate: Callable[[Any], bool]) -> None:
    """Drop the warnings whose message `predicate` accepts (registered once per cause)."""
    if predicate not in _SUPPRESSORS:
        _SUPPRESSORS.append(predicate)


def _trainwise_frame(frame: Any, package_dir: str) -> bool:
    return frame.f_code.co_filename.startswith(package_dir)


def install(package_dir: str = PACKAGE_DIR) -> Callable[[], None]:
    """Wrap `warnings.warn` (idempotent per process); returns a function that puts the previous one back."""
    previous = warnings.warn
    if getattr(previous, "_trainwise_origin", False):
        return lambda: None

    @functools.wraps(previous)
    def warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any) -> None:
        if _SUPPRESSORS and any(accepts(message) for accepts in _SUPPRESSORS):
            return None
        caller = sys._getframe(1)
        # trainwise's own warnings keep their stacklevel; a stacklevel that is not an int is warnings.warn's to refuse
        if isinstance(stacklevel, int) and not _trainwise_frame(caller, package_dir):
            named = caller
            for _ in range(stacklevel - 1):
                named = named.f_back if named is not None else None
            while named is not None and _trainwise_frame(named, package_dir):
                named, stacklevel = named.f_back, stacklevel + 1
        return previous(message, category, stacklevel + 1 if isinstance(stacklevel, int) else stacklevel, source,
                        **kwargs)

    warn._trainwise_origin = True  # type: ignore[attr-defined]
    warnings.warn = warn

    def uninstall() -> None:
        if warnings.warn is warn:
            warnings.warn = previous

    return uninstall
