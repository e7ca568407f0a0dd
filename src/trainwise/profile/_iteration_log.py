"""Every iteration a profile or `trainwise run` records, kept in typed columns inside the user's job.

A dict per iteration cost ~380 bytes there (nine keys, boxed floats): a million steps of a
`profile --full` or `trainwise run` job held ~380 MB of the job's memory and wrote ~150 MB. Columns
(`array`) cost 56 bytes an iteration (46 in the JSON), written one column at a time. Standard
library only: this runs in the training process.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Iterator

FLOAT_FIELDS = ("start_s", "end_s", "data_wait_s")
INT_FIELDS = ("epoch", "samples", "batches", "backward_passes")
FIELDS = FLOAT_FIELDS + INT_FIELDS
COLUMNS_FORMAT = "columns"


class IterationLog:
    """A list of iteration records (dicts with `index` and FIELDS) that stores them as columns.

    Reads give dicts built on demand (`log[-1]["end_s"]`, slices, iteration), so code written for a
    list of dicts keeps working; `end_times()` and `walls()` read a column without building any.
    """

    __slots__ = ("_columns",)

    def __init__(self) -> None:
        self._columns: dict[str, array] = {name: array("d") for name in FLOAT_FIELDS}
        self._columns.update({name: array("q") for name in INT_FIELDS})

    def append(self, record: dict[str, Any]) -> None:
        # a count not kept (None) is stored as 0, which readers treat alike
        self.add(record["start_s"], record["end_s"], record.get("data_wait_s"), *(record.get(n) for n in INT_FIELDS))

    def add(self, start_s: float, end_s: float, data_wait_s: float | None, epoch: int | None, samples: int | None,
            batches: int | None, backward_passes: int | None) -> int:
        """`append` without the dict: the recorder's per-iteration call (every optimizer step of the job). Returns
        the iterations now held (one call fewer for the caller on each step)."""
        columns = self._columns
        columns["start_s"].append(start_s)
        columns["end_s"].append(end_s)
        columns["data_wait_s"].append(data_wait_s or 0.0)
        columns["epoch"].append(epoch or 0)
        columns["samples"].append(samples or 0)
        columns["batches"].append(batches or 0)
        columns["backward_passes"].append(backward_passes or 0)
        return len(columns["end_s"])

    def __len__(self) -> int:
        return len(self._columns["end_s"])

    def __bool__(self) -> bool:
        return len(self) > 0

    def _row(self, index: int) -> dict[str, Any]:
        row: dict[str, Any] = {"index": index}
        for name, column in self._columns.items():
            row[name] = column[index]
        return row

    def __getitem__(self, key: int | slice) -> Any:
        n = len(self)
        if isinstance(key, slice):
            return [self._row(i) for i in range(*key.indices(n))]
        if key < 0:
            key += n
        if not 0 <= key < n:
            raise IndexError("iteration index out of range")
        return self._row(key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IterationLog):
            return self._columns == other._columns
        return isinstance(other, list) and len(other) == len(self) and list(self) == other

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._row(i) for i in range(len(self)))

    def end_times(self) -> array:
        return self._columns["end_s"]

    def walls(self) -> list[float]:
        return [end - start for start, end in zip(self._columns["start_s"], self._columns["end_s"])]

    def column_sum(self, name: str) -> float:
        return sum(self._columns[name])

    def column(self, name: str) -> list:
        return self._columns[name].tolist()

    def to_json(self) -> str:
        """The columns as one JSON object, written a column at a time (a column's list is the only
        transient copy)."""
        parts = [f'"format": "{COLUMNS_FORMAT}"']
        parts.extend(f"{json.dumps(name)}: {json.dumps(column.tolist())}" for name, column in self._columns.items())
        return "{" + ", ".join(parts) + "}"


def iteration_rows(raw_iterations: Any) -> list[dict[str, Any]]:
    """A record's iterations as a list of dicts: from the columns the agent writes, or from a list of
    dicts (records written before the columns, and synthetic ones)."""
    if isinstance(raw_iterations, dict) and raw_iterations.get("format") == COLUMNS_FORMAT:
        columns = [raw_iterations[name] for name in FIELDS]
        return [{"index": i, **dict(zip(FIELDS, values))} for i, values in enumerate(zip(*columns))]
    return list(raw_iterations or [])


def iteration_columns(raw_iterations: Any) -> dict[str, list]:
    """A record's iterations as columns (FIELDS), without building a dict per iteration: from the columns
    the agent writes, or from a list of dicts (records written before the columns, and synthetic ones)."""
    if isinstance(raw_iterations, dict) and raw_iterations.get("format") == COLUMNS_FORMAT:
        return {name: list(raw_iterations[name]) for name in FIELDS}
    if isinstance(raw_iterations, IterationLog):  # a record built in this process (a framework's callback)
        return {name: raw_iterations.column(name) for name in FIELDS}
    rows = list(raw_iterations or [])
    return {name: [row.get(name) for row in rows] for name in FIELDS}


def iteration_count(raw_iterations: Any) -> int:
    """How many iterations a record holds, in either form."""
    if isinstance(raw_iterations, dict) and raw_iterations.get("format") == COLUMNS_FORMAT:
        return len(raw_iterations["end_s"])
    return len(raw_iterations or [])


def record_json(record: dict[str, Any]) -> str:
    """The whole record as JSON (`json.dumps`: the C encoder), its IterationLog spliced in as columns."""
    log = record.get("iterations")
    if not isinstance(log, IterationLog):
        return json.dumps(record)
    rest = json.dumps({key: value for key, value in record.items() if key != "iterations"})
    return rest[:-1] + (", " if len(rest) > 2 else "") + '"iterations": ' + log.to_json() + "}"


def with_iteration_rows(raw: dict[str, Any]) -> dict[str, Any]:
    """A record read back from its file, its iterations as a list of dicts (what its readers expect)."""
    if "iterations" in raw:
        raw["iterations"] = iteration_rows(raw["iterations"])
    return raw
