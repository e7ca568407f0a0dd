"""How many passes the training loop makes, read from its source: a loop without a DataLoader, or one that draws
its batches from one with `next()` (trainwise.profile._loop_bound reads that one).

A loop that slices its batches out of one tensor (`for i in range(0, data.size(0) - 1, bptt)`, the PyTorch
examples' word_language_model) shows its epoch's length only when the epoch ends, and the profile would
otherwise wait out a whole epoch to learn it. The frame that ran the training step is found on the stack; the
`for` statement around the line it is at is parsed from its source, and when it iterates `range(...)` or
`enumerate(range(...))`, bare or in a tqdm progress bar (`tqdm(range(n))`, `trange(n)`), the range's arguments are
evaluated from the frame's variables by a small evaluator that only reads: names, integer arithmetic, `len()`,
`min`/`max`/`int`, a tensor's `.size(k)`/`.shape[k]` and attributes stored on an object or a module (never a property
or other code the script defines). The loop's own counter must then say that each of its passes was one training
iteration. Standard library only.
"""

from __future__ import annotations

import ast
import builtins
import functools
import linecache
import operator
import os
import sys
import types
from typing import Any

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
           ast.Mod: operator.mod}
_CALLS = {"len": len, "min": min, "max": max, "int": int}
_SIZED = (list, tuple, str, range, dict, bytes)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_MAX_SOURCE_BYTES = 2_000_000  # a generated file this large is no training loop worth parsing at a step boundary
_USER_FRAMES = 3  # the step may run in a helper the loop calls: look this many of the script's frames out


class _Refused(Exception):
    """The expression does something the reader does not evaluate."""


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _attribute(obj: Any, name: str) -> Any:
    if isinstance(obj, types.ModuleType):
        if name in vars(obj):
            return vars(obj)[name]
        raise _Refused(name)
    if name == "shape" and _is_tensor(obj):
        return obj.shape
    try:
        stored = object.__getattribute__(obj, "__dict__")  # not getattr: a class's __getattr__ is the script's code
    except AttributeError:
        raise _Refused(name) from None
    # Only a value stored on the object (argparse's Namespace, a config object): a name its class defines may
    # be a property, which runs the script's code
    if isinstance(stored, dict) and name in stored and not any(name in vars(k) for k in type(obj).__mro__):
        return stored[name]
    raise _Refused(name)


