"""The client-script and public-example benchmarks refuse bad input in one line, before any run starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=120)


def test_public_examples_without_a_checkout_names_what_is_missing(tmp_path):
    (tmp_path / "dcgan").mkdir()
    out = run("public_examples.py", "--examples", str(tmp_path), "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "word_language_model/main.py" in out.stderr and "dcgan/main.py" in out.stderr and "missing" in out.stderr
    assert not (tmp_path / "r.json").exists()
    out = run("public_examples.py", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "give --examples (pytorch/examples) and/or --nanogpt" in out.stderr and "--mingpt" in out.stderr
    out = run("public_examples.py", "--nanogpt", str(tmp_path), "--only", "mnist", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "--only mnist needs its checkout: give --examples" in out.stderr
    out = run("public_examples.py", "--nanogpt", str(tmp_path), "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "configurator.py" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r.json").exists()


def test_client_scripts_bounds_its_pairs_and_needs_a_previous_result_for_overhead_only(tmp_path):
    out = run("client_scripts.py", "--concurrent-pairs", "11", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "--concurrent-pairs in [0, 10]" in out.stderr and "Traceback" not in out.stderr
    out = run("client_scripts.py", "--overhead-only", "--pairs", "0", "--results", str(tmp_path / "none.json"))
    assert out.returncode != 0 and "run without --overhead-only first" in out.stderr and "Traceback" not in out.stderr
    out = run("client_scripts.py", "--abba-only", "--pairs", "1", "--results", str(tmp_path / "none.json"))
    assert out.returncode != 0 and "--abba-only adds to" in out.stderr and "Traceback" not in out.stderr
    (tmp_path / "r.json").write_text('{"summary": {}}')
    out = run("client_scripts.py", "--abba-only", "--pairs", "0", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "needs --pairs 1 or more" in out.stderr and "Traceback" not in out.stderr


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


def test_client_scripts_parallel_accuracy_checks_cores_and_limits_before_any_run(tmp_path):
    import os

    one_core = min(os.sched_getaffinity(0))
    results = tmp_path / "r.json"
    results.write_text('{"rows": [], "summary": {}}')
    out = subprocess.run([sys.executable, str(BENCHMARKS / "client_scripts.py"), "--accuracy-only", "--parallel-loops",
                          "--only", "manual_sgd_lm", "lbfgs_closure", "--results", str(results)], capture_output=True,
                         text=True, timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {one_core}))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "needs 4 cores here (2 per loop), this process may use 1" in out.stderr and "--cores-per-loop" in out.stderr
    out = run("client_scripts.py", "--accuracy-only", "--parallel-loops", "--time-limit-s", "0", "--results", str(results))
    assert out.returncode != 0 and "--time-limit-s in (0, 86400]" in out.stderr and "Traceback" not in out.stderr
    assert results.read_text() == '{"rows": [], "summary": {}}' and not list(tmp_path.glob("*.unfinished.json"))


def test_loop_cores_gives_each_loop_its_own_cores():
    sys.path.insert(0, str(BENCHMARKS))
    from client_scripts import loop_cores

    assert loop_cores([7, 1, 3, 2, 5, 4], 3, per_loop=2) == [[1, 2], [3, 4], [5, 7]]
    assert loop_cores([3, 1], 2, per_loop=1) == [[1], [3]]


def test_core_pairs_gives_each_parallel_loop_its_own_two_cores():
    sys.path.insert(0, str(BENCHMARKS))
    from client_scripts import core_pairs

    assert core_pairs([5, 1, 3, 2], 2, parallel=True) == [(1, 2), (3, 5)]
    assert core_pairs([5, 1, 3, 2], 3, parallel=False) == [(1, 2)] * 3


def test_an_abba_block_cancels_a_linear_drift_that_plain_first_pairs_read_as_overhead():
    sys.path.insert(0, str(BENCHMARKS))
    from client_scripts import abba_block

    # a host 5 % slower each run, an agent costing exactly 1 %: runs at t = 0, 1, 2, 3 of 20 s each
    level = [1.0 + 0.05 * t for t in range(4)]
    plain_first, agent, agent_again, plain_last = 20 * level[0], 20.2 * level[1], 20.2 * level[2], 20 * level[3]
    assert agent / plain_first - 1 > 0.05  # a plain-first pair reads the drift as overhead
    assert abba_block([plain_first, plain_last], [agent, agent_again]) == pytest.approx(1.01)
    with pytest.raises(ValueError):
        abba_block([20.0], [20.0, 20.0])
    with pytest.raises(ValueError):
        abba_block([20.0, 0.0], [20.0, 20.0])


def test_abba_blocks_run_plain_agent_agent_plain_one_loop_each_in_turn(monkeypatch):
    sys.path.insert(0, str(BENCHMARKS))
    import client_scripts

    calls: list[str] = []
    clock = iter(range(1, 100))

    def timed(kind):
        def run(argv):
            calls.append(f"{kind}:{Path(argv[1]).stem}")
            return 10.0 + next(clock)  # the host slows by a second each run
        return run

    monkeypatch.setattr(client_scripts, "plain_run_s", timed("plain"))
    agent = timed("agent")
    # the whole command and, half a second less, the job's own process (trainwise's start-up and post-processing)
    monkeypatch.setattr(client_scripts, "instrumented_run", lambda argv: (lambda s: (s, s - 0.5))(agent(argv)))
    rows = client_scripts.overhead_pairs(["tensor_validation", "manual_sgd_lm"], 0.01, 2, abba=True)
    assert [c.split(":")[0] for c in calls] == ["plain", "agent", "agent", "plain"] * 2
    assert [r["loop"] for r in rows] == ["tensor_validation", "manual_sgd_lm"]
    assert all(r["order"] == "abba" and r["ratio"] == pytest.approx(1.0) for r in rows)  # the drift cancels
    assert rows[0]["plain_runs_s"] == [11.0, 14.0] and rows[0]["instrumented_runs_s"] == [12.0, 13.0]
    assert rows[0]["instrumented_job_runs_s"] == [11.5, 12.5] and rows[0]["job_ratio"] == pytest.approx(24 / 25)


def test_client_scripts_accuracy_only_replaces_the_measured_loops_and_keeps_the_overhead(tmp_path):
    sys.path.insert(0, str(BENCHMARKS))
    from client_scripts import with_new_accuracy_rows

    def row(loop, error, actual_s, cost, at):
        return {"loop": loop, "profiled": True, "abs_error": error, "actual_s": actual_s,
                "profiling_cost_fraction": cost, "measured_at": at}

    previous = {"created_at": "old", "machine": {"host": "gpu"}, "rows": [
        row("manual_sgd_lm", 0.01, 590.0, 0.25, "old"), row("gan_two_optimizers", 0.48, 647.0, 0.017, "old")],
        "summary": {"agent_overhead": 0.009, "max_abs_error": 0.48}, "concurrent_pairs": [{"ratio": 1.01}],
        "accuracy_rows_from": "older"}
    result = with_new_accuracy_rows(previous, [row("gan_two_optimizers", 0.03, 700.0, 0.01, "new")],
                                    created_at="new", machine={"host": "vm"})
    assert [r["measured_at"] for r in result["rows"]] == ["old", "new"]  # the loops' order, the new GAN row
    summary = result["summary"]
    assert summary["agent_overhead"] == 0.009 and result["concurrent_pairs"] == [{"ratio": 1.01}]
    assert summary["max_abs_error"] == 0.03 and summary["median_abs_error"] == 0.02
    assert summary["profiling_cost_fraction_10min_runs"] == 0.01  # the 590-s run is not one of them
    assert result["overhead_machine"] == {"host": "gpu"} and result["overhead_measured_at"] == "old"
    assert "accuracy_rows_from" not in result and result["machine"] == {"host": "vm"}
    out = run("client_scripts.py", "--accuracy-only", "--results", str(tmp_path / "none.json"))
    assert out.returncode != 0 and "run without --accuracy-only first" in out.stderr and "Traceback" not in out.stderr


def test_agent_hot_path_bounds_its_repeats_before_any_run(tmp_path):
    out = run("agent_hot_path.py", "--repeats", "0", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "--repeats must be in [1, 200]" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.long
def test_agent_hot_path_times_each_hook_inside_a_profiled_job(tmp_path):
    import json

    out = subprocess.run([sys.executable, str(BENCHMARKS / "agent_hot_path.py"), "--repeats", "30", "--samples", "1600",
                          "--sample-seconds", "0", "--results", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert set(summary["agent_us_per_event"]) == {"next", "forward", "forward_outside_pass", "backward", "step"}
    assert summary["plain_micro_batch_us"] > 0 and summary["machine"]["torch_in_job"]
    assert summary["agent_share_warm_hooked_model_calls"] is not None
    # the optimizer step's hook closes an iteration: measurably above nothing, far below a step
    assert 0.1 < summary["agent_us_per_event"]["step"] < 1000


@pytest.mark.long
def test_synthetic_cora_has_the_format_and_sizes_the_graph_attention_example_reads(tmp_path):
    np = pytest.importorskip("numpy")
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from public_examples import write_cora_like
    finally:
        sys.path.remove(str(BENCHMARKS))
    write_cora_like(tmp_path / "cora")
    # as gat/main.py's load_cora reads them: ids, 1,433 features, a class name; then citations between known ids
    content = np.genfromtxt(tmp_path / "cora" / "cora.content", dtype=np.dtype(str))
    cites = np.genfromtxt(tmp_path / "cora" / "cora.cites", dtype=np.int32)
    assert content.shape == (2708, 1435) and cites.shape == (5429, 2)
    assert len(np.unique(content[:, -1])) == 7 and set(content[:, 1:-1].ravel()) == {"0", "1"}
    assert set(cites.ravel()) <= set(content[:, 0].astype(np.int32))


def test_the_lent_host_script_parses_and_its_inputs_are_in_the_repository():
    """benchmarks/lent_host.sh runs once on a lent GPU machine, with no second try: its shell parses, every results
    file it copies exists, every benchmark flag it passes is one the benchmark takes (a removed results file broke
    its first form)."""
    import re

    script = BENCHMARKS / "lent_host.sh"
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    text = script.read_text(encoding="utf-8")
    copied = re.findall(r"cp (benchmarks/results/\S+\.json)", text)
    assert copied and all((BENCHMARKS.parent / path).is_file() for path in copied), copied
    helps = " ".join(run(name, "--help").stdout for name in ("client_scripts.py", "public_examples.py", "kernel_sweep.py"))
    code = "\n".join(line.split("#")[0] for line in text.splitlines() if not line.lstrip().startswith("#"))
    pip_flags = {"--no-index", "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade", "--target"}
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", code)) - pip_flags
    assert "--no-cuda-sync" in flags and all(f in helps for f in flags), sorted(f for f in flags if f not in helps)
