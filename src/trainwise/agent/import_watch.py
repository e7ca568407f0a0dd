"""Run code around the first import of one module, without importing it early: a finder at the front of
`sys.meta_path` wraps that module's loader once and then steps aside."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable


class ImportWatcher(importlib.abc.MetaPathFinder):
    """Calls `before()` as module `name` starts executing and `after()` once it has."""

    def __init__(self, name: str, after: Callable[[], None], before: Callable[[], None] | None = None) -> None:
        self.name, self.after, self.before = name, after, before

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib protocol
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        original_exec = spec.loader.exec_module
        before, after = self.before, self.after

        def exec_module(module):
            if before is not None:
                before()
            original_exec(module)
            after()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def watch_import(name: str, after: Callable[[], None], before: Callable[[], None] | None = None) -> None:
    """Install an `ImportWatcher` for `name` (which must not be imported yet)."""
    sys.meta_path.insert(0, ImportWatcher(name, after, before))
