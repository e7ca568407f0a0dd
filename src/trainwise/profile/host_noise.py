"""How much this host's speed wanders: a fixed CPU probe timed for a few minutes, once per machine.

A profile samples a job for a few seconds and the prediction extends that to hours. On a dedicated
machine that is fine; on a shared cloud VM the host's speed level moves for seconds to minutes at a
time (noisy neighbours on sibling hyperthreads, shared caches and memory bandwidth), and no number of
steps inside a few-seconds window can show a level the host takes on later. The 95 % interval of the
sampled mean then claims a precision the prediction does not have: on the 2-core development VM the
same-machine benchmark's actual totals fell inside that interval in about a third of the runs.

`trainwise host-noise` measures the wander directly, with work that never changes (a small matmul for
compute, an in-place multiply over 16 MB for memory bandwidth, one thread), in one-second bins, and
records how far a window of w seconds strays from the whole probe's mean (median and 90th percentile
over every window, for w = 1, 3, 10, 30 s). Kept per hostname under the trainwise cache, every
measurement (the last MAX_KEPT): the wander itself changes over hours, so the profiler attaches the
widest of them (their envelope) to profiles taken on that host, and the estimator widens its band by
the 90th-percentile stray for a window as long as the profile's sampled steps.

Which way the level went during the sampled steps, the same probe says too: a sampled profile times it
for 0.1 s right before and right after its steps (`probe_level_s`, outside them), and the estimator
scales the steps by the host's mean level (the newest measurement's `mean_level_s`) over the level
beside them (`trainwise.predict.same_machine.host_level_correction`). A job's level follows the
probe's only in part (benchmarks/level_probe.py: correlation 0.7-0.9 over 1-s windows), so the band
keeps the host's stray.
"""

from __future__ import annotations

import math
import os
import socket
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainwise._io import atomic_write_text, cache_root
from trainwise.core.host_noise import (HostNoise, ProbeLevels, WindowStray,  # noqa: F401 - re-exported
                                       _hours_text, _interpolate, _minute)
from trainwise.errors import TrainwiseError

WINDOWS_S = (1, 3, 10, 30)
# A window needs this many positions to slide through for its quantiles to mean anything
MIN_WINDOW_POSITIONS = 10
MIN_PROBE_SECONDS = 40.0  # the 30 s window needs room to slide
DEFAULT_PROBE_SECONDS = 180.0
MATMUL_SIDE = 256
MATMULS_PER_SAMPLE = 10
MEMORY_ELEMENTS = 4_000_000  # 16 MB of float32: past the per-core caches, streams through L3/memory
# The wander itself changes over hours: on the development VM the compute probe's 3 s windows strayed
# 7.4 % (median) at 20:23 UTC and 0.5 % at 22:47 the same day, and the same-machine benchmark run
# next (22:47-23:52) saw the two identical full runs differ by 13.6 %: its bands from the quiet 22:47
# measurement alone held 5 of 8 actual totals, from the envelope with 20:23's all 8. Hence the
# envelope of the kept measurements, not the latest one.
MAX_KEPT = 20
# A newest measurement older than this is still used, and the profile says so, with the command
# that refreshes it.
STALE_AFTER_HOURS = 24.0


def staleness_note(noise: HostNoise, at: str) -> str | None:
    """A note for a profile taken long after its host's measurement: the wander it describes may be gone,
    or another may have come."""
    age = noise.age_hours(at)
    if age is None or age <= STALE_AFTER_HOURS:
        return None
    return (f"this host's speed wander was last measured {_hours_text(age)} before this profile and changes over hours: "
            "run `trainwise host-noise` again for a band that speaks for now")


def _widest_levels(levels: list[ProbeLevels], newest: ProbeLevels) -> ProbeLevels:
    """Per window, the largest median/p90/max stray any of the measurements saw (of those that have that
    window); the newest one's level, since levels are not comparable across the host's states."""
    by_window: dict[int, list[WindowStray]] = {}
    for one in levels:
        for window in one.windows:
            by_window.setdefault(window.window_s, []).append(window)
    windows = [WindowStray(window_s=w, median=max(x.median for x in seen), p90=max(x.p90 for x in seen),
                           max=max(x.max for x in seen)) for w, seen in sorted(by_window.items())]
    lasting = [one.correlation_length_s for one in levels if one.correlation_length_s is not None]
    return ProbeLevels(median_s=newest.median_s, mean_s=newest.mean_s, p90_over_p10=max(one.p90_over_p10 for one in levels),
                       correlation_length_s=max(lasting) if lasting else None, windows=windows)


