"""A host's measured speed wander (`trainwise host-noise`): the record a Profile carries, so the
estimator widens its band by it. Measuring it lives in `trainwise.profile.host_noise`."""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

class WindowStray(BaseModel):
    """|mean level over a window − the probe's mean level| / the probe's mean level, over every window."""

    model_config = ConfigDict(extra="forbid")
    window_s: int = Field(gt=0)
    median: float = Field(ge=0)
    p90: float = Field(ge=0)
    max: float = Field(ge=0)


class ProbeLevels(BaseModel):
    """One probe's per-second levels, summarised."""

    model_config = ConfigDict(extra="forbid")
    median_s: float = Field(gt=0, description="median per-second level (seconds per probe sample)")
    mean_s: float | None = Field(default=None, gt=0, description=(
        "mean per-second level: the level a run of minutes averages, its slow episodes included (None in "
        "measurements older than the level correction)"))
    p90_over_p10: float = Field(ge=1)
    correlation_length_s: int | None = Field(default=None, ge=0, description=(
        "lag at which the levels' autocorrelation falls under 0.5: how long one speed level lasts; None when "
        "it stays above within a third of the probe"))
    windows: list[WindowStray]


class HostNoise(BaseModel):
    """The speed wander of one host, measured by `trainwise host-noise`."""

    model_config = ConfigDict(extra="forbid")
    hostname: str
    cpu_model: str
    measured_at: str
    probe_seconds: float = Field(gt=0)
    pinned_cpus: list[int] | None = None
    compute: ProbeLevels
    memory: ProbeLevels
    measurements: int = Field(default=1, ge=1, description="how many measurements this is the envelope of")
    first_measured_at: str | None = Field(default=None, description="the oldest of them, when more than one")

    def stray_fraction(self, window_s: float) -> float:
        """90th-percentile stray of a window this long: the larger of compute's and memory's (a job
        mixes both), interpolated in log(window) between measured windows; a window shorter than the
        shortest measured gets the shortest's (shorter windows stray more), a longer one the longest's."""
        return max(_interpolate(levels.windows, window_s) for levels in (self.compute, self.memory))

    def mean_level_s(self) -> float | None:
        """Seconds per sample of the level probe (`probe_level_s`) at this host's mean level: the
        reference a profile's probe beside its sampled steps is compared with; None when not measured."""
        if self.compute.mean_s is None or self.memory.mean_s is None:
            return None
        return self.compute.mean_s + self.memory.mean_s

    def age_hours(self, at: str) -> float | None:
        """Hours from this measurement to the ISO time `at` (a profile's created_at); None when either
        time does not parse."""
        try:
            return (datetime.fromisoformat(at) - datetime.fromisoformat(self.measured_at)).total_seconds() / 3600
        except (TypeError, ValueError):
            return None

    def describe(self, at: str | None = None) -> str:
        age = None if at is None else self.age_hours(at)
        before = f", {_hours_text(age)} before the profile" if age is not None and age >= 0 else ""
        if self.measurements > 1:
            return (f"the widest of {self.measurements} measurements {_minute(self.first_measured_at)} to "
                    f"{_minute(self.measured_at)} UTC{before} by `trainwise host-noise`")
        return f"measured {_minute(self.measured_at)} UTC over {self.probe_seconds:.0f} s{before} by `trainwise host-noise`"


def _minute(iso_time: str | None) -> str:
    return (iso_time or "?")[:16].replace("T", " ")


def _hours_text(hours: float) -> str:
    return f"{hours * 60:.0f} min" if hours < 1 else f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.0f} days"


def _interpolate(windows: list[WindowStray], window_s: float) -> float:
    ordered = sorted(windows, key=lambda w: w.window_s)
    if not ordered:
        return 0.0
    if window_s <= ordered[0].window_s:
        return ordered[0].p90
    for shorter, longer in zip(ordered, ordered[1:]):
        if window_s <= longer.window_s:
            weight = math.log(window_s / shorter.window_s) / math.log(longer.window_s / shorter.window_s)
            return shorter.p90 + weight * (longer.p90 - shorter.p90)
    return ordered[-1].p90
