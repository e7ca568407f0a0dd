"""A profile's iterations as columns (trainwise.core.iterations): rows on demand, validation, the JSON form."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from trainwise.core.iterations import COLUMNS, Iteration, Iterations
from trainwise.profile.schema import iterations_from_raw, load_profile, steady_iterations, steady_positions
from test_same_machine import make

ROWS = [{"epoch": 0, "start_s": 1.0 + i, "wall_s": 1.0, "data_wait_s": 0.25, "samples": 8, "batches": 1,
         "backward_passes": None} for i in range(4)] + [
        {"epoch": 1, "start_s": 9.0, "wall_s": 2.0, "data_wait_s": 3.0, "samples": 8, "batches": 2, "backward_passes": 3}]


def test_rows_are_built_on_demand_from_the_columns():
    its = Iterations.of_rows(ROWS)
    assert len(its) == 5 and bool(its) and not Iterations.of_rows([])
    assert its[0] == Iteration(index=0, epoch=0, start_s=1.0, wall_s=1.0, data_wait_s=0.25, compute_s=0.75, samples=8,
                               batches=1, backward_passes=None)
    last = its[-1]
    assert (last.index, last.epoch, last.batches, last.backward_passes) == (4, 1, 2, 3)
    assert last.compute_s == 0.0  # wall − data wait, never below 0
    assert [it.index for it in its[1:3]] == [1, 2] and [it.index for it in its] == list(range(5))
    assert its.column("wall_s") == (1.0, 1.0, 1.0, 1.0, 2.0) and its.column("compute_s")[0] == 0.75
    with pytest.raises(IndexError):
        its[5]
    assert its == Iterations.of_columns(its.as_columns()) and its == list(its) and its != list(its)[:4]


def test_bad_values_are_named_by_column_and_position():
    with pytest.raises(ValidationError) as caught:
        Iterations.of_rows([*ROWS[:2], {**ROWS[2], "samples": -1}])
    assert caught.value.errors()[0]["loc"] == ("samples", 2)
    columns = Iterations.of_rows(ROWS).as_columns()
    with pytest.raises(ValidationError, match="differ in length"):
        Iterations.of_columns({**columns, "wall_s": columns["wall_s"][:3]})
    with pytest.raises(ValueError, match="iteration 1 has no start_s"):
        Iterations.of_rows([ROWS[0], {k: v for k, v in ROWS[1].items() if k != "start_s"}])


def test_the_profile_writes_one_compact_array_per_column(tmp_path):
    profile = make([0.5] * 300, epoch2=[0.5] * 20)
    text = profile.to_json()
    data = json.loads(text)
    assert list(data["iterations"]) == list(COLUMNS) and len(data["iterations"]["wall_s"]) == 320
    line = next(line for line in text.splitlines() if line.startswith(' "iterations"'))
    assert line.count("[") == len(COLUMNS)  # each column on the one line, not a line per value
    assert len(text) < 60 * 320 + 4_000  # a row per iteration wrote ~250 bytes each
    assert load_profile(profile.save(tmp_path / "p.json")) == profile


def test_steady_positions_match_the_rows():
    profile = make([3.0, 1.5] + [1.0] * 30, epoch2=[2.0, 1.0, 1.0])
    warmup, positions = steady_positions(profile.iterations)
    rows_warmup, rows = steady_iterations(profile.iterations)
    assert warmup == rows_warmup == 2 and [it.index for it in rows] == positions
    assert positions == list(range(2, 32)) + [33, 34]  # epoch 2's first step carries the epoch-start cost
    assert steady_positions(list(profile.iterations)) == (warmup, positions)  # a list of rows reads the same


def test_raw_records_become_the_same_columns_in_either_form():
    rows = [{"epoch": 0, "start_s": 1.0, "end_s": 1.5, "data_wait_s": 0.1, "samples": 4, "batches": 1,
             "backward_passes": 0},
            {"epoch": 0, "start_s": 1.5, "end_s": 1.4, "data_wait_s": -0.01, "samples": None, "batches": 1,
             "backward_passes": 2}]
    columns = {"format": "columns", **{name: [row[name] for row in rows] for name in rows[0]}}
    for raw in (rows, columns):
        its = iterations_from_raw(raw)
        assert its.column("wall_s") == (0.5, 0.0) and its.column("data_wait_s") == (0.1, 0.0)
        assert its.column("samples") == (4, 0) and its.column("backward_passes") == (0, 2)


def test_a_record_built_in_process_reads_its_iteration_log_as_columns():
    from trainwise.profile._iteration_log import IterationLog

    log = IterationLog()
    log.add(1.0, 1.5, 0.1, 0, 4, 1, None)
    log.add(1.5, 2.5, None, 1, 4, 2, 3)
    its = iterations_from_raw(log)
    assert its.column("wall_s") == (0.5, 1.0) and its.column("epoch") == (0, 1) and its.column("batches") == (1, 2)
    assert its.column("data_wait_s") == (0.1, 0.0) and its.column("backward_passes") == (0, 3)