def envelope(measurements: list[HostNoise]) -> HostNoise:
    """One HostNoise that strays as far, at every window, as the widest of several measurements of a host."""
    if not measurements:
        raise ValueError("envelope of no measurements")
    if len(measurements) == 1:
        return measurements[0]
    ordered = sorted(measurements, key=lambda one: one.measured_at)
    newest = ordered[-1]
    return newest.model_copy(update={
        "compute": _widest_levels([one.compute for one in ordered], newest.compute),
        "memory": _widest_levels([one.memory for one in ordered], newest.memory),
        "measurements": sum(one.measurements for one in ordered),
        "first_measured_at": ordered[0].first_measured_at or ordered[0].measured_at})


# ---- statistics of per-second levels (pure; also used by benchmarks/host_noise.py) ----

def per_second_levels(samples: list[dict], key: str) -> list[float]:
    """Median of each whole second's samples (medians: one descheduled sample should not move a bin);
    the last, partial second is dropped."""
    bins: dict[int, list[float]] = {}
    for sample in samples:
        bins.setdefault(int(sample["t_s"]), []).append(sample[key])
    if not bins:
        return []
    last_whole = max(bins) - 1
    return [statistics.median(bins[second]) for second in sorted(bins) if second <= last_whole]


def window_strays(levels: list[float], window_s: int) -> list[float]:
    """|mean of every window of window_s bins − mean of all bins| / mean of all bins."""
    overall = statistics.fmean(levels)
    return [abs(statistics.fmean(levels[i:i + window_s]) - overall) / overall
            for i in range(0, len(levels) - window_s + 1)]


