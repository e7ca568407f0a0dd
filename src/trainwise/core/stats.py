"""Robust statistics for iteration times: warm-up detection, steady-state estimate with its spread,
and the stopping rule the profiler uses to decide that it has sampled enough.

Standard library only: this module is imported inside the profiled process, where only torch and
the standard library can be assumed.

Why the mean (and not the median) is the steady-state estimate: the total training time is the *sum*
of the iteration times, so its unbiased per-iteration estimate is the mean of the steady-state
iterations. Iteration times on a shared machine are right-skewed (scheduler hiccups, GC, page
faults); those hiccups recur during the full run too, and the median would ignore them and under-
predict. One-off cold-start iterations are the exception: they are removed as warm-up (Malta:
the first iteration is an outlier).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

# Normal quantile for a two-sided 95 % interval. With n ≥ 8 steady iterations the Student-t
# correction is below 15 % of the half-width; the t table keeps small samples honest.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000}


def t_quantile_95(degrees_of_freedom: int) -> float:
    """Two-sided 95 % Student-t quantile (table, conservative between entries)."""
    if degrees_of_freedom <= 0:
        return float("inf")
    best = 1.96
    for dof, value in sorted(_T95.items(), reverse=True):
        if degrees_of_freedom <= dof:
            best = value
    if degrees_of_freedom > 60:
        best = 1.96
    return best


def detect_warmup(times_s: Sequence[float], max_fraction: float = 0.5, tolerance: float = 0.25) -> int:
    """Number of leading iterations to discard as warm-up.

    The first iteration is always warm-up (cold start: allocator, kernel selection, lazy init; Malta
    reports a 20.5 s standard deviation for it). Further leading iterations are warm-up while they
    are slower than the median of what follows by more than `tolerance` (relative), never more than
    `max_fraction` of the sample.
    """
    n = len(times_s)
    if n <= 1:
        return n
    warmup = 1
    limit = max(1, int(n * max_fraction))
    while warmup < limit:
        rest = times_s[warmup + 1:]
        if len(rest) < 3:
            break
        reference = statistics.median(rest)
        if times_s[warmup] > reference * (1.0 + tolerance):
            warmup += 1
        else:
            break
    return warmup


@dataclass(frozen=True)
class SpreadSummary:
    """A measurement with its spread, in seconds (like torch.utils.benchmark.Measurement)."""

    n: int
    mean_s: float
    median_s: float
    std_s: float
    iqr_s: float
    min_s: float
    max_s: float
    ci95_low_s: float
    ci95_high_s: float

    @property
    def relative_ci95_halfwidth(self) -> float:
        if self.mean_s <= 0:
            return 0.0
        return (self.ci95_high_s - self.ci95_low_s) / 2.0 / self.mean_s


# statistics.stdev sums exact fractions (~1 µs a value: 0.15 s for a --full profile's 200,000 steps);
# beyond this many values a compensated float sum is as good to far more digits than a time has
EXACT_STDEV_MAX_N = 10_000


def _float_stdev(values: list[float], mean: float) -> float:
    return math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summarise(times_s: Sequence[float]) -> SpreadSummary:
    """Mean with a 95 % confidence interval (Student t), median, IQR, extremes."""
    values = [float(t) for t in times_s]
    n = len(values)
    if n == 0:
        raise ValueError("no samples to summarise")
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if 1 < n <= EXACT_STDEV_MAX_N else _float_stdev(values, mean) if n > 1 else 0.0
    if n > 1:
        quartiles = statistics.quantiles(values, n=4, method="inclusive")
        iqr = max(0.0, quartiles[2] - quartiles[0])  # interpolation can round to -1e-16 for equal values
        half = t_quantile_95(n - 1) * std / math.sqrt(n)
    else:
        iqr = 0.0
        half = float("inf") if mean > 0 else 0.0
    return SpreadSummary(
        n=n,
        mean_s=mean,
        median_s=statistics.median(values),
        std_s=std,
        iqr_s=iqr,
        min_s=min(values),
        max_s=max(values),
        ci95_low_s=max(0.0, mean - half),
        ci95_high_s=mean + half,
    )


@dataclass(frozen=True)
class StabilityVerdict:
    stable: bool
    warmup_iterations: int
    steady_iterations: int
    relative_ci95_halfwidth: float
    relative_drift: float


def stability(times_s: Sequence[float], min_steady: int = 8, target_relative_ci: float = 0.02,
              max_relative_drift: float = 0.05) -> StabilityVerdict:
    """Has the steady-state estimate stabilised?

    Two conditions, both needed: the 95 % interval of the mean is narrower than
    `target_relative_ci`, and the two halves of the steady sample agree (medians within
    `max_relative_drift`). The second one catches drift (thermal throttling, a neighbour's load
    arriving), which a narrow interval over a short window would hide.
    """
    warmup = detect_warmup(times_s)
    steady = list(times_s[warmup:])
    if len(steady) < max(2, min_steady):
        return StabilityVerdict(False, warmup, len(steady), float("inf"), float("inf"))
    summary = summarise(steady)
    half = len(steady) // 2
    first, second = statistics.median(steady[:half]), statistics.median(steady[half:])
    centre = statistics.median(steady)
    drift = abs(first - second) / centre if centre > 0 else 0.0
    rel_ci = summary.relative_ci95_halfwidth
    return StabilityVerdict(rel_ci <= target_relative_ci and drift <= max_relative_drift,
                            warmup, len(steady), rel_ci, drift)
