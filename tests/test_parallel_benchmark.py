"""benchmarks/_parallel.py: the side-by-side runner of the accuracy benchmarks (--parallel-cpus)."""

from __future__ import annotations

import os
import textwrap

import pytest

from benchmark_modules import load_benchmark

parallel = load_benchmark("_parallel")
CPU = min(os.sched_getaffinity(0))

WORKER = textwrap.dedent("""
    import argparse, json, os, sys
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", type=int)
    parser.add_argument("--worker-task")
    parser.add_argument("--worker-out")
    args = parser.parse_args()
    os.sched_setaffinity(0, {args.cpu})
    task = json.loads(args.worker_task)
    if task.get("fail"):
        print("this task was told to fail")
        sys.exit(3)
    json.dump({"double": task["x"] * 2, "cpus": sorted(os.sched_getaffinity(0))}, open(args.worker_out, "w"))
""")


def test_parse_cpus_ranges_and_lists():
    assert parallel.parse_cpus(f"{CPU}") == [CPU]
    assert parallel.parse_cpus(f"{CPU}-{CPU}") == [CPU]


@pytest.mark.parametrize("text, message", [("x-1", "use CPU numbers"), ("100000", "not available here"),
                                           (f"{CPU},{CPU}", "names a CPU twice"), ("", "not available here")])
def test_parse_cpus_refuses_bad_lists(text, message):
    with pytest.raises(SystemExit, match=message):
        parallel.parse_cpus(text)


def test_run_tasks_returns_results_in_task_order_pinned_to_their_cpu(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    results = parallel.run_tasks(str(script), [(CPU, {"x": n}) for n in range(4)], label="test")
    assert [r["double"] for r in results] == [0, 2, 4, 6]
    assert all(r["cpus"] == [CPU] for r in results)


def test_a_failed_task_stops_the_run_with_its_log(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    with pytest.raises(SystemExit, match="this task was told to fail"):
        parallel.run_tasks(str(script), [(CPU, {"x": 1}), (CPU, {"x": 2, "fail": True})], label="test")
