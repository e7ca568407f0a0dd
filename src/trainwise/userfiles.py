"""The one reader for files a user hands trainwise (CSV, JSON, YAML, TOML) and the one JSON writer.

Every read is bounded before it starts: the size is checked from the file's metadata (a stream such
as /dev/zero or a FIFO is read only up to the limit), the text must be UTF-8 (the error names the
file and the byte offset), nesting is capped (no RecursionError), YAML aliases may not expand past
a node budget (no "billion laughs"), and integers longer than `MAX_INT_DIGITS` digits are refused
(no 4,300-digit ValueError, no OverflowError from `10**400` turned into a float). Every problem is a
`UserFileError`: one line naming the file, where in it, and the fix.

JSON output goes through `json_text`/`write_json`: NaN and ±Infinity are refused (`allow_nan=False`;
they are not JSON and other tools reject them), and text the user typed that is not UTF-8 (Python
keeps such bytes as surrogate escapes, e.g. a path `/x_\\xff` in a training command) is written as
`\\udcff` escapes: `json.loads` gives back the same string and `os.fsencode` the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, Callable

import yaml
from pydantic import BaseModel, ValidationError

from trainwise.errors import TrainwiseError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, as the tomli backport (a dependency on 3.10 only)
    import tomli as tomllib

MAX_FILE_BYTES = 64 * 1024 * 1024  # larger than any profile, plan or catalog trainwise writes
MAX_CSV_BYTES = 256 * 1024 * 1024  # a full SkyPilot catalog (every CPU type of a cloud) is tens of MB
MAX_DEPTH = 64  # trainwise's own files nest under 10 levels
MAX_INT_DIGITS = 20  # 10**20 bytes is 100 EB: anything longer is a typo or an attack
MAX_YAML_NODES = 200_000  # nodes after alias expansion
MAX_CSV_FIELD_BYTES = 1024 * 1024


class UserFileError(TrainwiseError):
    """A user file that is missing, too big, not UTF-8, malformed or out of bounds."""


def _size_text(n: int) -> str:
    return f"{n / 1024 / 1024:.0f} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def read_bytes(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None,
               missing_hint: str = "check the path") -> bytes:
    """The bytes of `path`, refused before reading when over `max_bytes` (default MAX_FILE_BYTES)."""
    max_bytes = MAX_FILE_BYTES if max_bytes is None else max_bytes
    p = Path(path)
    try:
        # before opening: a FIFO would block the open, a device (/dev/zero) never end
        mode = os.stat(p).st_mode
        if stat.S_ISDIR(mode):
            raise UserFileError(f"{what} {p} is a folder: give a file")
        if not stat.S_ISREG(mode):
            raise UserFileError(f"{what} {p} is not a regular file (a device, pipe or socket): give a file")
        with open(p, "rb") as handle:
            info = os.fstat(handle.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise UserFileError(f"{what} {p} is a folder: give a file")
            if stat.S_ISREG(info.st_mode) and info.st_size > max_bytes:
                raise UserFileError(f"{what} {p} is {_size_text(info.st_size)}, over the {_size_text(max_bytes)} "
                                    "limit for this kind of file: check it is the right file")
            data = handle.read(max_bytes + 1)
    except FileNotFoundError:
        raise UserFileError(f"{what} {p} does not exist: {missing_hint}") from None
    except IsADirectoryError:
        raise UserFileError(f"{what} {p} is a folder: give a file") from None
    except OSError as exc:
        raise UserFileError(f"cannot read {what} {p} ({exc.strerror or exc}): check the path and permissions") from None
    if len(data) > max_bytes:
        raise UserFileError(f"{what} {p} is over the {_size_text(max_bytes)} limit for this kind of file: "
                            "check it is the right file")
    return data


def decode_utf8(data: bytes, label: str) -> str:
    """`data` as text; a byte that is not UTF-8 is named with its offset. A leading BOM is dropped."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserFileError(f"{label}: not UTF-8 text (byte 0x{data[exc.start]:02x} at byte offset {exc.start}, "
                            f"line {line}): save the file as UTF-8") from None
    return text.removeprefix("\ufeff")


def read_text(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None,
              missing_hint: str = "check the path") -> str:
    return decode_utf8(read_bytes(path, what, max_bytes=max_bytes, missing_hint=missing_hint), f"{what} {path}")


# ---- structure checks shared by the formats ----------------------------------------------------

_QUOTED = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'')
_OPEN = frozenset("[{")
_CLOSE = frozenset("]}")


def _bracket_depth(text: str) -> int:
    """The deepest [ / { nesting outside quoted strings (JSON, TOML inline tables and arrays)."""
    stripped = _QUOTED.sub("", text)
    depth = deepest = 0
    for match in re.finditer(r"[\[\]{}]", stripped):
        if match.group() in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_DEPTH:
                    return deepest
        else:
            depth = max(depth - 1, 0)
    return deepest


def _check_depth(text: str, label: str) -> None:
    if _bracket_depth(text) > MAX_DEPTH:
        raise UserFileError(f"{label}: nested deeper than {MAX_DEPTH} levels: trainwise files are shallow; "
                            "check it is the right file")


