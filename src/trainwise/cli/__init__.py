"""The `trainwise` command: thin wiring of profile → predict → plan → report / run; no logic lives
here. One module per command group (profile, predict, plan, workloads, host-noise; `groups` wires in
the groups other packages define); `entry.main` is the console entry point (`trainwise.cli:run`)."""

from __future__ import annotations

from typing import Any

from trainwise.cli._app import app, console, err_console
from trainwise.cli import groups  # noqa: F401 - registers catalog, device, validate, launch, sweep, net, pipeline, run
from trainwise.cli import profile, predict, plan, workloads, host_noise  # noqa: F401 - register their commands
from trainwise.cli.entry import main, run
from trainwise.core.invocation import options_given  # noqa: F401 - the old import path

__all__ = ["app", "console", "err_console", "main", "run"]


def __getattr__(name: str) -> Any:
    # `trainwise.cli._passthrough`, read by commands before it moved to trainwise.core.invocation
    if name == "_passthrough":
        from trainwise.core.invocation import passthrough

        return passthrough()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
