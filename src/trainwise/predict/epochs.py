"""How many epochs a prediction or a plan is for: the one place that weighs the user's --epochs,
the training command's own epoch flag, a --full run's epochs to converge (Malta, methodology 1),
the epoch count the profiled script sets for itself, and the --epoch-options table (Malta,
methodology 2).

In order, the first that applies decides:
1. `--epochs N` (with a training command that sets its own count, the two must agree);
2. the training command's own flag (`plan save -- python train.py --epochs 3`);
3. `--epochs-from FULL.json` (predict): the epochs a complete run with early stopping needed;
4. without --epoch-options, the count every profiled script sets for itself (or, when `plan` profiles a
   reference workload here, the count that workload trains); a script bound by a step budget
   (`--max_steps`, nanoGPT's `max_iters`) trains that many optimizer steps: the epochs they make of the
   profile's iterations per epoch, when that is a whole number (within 2 %), and when it ends the run
   before the script's epoch count does;
5. the --epoch-options: each tabulated (predict), the largest the headline (plan).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainwise.core.profile import Profile
from trainwise.errors import TrainwiseError

DEFAULT_EPOCH_OPTIONS = (5, 10, 20)  # the table of Malta's methodology 2 when no count is known
# A step budget counts as whole epochs when rounding moves the run by at most this share of its steps.
WHOLE_EPOCHS_TOLERANCE = 0.02


@dataclass(frozen=True)
class EpochDecision:
    """`headline` is the count asked for (None: the largest of `options`); `says` is the line that
    tells the user where it came from (None when the user gave it)."""

    headline: int | None
    options: tuple[int, ...]
    says: str | None = None
    # predict only: a step budget that is no whole number of epochs, spread over `headline` epochs of this many
    iterations_per_epoch: int | None = None

    @property
    def counts(self) -> list[int]:
        """The counts to predict: the headline alone when there is one, else every option."""
        return [self.headline] if self.headline is not None else list(self.options)


def _epochs(count: int) -> str:
    return f"{count} epoch" + ("" if count == 1 else "s")


def decide_epochs(*, epochs: int | None, epoch_options: Sequence[int], epoch_options_given: bool,
                  profiles: Sequence[tuple[str, Profile]] = (), command: Sequence[str] | None = None,
                  epochs_from: Profile | None = None, workload_epochs: int | None = None,
                  what: str = "headline", iterations_per_epoch: int | None = None) -> EpochDecision:
    """The epoch count(s) of one `predict` or `plan` (see the module's docstring for the order).

    `profiles`: (where it was read, profile) of each profile the command predicts from (their scripts'
    own counts); `command`: the
    training command a saved plan will launch; `what`: how the line names the count ("epochs" for
    predict, "headline" for plan); `iterations_per_epoch`: predict's --iterations-per-epoch."""
    from trainwise.profile.schema import script_epochs_disagreement, script_epochs_of
    from trainwise.profile.script_epochs import epochs_in_command

    options = tuple(epoch_options)
    if epochs is not None and epochs < 1:
        raise TrainwiseError(f"--epochs must be a positive whole number (got {epochs}): pass e.g. --epochs 10")
    if epochs is not None and epochs_from is not None:
        raise TrainwiseError("--epochs and --epochs-from both give the epoch count: pass one of them")
    if command:
        found = epochs_in_command(command)
        if found is None:
            if epochs is None:
                # The command trains the script's default; a profile whose own command gave `--epochs N`
                # read that N, not the default, so nothing read what this command trains.
                for label, profile in profiles:
                    given = epochs_in_command(profile.command)
                    if profile.script_epochs is not None and given is not None:
                        raise TrainwiseError(
                            f"the training command gives no {given[1]}, but profile {label} read its "
                            f"{_epochs(given[0])} from its own command's {given[1]} {given[0]}: the saved plan cannot "
                            f"tell what this command trains; give plan --epochs N (the epochs this command trains), or "
                            f"put {given[1]} N in the command")
        else:
            command_epochs, flag = found
            if epochs is not None and epochs != command_epochs:
                raise TrainwiseError(f"--epochs {epochs} but the training command trains {flag} {command_epochs}: the "
                                     f"saved plan would predict a run the command does not do; drop trainwise's "
                                     f"--epochs, or change the command's {flag}")
            if epochs is None:
                return EpochDecision(command_epochs, options, f"{what}: {_epochs(command_epochs)}, the training "
                                                              f"command's {flag}")
    if epochs is not None:
        return EpochDecision(epochs, options)
    if epochs_from is not None:
        from trainwise.predict.same_machine import epochs_to_converge

        return EpochDecision(epochs_to_converge(epochs_from), options)
    if not epoch_options_given and not profiles and workload_epochs is not None:
        return EpochDecision(workload_epochs, options, f"{what}: {_epochs(workload_epochs)}, what the reference workload "
                                                       "trains; --epochs N plans another")
    if not epoch_options_given and profiles:
        own = script_epochs_of([profile for _, profile in profiles])
        command_steps = epochs_in_command(command, steps=True) if command else None
        budget = _step_budget([profile for _, profile in profiles], own.epochs if own else None, iterations_per_epoch,
                              what, command_steps)
        if budget is not None:
            return EpochDecision(budget[0], options, budget[1], budget[2])
        if own is not None:
            if what == "headline":
                says = f"headline: {_epochs(own.epochs)}, set by the script itself ({own.source}); --epochs N plans another"
            else:
                says = f"epochs: {own.epochs}, set by the script itself ({own.source}); --epochs N or --epoch-options predict others"
            return EpochDecision(own.epochs, options, says + _early_exits([profile for _, profile in profiles]))
        why = script_epochs_disagreement([profile for _, profile in profiles])
        if why:
            if what == "headline":
                return EpochDecision(None, options, f"headline: the largest --epoch-options; {why}: pass --epochs N")
            shown = ",".join(str(n) for n in options)
            return EpochDecision(None, options, f"epochs: {shown} (--epoch-options); {why}: pass --epochs N")
    return EpochDecision(None, options)


def _early_exits(profiles: Sequence[Profile]) -> str:
    """What else ends the script's epoch loop (early stopping), for the line that takes the script's epochs."""
    exits = next((p.epoch_loop_exits for p in profiles if p.epoch_loop_exits is not None), None)
    if exits is None:
        return ""
    tests = " or ".join(f"`{test}`" for test in exits.tests)
    return (f"; its epoch loop ({exits.where}) also leaves on {tests} (early stopping?): the run may stop sooner, "
            "when training decides, and the prediction runs every epoch")


def _step_budget(profiles: Sequence[Profile], own_epochs: int | None, iterations_per_epoch: int | None,
                 what: str, command_steps: tuple[int, str] | None = None) -> tuple[int | None, str, int | None] | None:
    """(epochs or None, the line saying why, iterations per epoch when predict spreads the steps over whole
    epochs) from the step budget every profiled script sets (`max_steps`, `max_iters`); None when there is none,
    or the script's epoch count ends the run first. `command_steps`: a saved plan's training command's own
    step flag (`--max_iters=4000`), which wins over what the profiled command set."""
    from trainwise.core.profile import ScriptIterations
    from trainwise.profile.schema import script_iterations_of

    budget = script_iterations_of(profiles)
    if command_steps is not None:
        budget = ScriptIterations(iterations=command_steps[0],
                                  source=f"the training command's {command_steps[1]} {command_steps[0]}")
    if budget is None:
        return None
    per_epoch = {iterations_per_epoch or p.dataset.iterations_per_epoch for p in profiles}
    if None in per_epoch or len(per_epoch) != 1:
        if own_epochs is not None:
            return None
        return None, (f"{what}: the script trains {budget.iterations:,} optimizer steps ({budget.source}), but the "
                      "profile does not know one epoch's iterations" + (" (the profiles differ)" if len(per_epoch) > 1
                                                                       else "") + ": pass --epochs N"), None
    (n_it,) = per_epoch
    if own_epochs is not None and own_epochs * n_it <= budget.iterations:
        return None  # the epoch count ends the run before the step budget does
    epochs = budget.iterations / n_it
    whole = max(1, round(epochs))
    of = f"{budget.iterations:,} optimizer steps ({budget.source}) over {n_it:,} iterations an epoch"
    if abs(whole * n_it - budget.iterations) <= WHOLE_EPOCHS_TOLERANCE * budget.iterations:
        rounded = "" if whole * n_it == budget.iterations else f", {whole * n_it:,} steps"
        again = "--epochs N plans another" if what == "headline" else "--epochs N or --epoch-options predict others"
        return whole, f"{what}: {_epochs(whole)}{rounded}, the script's {of}; {again}", None
    if what == "epochs":
        # Spread over the epochs it starts: the same steps, each epoch's start and end-of-epoch work counted
        # once per epoch begun (the last one partial: its end-of-epoch validation may not run).
        begun = math.ceil(epochs)
        spread = round(budget.iterations / begun)
        share = f"{epochs:.2f} epochs" if epochs >= 0.01 else "a small part of one epoch"
        return begun, (f"epochs: the script trains {of}, {share}: predicted as {_epochs(begun)} of {spread:,} "
                       f"iterations ({begun * spread:,} steps; one epoch start and end per epoch begun, the last one "
                       "partial); --epochs N predicts others"), spread
    return None, (f"{what}: the script trains {of}, {epochs:.2f} epochs, not a whole number: pass --epochs "
                  f"{int(epochs) + 1} for an upper bound, or --epochs {max(1, int(epochs))} for a lower one"), None