def _too_long_int(digits: str, label: str, where: str = "") -> UserFileError:
    shown = digits if len(digits) <= 24 else f"{digits[:12]}…{digits[-6:]} ({len(digits)} digits)"
    return UserFileError(f"{label}{where}: the integer {shown} is over the {MAX_INT_DIGITS}-digit limit: "
                         "give a realistic value")


def _int_digits(text: str) -> str:
    return text.strip().lstrip("+-").replace("_", "")


def _check_value_tree(value: Any, label: str) -> None:
    """Refuse over-long integers anywhere in parsed data (TOML has no hook for them)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise UserFileError(f"{label}: nested deeper than {MAX_DEPTH} levels: check it is the right file")
        if isinstance(item, bool):
            continue
        if isinstance(item, int) and item.bit_length() > MAX_INT_DIGITS * 3.33:
            raise UserFileError(f"{label}: an integer of about {int(item.bit_length() * 0.30103)} digits is over the "
                                f"{MAX_INT_DIGITS}-digit limit: give a realistic value")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


# ---- JSON ---------------------------------------------------------------------------------------

def parse_json(text: str, label: str, *, allow_non_finite: bool = False) -> Any:
    """Parse JSON text with the bounds above; NaN/Infinity refused unless `allow_non_finite`."""
    _check_depth(text, label)

    def parse_int(digits: str) -> int:
        if len(digits) > MAX_INT_DIGITS and len(_int_digits(digits)) > MAX_INT_DIGITS:
            raise _too_long_int(_int_digits(digits), label)
        return int(digits)

    def parse_float(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise UserFileError(f"{label}: the number {number[:24]} is too large to be a finite float: "
                                "give a realistic value")
        return value

    def parse_constant(name: str) -> float:
        if allow_non_finite:
            return float(name)
        raise UserFileError(f"{label}: {name} is not a number JSON allows: give a finite value")

    try:
        return json.loads(text, parse_int=parse_int, parse_float=parse_float, parse_constant=parse_constant)
    except json.JSONDecodeError as exc:
        raise UserFileError(f"{label}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    except RecursionError:  # the depth scan is the guard; this is the backstop
        raise UserFileError(f"{label}: nested too deeply: check it is the right file") from None


def load_json(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None,
              missing_hint: str = "check the path", allow_non_finite: bool = False) -> Any:
    text = read_text(path, what, max_bytes=max_bytes, missing_hint=missing_hint)
    return parse_json(text, f"{what} {path}", allow_non_finite=allow_non_finite)


# ---- YAML ---------------------------------------------------------------------------------------

class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader with a depth cap, an expanded-node budget (aliases count every time they are used)
    and an integer length cap. Nothing but plain data is constructed (no `!!python/...` tags)."""

    label = "YAML file"

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._weights: dict[int, int] = {}

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark
            raise UserFileError(f"{self.label}: nested deeper than {MAX_DEPTH} levels (line {mark.line + 1}): "
                                "check it is the right file")
        try:
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        weight = self._weights.get(id(node))
        if weight is None:
            if isinstance(node, yaml.SequenceNode):
                weight = 1 + sum(self._weights.get(id(child), 1) for child in node.value)
            elif isinstance(node, yaml.MappingNode):
                weight = 1 + sum(self._weights.get(id(k), 1) + self._weights.get(id(v), 1) for k, v in node.value)
            else:
                weight = 1
            self._weights[id(node)] = weight
        if weight > MAX_YAML_NODES:
            raise UserFileError(f"{self.label}: its aliases expand to over {MAX_YAML_NODES:,} values (line "
                                f"{node.start_mark.line + 1}): write the values out instead of nesting aliases")
        return node

    def construct_yaml_int(self, node: Any) -> int:
        digits = _int_digits(str(node.value))
        if len(digits.lstrip("0box")) > MAX_INT_DIGITS:
            raise _too_long_int(digits, self.label, f" (line {node.start_mark.line + 1})")
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


def parse_yaml(text: str, label: str) -> Any:
    loader_class = type("_Loader", (_BoundedLoader,), {"label": label})
    loader = None
    try:
        loader = loader_class(text)  # its reader refuses control characters here
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        first = str(exc).replace("\n", " ")
        raise UserFileError(f"{label}: not valid YAML ({' '.join(first.split())[:200]})") from None
    except RecursionError:
        raise UserFileError(f"{label}: nested too deeply: check it is the right file") from None
    finally:
        if loader is not None:
            loader.dispose()


def load_yaml(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None,
              missing_hint: str = "check the path") -> Any:
    return parse_yaml(read_text(path, what, max_bytes=max_bytes, missing_hint=missing_hint), f"{what} {path}")


# ---- TOML ---------------------------------------------------------------------------------------

_LONG_DIGITS = re.compile(r"(?<![\w.])[+-]?\d[\d_]{%d,}" % MAX_INT_DIGITS)


