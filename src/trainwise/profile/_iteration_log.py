"""Every iteration a profile or `trainwise run` records, kept as rows of one float array inside the user's job.

A dict per iteration cost ~380 bytes there (nine keys, boxed floats): a million steps of a
`profile --full` or `trainwise run` job held ~380 MB of the job's memory and wrote ~150 MB. One float
`array` of rows costs 56 bytes an iteration (46 in the JSON), written one column at a time. Standard
library only: this runs in the training process.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Iterator

FLOAT_FIELDS = ("start_s", "end_s", "data_wait_s")
INT_FIELDS = ("epoch", "samples", "batches", "backward_passes")
FIELDS = FLOAT_FIELDS + INT_FIELDS
WIDTH = len(FIELDS)
COLUMNS_FORMAT = "columns"


class IterationLog:
    """A list of iteration records (dicts with `index` and FIELDS) that stores them as one array of rows.

    Reads give dicts built on demand (`log[-1]["end_s"]`, slices, iteration), so code written for a
    list of dicts keeps working; `end_times()` and `walls()` read a column without building any. The rows
    are FIELDS' values interleaved in one float array: a step of the job appends one row with one call (seven
    arrays took seven, ~2 µs a step in a running loop); the counts are exact as floats below 2**53.
    """

    __slots__ = ("_rows",)

    def __init__(self) -> None:
        self._rows = array("d")

    def append(self, record: dict[str, Any]) -> None:
        # a count not kept (None) is stored as 0, which readers treat alike
        self.add(record["start_s"], record["end_s"], record.get("data_wait_s"), *(record.get(n) for n in INT_FIELDS))

    def add(self, start_s: float, end_s: float, data_wait_s: float | None, epoch: int | None, samples: int | None,
            batches: int | None, backward_passes: int | None) -> int:
        """`append` without the dict: the recorder's per-iteration call (every optimizer step of the job). Returns
        the iterations now held (one call fewer for the caller on each step)."""
        rows = self._rows
        rows.extend((start_s, end_s, data_wait_s or 0.0, epoch or 0, samples or 0, batches or 0, backward_passes or 0))
        return len(rows) // WIDTH

    def __len__(self) -> int:
        return len(self._rows) // WIDTH

    def __bool__(self) -> bool:
        return len(self._rows) > 0

    def _row(self, index: int) -> dict[str, Any]:
        values = self._rows[index * WIDTH:(index + 1) * WIDTH]
        row: dict[str, Any] = {"index": index}
        for position, name in enumerate(FIELDS):
            row[name] = values[position] if position < len(FLOAT_FIELDS) else int(values[position])
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
            return self._rows == other._rows
        return isinstance(other, list) and len(other) == len(self) and list(self) == other

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self._row(i) for i in range(len(self)))

    def _column(self, name: str) -> array:
        return self._rows[FIELDS.index(name)::WIDTH]

    def end_times(self) -> array:
        return self._column("end_s")

    def walls(self) -> list[float]:
        return [end - start for start, end in zip(self._column("start_s"), self._column("end_s"))]

    def column_sum(self, name: str) -> float:
        return sum(self._column(name))

    def column(self, name: str) -> list:
        values = self._column(name).tolist()
        return values if name in FLOAT_FIELDS else [int(v) for v in values]

    def to_json(self) -> str:
        """The columns as one JSON object, written a column at a time (a column's list is the only
        transient copy)."""
        parts = [f'"format": "{COLUMNS_FORMAT}"']
        parts.extend(f"{json.dumps(name)}: {json.dumps(self.column(name))}" for name in FIELDS)
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
