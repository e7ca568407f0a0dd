"""Full-training-time prediction on the machine a profile was taken on.

Two families of estimators work from the same Profile:

- the Malta dissertation's equations (`trainwise.predict.malta`), fed exactly the inputs
  they name (T(Init), T(It1), T(It2), the mean of iterations 2–10, T(Val1), T(Val2), epoch times);
- trainwise's own estimator (the default), which replaces the single second iteration by the
  robust steady-state mean with its 95 % interval, scales the validation time from the sampled
  batches to the whole validation set, and adds what happens between epochs (epoch-start cost of
  the DataLoader, the gap around validation), all measured in the profile.
"""

from __future__ import annotations

import bisect

import math
import statistics
from dataclasses import dataclass, field, replace

from trainwise.agent import cpu_steal
from trainwise.core.units import format_duration
from trainwise.errors import TrainwiseError
from trainwise.predict import malta, state_subnormals, state_zeros
from trainwise.profile.schema import HostNoise, Profile, steady_positions

ESTIMATORS = ("trainwise", "eq5.4", "eq5.3", "averaged", "eq5.1", "eq4.1")


@dataclass(frozen=True)
class Prediction:
    """A predicted total training time with its band and where each part comes from."""

    estimator: str
    epochs: int
    iterations_per_epoch: int
    total_s: float
    low_s: float
    high_s: float
    breakdown_s: dict[str, float] = field(default_factory=dict)
    note: str = ""

    @property
    def relative_halfwidth(self) -> float:
        return (self.high_s - self.low_s) / 2 / self.total_s if self.total_s > 0 else 0.0


# An epoch this long is a sampler drawing "forever" (10^10 samples), not a pass over data a run completes
ENDLESS_EPOCH_ITERATIONS = 10_000_000


def iterations_per_epoch_of(profile: Profile, override: int | None = None) -> int:
    if override is not None:
        if override <= 0:
            raise TrainwiseError(f"iterations per epoch must be positive (got {override})")
        return override
    n_it = profile.dataset.iterations_per_epoch
    if n_it is None:
        if not any(profile.iterations.column("batches")):
            raise TrainwiseError("the profile does not know the iterations per epoch (the script trains without a "
                                 "DataLoader and showed no epoch boundary): pass --iterations-per-epoch N")
        raise TrainwiseError("the profile does not know the iterations per epoch (the training loader has no length): "
                             "pass --iterations-per-epoch N")
    return n_it


def _check_epochs(epochs: int) -> None:
    if not isinstance(epochs, int) or epochs <= 0:
        raise TrainwiseError(f"epochs must be a positive whole number (got {epochs!r}): pass e.g. --epochs 10")


@dataclass(frozen=True)
class ValidationEstimate:
    """One DataLoader's validation passes, scaled from the timed batches to whole passes."""

    first_pass_s: float
    later_pass_s: float
    relative_halfwidth: float
    batches_per_pass: int
    loader: int | None = None
    passes_per_epoch: int = 1
    interval: int | None = None  # validation every `interval` iterations; None: once per epoch

    def total_s(self, epochs: int) -> float:
        return self.first_pass_s + (epochs * self.passes_per_epoch - 1) * self.later_pass_s


def _validation_groups(profile: Profile) -> list[list]:
    """The timed validation passes, one list per DataLoader in the order the script first evaluated
    each (a profile without loader numbers, older or from a framework's callback: one list)."""
    groups: dict[int | None, list] = {}
    for v in profile.validations:
        if v.batches_timed > 0:
            groups.setdefault(v.loader, []).append(v)
    return list(groups.values())


