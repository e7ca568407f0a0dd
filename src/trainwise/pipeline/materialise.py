"""Offline materialisation: run steps 1..m once and write WebDataset tar shards, the manifest last.

Crash safety: each shard is written to a hidden temp file, fsynced and renamed; a small per-shard
record (count, bytes, sha256) is written next to it atomically after the rename; `manifest.json` is
written last, so a directory without a manifest is never a complete strategy. A rerun keeps every
shard whose record matches the file on disk (resume) and rebuilds the rest; `rebuild=True` starts over.
A full disk or an unwritable directory stops with a one-line error and leaves no manifest.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.optional import require
from trainwise.pipeline.codec import encode_sample
from trainwise.pipeline.spec import Pipeline, StepError
from trainwise.pipeline.strategy import Strategy, storage_hash

MANIFEST = "manifest.json"
_MTIME = 0  # fixed member mtime: identical input gives byte-identical shards (checksums comparable across runs)
Progress = Callable[[int], None]


class ShardRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    samples: int
    bytes: int
    sha256: str
    field_kinds: dict[str, str] = Field(default_factory=dict)


class SkippedSample(BaseModel):
    index: int
    key: str | None
    step: str
    error: str


class Manifest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    layout: str = "webdataset-tar/2"
    pipeline: str
    strategy_hash: str
    storage_id: str
    split: int
    split_name: str
    format: str
    compression: str
    offline_steps: list[dict[str, Any]] = Field(description="names, versions of the steps run offline")
    online_steps: list[dict[str, Any]]
    source_fingerprint: str
    source_samples: int
    samples: int
    bytes: int
    skipped_count: int = 0
    skipped_by_step: dict[str, int] = Field(default_factory=dict)
    skipped_examples: list[SkippedSample] = Field(default_factory=list)
    field_kinds: dict[str, str]
    shards: list[ShardRecord]
    offline_seconds: float = Field(description="wall time of this materialisation (resumed shards count their earlier time)")
    created_at: float


def strategy_dir(root: str | Path, pipeline: Pipeline, strategy: Strategy) -> Path:
    return Path(root) / pipeline.name / f"{strategy.storage_id}-{storage_hash(pipeline, strategy)}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_writable(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise TrainwiseError(f"cannot write to output directory {directory}: {exc.strerror or exc}; "
                             "choose a writable --output-dir") from None


def _disk_full(directory: Path, shard: str, needed: int | None = None) -> TrainwiseError:
    free = shutil.disk_usage(directory).free if directory.exists() else 0
    extra = f" (about {needed / 1e6:.1f} MB needed for the next shard)" if needed else ""
    return TrainwiseError(f"disk full while writing {shard} in {directory}: {free / 1e6:.1f} MB free{extra}; "
                          "free space or choose another --output-dir (no manifest was written: the strategy is incomplete)")


def load_manifest(directory: Path) -> Manifest | None:
    path = directory / MANIFEST
    if not path.exists():
        return None
    try:
        return Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise TrainwiseError(f"manifest {path} is unreadable ({str(exc).splitlines()[0]}): rebuild the strategy") from None


def verify_shards(directory: Path, manifest: Manifest, checksums: bool = True) -> None:
    """Raise naming the first shard whose size (and checksum) differs from the manifest."""
    for record in manifest.shards:
        path = directory / record.name
        if not path.exists():
            raise TrainwiseError(f"shard {path} listed in the manifest is missing: rebuild the strategy (apply --rebuild)")
        size = path.stat().st_size
        if size != record.bytes:
            raise TrainwiseError(f"corrupted shard {path}: {size} bytes, manifest says {record.bytes}; rebuild the strategy (apply --rebuild)")
        if checksums and file_sha256(path) != record.sha256:
            raise TrainwiseError(f"corrupted shard {path}: sha256 differs from the manifest; rebuild the strategy (apply --rebuild)")


def _shard_ranges(count: int, shards: int) -> list[range]:
    shards = max(1, min(shards, count))
    return [range(i * count // shards, (i + 1) * count // shards) for i in range(shards)]


def _write_shard(pipeline: Pipeline, strategy: Strategy, indices: range, final: Path, *, skip_errors: bool,
                 kinds: dict[str, str], skipped: list[SkippedSample], progress: Progress | None) -> ShardRecord:
    tmp = final.with_name(f".{final.name}.tmp")
    samples = 0
    wds = require("webdataset", "writing WebDataset shards")
    try:
        with open(tmp, "wb") as raw:
            # webdataset's TarWriter into our temp file (fsync + rename stay ours); members get a fixed
            # mtime so identical input gives byte-identical shards, comparable by checksum across runs
            with wds.TarWriter(raw, encoder=False, keep_meta=True, mtime=_MTIME, mode=0o644, user="", group="") as tar:
                for index in indices:
                    try:
                        sample = pipeline.run_steps(pipeline.source[index], 0, strategy.split, index=index)
                    except StepError as exc:
                        if not skip_errors:
                            raise
                        skipped.append(SkippedSample(index=index, key=exc.key, step=exc.step_name, error=f"{type(exc.cause).__name__}: {exc.cause}"))
                        if progress:
                            progress(1)
                        continue
                    members, sample_kinds = encode_sample(sample, strategy.format, strategy.compression)
                    for field, kind in sample_kinds.items():
                        previous = kinds.setdefault(field, kind)
                        if previous != kind:
                            raise TrainwiseError(f"field {field!r} is {previous} in some samples and {kind} in sample {sample['__key__']!r}: "
                                                 "make the offline steps return one type per field")
                    tar.write(_webdataset_sample(members))
                    samples += 1
                    if progress:
                        progress(1)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    record = ShardRecord(name=final.name, samples=samples, bytes=final.stat().st_size, sha256=file_sha256(final),
                         field_kinds=dict(kinds))
    atomic_write_text(final.with_name(final.name + ".json"), record.model_dump_json())
    return record


def _webdataset_sample(members: list[tuple[str, bytes]]) -> dict[str, Any]:
    """Encoded members `key.field.ext[.comp]` as the sample dict TarWriter writes: {"__key__": key,
    "field.ext[.comp]": payload}; TarWriter names each member key + "." + suffix again."""
    sample: dict[str, Any] = {}
    for name, payload in members:
        key, suffix = name.split(".", 1)
        sample["__key__"] = key
        sample[suffix] = payload
    return sample


def _resumable(final: Path) -> ShardRecord | None:
    sidecar = final.with_name(final.name + ".json")
    if not (final.exists() and sidecar.exists()):
        return None
    try:
        record = ShardRecord.model_validate_json(sidecar.read_text(encoding="utf-8"))
    except ValueError:
        return None
    if record.bytes != final.stat().st_size or file_sha256(final) != record.sha256:
        return None
    return record


def materialise(pipeline: Pipeline, strategy: Strategy, root: str | Path, *, rebuild: bool = False, skip_errors: bool = False,
                progress: Progress | None = None, verify: bool = False) -> tuple[Path, Manifest]:
    """Write (or reuse, or resume) the shards of `strategy`; returns its directory and manifest."""
    if not strategy.materialised:
        raise TrainwiseError("an online strategy has nothing to materialise")
    strategy.check(pipeline)
    directory = strategy_dir(root, pipeline, strategy)
    _check_writable(Path(root))
    if rebuild and directory.exists():
        shutil.rmtree(directory)
    existing = load_manifest(directory)
    if existing is not None:
        verify_shards(directory, existing, checksums=verify)
        if progress:
            progress(existing.source_samples)
        return directory, existing
    _check_writable(directory)
    start = time.perf_counter()
    kinds: dict[str, str] = {}
    skipped: list[SkippedSample] = []
    records: list[ShardRecord] = []
    ranges = _shard_ranges(len(pipeline.source), strategy.shards)
    sidecar_time = directory / ".offline_seconds.json"
    earlier_s = json.loads(sidecar_time.read_text())["seconds"] if sidecar_time.exists() else 0.0
    for number, indices in enumerate(ranges):
        final = directory / f"shard-{number:05d}.tar"
        reused = _resumable(final)
        if reused is not None:
            records.append(reused)
            if progress:
                progress(len(indices))
            continue
        if records:
            expected = max(r.bytes for r in records)
            if shutil.disk_usage(directory).free < expected * 1.05:
                raise _disk_full(directory, final.name, expected)
        try:
            records.append(_write_shard(pipeline, strategy, indices, final, skip_errors=skip_errors, kinds=kinds,
                                        skipped=skipped, progress=progress))
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise _disk_full(directory, final.name) from None
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise TrainwiseError(f"cannot write {final}: {exc.strerror}; choose a writable --output-dir") from None
            raise
        atomic_write_text(sidecar_time, json.dumps({"seconds": earlier_s + time.perf_counter() - start}))
    for record in records:  # resumed shards carry their field kinds
        for field, kind in record.field_kinds.items():
            kinds.setdefault(field, kind)
    elapsed = earlier_s + time.perf_counter() - start
    by_step: dict[str, int] = {}
    for item in skipped:
        by_step[item.step] = by_step.get(item.step, 0) + 1
    manifest = Manifest(pipeline=pipeline.name, strategy_hash=storage_hash(pipeline, strategy), storage_id=strategy.storage_id,
                        split=strategy.split, split_name=pipeline.split_name(strategy.split), format=strategy.format,
                        compression=strategy.compression, offline_steps=pipeline.steps_signature(strategy.split),
                        online_steps=[s for s in pipeline.steps_signature()[strategy.split:]],
                        source_fingerprint=pipeline.source.fingerprint(), source_samples=len(pipeline.source),
                        samples=sum(r.samples for r in records), bytes=sum(r.bytes for r in records), skipped_count=len(skipped),
                        skipped_by_step=by_step, skipped_examples=skipped[:20], field_kinds=kinds, shards=records,
                        offline_seconds=elapsed, created_at=time.time())
    if manifest.samples == 0:
        raise TrainwiseError(f"every sample failed an offline step ({by_step}): nothing to store; fix the steps")
    try:
        atomic_write_text(directory / MANIFEST, manifest.model_dump_json(indent=1))
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise _disk_full(directory, MANIFEST) from None
        raise
    return directory, manifest

