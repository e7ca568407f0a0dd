"""Generate docs/reference/cli.md from the typer app itself (`typer.main.get_command`).

    .venv/bin/python docs/reference/generate_cli.py          # rewrite cli.md
    .venv/bin/python docs/reference/generate_cli.py --check  # exit 1 if cli.md is not what the app generates now

The page is rendered from click's own objects (usage, help, parameters, defaults), not from rich's terminal
output, so it does not depend on the terminal width or on colours. Typer ships its own copy of click, so the
objects are read by what they have (`commands`, `param_type_name`, `choices`), not by their click classes.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import typer.main

OUTPUT = Path(__file__).with_name("cli.md")
HEADER = """# Command-line reference

Generated from the typer app by `docs/reference/generate_cli.py`; do not edit by hand
(`tests/test_docs.py` checks it matches). `trainwise COMMAND --help` prints the same in the terminal.
"""


def _cell(text: str) -> str:
    """One markdown table cell: a single line, pipes escaped, the user's home directory not baked in."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    home = os.path.expanduser("~")
    return text.replace(home, "~") if home not in ("", "/") else text


def _is_argument(param: Any) -> bool:
    return getattr(param, "param_type_name", "") == "argument"


def _is_flag(param: Any) -> bool:
    return bool(getattr(param, "is_flag", False))


def _default(param: Any) -> str:
    if param.default is None or _is_argument(param):
        return ""
    if callable(param.default):
        return "(computed)"
    if _is_flag(param):
        if param.secondary_opts:
            return param.opts[0] if param.default else param.secondary_opts[0]
        return "on" if param.default else ""
    if isinstance(param.default, (list, tuple)):
        return ", ".join(str(v) for v in param.default)
    return str(getattr(param.default, "value", param.default))


def _type(param: Any, ctx: Any) -> str:
    if _is_flag(param):
        return "flag"
    if hasattr(param, "display_type"):  # typer >= 0.20: typer's own type description
        return str(param.display_type(ctx)).strip("<>")
    if getattr(param.type, "choices", None):
        return "|".join(str(c) for c in param.type.choices)
    return str(param.type.name or "").lower()


def _params_table(command: Any, ctx: Any) -> list[str]:
    rows = []
    for param in command.params:
        if getattr(param, "hidden", False) or param.name == "help":
            continue
        if _is_argument(param):
            name = (param.metavar or param.name or "").upper()
            help_text = getattr(param, "help", None) or ""
            required = "required" if param.required else "optional"
            rows.append(f"| `{name}` | argument, {required} | {_cell(help_text)} | |")
        else:
            names = ", ".join(f"`{o}`" for o in [*param.opts, *param.secondary_opts])
            default = _default(param)
            rows.append(f"| {names} | {_cell(_type(param, ctx))} | {_cell(param.help or '')} | {_cell(default)} |")
    if not rows:
        return []
    return ["| parameter | type | meaning | default |", "|---|---|---|---|", *rows, ""]


def _render(command: Any, path: list[str], out: list[str]) -> None:
    name = " ".join(path)
    ctx = command.context_class(command, info_name=name)
    level = "#" * min(len(path) + 1, 4)
    out.append(f"{level} `{name}`")
    out.append("")
    usage = " ".join(command.collect_usage_pieces(ctx))
    out.append(f"```\n{name} {usage}\n```")
    out.append("")
    if command.help:
        out.append(command.help.strip())
        out.append("")
    out.extend(_params_table(command, ctx))
    if hasattr(command, "commands"):
        subcommands = [(n, c) for n, c in sorted(command.commands.items()) if not c.hidden]
        if subcommands:
            out.append("| command | what it does |")
            out.append("|---|---|")
            for sub_name, sub in subcommands:
                out.append(f"| `{name} {sub_name}` | {_cell(sub.get_short_help_str(limit=120))} |")
            out.append("")
        for sub_name, sub in subcommands:
            _render(sub, [*path, sub_name], out)


def render() -> str:
    """The whole page, as the app defines its commands now."""
    from trainwise.cli import app

    command = typer.main.get_command(app)
    out = [HEADER]
    _render(command, ["trainwise"], out)
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that cli.md is current")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.is_file() else ""
        if current != text:
            print(f"error: {OUTPUT} is out of date: run python {Path(__file__).as_posix()}", file=sys.stderr)
            return 1
        return 0
    tmp = OUTPUT.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUTPUT)
    print(f"wrote {OUTPUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