def _loader_estimate(profile: Profile, passes: list) -> ValidationEstimate:
    first = passes[0]
    # A pass without its own length: the profile's validation loader's, for a profile that does not say
    # which loader a pass iterated (older, or a framework's callback); else the batches timed.
    fallback_batches = profile.dataset.val_batches_per_pass if first.loader is None else None
    total_batches = first.batches_total or fallback_batches or first.batches_timed
    first_batch_s = first.batch_wall_s[0]
    # a later segment of an iterator the script keeps starts nothing: its first batch is a steady one
    rest = [t for v in passes for t in (v.batch_wall_s if v.continued else v.batch_wall_s[1:])]
    steady_batch_s = statistics.fmean(rest) if rest else first_batch_s
    spread = statistics.stdev(rest) / math.sqrt(len(rest)) * 1.96 / steady_batch_s if len(rest) > 1 and steady_batch_s > 0 else 0.5
    first_pass = first_batch_s + (total_batches - 1) * steady_batch_s
    # Without DataLoader workers a later pass starts warm; with workers each pass pays their start (not one that
    # goes on drawing from the iterator it has).
    kept = len(passes) > 1 and all(v.continued for v in passes[1:])
    later_first = first_batch_s if profile.dataset.num_workers > 0 and not kept else steady_batch_s
    later_pass = later_first + (total_batches - 1) * steady_batch_s
    return ValidationEstimate(first_pass, later_pass, spread, total_batches, loader=first.loader)


def validation_estimates(profile: Profile, iterations_per_epoch: int) -> list[ValidationEstimate]:
    """Each evaluated DataLoader's passes: its pass time (timed batches scaled to the loader's length)
    and how many passes per epoch (once at the epoch's end, or every N iterations as seen in the first
    epoch). A script that evaluates the training set and the validation set after every epoch has two
    loaders, each with its own pass length."""
    estimates = []
    for passes in _validation_groups(profile):
        estimate = _loader_estimate(profile, passes)
        per_epoch, interval = _passes_per_epoch(profile, passes, iterations_per_epoch)
        estimates.append(replace(estimate, passes_per_epoch=per_epoch, interval=interval))
    return estimates


def validation_estimate(profile: Profile) -> ValidationEstimate | None:
    """One epoch's validation as one pass (the Malta equations' T(val)): every evaluated loader's
    pass, summed; None when no validation batch was timed."""
    loaders = [_loader_estimate(profile, passes) for passes in _validation_groups(profile)]
    if not loaders:
        return None
    if len(loaders) == 1:
        return loaders[0]
    later = sum(v.later_pass_s for v in loaders)
    halfwidth = math.sqrt(sum((v.later_pass_s * v.relative_halfwidth) ** 2 for v in loaders)) / later if later > 0 else 0.5
    return ValidationEstimate(sum(v.first_pass_s for v in loaders), later, halfwidth,
                              sum(v.batches_per_pass for v in loaders))


def _mid_epoch_validations(profile: Profile, passes: list) -> list:
    """Those of `passes` in the first epoch after which its training went on (validation every N
    steps), as opposed to the pass at the epoch's end."""
    if not profile.epochs:
        return []
    first = profile.epochs[0]
    its = profile.iterations
    last_start = max((s for s, e in zip(its.column("start_s"), its.column("epoch")) if e == first.index), default=None)
    return [v for v in passes if v.epoch == first.index and last_start is not None and last_start > v.start_s]


def _passes_per_epoch(profile: Profile, passes: list, iterations_per_epoch: int) -> tuple[int, int | None]:
    mid = _mid_epoch_validations(profile, passes)
    if not mid:
        return 1, None
    first = profile.epochs[0]
    its = profile.iterations
    ends = [s + w for s, w, e in zip(its.column("start_s"), its.column("wall_s"), its.column("epoch")) if e == first.index]
    ends.sort()  # in order already; a --full run's hundreds of thousands: a binary search per pass
    positions = [bisect.bisect_right(ends, v.start_s) for v in mid]
    interval = positions[1] - positions[0] if len(positions) > 1 else positions[0]
    if interval <= 0:
        return 1, None
    at_end = any(v.epoch == first.index and v not in mid for v in passes)
    inside = (iterations_per_epoch - 1) // interval
    return max(1, inside + (1 if at_end or iterations_per_epoch % interval == 0 else 0)), interval


