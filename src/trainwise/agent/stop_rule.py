"""When a sampled profile has seen enough of epoch 1: the stability test, the iteration and time caps,
and the cost budget. A pure function of the iterations so far (no torch, no clock of its own), so that
it is tested with synthetic iteration times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from trainwise.core import stats  # standard library only (.importlinter: agent-side-stdlib)

# The cost budget aims this much under the cap: the full run it is a fraction of is itself a
# prediction, and spending exactly the cap put the median cost at 2.03 % of a 2 % budget in the
# same-machine benchmark of 2026-11-25 17:00 (runs that came out faster than predicted overshoot)
BUDGET_MARGIN = 0.05
# Sampling's own share of the budget: the part of `budget_fraction` of the predicted run that sampled
# iterations may use even when start-up alone has spent the whole budget (a run of a few minutes). Half:
# a 10-minute run whose start-up takes under half its budget (6 s) still costs at most the budget.
SAMPLING_SHARE = 0.5
# The profile's end after its last timed step: the record written, the process ended, the launcher ending the job's
# helper processes (DataLoader workers): 0.07-0.31 s in five profile-only runs of the client loops (2026-11-28).
END_RESERVE_S = 0.25
# A loop without a DataLoader cannot be made to end its epoch: the profile may wait this share of the predicted run
# (or its --budget, if larger) for the epoch's end, to time the validation after it; beyond it the epoch is taken
# as known without its end. A tenth: nanoGPT validates every 250 of its 5,000 steps (5 %), and a 40-epoch word
# language model's epoch is 2.5 % of its run.
EPOCH_WAIT_SHARE = 0.1
# Iterations the next one's time is predicted from (their median).
NEXT_ITERATION_WINDOW = 5
# Steady iterations (past warm-up) after which the cost budget may stop sampling even before `min_iterations`, once
# they have lasted LONG_SAMPLE_S (steps of 2 s or more): twenty multi-second steps can cost several times the budget
# (the PyTorch examples' graph attention network, 300 full-batch epochs of ~3 s steps and 1 s of validation: 6.5 % of
# its run for seventeen). Shorter steps keep the twenty: five 0.3-s steps (a ResNet-18 twin on MNIST) are 1.5 s of
# a host whose level wanders ±25 % over 3-s windows (the 2-core VM; a 29 % error on that example, 2026-11-29).
MIN_BUDGET_ITERATIONS = 5
LONG_SAMPLE_S = 10.0


@dataclass(frozen=True)
class StopSettings:
    min_iterations: int = 20
    max_iterations: int = 5000
    max_seconds: float = 60.0
    min_seconds: float = 0.0
    min_budget_seconds: float = 0.0
    min_budget_iterations: int = MIN_BUDGET_ITERATIONS
    averaging_seconds: float = 0.0
    target_relative_ci: float = 0.02
    max_relative_drift: float = 0.05
    budget_fraction: float = 0.02
    validation_batches: int = 10
    epoch2_iterations: int = 5
    end_reserve_s: float = END_RESERVE_S


@dataclass(frozen=True)
class BudgetInputs:
    """What the cost budget needs: the planned run and where the profile stands."""
    planned_epochs: int | None
    batches_per_epoch: int | None
    batches_per_iteration: float
    init_s: float  # launch → first iteration start
    now_s: float  # launch → now: the profile's cost so far
    planned_iterations: int | None = None  # the script's step budget (`max_steps`), when it has one
    # Spent again after sampling stops, measured on the way in: the loader's start to its first batch (workers
    # starting, the first fetch) for the next epoch's start, and the level probe after the sampled steps.
    epoch_start_s: float = 0.0
    probe_after_s: float = 0.0
    epoch: int = 0  # the epoch being sampled (0-based)


@dataclass(frozen=True)
class StopDecision:
    reason: str | None  # None: go on sampling
    stable: bool
    warmup_iterations: int
    relative_ci95_halfwidth: float
    relative_drift: float

    def as_record(self, iterations: int) -> dict:
        return {"reason": self.reason, "iterations": iterations, "warmup_iterations": self.warmup_iterations,
                "relative_ci95_halfwidth": self.relative_ci95_halfwidth, "relative_drift": self.relative_drift,
                "stable": self.stable}


def run_known(budget: BudgetInputs | None) -> bool:
    """The planned run's length in iterations is known (its epochs and batches per epoch, or its step budget)."""
    return budget is not None and (bool(budget.planned_iterations)
                                   or (bool(budget.planned_epochs) and bool(budget.batches_per_epoch)))