def parse_toml(text: str, label: str) -> dict[str, Any]:
    _check_depth(text, label)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserFileError(f"{label}: not valid TOML ({exc})") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit conversion limit
        found = _LONG_DIGITS.search(_QUOTED.sub('""', text))
        if found:
            raise _too_long_int(_int_digits(found.group()), label) from None
        raise UserFileError(f"{label}: not valid TOML ({str(exc)[:200]})") from None
    except RecursionError:
        raise UserFileError(f"{label}: nested too deeply: check it is the right file") from None
    _check_value_tree(data, label)
    return data


def load_toml(path: str | os.PathLike[str], what: str, *, max_bytes: int | None = None,
              missing_hint: str = "check the path") -> dict[str, Any]:
    return parse_toml(read_text(path, what, max_bytes=max_bytes, missing_hint=missing_hint), f"{what} {path}")


def load_structured(path: str | os.PathLike[str], what: str, *, suffixes: tuple[str, ...] = (".toml", ".yaml", ".yml", ".json"),
                    missing_hint: str = "check the path", max_bytes: int | None = None) -> Any:
    """A TOML, YAML or JSON file by its suffix."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in suffixes:
        raise UserFileError(f"{what} {p}: expected a {', '.join(suffixes)} file")
    text = read_text(p, what, max_bytes=max_bytes, missing_hint=missing_hint)
    label = f"{what} {p}"
    if suffix == ".toml":
        return parse_toml(text, label)
    if suffix == ".json":
        return parse_json(text, label)
    return parse_yaml(text, label)


# ---- CSV ----------------------------------------------------------------------------------------

def read_csv_rows(path: str | os.PathLike[str], what: str, *, max_bytes: int = MAX_CSV_BYTES,
                  missing_hint: str = "check the path") -> tuple[list[str], list[tuple[int, list[str]]]]:
    """(header, [(line number, cells)]) of a UTF-8 CSV, blank lines skipped."""
    label = f"{what} {path}"
    text = read_text(path, what, max_bytes=max_bytes, missing_hint=missing_hint)
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise UserFileError(f"{label}: empty file: expected a header row") from None
    except csv.Error as exc:
        raise UserFileError(f"{label}: row 1: unreadable CSV ({exc})") from None
    rows: list[tuple[int, list[str]]] = []
    try:
        for cells in reader:
            rows.append((reader.line_num, cells))
    except csv.Error as exc:
        raise UserFileError(f"{label}: row {reader.line_num}: unreadable CSV ({exc})") from None
    return header, rows


# ---- validation ---------------------------------------------------------------------------------

def validation_message(label: str, exc: ValidationError, describe: Callable[[tuple[Any, ...]], str] | None = None) -> str:
    """One line for a pydantic error: the file, where in it (via `describe`, default the dotted field), the problem."""
    error = exc.errors()[0]
    loc = tuple(error["loc"])
    where = describe(loc) if describe else ("field " + ".".join(str(p) for p in loc) if loc else "")
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field (check the spelling)"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{label}" + (f", {where}" if where else "") + f": {message}{more}"


def validate(model: type[BaseModel], data: Any, label: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise UserFileError(validation_message(label, exc)) from None


# ---- JSON output --------------------------------------------------------------------------------

def _first_non_finite(value: Any, where: str = "") -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return path or "the top level"
        if isinstance(item, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k)) for k, v in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, f"{path}.{i}" if path else str(i)) for i, v in enumerate(item))
    return None


def json_text(data: Any, what: str, *, indent: int | None = 1) -> str:
    """`data` as JSON: NaN/Infinity refused with the field named; non-UTF-8 user text as \\udcXX escapes."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="python")
    try:
        return json.dumps(data, indent=indent, allow_nan=False, ensure_ascii=True, default=_default)
    except ValueError as exc:
        if "Out of range float" not in str(exc):
            raise
        where = _first_non_finite(data)
        raise TrainwiseError(f"not writing {what}: `{where}` is not a finite number (inf or NaN): an input "
                             "out of range produced it; check the inputs for huge or zero values") from None


def _default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="python")
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if isinstance(value, Path):
        return os.fspath(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def write_json(path: str | os.PathLike[str], data: Any, what: str, *, indent: int | None = 1) -> Path:
    """Atomically write `data` as JSON (json_text's rules; OS errors become one-line errors)."""
    from trainwise._io import atomic_write_text

    return atomic_write_text(path, json_text(data, what, indent=indent) + "\n")


def printable(text: str) -> str:
    """`text` for a terminal: bytes that are not UTF-8 (surrogate escapes) shown as \\xNN."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


# ---- names that reach a shell, a YAML task or a cloud API --------------------------------------

SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:+-]{0,127}$")


def check_safe_name(value: str, what: str) -> str:
    """An instance type, region, zone, cloud or accelerator name: letters, digits and . _ : + -
    (every name in the cloud catalogs fits); anything else (spaces, quotes, `;`, `$(...)`) is refused."""
    if not isinstance(value, str) or not SAFE_NAME.match(value):
        shown = printable(str(value))[:60]
        raise UserFileError(f"{what} {shown!r} has characters a {what} cannot have: use letters, digits and . _ : + - "
                            "(up to 128, starting with a letter or digit)")
    return value
