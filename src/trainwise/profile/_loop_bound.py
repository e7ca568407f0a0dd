"""A training loop with no length in its header (`while True:`, `for step in itertools.count():`, `while step <
max_steps:`, or a DataLoader's loop that leaves before the loader ends, or a range loop that draws its batches from a
DataLoader with `next()`), read from its source: where it stops, if a counter says so.

Such a loop runs until a statement inside it leaves (`if step >= 60000: break`, `return`) or, for `while`, until its
test fails. When that test compares a counter that advances once a pass with an expression the small evaluator of
trainwise.profile._loop_length can read (names, integer arithmetic, attributes stored on a settings object), the run's
step budget follows from the counter's value now and where the test sits against the step; a test that reads
anything else (a running reward, a loss) ends the run when training decides, which no sample foresees, and is named
so that the user can say how long they expect it to run. Standard library only; nothing of the script runs.
"""

from __future__ import annotations

import ast
import itertools
import os
import sys
from dataclasses import dataclass

from trainwise.profile._loop_length import (_SCOPES, _innermost_loop, _range_and_position, _Reader, _Refused,
                                            scope_and_innermost_loop, script_frames)

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef, ast.For, ast.AsyncFor, ast.While)
# the test is checked as `counter OP bound` (the counter on the left): the smallest counter value that leaves
_LEAVES_AT = {ast.GtE: 0, ast.Eq: 0, ast.Gt: 1}
_MIRROR = {ast.Lt: ast.Gt, ast.LtE: ast.GtE, ast.Gt: ast.Lt, ast.GtE: ast.LtE, ast.Eq: ast.Eq}
_FLIP = {ast.Lt: ast.GtE, ast.LtE: ast.Gt, ast.Gt: ast.LtE, ast.GtE: ast.Lt, ast.NotEq: ast.Eq, ast.Eq: ast.NotEq}
_SOURCE_CHARS = 80


@dataclass(frozen=True)
class LoopBound:
    """What the source says of the loop around the training step."""

    where: str  # "train.py:7: for step in itertools.count(1)"
    counter: str | None  # what advances once a pass (the `count()` target, `step += 1`, a Trainer's `self.step += 1`)
    counter_value: int | None  # its value at the step when read
    iterations_done: int  # the run's iterations when read (1-based: the one now ending counts)
    steps: int | None  # the run's optimizer steps, when a test on the counter ends the loop
    bound: str | None  # that test, as written
    other_exits: tuple[str, ...]  # tests that end the loop on something else (a loss, a reward)
    periodic: bool  # a test reads `counter % K`: something runs every K passes (validation, a checkpoint, a log)
    period: int | None = None  # the largest such K the evaluator reads (by its next multiple, every test has come)
    # The counter is the loop header's own (a `count()` target, `enumerate`'s index): it starts again each time the
    # loop runs, so `steps` are one run of the loop, an epoch when another loop (here or in a caller) runs it again
    header_counter: bool = False
    enclosed: bool = False  # another loop, in this function or a caller's, runs this one
    loader: str | None = None  # the loop iterates a DataLoader: "stream" (no length: an IterableDataset), "sized"
    # The loop iterates a range (in a tqdm bar or not) and draws its batches from a DataLoader with `next()`
    # (lucidrains' `for i in tqdm(range(NUM_BATCHES)): loss = model(next(train_loader))` over an endless `cycle`):
    # its length is in its header, and the loader's passes are not its epochs
    range_header: bool = False

    @property
    def per_epoch(self) -> bool:
        """`steps` are the passes of one run of the loop (an epoch's iterations), not the whole run's."""
        return self.header_counter and (self.enclosed or self.loader is not None)

    def passes_to_next_period(self) -> int | None:
        """Passes from the one now ending until the counter is next a multiple of `period` (the next periodic test
        that holds), give or take the one the counter's increment shifts it by."""
        if self.period is None or self.counter_value is None:
            return None
        return (-self.counter_value) % self.period or self.period

    def advanced_with(self, later: LoopBound) -> bool:
        """The counter advanced by exactly the iterations run between this reading and `later`'s: one a pass."""
        return (self.counter is not None and later.counter == self.counter and self.counter_value is not None
                and later.counter_value is not None and later.where == self.where
                and later.counter_value - self.counter_value == later.iterations_done - self.iterations_done > 0)

    @property
    def source(self) -> str:
        """Where the step count was read, for notes."""
        if self.range_header and self.bound is None:
            return f"the training loop's range ({self.where})"
        return f"the training loop's exit ({self.where}: `{self.bound}`)"

    def describe(self) -> str:
        if self.steps is not None and self.range_header and self.bound is None:
            per = " each time it runs" if self.per_epoch else ""
            return f"the training loop ({self.where}) runs {self.steps:,} iterations{per}"
        if self.steps is not None:
            exits = f"; it may leave earlier: {' or '.join(self.other_exits)}" if self.other_exits else ""
            per = " each time it runs" if self.per_epoch else ""
            return f"the training loop ({self.where}) stops at `{self.bound}`: {self.steps:,} iterations{per}{exits}"
        ends = f"ends when {' or '.join(self.other_exits)}" if self.other_exits else "has no exit in its code"
        return f"the training loop ({self.where}) has no length in its code: it {ends}"