def validation_passes_per_epoch(profile: Profile, iterations_per_epoch: int) -> tuple[int, int | None]:
    """(passes per epoch, the validation interval in iterations, None for once per epoch), over every
    evaluated loader. A script that validates every N steps shows it in the sampled first epoch: N is
    the number of iterations before its first pass there (or between its first two); the epoch then
    has one pass after each multiple of N inside it, and one at its end when the profile saw one there
    or N divides N_it."""
    estimates = validation_estimates(profile, iterations_per_epoch)
    if not estimates:
        return 1, None
    intervals = [v.interval for v in estimates if v.interval is not None]
    return sum(v.passes_per_epoch for v in estimates), (min(intervals) if intervals else None)


def _between_epochs_s(profile: Profile) -> float:
    """Time between the end of one epoch's last iteration and the next epoch's first batch request,
    less the validation pass inside it: printing, checkpointing, creating the next iterator."""
    epochs = profile.epochs
    if len(epochs) < 2 or epochs[0].end_s is None:
        return 0.0
    gap = epochs[1].start_s - epochs[0].end_s
    for v in profile.validations:
        if v.epoch == epochs[0].index and v.start_s >= epochs[0].end_s:  # passes inside the gap only
            gap -= v.wall_s
    return max(0.0, gap)


# A step whose optimizer state's zeros may cost at least this fraction of it gets the note and the
# wider band (below it the effect is inside the steady-state spread)
STATE_ZEROS_NOTE_FRACTION = 0.02
# The fill-in model is used only while its square-root excess stays under this share of the measured
# step (so the total still grows with every step; the worst job seen here: 17 %)
MAX_MODELLED_SHARE = 0.5


# A sample whose halves' medians differ by this much was not one level: say which way it went, first.
DRIFT_NOTE_MIN = 0.5


def drift_note(profile: Profile) -> str | None:
    """When the sampled steps never settled and moved by DRIFT_NOTE_MIN or more, which way and how far (PyTorch's
    actor-critic example: 7 ms a step over its first episodes, 89 ms after 20 s, 240 ms at the end of its run, as
    the policy learns to balance longer): the estimate is the sample's mean, and a run whose steps keep growing
    takes longer than that."""
    steady = profile.steady_state
    if steady.relative_drift is None or steady.relative_drift < DRIFT_NOTE_MIN:
        return None
    walls = list(profile.iterations.column("wall_s")[steady.warmup_iterations:])
    quarter = len(walls) // 4
    if quarter < 2:
        return None
    first, last = statistics.median(walls[:quarter]), statistics.median(walls[-quarter:])
    if last > first:
        return (f"the sampled steps never settled: they grew from {format_duration(first)} (first quarter) to "
                f"{format_duration(last)} (last quarter, medians); the estimate is their mean, and a run whose steps "
                "keep growing (a policy that learns to act longer, a growing sequence or graph) takes longer, possibly past "
                "the band")
    return (f"the sampled steps never settled: they fell from {format_duration(first)} (first quarter) to "
            f"{format_duration(last)} (last quarter, medians); the estimate is their mean, and a run whose steps keep "
            "falling takes less")


def sampled_steps_s(profile: Profile) -> float:
    """Seconds of steady iterations the profile sampled: the window its steady step time speaks for."""
    return sum(profile.iterations.column("wall_s")[profile.steady_state.warmup_iterations:])


def host_stray_fraction(profile: Profile) -> float | None:
    """How far (90th percentile) this host's speed level strays over a window as long as the profile's
    sampled steps, from `trainwise host-noise`; None when it was not measured on the profiled host."""
    if profile.host_noise is None:
        return None
    return profile.host_noise.stray_fraction(max(sampled_steps_s(profile), 1e-3))


# A level correction larger than this either way is not believed (a probe caught in a stall, a reference
# from another state of the host): the factor is clipped to [1 / MAX_LEVEL_FACTOR, MAX_LEVEL_FACTOR].
MAX_LEVEL_FACTOR = 1.5


# The host's mean level is taken from a `trainwise host-noise` measurement at most this old: the level itself
# moves over hours (the 2-core VM ran the same plain runs 23-53 % slower at 20:24 than at 09:20 UTC, and ~35 %
# faster at 23:00 than at 20:24). A reference taken minutes before helped (same-machine benchmark, 2.4 vs 3.0 %
# median); one taken 2.7 h before made five of six profiles of one 21-minute run 5-31 points worse (2026-11-27 23:03,
# docs/accuracy.md). Chosen on those rows, so in-sample.
LEVEL_REFERENCE_MAX_AGE_HOURS = 1.0


