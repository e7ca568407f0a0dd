"""Generate docs/reference/profile.md and profile.schema.json from the Profile pydantic model's JSON schema.

    .venv/bin/python docs/reference/generate_profile_schema.py          # rewrite both files
    .venv/bin/python docs/reference/generate_profile_schema.py --check  # exit 1 if either is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
MARKDOWN = HERE / "profile.md"
SCHEMA = HERE / "profile.schema.json"
HEADER = """# Profile schema

What `trainwise profile` writes (versioned JSON, `schema_version`). Generated from the pydantic model
`trainwise.profile.schema.Profile` by `docs/reference/generate_profile_schema.py`; do not edit by hand
(`tests/test_docs.py` checks it matches). The machine-readable JSON Schema is
[profile.schema.json](profile.schema.json). Durations are seconds unless a name says otherwise; a `Measurement`
holds a duration with its spread.
"""


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type(prop: dict[str, Any]) -> str:
    """A short, readable type for one JSON-schema property."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])
    if "allOf" in prop and len(prop["allOf"]) == 1:
        return _type(prop["allOf"][0])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "enum" in prop:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    kind = prop.get("type", "any")
    if kind == "array":
        items = prop.get("items") or prop.get("prefixItems")
        if isinstance(items, list):
            return "[" + ", ".join(_type(i) for i in items) + "]"
        return f"list of {_type(items)}" if items else "list"
    if kind == "object":
        extra = prop.get("additionalProperties")
        return f"map to {_type(extra)}" if isinstance(extra, dict) else "object"
    return str(kind)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" in prop:
        return f"`{json.dumps(prop['default'])}`"
    return ""


def _model_section(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"## {name}", ""]
    if schema.get("description"):
        out += [" ".join(schema["description"].split()), ""]
    props = schema.get("properties", {})
    if not props:
        return out
    required = set(schema.get("required", []))
    out += ["| field | type | default | meaning |", "|---|---|---|---|"]
    for field, prop in props.items():
        out.append(f"| `{field}` | {_cell(_type(prop))} | {_cell(_default(prop, field in required))} | "
                   f"{_cell(prop.get('description', ''))} |")
    out.append("")
    return out


def schema() -> dict[str, Any]:
    from trainwise.profile.schema import Profile

    return Profile.model_json_schema()


def render() -> tuple[str, str]:
    """(markdown page, JSON schema text) as the model defines them now."""
    full = schema()
    out = [HEADER]
    top = {k: v for k, v in full.items() if k != "$defs"}
    out += _model_section(full.get("title", "Profile"), top)
    for name, sub in sorted(full.get("$defs", {}).items()):
        out += _model_section(name, sub)
    return "\n".join(out).rstrip() + "\n", json.dumps(full, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the files are current")
    args = parser.parse_args(argv)
    markdown, json_text = render()
    stale = [p for p, text in ((MARKDOWN, markdown), (SCHEMA, json_text))
             if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(f"error: {path} is out of date: run python {Path(__file__).as_posix()}", file=sys.stderr)
        return 1 if stale else 0
    for path, text in ((MARKDOWN, markdown), (SCHEMA, json_text)):
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
