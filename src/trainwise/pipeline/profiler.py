"""Profile strategies: offline time p, storage s, online throughput t (PRESTO), measured here.

t is samples/s delivered by a real DataLoader, each sample touched without a model, over whole
epochs after a warm-up epoch (which starts the workers and fills the application cache or the page
cache). Cache mode "none" evicts the files from the page cache (posix_fadvise DONTNEED) before every
epoch, so each epoch reads from the disk. With `sample_n`, a subset of the source (evenly spaced) is
profiled and p, s extrapolated linearly to the full dataset. t of a cached strategy (page, app) is
measured over epochs of the sample repeated to the full dataset's length (`measure_sampled`); for the
uncached one t is split into each epoch's start-up (starting workers, producing the first sample) and
the steady streaming rate after it, and an epoch of the full dataset is start-up + samples / rate — in
a small sample's short epochs the start-up weighs far more than in the full one. Both take the per-
sample cost as size-independent, which stops holding once the full dataset outgrows the page cache or
memory: the report flags that.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError
from trainwise.pipeline.loader import drop_page_cache, make_dataloader, touch
from trainwise.pipeline.materialise import materialise
from trainwise.pipeline.spec import Pipeline
from trainwise.pipeline.strategy import Strategy

Progress = Callable[[str], None]


class Bandwidth(BaseModel):
    """Sequential read bandwidth measured here on the output directory's filesystem."""

    disk_bytes_per_s: float = Field(description="cold read after posix_fadvise DONTNEED")
    page_cache_bytes_per_s: float = Field(description="the same file read again from the page cache")
    file_bytes: int
    provenance: str = "measured here"


class StrategyResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    strategy_id: str
    storage_id: str
    materialised: bool
    split: int
    split_name: str
    format: str
    compression: str
    shards: int
    workers: int
    worker_kind: str
    cache: str
    samples: int = Field(description="samples profiled (after skipped ones)")
    offline_s: float = Field(description="p measured on the profiled samples")
    storage_bytes: int = Field(description="s measured on the profiled samples (source bytes for the online strategy)")
    bytes_per_sample: float
    throughput_sps: float = Field(description="t: samples/s over an epoch of the full dataset (measured over the "
                                              "profiled epochs; with --sample, extrapolated: see epoch_startup_s)")
    measured_throughput_sps: float | None = Field(default=None, description="samples/s over the profiled epochs as measured")
    epoch_startup_s: float = Field(default=0.0, description="median time from an epoch's start to its first sample")
    steady_throughput_sps: float | None = Field(default=None, description="samples/s after each epoch's first sample")
    warmup_s: float = Field(description="worker start + a few samples; a whole epoch for the app cache (not in t)")
    measured_epochs: int
    measured_s: float
    cpu_percent: float = Field(description="system-wide CPU utilisation during the measured epochs (psutil)")
    cpu_s_per_sample: float = Field(description="CPU seconds of this process and its workers per sample")
    disk_read_bytes_per_s: float = Field(description="system-wide disk reads during the measured epochs (psutil)")
    bound_sps: float | None = Field(description="read bandwidth / bytes per sample (None for the app cache: no reads)")
    bound_fraction: float | None
    skipped_samples: int = 0
    offline_s_full: float = Field(description="p for the full dataset (= offline_s when not sampled)")
    storage_bytes_full: float = Field(description="s for the full dataset")
    throughput_repeats_sps: list[float] = Field(default_factory=list, description="re-timings of a leader, interleaved with "
                                                "the other leaders' (confirm_leaders); t is then their median (the first timing, "
                                                "not side by side with them, is left out)")
    notes: list[str] = Field(default_factory=list)


class PipelineProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    pipeline: str
    description: str
    source_samples: int
    profiled_samples: int
    source_bytes: int | None
    extrapolation: str
    bandwidth: Bandwidth | None
    memory_bytes: int
    cpu_count: int | None
    results: list[StrategyResult]
    provenance: str = "measured here"

    def frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame([r.model_dump() for r in self.results])

    def result(self, strategy_id: str) -> StrategyResult:
        for r in self.results:
            if r.strategy_id == strategy_id:
                return r
        raise TrainwiseError(f"strategy {strategy_id!r} was not profiled: profiled are {', '.join(r.strategy_id for r in self.results[:8])}…")