def correlation_length_s(levels: list[float]) -> int | None:
    """First lag (seconds) at which the levels' autocorrelation falls under 0.5; 0 for a constant
    series, None when it never does within a third of the series."""
    mean = statistics.fmean(levels)
    deviations = [x - mean for x in levels]
    variance = sum(d * d for d in deviations)
    if variance == 0:
        return 0
    for lag in range(1, len(levels) // 3):
        covariance = sum(deviations[i] * deviations[i + lag] for i in range(len(levels) - lag))
        if covariance / variance < 0.5:
            return lag
    return None


def _quantile(values: list[float], q: float) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def summarise_levels(levels: list[float]) -> ProbeLevels:
    windows = [WindowStray(window_s=w, median=statistics.median(strays), p90=_quantile(strays, 0.90), max=max(strays))
               for w in WINDOWS_S if len(strays := window_strays(levels, w)) >= MIN_WINDOW_POSITIONS]
    return ProbeLevels(median_s=statistics.median(levels), mean_s=statistics.fmean(levels),
                       p90_over_p10=max(1.0, _quantile(levels, 0.90) / _quantile(levels, 0.10)),
                       correlation_length_s=correlation_length_s(levels), windows=windows)


# ---- the probe ----

def probe_samples(seconds: float, on_progress: Callable[[float], None] | None = None) -> list[dict]:
    """Back-to-back samples of the two probes: {t_s, compute_s, memory_s}."""
    import torch

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: what the level of one core is, not how threads share two
    try:
        matrix = torch.randn(MATMUL_SIDE, MATMUL_SIDE)
        vector = torch.randn(MEMORY_ELEMENTS)
        samples = []
        started = time.perf_counter()
        reported = 0.0
        while (elapsed := time.perf_counter() - started) < seconds:
            t0 = time.perf_counter()
            for _ in range(MATMULS_PER_SAMPLE):
                matrix @ matrix
            t1 = time.perf_counter()
            vector.mul_(1.0000001)  # in place: reads and writes 16 MB, allocates nothing
            vector.mul_(0.9999999)
            t2 = time.perf_counter()
            samples.append({"t_s": elapsed, "compute_s": t1 - t0, "memory_s": t2 - t1})
            if on_progress is not None and elapsed - reported >= 0.25:  # a progress bar, not a tax on every sample
                reported = elapsed
                on_progress(min(seconds, elapsed))
        return samples
    finally:
        torch.set_num_threads(previous_threads)


def probe_level_s(seconds: float) -> float:
    """This host's speed level now, in the host-noise probe's units: the median compute sample plus the
    median memory sample over `seconds` of probing (medians, as per_second_levels: one descheduled
    sample should not move it). A profile takes it beside its sampled steps (see LEVEL_PROBE_S)."""
    samples = probe_samples(seconds)
    return statistics.median(s["compute_s"] for s in samples) + statistics.median(s["memory_s"] for s in samples)


def check_seconds(seconds: float) -> None:
    """A probe too short for its longest window is an error, said before any probing."""
    if not math.isfinite(seconds) or seconds < MIN_PROBE_SECONDS:
        raise TrainwiseError(f"--seconds must be at least {MIN_PROBE_SECONDS:.0f} (got {seconds:g}): the 30 s window "
                             f"needs room to slide; use the default {DEFAULT_PROBE_SECONDS:.0f}")


def measure(seconds: float = DEFAULT_PROBE_SECONDS, on_progress: Callable[[float], None] | None = None,
            samples: list[dict] | None = None) -> HostNoise:
    """Probe this host for `seconds` (or summarise given samples) and return its HostNoise."""
    check_seconds(seconds)
    from trainwise.core.host import cpu_model

    measured_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    samples = probe_samples(seconds, on_progress) if samples is None else samples
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return HostNoise(hostname=socket.gethostname(), cpu_model=cpu_model(), measured_at=measured_at,
                     probe_seconds=seconds, pinned_cpus=affinity if affinity != list(range(os.cpu_count() or 0)) else None,
                     compute=summarise_levels(per_second_levels(samples, "compute_s")),
                     memory=summarise_levels(per_second_levels(samples, "memory_s")))


# ---- where it is kept ----

def store_dir() -> Path | None:
    """$TRAINWISE_HOST_NOISE_DIR, else host_noise/ under $TRAINWISE_CACHE_DIR or ~/.cache/trainwise;
    None with TRAINWISE_NO_CACHE=1."""
    explicit = os.environ.get("TRAINWISE_HOST_NOISE_DIR")
    if explicit:
        return Path(explicit)
    root = cache_root()
    return None if root is None else root / "host_noise"


def path_for(hostname: str) -> Path | None:
    directory = store_dir()
    return None if directory is None else directory / f"{hostname}.json"


class HostNoiseHistory(BaseModel):
    """What the store keeps per host: its measurements, oldest first (the last MAX_KEPT)."""

    model_config = ConfigDict(extra="forbid")
    hostname: str
    measurements: list[HostNoise] = Field(min_length=1)


def _read_history(path: Path) -> HostNoiseHistory:
    """A store file: a history, or one bare measurement (what `-o PATH` writes, and the first format)."""
    text = path.read_text(encoding="utf-8")
    try:
        return HostNoiseHistory.model_validate_json(text)
    except ValidationError:
        single = HostNoise.model_validate_json(text)
        return HostNoiseHistory(hostname=single.hostname, measurements=[single])


def save(noise: HostNoise, path: Path | None = None) -> Path:
    """`path`: that one measurement there. Otherwise added to this host's kept measurements in the store
    (an unreadable or other host's store file is replaced, not merged)."""
    target = path or path_for(noise.hostname)
    if target is None:
        raise TrainwiseError("TRAINWISE_NO_CACHE is set, so there is nowhere to keep the measurement: "
                             "give --output PATH or unset TRAINWISE_NO_CACHE")
    if path is not None:
        text = noise.model_dump_json(indent=1)
    else:
        kept: list[HostNoise] = []
        try:
            history = _read_history(target)
            if history.hostname == noise.hostname:
                kept = history.measurements
        except (OSError, UnicodeDecodeError, ValidationError, ValueError):
            pass  # nothing kept yet, or nothing usable: this measurement starts the history
        text = HostNoiseHistory(hostname=noise.hostname, measurements=(kept + [noise])[-MAX_KEPT:]).model_dump_json(indent=1)
    try:
        return atomic_write_text(target, text)
    except OSError as exc:
        raise TrainwiseError(f"cannot write {target} ({exc.strerror}): give a writable --output PATH") from None


def load_for_host(hostname: str | None = None) -> tuple[HostNoise | None, str | None]:
    """The envelope of this host's kept measurements, or None; the second value says why a file that
    exists was not used (unreadable, malformed, another host's), for the profile's notes."""
    hostname = hostname or socket.gethostname()
    path = path_for(hostname)
    if path is None or not path.exists():
        return None, None
    try:
        history = _read_history(path)
    except (OSError, UnicodeDecodeError, ValidationError, ValueError):
        return None, f"host-noise file {path} is unreadable or malformed and was ignored: run `trainwise host-noise` again"
    if history.hostname != hostname or any(one.hostname != hostname for one in history.measurements):
        return None, f"host-noise file {path} is for host {history.hostname!r}, not {hostname!r}, and was ignored"
    return envelope(history.measurements), None
