"""The console entry point: split off the training command, run typer, turn errors into one line."""

from __future__ import annotations

import sys

import typer

from trainwise._proc import Stopped
from trainwise.cli._app import err_console
from trainwise.cli._registry import NAMES, build_app, command_word
from trainwise.core.invocation import set_passthrough, split_passthrough
from trainwise.errors import TrainwiseError


def main(argv: list[str] | None = None) -> int:
    """Console entry point: split off the training command, run typer, turn errors into one line."""
    args, command = split_passthrough(list(sys.argv[1:] if argv is None else argv))
    set_passthrough(command)
    word = command_word(args)
    # Only the named command's module is imported: the refusals that come before any work (bounds)
    # then come before torch, pandas and numpy too. No command or an unknown one: all, for help.
    app = build_app({word} if word in NAMES else None)
    try:
        result = app(args=args, prog_name="trainwise", standalone_mode=False)
        if result == 130:
            # typer turns Ctrl-C (KeyboardInterrupt) into an exit code it returns, not raises, when not
            # in standalone mode: it must not become exit 0 (a script would take it for success).
            err_console.print("[red]interrupted[/red]")
            return 130
    except TrainwiseError as exc:
        from rich.markup import escape

        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/red]")
        return 130
    except Stopped as exc:  # SIGTERM while a job ran: it was ended and its files removed on the way out
        err_console.print(f"[red]error:[/red] {exc}", highlight=False, soft_wrap=True)
        return 128 + exc.signum
    except (typer.Exit, SystemExit) as exc:  # --help, no_args_is_help
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        return int(code or 0)
    except typer.exceptions.TyperException as exc:  # usage errors from the parser
        message = (exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
        # Point at the help of the command that was mistyped (`trainwise plan --help`), which lists its
        # options, not at the top-level help, which lists only the commands.
        context = getattr(exc, "ctx", None)
        command = getattr(context, "command_path", None) or "trainwise"
        err_console.print(f"[red]error:[/red] {message}; see `{command} --help`", highlight=False, soft_wrap=True)
        return int(getattr(exc, "exit_code", 2) or 2)
    return 0


def run() -> None:
    sys.exit(main())
