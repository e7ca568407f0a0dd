"""Where each `trainwise` command is defined, so a command line imports only the command it runs: the
others pull in torch, pandas or numpy, and a refusal (`run --nproc 4096`) must come before any of them."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from typing import Any

import typer

# Commands that take the training command after `--` (and may see its options before it).
_PASSTHROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}

# (name, "command" or "group", "module:attribute", context settings), in the order `--help` lists them (Typer
# lists the commands, then the groups): the flow first, profile -> predict -> plan -> run / launch.
COMMANDS: tuple[tuple[str, str, str, dict[str, Any] | None], ...] = (
    ("profile", "command", "trainwise.cli.profile:profile", _PASSTHROUGH),
    ("predict", "command", "trainwise.cli.predict:predict", None),
    ("run", "command", "trainwise.run.command:run_command", _PASSTHROUGH),
    ("launch", "command", "trainwise.launch.cli:launch_command", None),
    ("sweep", "command", "trainwise.launch.cli:sweep_command", None),
    ("host-noise", "command", "trainwise.cli.host_noise:host_noise_command", None),
    ("workloads", "command", "trainwise.cli.workloads:list_workloads", None),
    ("validate", "command", "trainwise.predict.cli:validate_command", None),
    ("plan", "group", "trainwise.cli.plan:plan_app", None),
    ("catalog", "group", "trainwise.catalog.cli:catalog_app", None),
    ("device", "group", "trainwise.predict.cli:device_app", None),
    ("net", "group", "trainwise.predict.net_cli:net_app", None),
    ("pipeline", "group", "trainwise.pipeline.cli:pipeline_app", None),
)
NAMES = frozenset(name for name, *_ in COMMANDS)


def _load(target: str) -> Any:
    module, attribute = target.split(":")
    return getattr(importlib.import_module(module), attribute)


def build_app(names: Collection[str] | None = None) -> typer.Typer:
    """The `trainwise` app with the named commands (all of them when None)."""
    from trainwise.cli._app import new_app

    app = new_app()
    for name, kind, target, settings in COMMANDS:
        if names is not None and name not in names:
            continue
        if kind == "group":
            app.add_typer(_load(target), name=name)
        else:
            function = _load(target)
            # a command that runs a training command shows where it goes in its usage line
            metavar = "[OPTIONS] -- COMMAND..." if settings is _PASSTHROUGH else "[OPTIONS]"
            app.command(name, context_settings=settings, short_help=short_help(function),
                        options_metavar=metavar)(function)
    return app


def short_help(function: Any) -> str | None:
    """The first paragraph of a command's docstring on one line: Typer's rich listing of the commands keeps a
    docstring's line breaks, so a sentence wrapped in the source would break mid-line in `trainwise --help`."""
    import inspect

    doc = inspect.getdoc(function)
    return " ".join(doc.split("\n\n")[0].split()) if doc else None


def command_word(args: list[str]) -> str | None:
    """The command an argument list names: its first word that is not an option (the app's own
    options, --quiet/-q and --help, take no value)."""
    return next((arg for arg in args if not arg.startswith("-")), None)