@dataclass(frozen=True)
class LevelCorrection:
    factor: float  # the steps' and validation's time is multiplied by it
    window_level_s: float
    reference_level_s: float
    note: str


def host_level_correction(profile: Profile) -> LevelCorrection | None:
    """The sampled steps ran at the host's speed level of their second or two; the full run averages
    the host's mean level. With the host-noise probe timed beside the steps (profile.level_probes) and
    this host's mean level from `trainwise host-noise` (the same probe, same units), the steps are
    scaled by mean level / level beside them (benchmarks/level_probe.py: a job's 1-s level follows the
    probe's with correlation 0.7-0.9, and the scaling halved the window's error there when the reference
    was the run's own mean). None without both, on a GPU, or on another CPU model than the measurement's.

    That evidence is for 1-s windows and a reference that was the run's own mean. The probe's ratio is
    applied with the weight `level_correction_weight`: a longer sample averages part of the wander itself,
    and the reference, a few minutes' mean, is itself off the level the run will average by as much as
    a window that long strays."""
    noise = profile.host_noise
    if not profile.level_probes or noise is None or profile.environment.device != "cpu":
        return None
    reference_s = noise.mean_level_s()
    if reference_s is None or noise.cpu_model != profile.environment.cpu_model or stale_level_reference(profile):
        return None
    window_s = statistics.fmean(p.level_s for p in profile.level_probes)
    sampled_s = sampled_steps_s(profile)
    weight = level_correction_weight(noise, sampled_s)
    ratio = min(MAX_LEVEL_FACTOR, max(1.0 / MAX_LEVEL_FACTOR, reference_s / window_s))
    factor = ratio ** weight
    direction = "slower" if window_s > reference_s else "faster"
    weighted = "" if weight >= 1.0 else (f" (×{ratio:.3f} weighted {weight:.2f}: by the {sampled_s:.1f}-s sample's share of the "
                                         f"wander, and because the reference, a {noise.probe_seconds:.0f}-s mean, strays too)")
    note = (f"host level: the probe beside the sampled steps ran {abs(window_s / reference_s - 1):.1%} {direction} than this "
            f"host's mean level ({noise.describe(profile.created_at)}): steps and validation scaled ×{factor:.3f}{weighted}")
    return LevelCorrection(factor, window_s, reference_s, note)


def stale_level_reference(profile: Profile) -> bool:
    """The host-noise measurement is too old to tell the host's mean level now (LEVEL_REFERENCE_MAX_AGE_HOURS)."""
    age = None if profile.host_noise is None else profile.host_noise.age_hours(profile.created_at)
    return age is not None and age > LEVEL_REFERENCE_MAX_AGE_HOURS


def level_correction_weight(noise: HostNoise, sampled_s: float) -> float:
    """The exponent the probe's level ratio is applied with, the product of two shares (each from the
    host-noise measurement's 90th-percentile strays, `HostNoise.stray_fraction`, flat past 30 s):

    - how much of the probe's stray the sampled steps share: 1 for a sample of a second or less (where the
      correction was measured to help), then the stray of a window as long as the sample over a 1-s one's;
    - how much of the probe-vs-reference gap is the probe's: both are off the host's mean level, the probe
      (an instant) by a 1-s window's stray s1, the reference (the measurement's mean over its probe_seconds)
      by a window that long's, sr. Weighting the two estimates of the mean level by their inverse variances
      moves the steps s1^2 / (s1^2 + sr^2) of the way: about half on a host whose levels last minutes (a
      3-minute mean strays as far as a second's), nearly all where they average out within seconds."""
    one_s = noise.stray_fraction(1.0)
    if one_s <= 0:
        return 1.0
    sampled_share = 1.0 if sampled_s <= 1.0 else max(0.0, min(1.0, noise.stray_fraction(sampled_s) / one_s))
    reference_stray = noise.stray_fraction(noise.probe_seconds)
    probe_share = one_s ** 2 / (one_s ** 2 + reference_stray ** 2)
    return sampled_share * probe_share