class _Reader:
    def __init__(self, frame: types.FrameType) -> None:
        self.scopes = (frame.f_locals, frame.f_globals, frame.f_builtins)

    def name(self, name: str) -> Any:
        for scope in self.scopes:
            if name in scope:
                return scope[name]
        raise _Refused(name)

    def value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            return self.name(node.id)
        if isinstance(node, ast.Attribute):
            return _attribute(self.value(node.value), node.attr)
        if isinstance(node, ast.Subscript):
            container, index = self.value(node.value), self.integer(node.slice)
            if isinstance(container, (tuple, list)):  # torch.Size is a tuple
                return container[index]
            raise _Refused("subscript")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](self.integer(node.left), self.integer(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -self.integer(node.operand)
        if isinstance(node, ast.Call) and not node.keywords:
            return self.call(node)
        raise _Refused(type(node).__name__)

    def integer(self, node: ast.AST) -> int:
        value = self.value(node)
        if type(value) is not int:
            raise _Refused("not an integer")
        return value

    def call(self, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "size":
            tensor = self.value(func.value)
            if not _is_tensor(tensor) or len(node.args) > 1:
                raise _Refused("size")
            return tensor.size(*(self.integer(arg) for arg in node.args))
        if isinstance(func, ast.Name) and func.id in _CALLS and self.name(func.id) is _CALLS[func.id]:
            if func.id == "len":
                (arg,) = node.args
                sized = self.value(arg)
                if not (isinstance(sized, _SIZED) or _is_tensor(sized)):
                    raise _Refused("len")
                return len(sized)
            return _CALLS[func.id](*(self.integer(arg) for arg in node.args))
        raise _Refused("call")


@functools.lru_cache(maxsize=4)
def _parsed(source: str) -> ast.Module:
    """A script's tree, parsed once for the frames and readings that ask (the same few files each time)."""
    return ast.parse(source)


def _innermost_loop(code: types.CodeType, lineno: int, kinds: tuple[type, ...] = (ast.For,)) -> Any:
    """The innermost loop of `kinds` (`for` by default) around `lineno` in the scope `code` runs (not one of an
    enclosing function's)."""
    return scope_and_innermost_loop(code, lineno, kinds)[1]


def scope_and_innermost_loop(code: types.CodeType, lineno: int, kinds: tuple[type, ...]) -> tuple[Any, Any]:
    """(the scope `code` runs: a function's node or the module's, the innermost loop of `kinds` around `lineno`
    in it); (None, None) when the source is not there."""
    lines = linecache.getlines(code.co_filename)
    if not lines or sum(len(line) for line in lines) > _MAX_SOURCE_BYTES:
        return None, None
    tree = _parsed("".join(lines))

    def inside(node: ast.AST) -> bool:
        return node.lineno <= lineno <= (node.end_lineno or node.lineno)

    scope: ast.AST = tree
    if code.co_name != "<module>":
        scopes = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name
                  and inside(node)]
        if not scopes:
            return None, None
        scope = max(scopes, key=lambda node: node.lineno)
    found: Any = None
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES) or not hasattr(node, "lineno") or not inside(node):
            continue
        if isinstance(node, kinds) and (found is None or node.lineno > found.lineno):
            found = node
        stack.extend(ast.iter_child_nodes(node))
    return scope, found


def _progress_bar(call: ast.AST, reader: _Reader) -> str | None:
    """"tqdm" for `tqdm(iterable, **options)` and "trange" for `trange(n, ...)` (`tqdm.tqdm`, `tqdm.auto.trange`, ...),
    the names being tqdm's own: a progress bar yields what it wraps, so its range is the loop's."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, (ast.Name, ast.Attribute)) and call.args):
        return None
    try:
        func = reader.value(call.func)
    except _Refused:
        return None
    name = str(getattr(func, "__name__", ""))
    if str(getattr(func, "__module__", "")).split(".")[0] != "tqdm":
        return None
    # tqdm's own classes and their range shorthands (tqdm.notebook's tqdm_notebook and tnrange, tqdm.rich's ...)
    return "tqdm" if name.startswith("tqdm") else "trange" if name.endswith("range") and name != "range" else None


def _loop_range(call: ast.AST, reader: _Reader) -> range:
    """The range a loop header iterates: `range(...)`, or one a tqdm progress bar wraps (`tqdm(range(n), desc=...)`,
    `trange(n)`)."""
    bar = _progress_bar(call, reader)
    if bar == "tqdm":
        call = call.args[0]
    elif bar == "trange":
        if not 1 <= len(call.args) <= 3:
            raise _Refused("trange")
        return range(*(reader.integer(arg) for arg in call.args))
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "range"
            and not call.keywords and 1 <= len(call.args) <= 3):
        raise _Refused("not a range loop")
    if reader.name("range") is not builtins.range:
        raise _Refused("range")
    return range(*(reader.integer(arg) for arg in call.args))


def _range_and_position(loop: ast.For, reader: _Reader) -> tuple[range, int]:
    """The loop's range, and the index of the pass now running (from the loop's own variables)."""
    call, target = loop.iter, loop.target
    enumerate_start = None
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "enumerate":
        if reader.name("enumerate") is not builtins.enumerate or call.keywords or not 1 <= len(call.args) <= 2:
            raise _Refused("enumerate")
        enumerate_start = reader.integer(call.args[1]) if len(call.args) == 2 else 0
        call = call.args[0]
    loop_range = _loop_range(call, reader)
    if enumerate_start is not None:
        if not (isinstance(target, ast.Tuple) and target.elts and isinstance(target.elts[0], ast.Name)):
            raise _Refused("enumerate target")
        return loop_range, reader.integer(target.elts[0]) - enumerate_start
    if not isinstance(target, ast.Name):
        raise _Refused("target")
    current = reader.integer(target)
    if current not in loop_range:
        raise _Refused("position")
    return loop_range, loop_range.index(current)


def _is_library(filename: str, skipped: tuple[str, ...]) -> bool:
    return filename.startswith(skipped) or filename.startswith("<")


def read_loop_length(iterations_done: int, skipped_dirs: tuple[str, ...]) -> tuple[int, str] | None:
    """(passes of the training loop, where it was read) when the loop running this training step iterates a range
    whose pass now running is iteration number `iterations_done` of its epoch (1-based); None otherwise.
    `skipped_dirs`: the frames of these packages (torch, trainwise) are not the script's."""
    for frame in script_frames(sys._getframe(1), skipped_dirs):
        code = frame.f_code
        try:
            loop = _innermost_loop(code, frame.f_lineno)
            if loop is not None:
                loop_range, position = _range_and_position(loop, _Reader(frame))
                if position + 1 == iterations_done:
                    where = f"{os.path.basename(code.co_filename)}:{loop.lineno}"
                    return len(loop_range), f"the training loop's range ({where}: {ast.unparse(loop.iter)})"
        except Exception:  # noqa: BLE001 - refused, or source that does not parse: the length stays unknown
            pass
    return None


def script_frames(frame: types.FrameType | None, skipped_dirs: tuple[str, ...]):
    """The script's frames from `frame` outwards, at most _USER_FRAMES of them: those of the packages in
    `skipped_dirs` (torch, trainwise) and of generated code are passed over."""
    skipped = tuple(os.path.join(os.path.realpath(d), "") for d in skipped_dirs)
    user_frames = 0
    while frame is not None and user_frames < _USER_FRAMES:
        if not _is_library(os.path.realpath(frame.f_code.co_filename), skipped):
            user_frames += 1
            yield frame
        frame = frame.f_back
