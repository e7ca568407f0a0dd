"""Would ending a training loop at once leave a name unbound that the script reads afterwards?

On resume, the epochs finished before the checkpoint are not run again: their training DataLoader
passes end at once, but the script's epoch loop still goes round them (its code before and after the
training loop runs). A script that uses a value of the loop's last batch after the loop,

    for xb, yb in train_loader:
        loss = loss_fn(model(xb), yb)
        ...
    print(f"epoch {epoch} loss {loss.item():.3f}")

then fails with NameError in the first skipped epoch. `loop_leaves_unbound` reads the source of the
frames that are starting the loop over the DataLoader (the script's, and any wrapper's such as a
progress bar's generator) and answers whether a name bound inside such a loop is read elsewhere in the
same function (or module) while not bound yet. The run agent then lets one batch through those
passes (the loop body runs once and binds its names; the checkpoint's state is loaded afterwards),
and ends the others at once as before.

The answer errs towards True (one batch more, never a crash): a source it cannot read, a read it
cannot place before or after the loop. Reads inside another `for` loop whose own target binds the
name (`for x, y in val_loader: ... x ...`) and names local to nested functions are not counted.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
from types import FrameType

# The agent's and the recorder's own hooks are on the stack between the script and DataLoader.__iter__.
# trainwise's own frames between the script's loop and the hook (the agent's patches live in several
# modules of the package); a symlinked copy of the package resolves to the same folder
_PACKAGE_DIR = os.path.join(os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "")


def _is_trainwise_file(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_PACKAGE_DIR)


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_trees: dict[str, ast.Module | None] = {}


def loop_leaves_unbound(frame: FrameType | None, max_frames: int = 50) -> bool:
    """True when a `for` loop being started in `frame` or one of its callers binds, inside its body, a
    name read outside that loop in the same scope and not bound at this moment; also True when a
    frame's source cannot be read."""
    depth = 0
    while frame is not None and depth < max_frames:
        filename = frame.f_code.co_filename
        if filename.startswith("<frozen") or _is_trainwise_file(filename):
            frame, depth = frame.f_back, depth + 1
            continue
        tree = _tree(filename, frame.f_globals)
        if tree is None:
            return True
        scope = _scope(tree, frame.f_code)
        if scope is None:
            return True
        line = frame.f_lineno or 0
        for loop in _loops_at(scope, line):
            leaked = (_bound_in_body(loop) & _reads_outside(scope, loop)) - _bound_now(frame)
            if leaked:
                return True
        frame, depth = frame.f_back, depth + 1
    return False


def _tree(filename: str, module_globals: dict) -> ast.Module | None:
    if filename not in _trees:
        lines = linecache.getlines(filename, module_globals)
        try:
            _trees[filename] = ast.parse("".join(lines), filename) if lines else None
        except (SyntaxError, ValueError):
            _trees[filename] = None
    return _trees[filename]


def _scope(tree: ast.Module, code) -> ast.AST | None:
    """The AST node whose code `code` runs: the module, or the function defined at its first line."""
    if code.co_name == "<module>":
        return tree
    if code.co_name.startswith("<") and code.co_name != "<lambda>":
        return ast.Module(body=[], type_ignores=[])  # a comprehension: no for statements of its own
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        name = node.name if not isinstance(node, ast.Lambda) else "<lambda>"
        if name == code.co_name and code.co_firstlineno in (first, node.lineno):
            return node
    return None


def _children(node: ast.AST):
    """Child nodes in the same scope: not into nested functions, lambdas, classes or comprehensions."""
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (*_SCOPES, *_COMPREHENSIONS)):
            yield child


def _walk(node: ast.AST):
    yield node
    for child in _children(node):
        yield from _walk(child)


def _loops_at(scope: ast.AST, line: int) -> list[ast.For | ast.AsyncFor]:
    """The for statements of this scope whose header (for ... in ...:) spans `line`."""
    return [node for node in _walk(scope) if isinstance(node, (ast.For, ast.AsyncFor))
            and node.lineno <= line <= (node.iter.end_lineno or node.lineno)]


def _bound(nodes: list[ast.AST]) -> set[str]:
    """Names these statements bind in their scope."""
    names: set[str] = set()
    for top in nodes:
        for node in _walk(top):
            if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.id)
            elif isinstance(node, ast.NamedExpr) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
            elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
                names.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                names.add(node.rest)
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(child.name)
    return names


def _bound_in_body(loop: ast.For | ast.AsyncFor) -> set[str]:
    # Not the else block: it runs when the loop ends, also when it ran no round.
    return _bound([loop.target, *loop.body])


def _function_locals(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    args = node.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    names.update(a.arg for a in (args.vararg, args.kwarg) if a is not None)
    body = node.body if isinstance(node.body, list) else [node.body]
    declared = {name for stmt in body for sub in _walk(stmt) if isinstance(sub, (ast.Global, ast.Nonlocal))
                for name in sub.names}
    return (names | _bound(body)) - declared


def _reads_outside(scope: ast.AST, loop: ast.AST) -> set[str]:
    """Names read in `scope` outside `loop`'s header and body, except where bound first for sure."""
    reads: set[str] = set()

    def visit(node: ast.AST, covered: frozenset[str]) -> None:
        if node is loop:
            for child in loop.orelse:  # runs after the loop
                visit(child, covered)
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            if node.id not in covered:
                reads.add(node.id)
            return
        if isinstance(node, (ast.For, ast.AsyncFor)):
            visit(node.iter, covered)
            inside = covered | _bound([node.target])  # its body runs only with its target bound
            for child in node.body:
                visit(child, inside)
            for child in node.orelse:
                visit(child, covered)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not scope:
            for child in (*getattr(node, "decorator_list", []), *node.args.defaults, *node.args.kw_defaults):
                if child is not None:
                    visit(child, covered)
            inside = covered | _function_locals(node)
            for child in (node.body if isinstance(node.body, list) else [node.body]):
                visit(child, inside)
            return
        if isinstance(node, _COMPREHENSIONS):
            inside = covered | _bound([gen.target for gen in node.generators])
            for child in ast.iter_child_nodes(node):
                visit(child, inside)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, covered)

    visit(scope, frozenset())
    return reads


def _bound_now(frame: FrameType) -> set[str]:
    if frame.f_code.co_name == "<module>":
        names = set(frame.f_globals)
    else:
        names = set(frame.f_locals)
    return names | set(dir(builtins))
