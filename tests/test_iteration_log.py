"""The recorder's iteration columns: read like the list of dicts they replace, written as columns, small."""

import json
import tracemalloc

from hypothesis import given, settings
from hypothesis import strategies as st

from trainwise.profile._iteration_log import IterationLog, iteration_rows, record_json, with_iteration_rows

record = st.fixed_dictionaries({
    "epoch": st.integers(0, 1000), "start_s": st.floats(0, 1e6), "end_s": st.floats(0, 1e6),
    "data_wait_s": st.floats(0, 10), "samples": st.integers(0, 10**6), "batches": st.integers(0, 64),
    "backward_passes": st.integers(0, 64),
})


@settings(max_examples=60, deadline=None)
@given(st.lists(record, max_size=40), st.integers(-50, 50))
def test_reads_like_the_list_of_dicts_it_replaces(records, k):
    log, plain = IterationLog(), []
    for i, rec in enumerate(records):
        log.append({"index": i, **rec})
        plain.append({"index": i, **rec})
    assert len(log) == len(plain) and bool(log) == bool(plain)
    assert list(log) == plain
    assert log[k:] == plain[k:] and log[-5:] == plain[-5:]
    if -len(plain) <= k < len(plain):
        assert log[k] == plain[k]
    assert log.walls() == [it["end_s"] - it["start_s"] for it in plain]
    assert log.column_sum("batches") == sum(it["batches"] for it in plain)
    # written as columns and read back as the same rows
    text = record_json({"mode": "full", "iterations": log})
    assert with_iteration_rows(json.loads(text))["iterations"] == plain


def test_records_without_columns_still_read():
    rows = [{"index": 0, "epoch": 0, "start_s": 0.0, "end_s": 1.0, "data_wait_s": 0.0, "samples": 4, "batches": 1,
             "backward_passes": 1}]
    assert iteration_rows(rows) == rows and iteration_rows(None) == []
    assert json.loads(record_json({"iterations": rows})) == {"iterations": rows}
    assert json.loads(record_json({"iterations": IterationLog()}))["iterations"]["format"] == "columns"


def test_a_long_run_costs_under_80_bytes_an_iteration():
    # A dict per iteration cost ~380 bytes in the job: a million steps, ~380 MB.
    n = 200_000
    tracemalloc.start()
    try:
        log = IterationLog()
        before, _ = tracemalloc.get_traced_memory()
        for i in range(n):
            log.append({"epoch": i // 1000, "start_s": i * 0.01, "end_s": i * 0.01 + 0.009, "data_wait_s": 0.001,
                        "samples": 32, "batches": 1, "backward_passes": 1})
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (after - before) / n < 80
