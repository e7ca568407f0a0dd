"""The `trainwise` Typer app (its commands are added by `_registry`), its consoles, and the option
parsing every command module shares."""

from __future__ import annotations

import typer
from rich.console import Console

from trainwise.errors import TrainwiseError

console = Console()
err_console = Console(stderr=True)


def _global_options(quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress display on stderr (it is off anyway when stderr is not a terminal)")) -> None:
    from trainwise._progress import set_quiet

    set_quiet(quiet)


def new_app() -> typer.Typer:
    """The top-level app with its global options and no commands yet."""
    app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                      help="Profile a PyTorch training job for a few iterations, predict its full training time, plan where to run it.")
    app.callback()(_global_options)
    return app

# An example value of each comma-separated option, for its error message.
_INT_LIST_EXAMPLES = {"--batch-sizes": "64,128,256", "--epoch-options": "5,10,20", "--node-counts": "2,4,8"}


def given(ctx: typer.Context, name: str) -> bool:
    """The option was on the command line (or in the environment), not left at its default."""
    source = ctx.get_parameter_source(name)
    # by name: typer's click and the `click` package need not be the same module
    return source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")


def parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TrainwiseError(f"{what} must be comma-separated whole numbers (got {text!r}), "
                             f"e.g. {_INT_LIST_EXAMPLES.get(what, '5,10,20')}") from None
    if not values or any(v <= 0 for v in values):
        raise TrainwiseError(f"{what} must be positive whole numbers (got {text!r})")
    return values