def warmup_excess_s(profile: Profile) -> float:
    """The measured warm-up iterations' time above the steady mean (at least the first iteration's cold
    start; a closure optimizer's converging steps too): measured, not extrapolated."""
    steady = profile.steady_state
    mean_s = steady.iteration.mean_s
    warmup = profile.iterations[:max(1, steady.warmup_iterations)]
    return sum(it.wall_s - mean_s for it in warmup)


def closure_still_capped(profile: Profile) -> tuple[float, int] | None:
    """(median closure evaluations, the cap) when the steady steps of a closure optimizer ran as many
    closure evaluations as it allows (LBFGS's max_iter): the optimisation had not converged."""
    cap = profile.model.closure_evaluation_cap
    _, steady = steady_positions(profile.iterations)
    passes = profile.iterations.column("backward_passes")
    counts = [passes[i] for i in steady if passes[i]]
    if cap is None or not counts or statistics.median(counts) < cap:
        return None
    return float(statistics.median(counts)), cap


def after_training_s(profile: Profile) -> float:
    """Seconds from the end of training (its last iteration, validation pass or epoch) to the process's exit, when
    the script ran to its end during the profile: its final evaluation, saving and exit, measured. 0 for a profile
    that stopped the script before its end, which never sees that time."""
    if profile.stop_reason != "script_exited" or not profile.iterations or any(e.truncated for e in profile.epochs):
        return 0.0
    last = profile.iterations[-1]
    ends = [last.start_s + last.wall_s, *(v.start_s + v.wall_s for v in profile.validations),
            *(e.end_s for e in profile.epochs if e.end_s is not None)]
    return max(0.0, profile.process_wall_s - max(ends))


def _no_validation_note(profile: Profile) -> str:
    """A profile that ended inside epoch 1 (a loop without a DataLoader whose epoch was too long to wait out) has not
    seen whatever validation follows the epoch: it says so, not that the script has none."""
    if profile.stop_reason == "sampled" and len(profile.epochs) == 1 and profile.epochs[0].truncated:
        return ("no validation pass observed: the profile ended inside epoch 1, before any validation after it (its "
                "notes say why, and what times it): validation time not included")
    return "no validation pass observed: validation time not included"


def compile_cache_saving_s(profile: Profile) -> float:
    """The seconds of inductor's compile (code generation, C++/Triton builds) the profile spent on graphs missing
    from inductor's cache: a run after the profile on this machine finds them there and skips it. Bounded by the
    warm-up iterations' and validation's measured excess, where the compile was paid. 0 without a cold compile."""
    compiled = profile.torch_compile
    if compiled is None or not compiled.fx_cache_misses or not compiled.codegen_s:
        return 0.0
    first_validation_excess_s = sum(max(0.0, v.batch_wall_s[0] - statistics.median(v.batch_wall_s[1:]))
                                    for v in profile.validations[:1] if len(v.batch_wall_s) > 1)
    return min(compiled.codegen_s, max(0.0, warmup_excess_s(profile)) + first_validation_excess_s)


