"""What the `trainwise` command line was given: the user's training command after `--`, split off
before typer parses the rest (typer would otherwise try to parse the user's own options).

`trainwise.cli.main` sets it; the commands that take a training command (profile, run, plan save,
launch) read it here, in whichever package they live, so none of them imports the CLI above it.
"""

from __future__ import annotations

_passthrough: list[str] | None = None


def set_passthrough(command: list[str] | None) -> None:
    global _passthrough
    _passthrough = None if command is None else list(command)


def passthrough() -> list[str] | None:
    """The words after `--` (an empty list for a bare `--`), or None when there was no `--`."""
    return _passthrough


def split_passthrough(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """(trainwise's own arguments, the training command after the first `--` or None)."""
    if "--" in argv:
        position = argv.index("--")
        return argv[:position], argv[position + 1:]
    return list(argv), None


def options_given(*options: tuple[str, object, object]) -> list[str]:
    """The names among (name, value, default) whose value is not the default: options the user gave."""
    return [name for name, value, default in options if value != default]
