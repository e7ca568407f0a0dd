"""A preprocessing pipeline: a source of samples and an ordered list of named steps (sample → sample).

A sample is a dict of named fields (numpy arrays, torch tensors, bytes, str, numbers). Steps are plain
callables; each says whether it is deterministic (a random crop or an augmentation is not, and must
stay online: it would be frozen into the data if materialised) and carries a version string that is
part of every materialised strategy's hash, so changing a step's code and bumping its version forces
a rebuild instead of silently reusing stale shards.

Sources (`Source`): a directory of files or a list of paths (`FileSource`: each item is the file's
bytes, the I/O the naive pipeline pays every epoch), a map-style dataset / sequence (`SequenceSource`:
anything with `__len__` and `__getitem__`, e.g. an existing `torch.utils.data.Dataset`), or any other
iterable (read into memory once). `Pipeline.from_dataset(dataset, steps)` wraps an existing
`Dataset.__getitem__` chain: the dataset gives the raw item, the steps are what `__getitem__` did after.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwise.errors import TrainwiseError

Sample = dict[str, Any]
_KEY_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class Step:
    """One named preprocessing step. `fn(sample) -> sample`; not deterministic → always online."""

    name: str
    fn: Callable[[Sample], Sample]
    deterministic: bool = True
    version: str = "1"

    def __post_init__(self) -> None:
        if not self.name or not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise TrainwiseError(f"step name {self.name!r} must be letters, digits, '_' or '-' (it names files and strategies)")
        if not callable(self.fn):
            raise TrainwiseError(f"step {self.name!r}: fn must be callable (got {type(self.fn).__name__})")

    def __call__(self, sample: Sample) -> Sample:
        return self.fn(sample)


def step(name: str | None = None, *, deterministic: bool = True, version: str = "1") -> Callable[[Callable[[Sample], Sample]], Step]:
    """Decorator: `@step(deterministic=False) def random_crop(sample): ...` makes a Step."""

    def wrap(fn: Callable[[Sample], Sample]) -> Step:
        return Step(name or fn.__name__, fn, deterministic, version)

    return wrap


def as_sample(item: Any, index: int) -> Sample:
    """A source item as a sample dict with a `__key__` safe for tar member names (no dots)."""
    sample = dict(item) if isinstance(item, dict) else {"data": item}
    key = str(sample.get("__key__", f"{index:08d}"))
    sample["__key__"] = _KEY_UNSAFE.sub("_", key)
    return sample


class Source:
    """Random access to the raw items, with their size on storage when known."""

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index: int) -> Sample:
        raise NotImplementedError

    def storage_bytes(self) -> int | None:
        return None

    def subset(self, indices: Sequence[int]) -> "Source":
        return _SubsetSource(self, list(indices))

    def fingerprint(self) -> str:
        return f"{type(self).__name__}:{len(self)}:{self.storage_bytes()}"

    def file_paths(self) -> list[Path]:
        """The files the raw items are read from (for page-cache control); empty if unknown."""
        return []


class _SubsetSource(Source):
    def __init__(self, parent: Source, indices: list[int]) -> None:
        self.parent, self.indices = parent, indices

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> Sample:
        return self.parent[self.indices[index]]

    def storage_bytes(self) -> int | None:
        total = self.parent.storage_bytes()
        return None if total is None else round(total * len(self.indices) / max(1, len(self.parent)))

    def fingerprint(self) -> str:
        import hashlib

        digest = hashlib.sha256(",".join(map(str, self.indices)).encode()).hexdigest()[:12]
        return f"subset({self.parent.fingerprint()}):{digest}"

    def file_paths(self) -> list[Path]:
        paths = self.parent.file_paths()
        if len(paths) == len(self.parent):
            return [paths[i] for i in self.indices]
        return paths


class FileSource(Source):
    """Files as raw items: {"__key__", "data": the file's bytes, "suffix": ".jpg"}."""

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.paths = [Path(p) for p in paths]
        if not self.paths:
            raise TrainwiseError("the pipeline source has no files: point it at a directory with data files or pass paths")
        missing = [p for p in self.paths if not p.is_file()]
        if missing:
            raise TrainwiseError(f"source file {missing[0]} does not exist or is not a file ({len(missing)} missing): fix the path list")
        self._bytes: int | None = None

    @classmethod
    def from_directory(cls, directory: str | Path, pattern: str = "*") -> "FileSource":
        root = Path(directory)
        if not root.is_dir():
            raise TrainwiseError(f"source directory {root} does not exist: create it or pass another directory")
        paths = sorted(p for p in root.rglob(pattern) if p.is_file() and not p.name.startswith("."))
        if not paths:
            raise TrainwiseError(f"source directory {root} has no files matching {pattern!r}")
        return cls(paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Sample:
        path = self.paths[index]
        return {"__key__": _KEY_UNSAFE.sub("_", f"{index:08d}_{path.stem}"), "data": path.read_bytes(), "suffix": path.suffix.lower()}

    def storage_bytes(self) -> int:
        if self._bytes is None:
            self._bytes = sum(p.stat().st_size for p in self.paths)
        return self._bytes

    def fingerprint(self) -> str:
        import hashlib

        listing = "\n".join(f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in self.paths)
        return f"files:{len(self.paths)}:{hashlib.sha256(listing.encode()).hexdigest()[:16]}"

    def file_paths(self) -> list[Path]:
        return list(self.paths)


class SequenceSource(Source):
    """A map-style dataset or sequence (an existing `Dataset`): item i is `data[i]` as a sample."""

    def __init__(self, data: Any, storage_bytes: int | None = None, files: Sequence[Path] = (), name: str | None = None) -> None:
        if not (hasattr(data, "__len__") and hasattr(data, "__getitem__")):
            raise TrainwiseError(f"{type(data).__name__} has no __len__/__getitem__: wrap iterables with SequenceSource.from_iterable")
        self.data, self._storage_bytes, self._files, self.name = data, storage_bytes, [Path(f) for f in files], name

    @classmethod
    def from_iterable(cls, iterable: Iterable[Any], **kwargs: Any) -> "SequenceSource":
        """An iterable without random access, read into memory once (the sampling and sharding need counts)."""
        return cls(list(iterable), **kwargs)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Sample:
        return as_sample(self.data[index], index)

    def storage_bytes(self) -> int | None:
        return self._storage_bytes

    def fingerprint(self) -> str:
        return f"sequence:{self.name or type(self.data).__name__}:{len(self)}:{self._storage_bytes}"

    def file_paths(self) -> list[Path]:
        return list(self._files)


def make_source(source: Any) -> Source:
    """A directory, a list of paths, a Source, a map-style dataset or any iterable, as a Source."""
    if isinstance(source, Source):
        return source
    if isinstance(source, (str, Path)):
        return FileSource.from_directory(source)
    if isinstance(source, (list, tuple)) and source and all(isinstance(p, (str, Path)) for p in source):
        return FileSource(source)
    if hasattr(source, "__len__") and hasattr(source, "__getitem__"):
        return SequenceSource(source)
    if isinstance(source, Iterable):
        return SequenceSource.from_iterable(source)
    raise TrainwiseError(f"unsupported pipeline source {type(source).__name__}: pass a directory, paths, a Dataset or an iterable")


@dataclass
class Pipeline:
    """A source and steps S1..Sn; a strategy runs S1..Sm offline once and S(m+1)..Sn online every epoch."""

    name: str
    source: Source
    steps: list[Step]
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    # While profiling with --skip-errors: a sample an online step fails on is dropped (counted as
    # skipped by the offline part in the manifest), as the offline part drops it, instead of ending the run.
    skip_online_errors: bool = False

    def __post_init__(self) -> None:
        self.source = make_source(self.source)
        self.steps = [s if isinstance(s, Step) else Step(getattr(s, "__name__", "step"), s) for s in self.steps]
        names = [s.name for s in self.steps]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise TrainwiseError(f"pipeline {self.name!r} has duplicate step names {duplicates}: name each step uniquely")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.name):
            raise TrainwiseError(f"pipeline name {self.name!r} must be letters, digits, '_', '.' or '-'")

    @classmethod
    def from_dataset(cls, dataset: Any, steps: Sequence[Step | Callable[[Sample], Sample]], name: str = "dataset", **kwargs: Any) -> "Pipeline":
        """Wrap an existing `Dataset.__getitem__` chain: `dataset[i]` is the raw item, `steps` what followed."""
        return cls(name=name, source=SequenceSource(dataset), steps=list(steps), **kwargs)

    @property
    def max_offline_split(self) -> int:
        """The largest m allowed: every step before the first non-deterministic one."""
        for index, s in enumerate(self.steps):
            if not s.deterministic:
                return index
        return len(self.steps)

    def check_split(self, split: int) -> None:
        if not 0 <= split <= len(self.steps):
            raise TrainwiseError(f"split {split} is outside 0..{len(self.steps)} for pipeline {self.name!r}")
        for s in self.steps[:split]:
            if not s.deterministic:
                raise TrainwiseError(f"step {s.name!r} of pipeline {self.name!r} is not deterministic and cannot run offline "
                                     f"(split {split} would freeze its randomness into the data): use a split ≤ {self.max_offline_split}")

    def split_name(self, split: int) -> str:
        """What is stored at split m: 'source' for m = 0, else the name of step m."""
        return "source" if split == 0 else self.steps[split - 1].name

    def steps_signature(self, split: int | None = None) -> list[dict[str, Any]]:
        chosen = self.steps if split is None else self.steps[:split]
        return [{"name": s.name, "version": s.version, "deterministic": s.deterministic} for s in chosen]

    def with_source(self, source: Source) -> "Pipeline":
        return Pipeline(self.name, source, list(self.steps), self.description, dict(self.metadata), self.skip_online_errors)

    def run_steps(self, sample: Sample, start: int, stop: int | None = None, *, index: int | None = None) -> Sample:
        """Apply steps[start:stop]; an exception names the step and the sample."""
        for s in self.steps[start:stop]:
            try:
                sample = s.fn(sample)
            except Exception as exc:  # noqa: BLE001 - re-raised with the step and sample named
                raise StepError(s.name, sample.get("__key__") if isinstance(sample, dict) else None, index, exc) from exc
            if not isinstance(sample, dict):
                raise StepError(s.name, None, index, TypeError(f"returned {type(sample).__name__}, not a sample dict"))
        return sample


class StepError(TrainwiseError):
    """A step raised on one sample; the message names the step and the sample."""

    def __init__(self, step_name: str, key: Any, index: int | None, cause: BaseException) -> None:
        self.step_name, self.key, self.index, self.cause = step_name, key, index, cause
        where = f"sample {key!r}" + (f" (source index {index})" if index is not None else "")
        super().__init__(f"step {step_name!r} failed on {where}: {type(cause).__name__}: {cause}; fix the step or "
                         "skip failing samples (--skip-errors / skip_errors=True), which counts them in the manifest")
