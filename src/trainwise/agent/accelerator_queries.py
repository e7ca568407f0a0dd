"""Whether the job asks torch for an accelerator. A command that never does (no `torch.cuda.is_available()`, no
`torch.accelerator`, no `torch.cuda.device_count()`, ...) while running on a CPU-only machine runs on the CPU on
any machine: its model never moves to a GPU it was not told exists. A GPU plan for it would pay for a GPU it
leaves idle (PyTorch's REINFORCE example; dcgan and the word language model without their `--accel`/`--cuda`).

The availability queries are wrapped once torch is imported; a call whose caller is outside torch (the script, or
a library that picks the device for it: Lightning, the Hugging Face Trainer) is reported once, and the wrappers
are taken off then. Calls torch makes itself (a DataLoader's pinned memory, GradScaler) do not count. The wrappers
return what torch returns, and come off unasked when the job first compiles with torch.compile (the answer is then
unknown). Standard library and torch only."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

# torch.<path>: what a script calls to learn whether (or which) accelerator it has
QUERIES = ("cuda.is_available", "cuda.device_count", "accelerator.is_available", "accelerator.current_accelerator",
           "accelerator.device_count", "backends.mps.is_available", "xpu.is_available")


class AcceleratorQueries:
    """Wraps torch's availability queries; `on_query(query, caller)` once, at the first call from outside torch."""

    def __init__(self, on_query: Callable[[str, str], None]) -> None:
        self.on_query = on_query
        self.asked = False
        # Stopped looking before the job asked (torch.compile's dynamo imported): whether it would ask is unknown
        self.gave_up = False
        self._patched: list[tuple[Any, str, Any, Any]] = []

    def install(self, torch: Any) -> None:
        ignored = (os.path.dirname(torch.__file__) + os.sep, os.path.dirname(os.path.dirname(__file__)) + os.sep)
        for dotted in QUERIES:
            *path, name = dotted.split(".")
            owner = torch
            for part in path:
                owner = getattr(owner, part, None)  # torch.accelerator is new in 2.6, torch.xpu in 2.4
            original = getattr(owner, name, None) if owner is not None else None
            if not callable(original):
                continue
            wrapper = functools.update_wrapper(self._wrapper(f"torch.{dotted}", original, ignored), original)
            setattr(owner, name, wrapper)
            self._patched.append((owner, name, original, wrapper))

    def _wrapper(self, query: str, original: Callable, ignored: tuple[str, str]) -> Callable:
        def availability_query(*args: Any, **kwargs: Any) -> Any:
            if not self.asked:
                frame = sys._getframe(1)
                if not frame.f_code.co_filename.startswith(ignored):
                    self._found(query, f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}")
            return original(*args, **kwargs)

        return availability_query

    def _found(self, query: str, caller: str) -> None:
        self.asked = True
        self.uninstall()  # once is enough: from here the job's own calls cost it nothing
        self.on_query(query, caller)

    def watch_compiles(self) -> None:
        """Once dynamo is imported (constructing an optimizer imports it): give up at the job's first compile."""
        if self.asked or not self._patched:
            return
        try:
            from torch._dynamo.callback import callback_handler

            callback_handler.register_start_callback(lambda _args: self.give_up())
        except Exception:  # noqa: BLE001 - a torch without compile callbacks: stop looking now
            self.give_up()

    def give_up(self) -> None:
        """Stop looking: dynamo would trace a wrapper called inside compiled code (a graph break the plain job has
        not), so once the job compiles, the queries are torch's own again and the answer is unknown."""
        if not self.asked and self._patched:
            self.gave_up = True
        self.uninstall()

    def uninstall(self) -> None:
        for owner, name, original, wrapper in self._patched:
            if getattr(owner, name, None) is wrapper:  # a wrapper the script put over it since stays
                setattr(owner, name, original)
        self._patched = []