def trainwise_estimate(profile: Profile, epochs: int, iterations_per_epoch: int | None = None,
                       level_correction: bool = True) -> Prediction:
    _check_epochs(epochs)
    n_it = iterations_per_epoch_of(profile, iterations_per_epoch)
    steady = profile.steady_state
    mean_s = steady.iteration.mean_s
    half = (steady.iteration.ci95_high_s - steady.iteration.ci95_low_s) / 2
    iterations_s = epochs * n_it * mean_s + warmup_excess_s(profile)
    epoch_start_s = (epochs - 1) * max(0.0, steady.epoch_start_extra_s or 0.0)
    between_s = (epochs - 1) * _between_epochs_s(profile)
    loaders = validation_estimates(profile, n_it)
    validation_s = sum(v.total_s(epochs) for v in loaders)
    init_s = profile.init.total_s
    after_s = after_training_s(profile)
    total = init_s + iterations_s + epoch_start_s + between_s + validation_s + after_s
    notes = [] if loaders else [_no_validation_note(profile)]
    if after_s > 0:
        notes.append(f"{format_duration(after_s)} after training, measured (the script ran to its end during the profile: "
                     "what it does after its last step, a final test or save, and its exit)")
    if iterations_per_epoch is None and n_it >= ENDLESS_EPOCH_ITERATIONS and profile.script_iterations is None:
        notes.append(f"an epoch of {n_it:,} iterations, the training DataLoader's length (an endless sampler, as minGPT's "
                     "10^10 samples?): a loop that stops at a step count it does not read (`max_steps`, `max_iters`) "
                     "trains far less; pass --epochs 1 --iterations-per-epoch STEPS")
    cache_saving_s = compile_cache_saving_s(profile)
    if cache_saving_s:
        total -= cache_saving_s
        compiled = profile.torch_compile
        notes.append(f"torch.compile compiled {compiled.fx_cache_misses} inductor graph(s) from scratch in the profile "
                     f"({format_duration(compiled.compile_s)} compiling, measured): a run after it on this machine finds "
                     f"them in inductor's cache, so the {format_duration(cache_saving_s)} of inductor's own compile are "
                     "left out (modelled: the rest, tracing and the cache lookups, is paid again)")
    level = host_level_correction(profile) if level_correction else None
    level_correction_s = 0.0
    if level is not None:
        level_correction_s = (level.factor - 1.0) * (iterations_s + validation_s)
        total += level_correction_s
        notes.append(level.note)
    elif level_correction and profile.level_probes and stale_level_reference(profile):
        notes.append(f"no host-level correction: this host's mean level was measured over {LEVEL_REFERENCE_MAX_AGE_HOURS:g} h "
                     f"before the profile ({profile.host_noise.describe(profile.created_at)}) and levels move over hours; "
                     "run `trainwise host-noise` right before profiling to correct the sample's level")
    if len(loaders) > 1:
        notes.append(f"validation over {len(loaders)} DataLoaders per epoch (passes of "
                     f"{', '.join(str(v.batches_per_pass) for v in loaders)} batches)")
    for v in loaders:
        if v.interval is not None:
            notes.append(f"validation every {v.interval} iterations (seen in the first epoch): {v.passes_per_epoch} passes "
                         f"per epoch, {epochs * v.passes_per_epoch} in all")
    # The host's speed wander (independent of the sampling error): how far a window as long as the
    # sampled steps strays from the host's mean level, when `trainwise host-noise` measured it here.
    host_stray = host_stray_fraction(profile)
    validation_halfwidth_s = math.sqrt(sum((v.total_s(epochs) * v.relative_halfwidth) ** 2 for v in loaders))
    band = math.hypot(epochs * n_it * half, validation_halfwidth_s, (iterations_s + validation_s) * (host_stray or 0.0))
    if host_stray is None:
        notes.append("band: the sampled steps' own spread only; this host's speed wander is not in it (measure it "
                     "once with `trainwise host-noise`)")
    else:
        notes.append(f"band includes this host's speed wander: ±{host_stray:.1%} for {sampled_steps_s(profile):.1f} s "
                     f"of sampled steps (90th percentile, {profile.host_noise.describe(profile.created_at)})")
    steal = profile.sample_cpu_steal
    if steal is not None and steal >= cpu_steal.NOTEWORTHY_STEAL:
        notes.append(f"the hypervisor took {steal:.1%} of this VM's CPU during the sampled steps (/proc/stat steal): "
                     "a shared host's steps run as slowly as its neighbours are busy, and the full run will see "
                     "another share")
    # An estimate that was still drifting when sampling stopped gets the drift added to its band.
    if steady.stabilised_after is None and steady.relative_drift and math.isfinite(steady.relative_drift):
        band += iterations_s * steady.relative_drift / 2
        drifting = drift_note(profile)
        if drifting:
            notes.insert(0, drifting)
    low, high = total - band, total + band
    capped = closure_still_capped(profile)
    if capped is not None:
        # Steps that still ran every closure evaluation allowed have not converged: once they do, a step
        # can cost one evaluation. The point estimate keeps the measured steps; the low end does not.
        evaluations, cap = capped
        low -= iterations_s * (1.0 - 1.0 / evaluations)
        notes.append(f"{profile.model.optimizer} steps still ran {evaluations:g} closure evaluations each (its max_iter is "
                     f"{cap}) when sampling stopped: if the optimisation converges, later steps run as few as one and "
                     f"the run is shorter, down to the band's low end; the estimate assumes it does not")
    breakdown = {"init_s": init_s, "iterations_s": iterations_s, "epoch_start_s": epoch_start_s,
                 "between_epochs_s": between_s, "validation_s": validation_s, "after_training_s": after_s}
    if level is not None:
        breakdown["host_level_correction_s"] = level_correction_s  # the parts still add up to the total
    if cache_saving_s:
        breakdown["compile_cache_saving_s"] = -cache_saving_s
    zeros = profile.optimizer_state_zeros
    at_stake_s = zeros.step_time_at_stake_s if zeros is not None else None
    if zeros is not None and at_stake_s and mean_s > 0 and at_stake_s / mean_s >= STATE_ZEROS_NOTE_FRACTION:
        fraction = min(1.0, at_stake_s / mean_s)
        ratio = zeros.sqrt_state_ns_per_element / max(zeros.sqrt_normal_ns_per_element or 0, 1e-3)
        timed_as = ("its fused step costs" if zeros.square_root_timed_in == "fused step" else "its square root costs")
        seen = (f"{zeros.optimizer}'s {zeros.state} was {zeros.zero_fraction:.0%} zeros when sampling stopped and {timed_as} "
                f"{ratio:.1f}x per element what it costs on normal values on this CPU ({at_stake_s * 1e3:.1f} ms, "
                f"{fraction:.0%} of a step)")
        model = state_zeros.fit(zeros)
        window = (steady.warmup_iterations + 1, len(profile.iterations))
        if model is not None and state_zeros.window_excess_s(model, window) > MAX_MODELLED_SHARE * mean_s:
            model = None  # a model that puts most of the measured step in the square root is not believed
        if model is None:
            # No believable fill-in model (too few counts, no decay, or one claiming most of the step):
            # the point estimate keeps the measured step and the band's low end takes the whole
            # speed-up the zeros can still give.
            low -= iterations_s * fraction
            notes.append(f"{seen}: that time goes away as training fills the state in; the prediction keeps the measured "
                         "step, its band's low end does not")
        else:
            total_steps = epochs * n_it
            correction_s = state_zeros.iterations_correction_s(model, total_steps, window)
            total += correction_s
            breakdown["state_zeros_correction_s"] = correction_s  # the parts still add up to the total
            # half the correction stays in the band, on the side of the uncorrected estimate
            low, high = total - band, total + band
            if correction_s < 0:
                high -= correction_s / 2
            else:
                low -= correction_s / 2
            filled = model.zeros_at(float(total_steps)) / model.sparse_elements
            notes.append(f"{seen}; modelled: its zeros decay like exp(-(s/{model.tau_steps:.0f})^{model.kappa:.2f}) over "
                         f"{model.sparse_elements:,} elements (fitted to {model.points} counts), {filled:.0%} zeros after "
                         f"{total_steps:,} steps: {correction_s:+.1f} s on the iterations (half of it kept in the band)")
    subnormal = state_subnormals.worst_case(profile, epochs * n_it, mean_s)
    if subnormal is not None:
        high += subnormal[0]
        notes.append(subnormal[1])
    note = "; ".join(notes)
    # The band's terms are the steps' and validation's uncertainty; the start-up was measured and no run
    # ends before it, so a wide band (a drifting sample) stops at T(Init), not at "0.0 ms".
    return Prediction("trainwise", epochs, n_it, total, max(init_s, low), high, breakdown, note)