def _short(node: ast.AST) -> str:
    text = ast.unparse(node)
    return text if len(text) <= _SOURCE_CHARS else text[: _SOURCE_CHARS - 3] + "..."


def _is_count(node: ast.AST, reader: _Reader) -> bool:
    """`count(...)` or `itertools.count(...)`, when the name is itertools' own."""
    if not isinstance(node, ast.Call) or node.keywords:
        return False
    try:
        return reader.value(node.func) is itertools.count  # a module's attribute is read from its namespace
    except _Refused:
        return False


def _loader_kind(node: ast.AST, reader: _Reader) -> str | None:
    """For `loader` or `enumerate(loader[, start])`, `loader` a DataLoader: "stream" when it has no length (an
    IterableDataset without one: the loop's length is not in its header), else "sized"; None for anything else.
    Only stored values are read (nothing of the script runs)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "enumerate" and node.args:
        if reader.name("enumerate") is not enumerate:
            return None
        node = node.args[0]
    data = sys.modules.get("torch.utils.data")
    if data is None or not isinstance(node, (ast.Name, ast.Attribute)):
        return None
    try:
        loader = reader.value(node)
    except _Refused:
        return None
    if not isinstance(loader, data.DataLoader):
        return None
    dataset = vars(loader).get("dataset")
    return "stream" if isinstance(dataset, data.IterableDataset) and not hasattr(type(dataset), "__len__") else "sized"


def _enclosed(tree_scope: ast.AST, loop: ast.AST) -> bool:
    """`loop` sits inside another `for`/`while` of the same function."""
    stack: list[tuple[ast.AST, bool]] = [(child, False) for child in ast.iter_child_nodes(tree_scope)]
    while stack:
        node, inside = stack.pop()
        if node is loop:
            return inside
        if isinstance(node, _SCOPES):
            continue
        looping = inside or isinstance(node, (ast.For, ast.AsyncFor, ast.While))
        stack.extend((child, looping) for child in ast.iter_child_nodes(node))
    return False


def _walk_body(body: list[ast.stmt]):
    """The loop body's nodes, not those of a nested loop (its `break` leaves only it) or function."""
    stack = [node for node in body if not isinstance(node, _NESTED)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(child for child in ast.iter_child_nodes(node) if not isinstance(child, _NESTED))


def _leaves(statements: list[ast.stmt]) -> bool:
    return any(isinstance(statement, (ast.Break, ast.Return)) for statement in statements)


def _counter_name(node: ast.AST) -> str | None:
    """A counter as written: a name (`step`) or an attribute of one (`self.step`: a Trainer class's own count, as
    lucidrains' denoising-diffusion-pytorch keeps it); None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _counter_increments(body: list[ast.stmt]) -> dict[str, int | None]:
    """Counters the loop body adds one to unconditionally (`step += 1`, `self.step += 1`, at its top level or in a
    `with`): their lines."""
    found: dict[str, int] = {}
    stack = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.With):
            stack.extend(node.body)
        elif (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and _counter_name(node.target)
              and isinstance(node.value, ast.Constant) and node.value.value == 1):
            found[_counter_name(node.target)] = node.lineno
    return found


def _comparison(test: ast.AST, counter: str) -> tuple[type, ast.AST] | None:
    """(operator, bound) of `counter OP bound` or `bound OP counter` (mirrored to the counter's side)."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return None
    left, op, right = test.left, type(test.ops[0]), test.comparators[0]
    if _counter_name(left) == counter:
        return op, right
    if _counter_name(right) == counter and op in _MIRROR:
        return _MIRROR[op], left
    return None


class _Analysis:
    """One loop's exits, read against the frame's values at the step's line."""

    def __init__(self, loop: ast.For | ast.While, reader: _Reader, step_line: int, iterations_done: int) -> None:
        self.loop, self.reader, self.step_line, self.done = loop, reader, step_line, iterations_done
        self.counter: str | None = None
        self.increment_line: int | None = None  # None: the counter advances between passes (a `for` target)
        self.steps: int | None = None
        self.bound: str | None = None
        self.other_exits: list[str] = []

    def exits(self) -> list[tuple[ast.AST, int]]:
        """(test, line) of every test that leaves the loop: `while`'s own (checked before each pass), then each `if`
        whose body breaks or returns."""
        found: list[tuple[ast.AST, int]] = []
        if isinstance(self.loop, ast.While) and not (isinstance(self.loop.test, ast.Constant) and self.loop.test.value):
            found.append((_negated(self.loop.test), self.loop.lineno))
        for node in _walk_body(self.loop.body):
            if isinstance(node, ast.If) and _leaves(node.body):
                found.append((node.test, node.lineno))
        return sorted(found, key=lambda pair: pair[1])

    def counter_value(self) -> int | None:
        if self.counter is None:
            return None
        try:
            return self.reader.integer(ast.parse(self.counter, mode="eval").body)  # `step`, or `self.step`
        except _Refused:
            return None

    def steps_left(self, op: type, bound: int, check_line: int) -> int | None:
        """Steps still to run after the one now ending, when the loop leaves at the first pass whose check finds
        `counter OP bound` (ops mirrored to >=, >, ==). Pass k from now sees the counter at a line X as
        value + k + [X after the increment] - [the step after the increment]."""
        value = self.counter_value()
        if value is None or op not in _LEAVES_AT:
            return None
        inc = self.increment_line if self.increment_line is not None else -1
        shift = int(check_line > inc) - int(self.step_line > inc)
        first_pass = 0 if check_line > self.step_line else 1  # a check before the step has run in this pass
        leaving = max(first_pass, bound + _LEAVES_AT[op] - value - shift)
        if op is ast.Eq and bound - value - shift < first_pass:
            return None  # the counter is already past the value it waits for: that test never ends this loop
        # the pass that leaves runs its step only when its check comes after the step
        return leaving if check_line > self.step_line else leaving - 1

    def read(self) -> None:
        """The loop's counter (of several names the body adds one to, the one an exit test compares: nanoGPT counts
        `iter_num` and `local_iter_num`), the step budget its exit tests give, and the exits on anything else."""
        loop = self.loop
        candidates = _counter_increments(loop.body)
        header = _header_counter(loop)
        if header is not None:
            candidates = {header: None, **{name: line for name, line in candidates.items() if name != header}}
        read: list[_Analysis] = []
        for name, line in candidates.items():
            trial = _Analysis(loop, self.reader, self.step_line, self.done)
            trial.counter, trial.increment_line = name, line
            trial._read_exits()
            read.append(trial)
        chosen = min((trial for trial in read if trial.steps is not None), key=lambda trial: trial.steps, default=None)
        if chosen is None:
            if len(read) == 1:
                chosen = read[0]
            else:
                self._read_exits()
                return
        self.counter, self.increment_line = chosen.counter, chosen.increment_line
        self.steps, self.bound, self.other_exits = chosen.steps, chosen.bound, chosen.other_exits

    @property
    def header_counter(self) -> bool:
        return self.counter is not None and self.counter == _header_counter(self.loop)

    def _read_exits(self) -> None:
        remaining: list[tuple[int, str]] = []
        for test, line in self.exits():
            if self._never_again(test, line):
                continue
            operands = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
            for operand in operands:
                pair = _comparison(operand, self.counter) if self.counter else None
                left = None
                if pair is not None:
                    try:
                        left = self.steps_left(pair[0], self.reader.integer(pair[1]), line)
                    except _Refused:
                        pass
                if left is not None and left >= 0:
                    remaining.append((left, _short(operand)))
                else:
                    self.other_exits.append(f"`{_short(operand)}`")
        if remaining:
            left, text = min(remaining)
            self.steps, self.bound = self.done + left, text

    def _never_again(self, test: ast.AST, line: int) -> bool:
        """An `and` of a counter test that cannot hold from now on (nanoGPT's `iter_num == 0 and eval_only`)."""
        if not (self.counter and isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)):
            return False
        for operand in test.values:
            pair = _comparison(operand, self.counter)
            if pair is not None and pair[0] is ast.Eq:
                try:
                    if self.steps_left(ast.Eq, self.reader.integer(pair[1]), line) is None:
                        return True
                except _Refused:
                    continue
        return False

    def periods(self) -> tuple[bool, int | None]:
        """(a test reads `counter % K`, the largest K read) over the loop body: nanoGPT logs every pass and evaluates
        every 250th."""
        moduli = [node.right for node in _walk_body(self.loop.body)
                  if self.counter is not None and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)
                  and _counter_name(node.left) == self.counter]
        read = []
        for modulus in moduli:
            try:
                value = self.reader.integer(modulus)
            except _Refused:
                continue
            if value > 0:
                read.append(value)
        return bool(moduli), max(read) if read else None