def iterations_per_epoch(budget: BudgetInputs) -> float | None:
    """Optimizer steps per epoch (with gradient accumulation an iteration consumes several batches)."""
    return budget.batches_per_epoch / max(1.0, budget.batches_per_iteration) if budget.batches_per_epoch else None


def run_iterations(budget: BudgetInputs) -> float:
    """The planned run's iterations: its epochs' or its step budget, whichever ends it first."""
    counts = [float(budget.planned_iterations)] if budget.planned_iterations else []
    per_epoch = iterations_per_epoch(budget)
    if budget.planned_epochs and per_epoch:
        counts.append(per_epoch * float(budget.planned_epochs))
    return min(counts)


def run_goes_past(budget: BudgetInputs, epoch: int) -> bool:
    """The planned run goes on past epoch `epoch` (0-based), by its planned epochs and by its step budget (minGPT's
    endless sampler: an epoch of 10^10 samples, a run of 1,500 steps, ends inside its first)."""
    if budget.planned_epochs is not None and epoch >= budget.planned_epochs - 1:
        return False
    per_epoch = iterations_per_epoch(budget)
    if budget.planned_iterations and per_epoch:
        return budget.planned_iterations > (epoch + 1) * per_epoch
    return True


def predicted_full_run_s(times_s: Sequence[float], budget: BudgetInputs) -> float | None:
    if not run_known(budget) or not times_s:
        return None
    return budget.init_s + _steady_mean_s(times_s) * run_iterations(budget)


def epoch2_iterations_to_time(budget: BudgetInputs | None, settings: StopSettings) -> int:
    """Iterations of the next epoch timed for its start cost: `epoch2_iterations`, at most one whole epoch (a loop
    whose epoch is one full-batch step, as a graph network's, would otherwise time five more epochs)."""
    per_epoch = iterations_per_epoch(budget) if budget is not None else None
    return min(settings.epoch2_iterations, max(1, math.ceil(per_epoch))) if per_epoch else settings.epoch2_iterations


def next_epoch_timed(budget: BudgetInputs, settings: StopSettings) -> bool:
    """After sampling stops, the next epoch's first iterations are timed (its start cost): the run goes on past
    the epoch being sampled."""
    return settings.epoch2_iterations > 0 and run_goes_past(budget, budget.epoch)


def over_budget(times_s: Sequence[float], sampling_s: float, budget: BudgetInputs, settings: StopSettings,
                iterations_to_check: int = 1) -> bool:
    """With the planned epoch count known, the profile should cost at most `budget_fraction` of the
    predicted full run. Start-up the profile cannot avoid (the interpreter, the imports, the script's
    set-up: seconds) may alone exceed that share of a run of a few minutes; sampling then still gets
    SAMPLING_SHARE of the budget in sampled iterations instead of stopping at the first check: on a
    16-core host, 4-minute runs were cut at 25 iterations that way, all in their warm-up
    (benchmarks/results/same_machine_prediction_h200host.json).
    `iterations_to_check`: iterations until the stop is next decided (the checks thin out as the sample grows): it
    stops before the check that would cross the cap, not after it."""
    predicted_s = predicted_full_run_s(times_s, budget)
    if predicted_s is None:
        return False
    reserve_s = _after_sampling_s(times_s, budget, settings)
    cap_s = (1.0 - BUDGET_MARGIN) * settings.budget_fraction * predicted_s
    # Stop *before* the iteration that would cross the cap, not after it: the decision is taken at a
    # boundary, and one more iteration is spent whenever sampling goes on.
    next_s = next_iteration_s(times_s) * max(1, iterations_to_check)
    # (the end is a fixed cost, as the start-up is: it does not shorten sampling's own share)
    return (budget.now_s + next_s + reserve_s + settings.end_reserve_s >= cap_s
            and sampling_s + next_s + reserve_s >= SAMPLING_SHARE * cap_s)


