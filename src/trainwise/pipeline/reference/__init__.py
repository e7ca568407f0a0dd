"""Reference pipelines of the PRESTO domains, each with a generator of real encoded data (no downloads).

`reference_pipeline(name, data_dir, size)` generates the data once (kept under data_dir/NAME-SIZE) and
returns the Pipeline. Sizes: tiny (tests), small (benchmark default), medium, large, or a sample count;
large sets are meant to exceed the page cache only when the machine's memory is small — state the
machine's memory next to any result.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.pipeline.spec import Pipeline


@dataclass(frozen=True)
class Reference:
    name: str
    generate: Callable[[Path, int], list[Path]]
    build: Callable[[Path], Pipeline]
    sizes: dict[str, int]
    unit: str


def _refs() -> dict[str, Reference]:
    from trainwise.pipeline.reference import audio, cv, nilm, nlp

    return {
        "cv": Reference("cv", cv.generate, cv.pipeline, {"tiny": 24, "small": 600, "medium": 5000, "large": 60000}, "images"),
        "nlp": Reference("nlp", nlp.generate, nlp.pipeline, {"tiny": 30, "small": 1500, "medium": 20000, "large": 200000}, "documents"),
        "audio": Reference("audio", audio.generate, audio.pipeline, {"tiny": 16, "small": 400, "medium": 4000, "large": 40000}, "utterances"),
        "nilm": Reference("nilm", nilm.generate, nilm.pipeline, {"tiny": 24, "small": 1200, "medium": 12000, "large": 120000}, "10 s windows"),
    }


REFERENCE_NAMES = ("cv", "nlp", "audio", "nilm")


def resolve_size(name: str, size: str | int) -> int:
    ref = _refs()[name]
    if isinstance(size, int) or str(size).isdigit():
        count = int(size)
        if count < 1:
            raise TrainwiseError(f"--size must be a positive sample count or one of {', '.join(ref.sizes)} (got {size})")
        return count
    if size not in ref.sizes:
        raise TrainwiseError(f"unknown size {size!r} for reference pipeline {name!r}: use {', '.join(ref.sizes)} or a sample count")
    return ref.sizes[size]


def reference_pipeline(name: str, data_dir: str | Path, size: str | int = "small", seed: int = 0) -> Pipeline:
    """Generate (once) and load reference pipeline `name` with `size` samples under `data_dir`."""
    refs = _refs()
    if name not in refs:
        raise TrainwiseError(f"unknown reference pipeline {name!r}: use one of {', '.join(REFERENCE_NAMES)} or module:function")
    count = resolve_size(name, size)
    directory = Path(data_dir) / f"{name}-{count}-seed{seed}"
    done = directory.with_name(directory.name + ".done.json")
    if not done.exists():
        try:
            refs[name].generate(directory, count, seed=seed)  # type: ignore[call-arg]
        except OSError as exc:
            raise TrainwiseError(f"cannot generate the {name} reference data in {directory}: {exc.strerror or exc}; "
                                 "choose a writable --data-dir with free space") from None
        atomic_write_text(done, json.dumps({"samples": count, "unit": refs[name].unit, "seed": seed}))
    return refs[name].build(directory)