def _malta_inputs(profile: Profile) -> tuple[float, float, float]:
    its = profile.iterations
    if len(its) < 2:
        raise TrainwiseError("the Malta estimators need at least two iterations in the profile: profile with --iterations ≥ 2")
    return profile.init.total_s, its[0].wall_s, its[1].wall_s


def malta_estimate(profile: Profile, epochs: int, estimator: str, iterations_per_epoch: int | None = None) -> Prediction:
    """The dissertation's equations, with exactly the inputs they name."""
    _check_epochs(epochs)
    n_it = iterations_per_epoch_of(profile, iterations_per_epoch)
    init_s, it1_s, it2_s = _malta_inputs(profile)
    val = validation_estimate(profile)
    val1 = val.first_pass_s if val else 0.0
    val2 = val.later_pass_s if val else 0.0
    if estimator == "eq5.4":
        total = malta.eq_5_4_total_s(init_s, it1_s, it2_s, n_it, epochs)
        breakdown = {"init_s": init_s, "iterations_s": total - init_s}
    elif estimator in ("eq5.3", "averaged"):
        if estimator == "eq5.3":
            total = malta.eq_5_3_total_s(init_s, it1_s, it2_s, n_it, epochs, val1, val2)
        else:
            first_ten = [it.wall_s for it in profile.iterations[1:10]]
            total = malta.averaged_iterations_total_s(init_s, it1_s, first_ten, n_it, epochs, val1, val2)
        validation_s = val1 + (epochs - 1) * val2
        # the parts add up to the total, as every estimator's do
        breakdown = {"init_s": init_s, "iterations_s": total - init_s - validation_s, "validation_s": validation_s}
    elif estimator in ("eq5.1", "eq4.1"):
        complete = [e for e in profile.epochs if e.end_s is not None and not e.truncated]
        if len(complete) < 2:
            raise TrainwiseError(f"{estimator} needs two complete epochs (methodology 1): profile with --full on a 2-epoch run")
        ends = []
        for e in complete[:2]:
            vals = [v.start_s + v.wall_s for v in profile.validations if v.epoch == e.index]
            ends.append(max([e.end_s, *vals]))
        first_epoch_s = ends[0] - complete[0].start_s
        later_epoch_s = ends[1] - complete[1].start_s
        if estimator == "eq5.1":
            total = malta.eq_5_1_total_s(init_s, first_epoch_s, later_epoch_s, epochs)
            breakdown = {"init_s": init_s}
        else:
            total = malta.eq_4_1_total_s(first_epoch_s, later_epoch_s, epochs)
            breakdown = {}
        breakdown.update(first_epoch_s=first_epoch_s, later_epochs_s=(epochs - 1) * later_epoch_s)
    else:
        raise TrainwiseError(f"unknown estimator {estimator!r}: choose one of {', '.join(ESTIMATORS)} (or all, in `trainwise predict`)")
    return Prediction(estimator, epochs, n_it, total, total, total, breakdown,
                      "published equation: no uncertainty band")


def predict_total(profile: Profile, epochs: int, estimator: str = "trainwise",
                  iterations_per_epoch: int | None = None, level_correction: bool = True) -> Prediction:
    if estimator == "trainwise":
        return trainwise_estimate(profile, epochs, iterations_per_epoch, level_correction)
    return malta_estimate(profile, epochs, estimator, iterations_per_epoch)


def epochs_to_converge(full_profile: Profile) -> int:
    """Methodology 1: the epochs a full run with early stopping needed, reused for other machines."""
    if full_profile.mode != "full" or full_profile.full_run is None:
        raise TrainwiseError("--epochs-from needs a profile recorded with --full (a complete run with early stopping)")
    if full_profile.full_run.epochs_completed < 1:
        raise TrainwiseError("the --epochs-from profile completed no epoch")
    return full_profile.full_run.epochs_completed


def relative_error(actual_s: float, predicted_s: float) -> float:
    """trainwise's error convention: |predicted − actual| / actual (the actual run is the truth).
    The dissertation divides by the estimate instead (`malta.malta_relative_error`)."""
    if actual_s <= 0:
        raise ValueError("actual time must be positive")
    return abs(predicted_s - actual_s) / actual_s