def _steady_mean_s(times_s: Sequence[float]) -> float:
    steady = list(times_s[stats.detect_warmup(times_s):]) or list(times_s[-1:])
    return sum(steady) / len(steady)


def _after_sampling_s(times_s: Sequence[float], budget: BudgetInputs, settings: StopSettings) -> float:
    """What is still to come once sampling stops: the validation batches (about half an iteration each: no
    backward), the level probe, and the next epoch's start and first iterations (a 0.4-s worker start spent again
    after 14 s of sampling put five 12-minute profiles at 2.0-2.1 % of a 2 % budget, 2026-11-28)."""
    mean_s = _steady_mean_s(times_s)
    reserve_s = 0.5 * settings.validation_batches * mean_s + budget.probe_after_s
    if next_epoch_timed(budget, settings):
        reserve_s += budget.epoch_start_s + epoch2_iterations_to_time(budget, settings) * mean_s
    return reserve_s


def epoch_end_too_dear(times_s: Sequence[float], budget: BudgetInputs, settings: StopSettings,
                       iterations_left: int) -> tuple[float, float] | None:
    """A loop without a DataLoader cannot end its epoch early: (the wait, the budget fraction the profile would need
    to include it) when waiting out the epoch's `iterations_left` iterations to time the validation after it would
    take the profile past EPOCH_WAIT_SHARE of the predicted run and past its budget; None when it fits, when it is
    shorter than `min_budget_seconds` (as sampling, a wait that short is always allowed: a test's few-second run),
    or when the planned run's length, and so the budget, is unknown."""
    predicted_s = predicted_full_run_s(times_s, budget)
    if predicted_s is None:
        return None
    wait_s = iterations_left * _steady_mean_s(times_s) + _after_sampling_s(times_s, budget, settings)
    needed = (budget.now_s + wait_s + settings.end_reserve_s) / ((1.0 - BUDGET_MARGIN) * predicted_s)
    allowed = max(settings.budget_fraction, EPOCH_WAIT_SHARE)
    return (wait_s, needed) if needed > allowed and wait_s > settings.min_budget_seconds else None


def next_iteration_s(times_s: Sequence[float], last: int = NEXT_ITERATION_WINDOW) -> float:
    """The next iteration's predicted time: the median of the last few (a median, so that one slow
    iteration, a save or a collection, does not stop sampling early)."""
    recent = sorted(times_s[-last:])
    if not recent:
        return 0.0
    middle = len(recent) // 2
    return recent[middle] if len(recent) % 2 else 0.5 * (recent[middle - 1] + recent[middle])


def budget_may_stop(times_s: Sequence[float], warmup_iterations: int, settings: StopSettings) -> bool:
    """Enough steady iterations (past warm-up) for the cost budget to end sampling: `min_iterations`, or
    `min_budget_iterations` when those have lasted LONG_SAMPLE_S (long steps, whose twenty would cost more than the
    budget). Counted past warm-up: an LBFGS loop that spent its budget converging (six closure evaluations a step
    for 54 steps) had stopped seven one-evaluation steps later, and those seven set its whole run (36 % too long on
    a quiet 16-core host, 2026-11-29)."""
    steady = times_s[warmup_iterations:]
    return (len(steady) >= settings.min_iterations
            or (len(steady) >= settings.min_budget_iterations and sum(steady) >= LONG_SAMPLE_S))