def measure_read_bandwidth(directory: str | Path, file_bytes: int = 256 << 20, block: int = 1 << 20) -> Bandwidth:
    """Write a file, evict it, read it (disk), read it again (page cache)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=".bandwidth-", dir=root)
    path = Path(name)
    try:
        chunk = np.random.default_rng(0).integers(0, 255, size=block, dtype=np.uint8).tobytes()
        with os.fdopen(fd, "wb") as handle:
            for _ in range(file_bytes // block):
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        drop_page_cache([path])
        rates = []
        for _ in range(2):
            start = time.perf_counter()
            with open(path, "rb", buffering=0) as handle:
                while handle.read(block):
                    pass
            rates.append(file_bytes / (time.perf_counter() - start))
        return Bandwidth(disk_bytes_per_s=rates[0], page_cache_bytes_per_s=rates[1], file_bytes=file_bytes)
    finally:
        path.unlink(missing_ok=True)


def warm_page_cache(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(1 << 20):
                pass


def _shutdown(loader: Any) -> None:
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    loader._iterator = None


def _cpu_seconds() -> float:
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


# A worker process that delivers no sample for this long is stuck, not slow: the profile stops with an
# error naming the strategy instead of waiting for ever (a forked worker deadlocked on a lock its parent
# held at fork time spins at 100 % CPU and never returns: torch.stft (MKL) after reader threads did so here,
# see trainwise/pipeline/reference/audio.py).
WORKER_STALL_TIMEOUT_S = 300.0


def measure_online(pipeline: Pipeline, strategy: Strategy, manifest: Any = None, *, min_seconds: float = 0.5,
                   max_epochs: int = 5, repeat: int = 1, stall_timeout_s: float = WORKER_STALL_TIMEOUT_S) -> dict[str, Any]:
    """Throughput of one strategy's DataLoader, in steady state (see the module docstring); `repeat` > 1
    runs epochs that go over the data that many times."""
    try:
        return _measure_online(pipeline, strategy, manifest, min_seconds=min_seconds, max_epochs=max_epochs, repeat=repeat,
                               stall_timeout_s=stall_timeout_s)
    except RuntimeError as exc:
        if "DataLoader timed out" not in str(exc):
            raise
        raise TrainwiseError(f"strategy {strategy.id}: a DataLoader worker process delivered no sample in {stall_timeout_s:.0f} s "
                             "(stuck, e.g. a library that is not fork-safe): profile without worker processes (--workers 0 or --worker-kinds thread) "
                             "or make the step fork-safe") from None


def _measure_online(pipeline: Pipeline, strategy: Strategy, manifest: Any, *, min_seconds: float, max_epochs: int, repeat: int,
                    stall_timeout_s: float) -> dict[str, Any]:
    loader = make_dataloader(pipeline, strategy, manifest=manifest, verify=False, repeat=repeat, timeout_s=stall_timeout_s)
    files = ([manifest[0] / r.name for r in manifest[1].shards] if strategy.materialised else pipeline.source.file_paths())
    evict = strategy.cache == "none"
    try:
        # Warm-up: start the workers (a few samples); the app cache needs a whole epoch to fill, the
        # page cache a read of the files (cheaper than a whole epoch through slow steps).
        start = time.perf_counter()
        if strategy.cache == "app":
            warm = sum(1 for sample in loader if sample is not None and touch(sample) >= 0)
        else:
            if strategy.cache == "page":
                warm_page_cache(files)
            warm = 0
            for sample in loader:
                if sample is None:  # failed an online step, skipped (--skip-errors)
                    continue
                touch(sample)
                warm += 1
                if warm >= 2 * max(1, strategy.workers) + 1:
                    break
        warmup_s = time.perf_counter() - start
        epochs, count, elapsed, cpu_s, read_bytes = 0, 0, 0.0, 0.0, 0
        cpu_percent_samples = []
        startups: list[float] = []
        while epochs < max_epochs and (epochs == 0 or elapsed < min_seconds):
            if evict:
                drop_page_cache(files)
            io_before, cpu_before = psutil.disk_io_counters(), _cpu_seconds()
            psutil.cpu_percent(None)
            start = time.perf_counter()
            first_at = None
            for sample in loader:
                if sample is None:
                    continue
                touch(sample)
                count += 1
                if first_at is None:
                    first_at = time.perf_counter()
            elapsed += time.perf_counter() - start
            if first_at is not None:
                startups.append(first_at - start)
            cpu_percent_samples.append(psutil.cpu_percent(None))
            cpu_s += _cpu_seconds() - cpu_before
            io_after = psutil.disk_io_counters()
            if io_before is not None and io_after is not None:
                read_bytes += io_after.read_bytes - io_before.read_bytes
            epochs += 1
    finally:
        _shutdown(loader)
    # Each epoch pays a start-up (worker processes/threads started, first sample produced) and then
    # streams: t_epoch = startup + samples / steady rate. Kept apart so that an epoch of the full
    # dataset can be extrapolated from a small sample's epochs, where start-up weighs far more.
    startup_s = float(np.median(startups)) if startups else 0.0
    streaming_s = elapsed - sum(startups)
    streamed = count - len(startups)
    steady_sps = streamed / streaming_s if streamed > 0 and streaming_s > 0 else count / elapsed
    return {"throughput_sps": count / elapsed, "measured_throughput_sps": count / elapsed,
            "epoch_startup_s": startup_s, "steady_throughput_sps": steady_sps,
            "warmup_s": warmup_s, "measured_epochs": epochs, "measured_s": elapsed,
            "cpu_percent": float(np.mean(cpu_percent_samples)), "cpu_s_per_sample": cpu_s / max(1, count),
            "disk_read_bytes_per_s": read_bytes / elapsed}


# A sampled epoch whose first sample took more than this share of it is not split into start-up and
# streaming for extrapolation (see profile_pipeline)
MAX_STARTUP_SHARE = 0.5


def measure_sampled(profiled: Pipeline, strategy: Strategy, manifest: Any, samples: int, scale: float, *, min_seconds: float,
                    max_epochs: int) -> tuple[dict[str, Any], list[str]]:
    """t of a full-dataset epoch from a sample (`scale` = full / sample size), with notes on how.

    Cached strategies (page, app) are timed over epochs of the sample repeated round(scale) times, as long
    as the full dataset's: what the reader does per epoch (start workers or threads, prefetch, hand over
    samples) then happens at the full epoch's length and t is measured, not modelled. Why: a thread
    reader produces a short sample epoch within the GIL's 5 ms switch interval, before the consumer runs,
    and hands the rest over from its queue at memory speed; at the full length producer and consumer take
    turns (CV, one reader thread: extrapolated from 12-sample epochs 7,000/s, measured on 120 samples
    4,600/s; the sample repeated 10x 4,000/s). The uncached strategy ("none") reads the disk every
    epoch and a repeated sample would come from the page cache: it keeps start-up + streaming.
    """
    if scale > 1 and strategy.cache != "none":
        repeat = max(1, round(scale))
        online = measure_online(profiled, strategy, manifest, min_seconds=min_seconds, max_epochs=max_epochs, repeat=repeat)
        return online, [f"t measured over epochs of the sample repeated {repeat}x (the full dataset's epoch length)"]
    online = measure_online(profiled, strategy, manifest, min_seconds=min_seconds, max_epochs=max_epochs)
    return online, extrapolate_epoch(online, samples, scale)


def extrapolate_epoch(online: dict[str, Any], samples: int, scale: float) -> list[str]:
    """Turn a sampled measurement's throughput into a full-dataset epoch's (in place); notes on how."""
    if scale <= 1:
        return []
    epoch_s = online["measured_s"] / max(1, online["measured_epochs"])
    if online["epoch_startup_s"] <= MAX_STARTUP_SHARE * epoch_s:
        epoch_samples = samples * scale  # one epoch of the full dataset: start-up once, then streaming
        online["throughput_sps"] = epoch_samples / (online["epoch_startup_s"] + epoch_samples / online["steady_throughput_sps"])
        return []
    # The producers ran ahead of the first sample: reader threads hold the GIL for up to its 5 ms
    # switch interval, so a short sample epoch is mostly produced before the consumer sees its first
    # sample and the rest drains from the queue at memory speed (CV, 12 samples, 2 threads: start-up
    # 1.9 ms of a 2.5 ms epoch, extrapolated 12,900/s, full dataset 5,000/s). Start-up and streaming
    # cannot be told apart: the measured rate stands.
    return [f"start-up took {online['epoch_startup_s'] * 1e3:.2f} ms of the sample's {epoch_s * 1e3:.2f} ms epochs: "
            "t is the sample's measured rate, not extrapolated"]


def sample_indices(total: int, n: int) -> list[int]:
    """n evenly spaced source indices (every size and format of a mixed dataset is represented)."""
    if n >= total:
        return list(range(total))
    return sorted(set(np.linspace(0, total - 1, n).round().astype(int).tolist()))


def sampled(pipeline: Pipeline, sample_n: int | None) -> Pipeline:
    """The pipeline over `sample_n` evenly spaced source samples (itself for None)."""
    if sample_n is None:
        return pipeline
    if sample_n < 1:
        raise TrainwiseError(f"--sample must be a positive sample count (got {sample_n})")
    return pipeline.with_source(pipeline.source.subset(sample_indices(len(pipeline.source), sample_n)))


def profile_pipeline(pipeline: Pipeline, strategies: Sequence[Strategy], root: str | Path, *, sample_n: int | None = None,
                     min_seconds: float = 0.5, max_epochs: int = 5, bandwidth: Bandwidth | None = None, rebuild: bool = True,
                     skip_errors: bool = False, progress: Progress | None = None) -> PipelineProfile:
    """Materialise each storage variant once and measure every strategy on it."""
    if not strategies:
        raise TrainwiseError("no strategies to profile: widen the split/compression/worker choices")
    for s in strategies:
        s.check(pipeline)
    total = len(pipeline.source)
    profiled = sampled(pipeline, sample_n)
    n = len(profiled.source)
    scale = total / n
    source_bytes = profiled.source.storage_bytes()
    memory = psutil.virtual_memory().total
    groups: dict[str, list[Strategy]] = {}
    for s in strategies:
        groups.setdefault(s.storage_id, []).append(s)
    results: list[StrategyResult] = []
    for storage_id, members in groups.items():
        head = members[0]
        manifest = None
        if head.materialised:
            if progress:
                progress(f"materialise {storage_id}")
            manifest = materialise(profiled, head, root, rebuild=rebuild, skip_errors=skip_errors)
            offline_s, storage_bytes, samples, skipped = (manifest[1].offline_seconds, manifest[1].bytes, manifest[1].samples,
                                                         manifest[1].skipped_count)
        else:
            if source_bytes is None:
                raise TrainwiseError("the source's size on storage is unknown: give SequenceSource(storage_bytes=...)")
            offline_s, storage_bytes, samples, skipped = 0.0, source_bytes, n, 0
        for s in members:
            if progress:
                progress(f"measure {s.id}")
            online, notes = measure_sampled(profiled, s, manifest, samples, scale, min_seconds=min_seconds, max_epochs=max_epochs)
            per_sample = storage_bytes / max(1, samples)
            if s.cache == "app":
                bound = None
            elif bandwidth is not None:
                bound = (bandwidth.disk_bytes_per_s if s.cache == "none" else bandwidth.page_cache_bytes_per_s) / per_sample
            else:
                bound = None
            if sample_n is not None and s.cache in ("page", "app") and storage_bytes * scale > 0.5 * memory:
                notes.append(f"the full dataset ({storage_bytes * scale / 2**30:.1f} GiB) would not stay cached in "
                             f"{memory / 2**30:.0f} GiB of memory: t measured on the sample overstates it")
            results.append(StrategyResult(
                strategy_id=s.id, storage_id=s.storage_id, materialised=s.materialised, split=s.split,
                split_name=profiled.split_name(s.split) if s.materialised else "source files (online)", format=s.format,
                compression=s.compression, shards=s.shards, workers=s.workers, worker_kind=s.worker_kind, cache=s.cache,
                samples=samples, offline_s=offline_s, storage_bytes=storage_bytes, bytes_per_sample=per_sample,
                bound_sps=bound, bound_fraction=None if bound is None else online["throughput_sps"] / bound,
                skipped_samples=skipped, offline_s_full=offline_s * scale, storage_bytes_full=storage_bytes * scale, notes=notes,
                **online))
    if sample_n is None or n == total:
        extrapolation = f"none: all {total} samples profiled"
    else:
        extrapolation = (f"profiled {n} of {total} samples (evenly spaced); offline time p and storage s extrapolated linearly "
                         f"(× {scale:.2f}); throughput t for a full-dataset epoch from the sample's per-epoch start-up "
                         f"(workers started, first sample) plus its steady streaming rate")
    return PipelineProfile(pipeline=pipeline.name, description=pipeline.description, source_samples=total, profiled_samples=n,
                           source_bytes=pipeline.source.storage_bytes(), extrapolation=extrapolation, bandwidth=bandwidth,
                           memory_bytes=memory, cpu_count=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                           results=results)


# Leaders: strategies within this share of the fastest are re-timed side by side before one is picked.
# Why: among hundreds of strategies the top few are often within this host's run-to-run noise (CV full
# product: 5 of 966 within 10 % of the best, all in-memory), and one timing each lets the noise pick the
# winner — the maximum of many noisy timings is biased upwards. Interleaved rounds expose every leader to
# the same drifts of a shared machine, and the median of the timings is what is compared.
LEADER_SHARE = 0.10
MAX_LEADERS = 6
CONFIRM_ROUNDS = 3


def leaders(results: Sequence[StrategyResult], *, within: float = LEADER_SHARE, limit: int = MAX_LEADERS) -> list[StrategyResult]:
    """The fastest strategies: within `within` of the best throughput, at most `limit`, fastest first."""
    ranked = sorted(results, key=lambda r: -r.throughput_sps)
    if not ranked:
        return []
    floor = ranked[0].throughput_sps * (1 - within)
    return [r for r in ranked if r.throughput_sps >= floor][:max(1, limit)]


def remeasure(pipeline: Pipeline, strategies: Sequence[Strategy], root: str | Path, *, sample_n: int | None = None,
              rounds: int = CONFIRM_ROUNDS, min_seconds: float = 0.5, max_epochs: int = 5,
              progress: Progress | None = None) -> dict[str, list[float]]:
    """Throughput of each strategy `rounds` times, round-robin (round 1 times every strategy, then round 2 …),
    every other round in reverse order (A B C, C B A, …): a drift that is linear over two rounds then
    weighs on every strategy alike, where a fixed order would always time the same strategy last.

    Full-dataset epochs extrapolated as in `profile_pipeline` when `sample_n` is given; materialisations
    already under `root` are reused.
    """
    if rounds < 1:
        raise TrainwiseError(f"rounds must be at least 1 (got {rounds})")
    profiled = sampled(pipeline, sample_n)
    scale = len(pipeline.source) / len(profiled.source)
    manifests: dict[str, Any] = {}
    for s in strategies:
        s.check(pipeline)
        if s.materialised and s.storage_id not in manifests:
            if progress:
                progress(f"materialise {s.storage_id}")
            manifests[s.storage_id] = materialise(profiled, s, root)
    timings: dict[str, list[float]] = {s.id: [] for s in strategies}
    for number in range(rounds):
        for s in (strategies if number % 2 == 0 else list(reversed(strategies))):
            if progress:
                progress(f"round {number + 1}/{rounds}: {s.id}")
            manifest = manifests.get(s.storage_id)
            online, _ = measure_sampled(profiled, s, manifest, manifest[1].samples if manifest else len(profiled.source), scale,
                                        min_seconds=min_seconds, max_epochs=max_epochs)
            timings[s.id].append(float(online["throughput_sps"]))
    return timings


def confirm_leaders(pipeline: Pipeline, profile: PipelineProfile, root: str | Path, *, rounds: int = CONFIRM_ROUNDS,
                    within: float = LEADER_SHARE, limit: int = MAX_LEADERS, min_seconds: float = 0.5, max_epochs: int = 5,
                    progress: Progress | None = None) -> PipelineProfile:
    """Re-time the leaders side by side; each leader's t becomes the median of its interleaved repeats.

    The first timings were taken minutes apart (one strategy after another) while this kind of host drifts
    by tens of percent over minutes; only the repeats were taken side by side, so only they rank the
    leaders. The first timing stays in the note.
    """
    chosen = leaders(profile.results, within=within, limit=limit)
    if len(chosen) < 2:
        return profile
    sample_n = profile.profiled_samples if profile.profiled_samples < profile.source_samples else None
    timings = remeasure(pipeline, [Strategy.parse(r.strategy_id) for r in chosen], root, sample_n=sample_n, rounds=rounds,
                        min_seconds=min_seconds, max_epochs=max_epochs, progress=progress)
    updated = []
    for r in profile.results:
        repeats = timings.get(r.strategy_id)
        if repeats is None:
            updated.append(r)
            continue
        median = float(np.median(repeats))
        note = (f"t is the median of {len(repeats)} timings interleaved with the other {len(chosen) - 1} strategies within "
                f"{within:.0%} of the fastest (its first timing, {r.throughput_sps:.1f}/s, was not side by side)")
        updated.append(r.model_copy(update={
            "throughput_sps": median, "throughput_repeats_sps": repeats, "notes": [*r.notes, note],
            "bound_fraction": None if r.bound_sps is None else median / r.bound_sps}))
    return profile.model_copy(update={"results": updated})
