"""The online part of a strategy: a real `torch.utils.data.DataLoader` over the shards (or the source).

- `SourceDataset`: the naive PyTorch pipeline (map-style; each item reads its source file and runs
  every step), what a user writes without trainwise.
- `ShardDataset`: an IterableDataset over the strategy's tar shards; DataLoader worker w of W reads
  shards w, w+W, ...; it deserialises each sample and runs steps m+1..n. With cache mode "app" each
  worker keeps its deserialised samples in memory after the first epoch (persistent workers), the
  PyTorch counterpart of tf.data's `cache()`; the online steps still run every epoch.
- `worker_kind="thread"`: the same shards read by a pool of threads inside the main process
  (DataLoader num_workers=0), for steps that release the GIL (numpy, PIL, tokenizers); one thread
  is a background reader that runs ahead of the consumer (up to 256 samples), not the main thread.
"""

from __future__ import annotations

import os
import queue
import random
import tarfile
import threading
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from trainwise.errors import TrainwiseError
from trainwise.optional import require
from trainwise.pipeline.codec import decode_member, split_member_name
from trainwise.pipeline.materialise import Manifest, load_manifest, strategy_dir, verify_shards
from trainwise.pipeline.spec import Pipeline, Sample, StepError
from trainwise.pipeline.strategy import Strategy

try:  # decompressors raise their own error types on corrupted input
    import zstandard

    _ZSTD_ERRORS: tuple[type[BaseException], ...] = (zstandard.ZstdError,)
except ImportError:  # zstandard comes with the [pipeline] extra; without it no shard is zstd-compressed
    _ZSTD_ERRORS = ()


class SourceDataset(Dataset):
    """Naive fully-online pipeline: source item i, then every step, every epoch."""

    def __init__(self, pipeline: Pipeline, repeat: int = 1) -> None:
        self.pipeline, self.repeat = pipeline, max(1, int(repeat))

    def __len__(self) -> int:
        return len(self.pipeline.source) * self.repeat

    def __getitem__(self, index: int) -> Sample | None:
        index %= len(self.pipeline.source)
        try:
            return self.pipeline.run_steps(self.pipeline.source[index], 0, index=index)
        except StepError:
            if self.pipeline.skip_online_errors:
                return None  # a map-style data set cannot leave an index out: the consumer skips None
            raise


def read_shard(path: Path, field_kinds: dict[str, str]) -> Iterator[Sample]:
    """Deserialised samples of one shard, in order; a damaged shard raises naming it. webdataset's tar
    iterators read the members and group them by key (suffixes kept as written: field names keep their case)."""
    tariterators = require("webdataset.tariterators", "reading WebDataset shards")
    name = "?"
    try:
        with open(path, "rb") as stream:
            members = ({**member, "__url__": str(path)} for member in tariterators.tar_file_iterator(stream, skip_meta=None))
            for grouped in tariterators.group_by_keys(members, lcase=False):
                key = grouped["__key__"]
                sample: Sample = {"__key__": key}
                for suffix, payload in grouped.items():
                    if suffix.startswith("__") and suffix.endswith("__"):
                        continue  # __key__, __url__
                    name = f"{key}.{suffix}"
                    _, field, ext, compression = split_member_name(name)
                    sample[field] = decode_member(ext, payload, compression, field_kinds.get(field))
                yield sample
    except (tarfile.TarError, ValueError, EOFError, OSError, zlib.error, RuntimeError, *_ZSTD_ERRORS) as exc:
        raise TrainwiseError(f"corrupted shard {path} (at member {name!r}): {type(exc).__name__}: {exc}; "
                             "rebuild the strategy (apply --rebuild)") from None