# A closure optimizer's early steps are its converging phase when they ran at least this many times the
# closure evaluations of the latest steps (LBFGS: max_iter each, then one or two once the loss settles).
CLOSURE_CONVERGENCE_RATIO = 1.5
# The latest steps whose closure evaluations say where a closure optimizer has settled.
CLOSURE_SETTLED_WINDOW = 3


def closure_converging_steps(evaluations: Sequence[int | None]) -> int:
    """Leading steps of a closure optimizer's converging phase, from each step's closure evaluations (backward
    passes): up to the last one that ran more than the latest steps do, when those early steps ran clearly more
    (0 otherwise, and for steps without counts)."""
    counts = list(evaluations)
    if len(counts) <= CLOSURE_SETTLED_WINDOW or any(c is None for c in counts):
        return 0
    settled = max(counts[-CLOSURE_SETTLED_WINDOW:])
    last_above = max((i for i, c in enumerate(counts) if c > settled), default=-1)
    if last_above < 0:
        return 0
    early = counts[:last_above + 1]
    return last_above + 1 if sum(early) / len(early) >= CLOSURE_CONVERGENCE_RATIO * max(1, settled) else 0


def first_check_iterations(settings: StopSettings) -> int:
    """Iterations before any stop is worth deciding (the first is always warm-up)."""
    return min(settings.min_iterations, settings.min_budget_iterations + 1)


def decide(times_s: Sequence[float], sampling_s: float, settings: StopSettings, budget: BudgetInputs | None = None,
           closure_capped: bool = False, iterations_to_check: int = 1, converging_steps: int = 0) -> StopDecision:
    """Stop now? `sampling_s`: seconds of sampled iterations (observer time excluded).
    `closure_capped`: the latest steps of a closure optimizer (LBFGS) ran as many closure evaluations as
    it allows: they have not converged, later steps may run far fewer, so steady times are no reason to
    stop, and neither is the cost budget (its estimate of the run is made of those capped steps: 6x too
    long for an LBFGS loop that converges after 54 of 2,400 steps); the caps (--iterations,
    --max-seconds) still are. `iterations_to_check`: as for `over_budget`. `converging_steps`: a closure
    optimizer's converging phase (`closure_converging_steps`), warm-up for the cost budget's count."""
    n = len(times_s)
    # With the planned run known, a steady verdict waits for `averaging_seconds` of steps: a host's speed wanders
    # over tens of seconds (a few seconds of steady steps see one level of it) and the cost budget, not the
    # verdict, then ends a short run's sample; without a budget the run's cost share is unknown and it does not wait.
    # (never past --max-seconds: a user's cap on sampling is the window then)
    averaging_s = min(settings.averaging_seconds, settings.max_seconds)
    settled_s = max(settings.min_seconds, averaging_s) if run_known(budget) and times_s else settings.min_seconds
    verdict = stats.stability(times_s, target_relative_ci=settings.target_relative_ci,
                              max_relative_drift=settings.max_relative_drift)
    reason = None
    if (verdict.stable and not closure_capped and n >= settings.min_iterations
            and sampling_s >= settled_s):
        reason = "stable"
    elif n >= settings.max_iterations:
        reason = "max_iterations"
    elif sampling_s >= settings.max_seconds:
        reason = "time_budget"
    elif (budget is not None and not closure_capped
          and budget_may_stop(times_s, max(verdict.warmup_iterations, converging_steps), settings)
          and sampling_s >= settings.min_budget_seconds
          and over_budget(times_s, sampling_s, budget, settings, iterations_to_check)):
        reason = "cost_budget"
    return StopDecision(reason, verdict.stable, verdict.warmup_iterations, verdict.relative_ci95_halfwidth,
                        verdict.relative_drift)