def _negated(test: ast.AST) -> ast.AST:
    """What leaves a `while` loop: its test failing, written as a test that holds (`step < n` -> `step >= n`,
    `not done` -> `done`, `a and b` -> `not a or not b`)."""
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _FLIP:
        return ast.Compare(left=test.left, ops=[_FLIP[type(test.ops[0])]()], comparators=test.comparators)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return test.operand
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return ast.BoolOp(op=ast.Or(), values=[_negated(value) for value in test.values])
    return ast.UnaryOp(op=ast.Not(), operand=test)


def _header_counter(loop: ast.AST) -> str | None:
    """The counter a `for` header makes: `step` of `for step in count()`, `i` of `for i, batch in enumerate(...)`."""
    if not isinstance(loop, ast.For):
        return None
    if isinstance(loop.iter, ast.Call) and isinstance(loop.iter.func, ast.Name) and loop.iter.func.id == "enumerate":
        first = loop.target.elts[0] if isinstance(loop.target, ast.Tuple) and loop.target.elts else None
        return first.id if isinstance(first, ast.Name) else None
    return loop.target.id if isinstance(loop.target, ast.Name) else None


def _unbounded(loop: ast.For | ast.While, reader: _Reader) -> bool:
    """A loop whose own header sets no length: `while ...` (any test) or `for ... in count(...)`."""
    if isinstance(loop, ast.While):
        return True
    return _is_count(loop.iter, reader)


