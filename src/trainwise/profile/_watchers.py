"""Watchers the recorder installs in the profiled process before the script runs: the script's
sys.exit()/exit()/quit() calls and its argparse epoch count (its `import torch`: trainwise.agent.torch_patch;
the frameworks' Trainer modules: trainwise.integrations._autodetect); and two small readers (a batch's size, the CPU's name). Standard library only.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from trainwise.agent.sink import batch_length as _batch_length  # noqa: F401 - the recorder's name for it
from trainwise.profile import script_epochs as script_epochs_source


def _watch_sys_exit(recorder: Any) -> None:
    """A script that ends itself with sys.exit() (or the exit()/quit() builtins) in the middle of training
    looks, at exit, like one that ran to its end: the call is noted so that the profile can say where it
    stopped (on_process_exit). A bare `raise SystemExit` cannot be seen without tracing every call."""
    import builtins

    original_exit = sys.exit

    def exit_noted(status=None):
        recorder.on_sys_exit(status)
        original_exit(status)

    sys.exit = exit_noted
    for name in ("exit", "quit"):
        original = getattr(builtins, name, None)
        if original is not None:
            setattr(builtins, name, _NotedQuitter(original, recorder, name))


class _NotedQuitter:
    """site's exit()/quit() builtins, noting the call first; prints as the original does."""

    def __init__(self, original: Any, recorder: Any, name: str) -> None:
        self._original, self._recorder, self._name = original, recorder, name

    def __repr__(self) -> str:
        return repr(self._original)

    def __call__(self, code=None):
        self._recorder.on_sys_exit(code, call=self._name)
        return self._original(code)


def _watch_argparse(recorder: Any) -> None:
    """The script's own epoch count from its argparse arguments (`--epochs 30`): the N_ep of the run
    the user will launch, kept in the profile so that predict and plan need not be told it again."""
    import argparse

    original = argparse.ArgumentParser.parse_known_args
    skipped = {os.path.normcase(os.path.abspath(path)) for path in (argparse.__file__, __file__)}

    def parse_known_args(parser, *args, **kwargs):
        namespace, extras = original(parser, *args, **kwargs)
        try:
            # Whose parse this is: the first caller outside argparse (a subparser is parsed from inside its parent's parse)
            frame = sys._getframe(1)
            while frame is not None and os.path.normcase(os.path.abspath(frame.f_code.co_filename)) in skipped:
                frame = frame.f_back
            parsed = args[0] if args else kwargs.get("args")
            caller = frame.f_code.co_filename if frame is not None else ""
            found = script_epochs_source.argparse_reading(parser, namespace, parsed, caller_file=caller, argv=sys.argv[1:])
            if found is not None:
                epochs, source, rank = found
                recorder.note_script_epochs(epochs, source, rank=rank)
            steps = script_epochs_source.argparse_reading(parser, namespace, parsed, caller_file=caller, argv=sys.argv[1:],
                                                          iterations=True)
            if steps is not None:
                recorder.note_script_iterations(steps[0], steps[1], rank=steps[2])
        except Exception:  # noqa: BLE001 - reading the arguments must never break the script
            pass
        return namespace, extras

    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
