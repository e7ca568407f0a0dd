"""The client-script and public-example benchmarks refuse bad input in one line, before any run starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=120)


def test_public_examples_without_a_checkout_names_what_is_missing(tmp_path):
    (tmp_path / "dcgan").mkdir()
    out = run("public_examples.py", "--examples", str(tmp_path), "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "lacks word_language_model/main.py" in out.stderr and "dcgan/main.py" in out.stderr
    assert not (tmp_path / "r.json").exists()


def test_client_scripts_bounds_its_pairs_and_needs_a_previous_result_for_overhead_only(tmp_path):
    out = run("client_scripts.py", "--concurrent-pairs", "11", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "--concurrent-pairs in [0, 10]" in out.stderr and "Traceback" not in out.stderr
    out = run("client_scripts.py", "--overhead-only", "--pairs", "0", "--results", str(tmp_path / "none.json"))
    assert out.returncode != 0 and "run without --overhead-only first" in out.stderr and "Traceback" not in out.stderr


def test_client_scripts_parallel_loops_needs_two_cores_per_loop_before_any_run(tmp_path):
    import os

    one_core = min(os.sched_getaffinity(0))
    out = subprocess.run([sys.executable, str(BENCHMARKS / "client_scripts.py"), "--concurrent-pairs", "1",
                          "--parallel-loops", "--only", "manual_sgd_lm", "lbfgs_closure", "--results",
                          str(tmp_path / "r.json")], capture_output=True, text=True, timeout=120,
                         preexec_fn=lambda: os.sched_setaffinity(0, {one_core}))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "needs 4 cores here, this process may use 1" in out.stderr and "drop --parallel-loops" in out.stderr
    assert not (tmp_path / "r.json").exists()


def test_core_pairs_gives_each_parallel_loop_its_own_two_cores():
    sys.path.insert(0, str(BENCHMARKS))
    from client_scripts import core_pairs

    assert core_pairs([5, 1, 3, 2], 2, parallel=True) == [(1, 2), (3, 5)]
    assert core_pairs([5, 1, 3, 2], 3, parallel=False) == [(1, 2)] * 3
