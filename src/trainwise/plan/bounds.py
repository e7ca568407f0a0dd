"""Bounds on a plan or prediction request, checked before any profiling or ranking starts.

The planner's tables grow with machines per group and epoch counts (`plan --node-counts 100000000`
grew memory without end; `plan --epochs 1000000000000` asked NumPy for 7.28 TiB): counts beyond
trainwise.bounds.MAX_NODES machines and MAX_EPOCHS epochs are refused, as are more devices than the
training set has samples (each device needs at least one sample per step).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from trainwise.bounds import MAX_EPOCHS, MAX_NODES, check_count
from trainwise.errors import TrainwiseError

DEFAULT_NODE_COUNTS = (2, 4, 8)  # --node-counts: N x machine groups ranked by default (here: the CLI reads it without pydantic)

# Accelerators in one prediction (data parallel): beyond any machine room.
MAX_DEVICES = 1_000_000


def check_epochs(values: Iterable[int | None], option: str = "--epochs") -> None:
    for value in values:
        if value is not None and value < 1:
            raise TrainwiseError(f"{option} must be a positive whole number (got {value}): pass e.g. {option} 10")
        if value is not None:
            check_count(int(value), option, MAX_EPOCHS, "epochs")


def check_node_counts(counts: Iterable[int], option: str = "--node-counts") -> None:
    for count in counts:
        check_count(int(count), option, MAX_NODES, "machines in a group", minimum=1)


def check_group_counts(groups: Sequence[Any], where: str) -> None:
    """Hivemind groups from a file: the machines of each group, summed over its peers."""
    for group in groups:
        total = sum(int(getattr(peer, "count", 1)) for peer in getattr(group, "peers", ()))
        if total > MAX_NODES:
            raise TrainwiseError(f"{where}, group {getattr(group, 'name', '?')}: {total:,} peers is beyond trainwise's "
                                 f"limit of {MAX_NODES:,} machines in a group: give smaller counts")


def check_devices(count: int, profiles: Sequence[Any], option: str = "--count") -> None:
    """`count` data-parallel devices for the profiles' training sets."""
    if count < 1:
        raise TrainwiseError(f"{option} must be at least 1 (got {count})")
    for profile in profiles:
        samples = getattr(getattr(profile, "dataset", None), "n_train", None)
        if samples and count > samples:
            raise TrainwiseError(f"{option} {count:,} devices is more than the training set's {samples:,} samples (each "
                                 f"device needs at least one sample per step): give at most {samples:,}")
    check_count(count, option, MAX_DEVICES, "devices")


def check_plan_request(*, epochs: int | None = None, epoch_options: Sequence[int] = (),
                       node_counts: Sequence[int] = ()) -> None:
    check_epochs([epochs], "--epochs")
    check_epochs(epoch_options, "--epoch-options")
    check_node_counts(node_counts)


def check_predict_request(*, count: int, epochs: Sequence[int], profiles: Sequence[Any]) -> None:
    check_epochs(epochs)
    check_devices(count, profiles)
