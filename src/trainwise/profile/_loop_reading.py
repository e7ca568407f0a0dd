"""What a loop without a DataLoader says of its own length, read from its source (trainwise.profile._loop_length:
a `range` header; trainwise.profile._loop_bound: a loop with none, and what leaves it), and the epoch taken from it
when waiting out the real one is too dear or cannot end. A mixin of the recorder.
"""

from __future__ import annotations

import math
import os

from trainwise.agent import stop_rule
from trainwise.profile._epoch_exits import read_epoch_loop_exits
from trainwise.profile._loop_bound import LoopBound, read_loop_bound
from trainwise.profile._loop_length import read_loop_length
from trainwise.profile._no_loader import _tensor_pass


class LoopReading:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _init_loop_reading(self) -> None:
        # The training loop's passes and where they were read (_loop_length), read once while sampling
        self._loop_passes: tuple[int, str] | None = None
        self._loop_passes_read = False
        # A loop with no length in its header (`while True`, `count()`), read beside it; checked again once waiting
        self._loop_bound: LoopBound | None = None
        self._loop_bound_checked = False
        self._periodic_until: int | None = None  # waiting to this iteration for the loop's every-K-passes test
        self.epoch_loop_exits: dict | None = None  # the epoch loop's own exits (early stopping), read once

    def _take_as_epoch(self, iterations: int, note: str) -> None:
        """The epoch's length is known without its end: sampling ends here, the epoch truncated at `iterations`
        (validation, if the script runs any after it, not timed)."""
        batches = iterations * max(1, self._most_batches_per_iteration)
        epoch = self.epochs[-1]
        epoch.update(end_s=self.iterations[-1]["end_s"], truncated=True, batches_per_epoch=batches)
        self.loaders["train"] = {**(self.loaders.get("train") or _tensor_pass(0)), "batches_per_pass": batches}
        self._waiting_for_epoch_end = False
        self.epoch1_truncated = True
        self._truncated_epoch = epoch["index"]
        self.notes.append(note)
        self._finish("sampled")

    def _take_step_budget_as_epoch(self) -> None:
        """No epoch boundary came within the profile's budget, but the script's step budget says how long the run
        is: its steps are taken as one epoch."""
        steps = int(self.script_iterations["iterations"])
        self._take_as_epoch(steps, f"no epoch boundary (a validation region) within the profile's share of the run: the "
                                   f"script's {steps:,} optimizer steps ({self.script_iterations['source']}) are taken "
                                   "as one epoch; validation it may run later is not timed")

    def _read_loop_passes(self) -> None:
        """Once, while sampling a loop without a DataLoader: its epoch's length from the loop's source."""
        self._loop_passes_read = True
        epochs = self.epochs
        if not epochs or epochs[-1]["end_s"] is not None or self._torch is None:
            return
        skipped = self._library_dirs()
        self._read_epoch_loop_exits()
        self._loop_passes = read_loop_length(int(epochs[-1]["iterations"]), skipped)
        if self._loop_passes is None and len(epochs) == 1:
            self._loop_bound = read_loop_bound(int(epochs[-1]["iterations"]), skipped)
        if self._loop_passes is not None or len(epochs) < 2 or self.script_epochs or self.script_iterations:
            return
        # Epochs have ended inside the loop around the step, and its counter counts every iteration of the run
        # (`for i in range(opt.steps)`, a prediction after each step): its range is the run's step budget.
        whole = read_loop_length(len(self.iterations), skipped)
        if whole is not None:
            self.note_script_iterations(whole[0], f"{whole[1]}, each pass an iteration, the epochs' validation inside",
                                        rank=())

    def _read_epoch_loop_exits(self) -> None:
        exits = read_epoch_loop_exits(self._library_dirs())
        if exits is not None:
            self.epoch_loop_exits = exits.as_record()

    def _library_dirs(self) -> tuple[str, ...]:
        return (os.path.dirname(self._torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def _loop_bound_ends_sampling(self) -> bool:
        """Sampled and waiting for an epoch boundary in a loop with no length in its header: read it again (an
        iteration or more after the first reading, so that its counter is seen to advance once an iteration). A test
        on the counter that ends the loop is the run's step budget, taken as one epoch. When something runs every K
        passes (`step % K`: a validation, or a log line), the usual wait for a validation region goes on (a tenth of
        the steps, --max-epoch-wait), ended sooner when the K-th pass comes and goes without one. A loop that ends only
        when training decides (a reward, a loss) has no epoch to wait for: sampling ends, and the note says what
        predict needs. True when sampling ended here."""
        if self._loop_bound is None or self.epochs_hint:
            return False
        n = int(self.epochs[-1]["iterations"])
        if self._loop_bound_checked:
            if self._periodic_until is None or n < self._periodic_until:
                return False
            bound = self._loop_bound
            seen = (f"its test every {bound.period:,} passes (`{bound.counter} % {bound.period}`) came at iteration "
                    f"~{n - 1:,} without a validation region")
            return self._end_at_loop_bound(bound, seen)
        self._loop_bound_checked = True
        first, later = self._loop_bound, read_loop_bound(n, self._library_dirs())
        if later is None or later.where != first.where or self._script_iterations_from_framework:
            return False
        self._loop_bound = later
        flag = self.script_iterations  # a step budget read from a flag or a global, or None
        if later.steps is not None and not first.advanced_with(later):
            return False  # its counter does not count iterations: the usual wait
        if later.steps is not None and later.per_epoch:
            # `for step in count()` run again by an epoch loop: its exit is the epoch's length, as a range's would be
            self._loop_passes = (later.steps, f"the training loop's exit ({later.where}: `{later.bound}`)")
            return self._loop_epoch_too_dear(int(self.epochs[-1]["index"]))
        if later.steps is not None:
            # a flag the loop agrees with, give or take its last step (nanoGPT's `iter_num > max_iters` runs
            # max_iters + 1), stands; one it does not test gives way to what the loop tests, which is what runs
            self._note_loop_steps(later)
        elif flag is not None:
            self.notes.append(f"{flag['source']} may not be what the training loop runs: {later.describe()}; "
                              f"predict takes the {int(flag['iterations']):,} steps, give predict --epochs 1 "
                              "--iterations-per-epoch N if it runs another count")
            return False
        if later.periodic:
            wait = later.passes_to_next_period()
            self._periodic_until = None if wait is None else n + wait + 2  # its region, the increment's margin
            return False
        return self._end_at_loop_bound(later, "")

    def _read_loader_loop(self) -> None:
        """Once, while sampling epoch 1 over a DataLoader: the loop around the step, whose exit may end a pass before
        the loader does (`if i >= args.max_batches: break`), or the run (`if step >= total: break`), or say how long
        a pass over a stream (an IterableDataset with no length) is."""
        self._loop_passes_read = True
        epoch = self.epochs[-1] if self.epochs else None
        if epoch is None or self._torch is None:
            return
        self._read_epoch_loop_exits()
        self._loop_bound = read_loop_bound(int(epoch["iterations"]), self._library_dirs(), loaders=True,
                                           run_iterations=len(self.iterations))

    def _loader_loop_length(self) -> None:
        """Sampling stops inside epoch 1 of a DataLoader pass: read its loop again (its counter must have advanced
        once an iteration). `enumerate`'s index tested against a bound gives the epoch's length when the loader's own
        is longer or unknown; a counter the loop adds one to gives the run's step budget, which over a stream is also
        one epoch (a stream shows no boundary before the run ends). So does a loop that draws its batches with `next()`:
        a range's length, or the exit of a `while` (a Trainer's `while self.step < self.train_num_steps`)."""
        first = self._loop_bound
        if first is None or self._loop_bound_checked:
            return
        self._loop_bound_checked = True
        epoch = self.epochs[-1]
        later = read_loop_bound(int(epoch["iterations"]), self._library_dirs(), loaders=True,
                                run_iterations=len(self.iterations))
        if later is None or later.steps is None or not first.advanced_with(later):
            return
        per_iteration = max(1, self._most_batches_per_iteration)
        known = epoch["batches_per_epoch"]
        source = later.source
        if later.per_epoch:
            if known is not None and later.steps * per_iteration >= known and not later.range_header:
                return  # the loader ends its pass first (a range drawing with next() runs on past a pass's end)
            steps = later.steps
            note = (f"{steps:,} iterations an epoch, read from {source}" if known is None else
                    f"{steps:,} iterations an epoch, drawn with next() from its DataLoaders whatever their passes (the "
                    f"loader's {known:,} batches; {source})" if later.range_header else
                    f"the training loop leaves each pass over its DataLoader after {steps:,} iterations, not the "
                    f"loader's {known:,} batches ({source})")
        else:
            if self._script_iterations_from_framework:
                return
            self._note_loop_steps(later)
            steps = self.planned_steps
            if known is not None or steps is None:
                return  # a sized loader keeps its epochs; the step budget ends the run where it comes first
            note = f"one epoch taken as the run's {steps:,} optimizer steps ({self.script_iterations['source']})"
        batches = steps * per_iteration
        epoch["batches_per_epoch"] = batches
        if self.loaders.get("train") is not None:
            self.loaders["train"]["batches_per_pass"] = batches
        self.notes.append(note if known is not None else
                          f"the training DataLoader has no length (an IterableDataset, a stream): {note}")

    def _note_loop_steps(self, bound: LoopBound) -> None:
        """The loop's step budget, unless a step flag it agrees with (give or take its last step) stands."""
        flag = self.script_iterations
        if flag is not None and abs(int(flag["iterations"]) - bound.steps) <= 1:
            return
        if flag is not None:
            self.notes.append(f"the training loop runs {bound.steps:,} optimizer steps ({bound.source}), not the "
                              f"{int(flag['iterations']):,} of {flag['source']}")
        self.note_script_iterations(bound.steps, bound.source, rank=(True, True, True, True))

    def _end_at_loop_bound(self, bound: LoopBound, seen: str) -> bool:
        """Sampling ends at a loop read by _loop_bound_ends_sampling: its step budget as one epoch, or, with none, a
        note of what ends it and what predict needs."""
        seen = f": {seen}" if seen else ""
        if bound.steps is not None:
            steps = self.planned_steps or bound.steps  # a flag the loop agrees with stands (above)
            self._take_as_epoch(steps, f"no DataLoader: {bound.describe()}, taken as one epoch of "
                                       f"{steps:,}{seen}; validation after the loop, if any, is not timed")
        else:
            self.notes.append(f"no DataLoader: {bound.describe()}, which no sample foresees{seen}; give predict --epochs "
                              "1 --iterations-per-epoch N with the optimizer steps you expect it to run")
            self._finish("sampled_no_dataloader")
        return True

    def _loop_epoch_too_dear(self, epoch: int) -> bool:
        """Sampling has stopped in a loop without a DataLoader whose length was read from its source: the epoch is
        waited out, to time the validation after it, only when that fits (stop_rule.epoch_end_too_dear). True when it
        did not and the profile ended here."""
        budget = self._budget_inputs(epoch)
        passes, source = self._loop_passes
        left = passes - int(self.epochs[-1]["iterations"])
        dear = stop_rule.epoch_end_too_dear(self.iterations.walls(), budget, self._stop_settings, left) \
            if budget is not None else None
        if dear is None:
            return False
        wait_s, needed = dear
        self._take_as_epoch(passes, f"no DataLoader: {passes:,} iterations an epoch, read from {source}; waiting out "
                                    f"the epoch's other {left:,} (~{wait_s:.0f} s) to time the validation after it "
                                    f"would cost {needed:.0%} of the predicted run, past the "
                                    f"{stop_rule.EPOCH_WAIT_SHARE:.0%} a profile waits for an epoch's end and past "
                                    f"--budget {self.budget_fraction:g}, so validation (if the script runs any after "
                                    f"the epoch) is not timed: --budget {math.ceil(needed * 100) / 100:g} times it")
        return True
