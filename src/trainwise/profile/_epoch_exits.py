"""The epoch loop's own exits, read from its source: early stopping (`if bad_epochs >= args.patience: break`), a
target accuracy, a wall-clock limit. A prediction runs every epoch the script names; such a test may end the run
sooner, when training decides, which no sample foresees, so the prediction says so. Standard library only; nothing of
the script runs.

The epoch loop is the loop around the loop that runs the step (in the same function), or, when the step's loop is the
innermost of its function, the innermost loop around the call in a caller (`for epoch in range(args.epochs):
train(...)`). Tests on the loop's own counter (its `for` target, a name it adds one to) are a count, not an exit
training decides, and are left out.
"""

from __future__ import annotations

import ast
import os
import sys
from dataclasses import dataclass

from trainwise.profile._loop_bound import _counter_increments, _leaves, _short, _walk_body
from trainwise.profile._loop_length import _SCOPES, scope_and_innermost_loop, script_frames

_LOOPS = (ast.For, ast.While)
MAX_TESTS = 3


@dataclass(frozen=True)
class EpochLoopExits:
    where: str  # "train.py:120: for epoch in range(args.epochs)"
    tests: tuple[str, ...]  # the tests that leave it, as written

    def as_record(self) -> dict:
        return {"where": self.where, "tests": list(self.tests)}


def _enclosing_loop(scope: ast.AST, loop: ast.AST) -> ast.AST | None:
    """The innermost `for`/`while` of `scope` (not crossing into nested functions) that holds `loop`."""
    found = None
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        node = stack.pop()
        if isinstance(node, _SCOPES) or node is loop:
            continue
        if isinstance(node, _LOOPS) and node.lineno < loop.lineno <= (node.end_lineno or node.lineno):
            if found is None or node.lineno > found.lineno:
                found = node
        stack.extend(ast.iter_child_nodes(node))
    return found


def _counts(loop: ast.AST) -> set[str]:
    """Names the loop counts with: its `for` target's names and what its body adds one to."""
    names = set(_counter_increments(loop.body))
    if isinstance(loop, ast.For):
        names |= {node.id for node in ast.walk(loop.target) if isinstance(node, ast.Name)}
    return names


def _exit_tests(loop: ast.AST) -> tuple[str, ...]:
    counts = _counts(loop)
    tests = []
    for node in _walk_body(loop.body):
        if not (isinstance(node, ast.If) and _leaves(node.body)):
            continue
        names = {n.id for n in ast.walk(node.test) if isinstance(n, ast.Name)}
        names |= {f"{n.value.id}.{n.attr}" for n in ast.walk(node.test)
                  if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
        if not names & counts:
            tests.append((node.lineno, _short(node.test)))
    return tuple(text for _, text in sorted(tests)[:MAX_TESTS])


def read_epoch_loop_exits(skipped_dirs: tuple[str, ...]) -> EpochLoopExits | None:
    """The exits of the loop around the training step's loop, when it has any besides its count; called from inside
    the step (the script's frames are read outwards from the caller's)."""
    stepped = False
    for frame in script_frames(sys._getframe(1), skipped_dirs):
        try:
            scope, loop = scope_and_innermost_loop(frame.f_code, frame.f_lineno, _LOOPS)
            if loop is None:
                continue
            if not stepped:
                stepped = True
                loop = _enclosing_loop(scope, loop)
                if loop is None:
                    continue  # the step's loop is its function's outermost: the epoch loop is a caller's
            tests = _exit_tests(loop)
            if not tests:
                return None
            header = f"while {_short(loop.test)}" if isinstance(loop, ast.While) else \
                f"for {_short(loop.target)} in {_short(loop.iter)}"
            return EpochLoopExits(f"{os.path.basename(frame.f_code.co_filename)}:{loop.lineno}: {header}", tests)
        except Exception:  # noqa: BLE001 - source that does not parse: nothing is known
            return None
    return None