class ShardDataset(IterableDataset):
    """Samples from the shards, with steps split..n applied online; optional in-memory cache."""

    def __init__(self, pipeline: Pipeline, directory: Path, manifest: Manifest, *, cache: str = "none",
                 threads: int = 0, shuffle_shards: bool = False, seed: int = 0, repeat: int = 1) -> None:
        self.pipeline, self.directory, self.manifest = pipeline, Path(directory), manifest
        # `repeat`: an epoch reads every shard this many times (profiling a sample at the full dataset's epoch length)
        self.paths = [self.directory / r.name for r in manifest.shards] * max(1, int(repeat))
        self.cache_enabled = cache == "app"
        self.threads, self.shuffle_shards, self.seed = threads, shuffle_shards, seed
        self._cache: dict[str, list[Sample]] = {}
        self._epoch = 0

    def __len__(self) -> int:
        return self.manifest.samples * len(self.paths) // max(1, len(self.manifest.shards))

    def _shard_samples(self, path: Path) -> Iterator[Sample]:
        cached = self._cache.get(path.name)
        if cached is not None:
            yield from cached
            return
        keep: list[Sample] | None = [] if self.cache_enabled else None
        for sample in read_shard(path, self.manifest.field_kinds):
            if keep is not None:
                keep.append(sample)
            yield sample
        if keep is not None:
            self._cache[path.name] = keep

    def _online(self, sample: Sample) -> Sample | None:
        # a shallow copy: online steps must not replace fields of a cached sample
        try:
            return self.pipeline.run_steps(dict(sample), self.manifest.split)
        except StepError:
            if self.pipeline.skip_online_errors:
                return None
            raise

    def _my_paths(self) -> list[Path]:
        paths = list(self.paths)
        if self.shuffle_shards:
            random.Random(self.seed + self._epoch).shuffle(paths)
        self._epoch += 1
        info = get_worker_info()
        if info is not None:
            paths = paths[info.id::info.num_workers]
        return paths

    def __iter__(self) -> Iterator[Sample]:
        paths = self._my_paths()
        if self.threads <= 0:
            for path in paths:
                for sample in self._shard_samples(path):
                    done = self._online(sample)
                    if done is not None:
                        yield done
            return
        yield from self._threaded(paths)

    def _threaded(self, paths: list[Path]) -> Iterator[Sample]:
        out: queue.Queue[Any] = queue.Queue(maxsize=256)
        done = object()
        stop = threading.Event()

        def work(mine: list[Path]) -> None:
            try:
                for path in mine:
                    for sample in self._shard_samples(path):
                        if stop.is_set():
                            return
                        done_sample = self._online(sample)
                        if done_sample is not None:
                            out.put(done_sample)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                out.put(exc)
            finally:
                out.put(done)

        with ThreadPoolExecutor(self.threads) as pool:
            for t in range(self.threads):
                pool.submit(work, paths[t::self.threads])
            finished = 0
            try:
                while finished < self.threads:
                    item = out.get()
                    if item is done:
                        finished += 1
                    elif isinstance(item, BaseException):
                        raise item
                    else:
                        yield item
            finally:
                stop.set()
                while finished < self.threads:  # unblock producers waiting on a full queue
                    try:
                        if out.get(timeout=0.1) is done:
                            finished += 1
                    except queue.Empty:
                        pass


def open_strategy(pipeline: Pipeline, strategy: Strategy, root: str | Path, *, verify: bool = True) -> tuple[Path, Manifest]:
    """The directory and manifest of a complete materialisation (checked against the manifest)."""
    directory = strategy_dir(root, pipeline, strategy)
    manifest = load_manifest(directory)
    if manifest is None:
        raise TrainwiseError(f"strategy {strategy.storage_id} of pipeline {pipeline.name!r} is not materialised (no {directory}/manifest.json): "
                             f"run `trainwise pipeline apply {pipeline.name} --strategy {strategy.id}`")
    verify_shards(directory, manifest, checksums=verify)
    return directory, manifest


def make_dataloader(pipeline: Pipeline, strategy: Strategy, root: str | Path | None = None, *, batch_size: int | None = None,
                    collate_fn: Any = None, verify: bool = True, shuffle_shards: bool = False,
                    manifest: tuple[Path, Manifest] | None = None, repeat: int = 1, timeout_s: float = 0) -> DataLoader:
    """A ready DataLoader for `strategy` (samples one by one unless `batch_size` is given); `repeat` > 1
    makes each epoch go over the data that many times (the profiler's full-length epochs from a sample);
    `timeout_s` > 0: a worker process that delivers nothing for that long raises (0: wait for ever)."""
    strategy.check(pipeline)
    kwargs: dict[str, Any] = {"batch_size": batch_size}
    if timeout_s > 0 and strategy.workers > 0 and strategy.worker_kind == "process":
        kwargs["timeout"] = timeout_s  # DataLoader accepts a timeout only with worker processes
    if collate_fn is not None:
        kwargs["collate_fn"] = collate_fn
    if not strategy.materialised:
        dataset: Dataset = SourceDataset(pipeline, repeat)
        if strategy.worker_kind == "thread" and strategy.workers > 1:
            raise TrainwiseError("thread workers apply to materialised strategies; use process workers (…-wNp-…) for the online pipeline")
        return DataLoader(dataset, num_workers=strategy.workers, persistent_workers=strategy.workers > 0, **kwargs)
    if root is None and manifest is None:
        raise TrainwiseError("a materialised strategy needs the directory it was materialised in (--output-dir)")
    directory, loaded = manifest if manifest is not None else open_strategy(pipeline, strategy, root, verify=verify)  # type: ignore[arg-type]
    threads = strategy.workers if strategy.worker_kind == "thread" else 0
    dataset = ShardDataset(pipeline, directory, loaded, cache=strategy.cache, threads=threads, shuffle_shards=shuffle_shards,
                           repeat=repeat)
    processes = strategy.workers if strategy.worker_kind == "process" else 0
    return DataLoader(dataset, num_workers=processes, persistent_workers=processes > 0, **kwargs)


def drop_page_cache(paths: list[Path]) -> int:
    """Evict these files from the page cache (posix_fadvise DONTNEED; no root needed). Returns files evicted."""
    count = 0
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            count += 1
        finally:
            os.close(fd)
    return count


def touch(sample: Any) -> int:
    """Touch every field of a delivered sample without a model (as PRESTO): returns bytes seen."""
    total = 0
    values = sample.values() if isinstance(sample, dict) else [sample]
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.numel():
                value.reshape(-1)[-1].item()
            total += value.numel() * value.element_size()
        elif hasattr(value, "nbytes"):
            if getattr(value, "size", 0):
                value.reshape(-1)[-1].item()
            total += int(value.nbytes)
        elif isinstance(value, (bytes, str)):
            total += len(value)
    return total