def _range_reading(loop: ast.For, reader: _Reader, iterations_done: int,
                   run_iterations: int | None, enclosed: bool = False) -> tuple[int, int, bool] | None:
    """For a range loop (bare or in a tqdm bar) whose pass now running is this epoch's or this run's iteration number
    `iterations_done` / `run_iterations`: (its passes, the pass's index, whether it matched the epoch's count); None
    for another loop or a counter that does not count iterations. A range another loop runs again (`enclosed`) may be
    in a later run of it: the run's iterations are then whole runs of the range and this pass, and the index given is
    the run's (FixMatch's epochs of `range(eval_step)` over loaders whose passes are not its epochs)."""
    try:
        loop_range, position = _range_and_position(loop, reader)
    except _Refused:
        return None
    if position + 1 == iterations_done or (run_iterations is not None and position + 1 == run_iterations):
        return len(loop_range), position, position + 1 == iterations_done
    if (enclosed and run_iterations is not None and len(loop_range) > 0 and run_iterations > position + 1
            and (run_iterations - position - 1) % len(loop_range) == 0):
        return len(loop_range), run_iterations - 1, False
    return None


def read_loop_bound(iterations_done: int, skipped_dirs: tuple[str, ...], *, loaders: bool = False,
                    run_iterations: int | None = None) -> LoopBound | None:
    """What the source says of the loop around this training step when it has no length in its header; None when it
    has one (a `range`, a DataLoader) or no loop of the script's is found. With `loaders` (the step's batches come from
    a DataLoader), a loop over a DataLoader is read too (its exit may end a pass before the loader does, or the run),
    and so is a range loop that draws its batches with `next()` (its range is what runs, whatever the loader's passes).
    `iterations_done`: the iterations of this run of the loop so far (the epoch's), the one now ending counted;
    `run_iterations`: the run's. `skipped_dirs`: the frames of these packages (torch, trainwise) are not the script's."""
    frames = list(script_frames(sys._getframe(1), skipped_dirs))
    for index, frame in enumerate(frames):
        code = frame.f_code
        try:
            scope, loop = scope_and_innermost_loop(code, frame.f_lineno, (ast.For, ast.While))
            if loop is None:
                continue
            reader = _Reader(frame)
            loader = _loader_kind(loop.iter, reader) if loaders and isinstance(loop, ast.For) else None
            enclosed = _enclosed(scope, loop) or any(_innermost_loop(outer.f_code, outer.f_lineno, (ast.For, ast.While))
                                                     is not None for outer in frames[index + 1:])
            ranged = _range_reading(loop, reader, iterations_done, run_iterations, enclosed) \
                if loaders and not loader and isinstance(loop, ast.For) else None
            if not (loader or ranged or _unbounded(loop, reader)):
                return None  # a loop with a length in its header: trainwise.profile._loop_length reads it
            done = ranged[1] + 1 if ranged else iterations_done  # the count the range's position matched
            analysis = _Analysis(loop, reader, frame.f_lineno, done)
            analysis.read()
            if (not ranged and run_iterations is not None and run_iterations != done and analysis.counter is not None
                    and not analysis.header_counter):
                # a count the body keeps (`self.step += 1`) counts the run's iterations, not a loader pass's: a Trainer
                # drawing from a small loader's cycle starts a pass every few steps
                done = run_iterations
                analysis = _Analysis(loop, reader, frame.f_lineno, done)
                analysis.read()
            periodic, period = analysis.periods()
            header = f"while {_short(loop.test)}" if isinstance(loop, ast.While) else \
                f"for {_short(loop.target)} in {_short(loop.iter)}"
            steps, bound, counter_value = analysis.steps, analysis.bound, analysis.counter_value()
            header_counter = analysis.header_counter
            if ranged:
                passes, position, epoch_counted = ranged
                if steps is None or steps >= passes:  # an exit on the counter before the range ends shortens it
                    steps, bound = passes, None
                # the counter's position in the range, for advanced_with; a range begun before this epoch counts the run,
                # unless another loop runs it again (FixMatch's `for batch_idx in range(args.eval_step)` inside its epoch
                # loop, drawing from loaders it restarts: their passes are not its epochs)
                counter_value, header_counter = position, epoch_counted or enclosed
            return LoopBound(where=f"{os.path.basename(code.co_filename)}:{loop.lineno}: {header}",
                             counter=analysis.counter, counter_value=counter_value,
                             iterations_done=done, steps=steps, bound=bound,
                             other_exits=tuple(dict.fromkeys(analysis.other_exits)), periodic=periodic, period=period,
                             header_counter=header_counter, enclosed=enclosed, loader=loader,
                             range_header=ranged is not None)
        except Exception:  # noqa: BLE001 - source that does not parse or a value refused: nothing is known
            return None
    return None
