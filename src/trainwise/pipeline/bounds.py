"""Bounds and number checks of `trainwise pipeline profile/apply`, before any data is generated or timed.

- `--workers`: DataLoader workers are processes (or threads) on this machine: trainwise.bounds'
  per-node process rule (`--workers 100000` started 851 processes in 30 s);
- `--size` of a reference pipeline: at most MAX_SIZE_FACTOR x its `large` size (`--size 100000000000`
  generated data for ever);
- `--weights`: three finite, non-negative numbers, not all zero (NaN picked the slowest strategy; negative
  or all-zero weights were refused only after ~40 s of profiling); `--required-sps`: finite and positive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trainwise.bounds import check_count, check_number, check_processes_per_node
from trainwise.errors import TrainwiseError

MAX_SIZE_FACTOR = 10
MAX_SHARDS = 100_000
MAX_CONFIRM_ROUNDS = 100
MAX_MIN_SECONDS = 86_400.0


def check_weights(weights: Sequence[float]) -> None:
    text = ",".join(f"{w:g}" for w in weights)
    if not all(math.isfinite(w) for w in weights):
        raise TrainwiseError(f"--weights must be finite numbers (got {text}), e.g. 0,0,1")
    if any(w < 0 for w in weights):
        raise TrainwiseError(f"--weights must not be negative (got {text}): a weight says how much p, s or t counts, e.g. 1,0,1")
    if not any(w > 0 for w in weights):
        raise TrainwiseError(f"--weights are all zero (got {text}): give at least one positive weight, e.g. 0,0,1")


def check_workers(workers: Sequence[int]) -> None:
    if workers:
        check_processes_per_node(max(workers), "--workers")


def check_shards(shards: Sequence[int]) -> None:
    for count in shards:
        check_count(count, "--shards", MAX_SHARDS, "shards")


def check_reference_size(spec: str, size: str) -> None:
    """A sample-count --size of a reference pipeline (module:function specs size themselves)."""
    from trainwise.pipeline.reference import REFERENCE_NAMES, _refs

    if spec not in REFERENCE_NAMES or not str(size).strip().isdigit():
        return
    largest = _refs()[spec].sizes["large"]
    check_count(int(size), "--size", MAX_SIZE_FACTOR * largest, f"samples for reference pipeline {spec} "
                f"({MAX_SIZE_FACTOR} x its large size)")


def check_profile_options(*, weights: Sequence[float], required_sps: float | None, workers: Sequence[int],
                          shards: Sequence[int], confirm_rounds: int, min_seconds: float, spec: str, size: str,
                          sample: int | None) -> None:
    check_weights(weights)
    check_number(required_sps, "--required-sps", positive=True, unit="samples/s")
    if not 0 <= min_seconds <= MAX_MIN_SECONDS:  # (also NaN) a negative time is a typo, not "one epoch"
        raise TrainwiseError(f"--min-seconds must be 0 or more, at most {MAX_MIN_SECONDS:g} (got {min_seconds:g}): the "
                             "least time each strategy is measured")
    check_workers(workers)
    check_shards(shards)
    check_count(confirm_rounds, "--confirm-rounds", MAX_CONFIRM_ROUNDS, "rounds", minimum=0)
    if sample is not None and sample < 1:
        raise TrainwiseError(f"--sample must be at least 1 (got {sample})")
    check_reference_size(spec, size)
