"""The `trainwise` command: thin wiring of profile → predict → plan → report / run; no logic lives
here. One module per command group (profile, predict, plan, workloads, host-noise; the groups other
packages define are named in `_registry`); `entry.main` is the console entry point (`trainwise.cli:run`).
A command line imports only the command it runs (`_registry.build_app`); `trainwise.cli.app` has them all."""

from __future__ import annotations

from typing import Any

from trainwise.cli._app import console, err_console
from trainwise.cli.entry import main, run

__all__ = ["app", "console", "err_console", "main", "run"]

_full_app: Any = None


def __getattr__(name: str) -> Any:
    global _full_app
    if name == "app":
        # built on first use: every command's module is imported (docs generation, tests' CliRunner)
        if _full_app is None:
            from trainwise.cli._registry import build_app

            _full_app = build_app()
        return _full_app
    if name == "options_given":  # the old import path
        from trainwise.core.invocation import options_given

        return options_given
    # `trainwise.cli._passthrough`, read by commands before it moved to trainwise.core.invocation
    if name == "_passthrough":
        from trainwise.core.invocation import passthrough

        return passthrough()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
