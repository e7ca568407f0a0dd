"""The data-parallel benchmark's ordering, noise and --repredict (no runs: that is the benchmark's job)."""

from __future__ import annotations

import json
import shutil
import statistics

import pytest

from benchmark_modules import BENCHMARKS, load_benchmark

RESULTS = BENCHMARKS / "results" / "data_parallel.json"


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("data_parallel")


def row(name, measured, predicted, noise=None, workload="w"):
    return {"name": name, "workload": workload, "measured_samples_per_s": measured,
            "predicted_samples_per_s": predicted, "measured_noise_fraction": noise}


def test_ordering_counts_all_pairs_and_those_beyond_the_measured_noise(bench):
    rows = [row("a", 100.0, 90.0, 0.02), row("b", 95.0, 99.0, 0.05), row("c", 10.0, 12.0, 0.01)]
    order = bench.ordering(rows)["w"]
    # a and b are swapped: the strict order fails; their gap (5) is within their noise (2 + 4.75)
    assert not order["correct"] and order["concordant_pairs"] == "2/3"
    assert order["correct_beyond_noise"] and order["concordant_pairs_beyond_noise"] == "2/2"
    assert order["discordant_pairs"] == ["a vs b (within noise)"]
    # the same swap beyond the noise counts against the order
    quiet = bench.ordering([row("a", 100.0, 90.0, 0.001), row("b", 95.0, 99.0, 0.001)])["w"]
    assert not quiet["correct_beyond_noise"] and quiet["concordant_pairs_beyond_noise"] == "0/1"


def test_the_model_orders_only_pairs_it_predicts_apart_and_ties_measured_apart_are_listed(bench):
    # a, b predicted 1 % apart: a tie, whichever measures faster; c predicted far below both
    rows = [row("a", 70.0, 76.8, 0.01), row("b", 90.0, 76.0, 0.01), row("c", 20.0, 30.0, 0.01)]
    order = bench.ordering(rows)["w"]
    assert not order["correct"]  # the strict order reads the tie as a claim
    assert order["correct_where_predicted_apart"] and order["concordant_pairs_predicted_apart"] == "2/2"
    assert order["predicted_ties_measured_apart"] == ["a vs b"]  # 70 vs 90 is beyond their noise: listed, not hidden
    # a pair predicted apart and measured the other way counts against the order
    wrong = bench.ordering([row("a", 50.0, 100.0, 0.01), row("b", 60.0, 70.0, 0.01)])["w"]
    assert not wrong["correct_where_predicted_apart"] and wrong["concordant_pairs_predicted_apart"] == "0/1"


def test_the_order_with_ties_fails_on_a_predicted_tie_measured_apart_and_on_a_swap(bench):
    # a, b predicted 1 % apart (a tie) and measured within their noise; c predicted and measured far below
    tied = bench.ordering([row("a", 80.0, 76.8, 0.10), row("b", 84.0, 76.0, 0.10), row("c", 20.0, 30.0, 0.01)])["w"]
    assert tied["correct_with_ties"] and not tied["correct"]  # b measured faster: only the strict order minds
    apart = bench.ordering([row("a", 70.0, 76.8, 0.01), row("b", 90.0, 76.0, 0.01)])["w"]
    assert not apart["correct_with_ties"]  # a predicted tie the runs tell apart is a miss of the model
    swapped = bench.ordering([row("a", 50.0, 100.0, 0.01), row("b", 60.0, 70.0, 0.01)])["w"]
    assert not swapped["correct_with_ties"]


def measurement(rate, noise=0.01, valid=True):
    return {"samples_per_s": rate if valid else None, "whole_run_samples_per_s": rate, "noise_fraction": noise,
            "valid": valid, "invalid_reasons": [] if valid else ["blocked on a round"], "how": "rounds"}


def test_repeated_runs_give_the_median_and_a_noise_spanning_every_run(bench):
    combined = bench.combine_repeats([measurement(100.0), measurement(80.0), measurement(90.0)])
    assert combined["samples_per_s"] == 90.0 and combined["runs"] == 3
    # the runs span 80 × 0.99 … 100 × 1.01 around the median 90: the larger side, 11.1 / 90
    assert combined["noise_fraction"] == pytest.approx((100.0 * 1.01 - 90.0) / 90.0)
    # a run that did not measure the configuration is named, not averaged in
    partly = bench.combine_repeats([measurement(100.0), measurement(40.0, valid=False)])
    assert partly["valid"] and partly["samples_per_s"] == 100.0 and partly["invalid_runs"] == ["run 2: blocked on a round"]
    assert not bench.combine_repeats([measurement(40.0, valid=False)])["valid"]
    # two configurations whose runs overlap are a measured tie; two whose runs do not meet are apart
    a = bench.combine_repeats([measurement(100.0), measurement(80.0)])
    b = bench.combine_repeats([measurement(85.0), measurement(95.0)])
    c = bench.combine_repeats([measurement(40.0), measurement(42.0)])
    rows = [{**row(n, m["samples_per_s"], 50.0, m["noise_fraction"])} for n, m in (("a", a), ("b", b))]
    assert bench.ordering(rows)["w"]["correct_with_ties"]
    far = [row("a", a["samples_per_s"], 50.0, a["noise_fraction"]), row("c", c["samples_per_s"], 50.0, c["noise_fraction"])]
    assert bench.ordering(far)["w"]["predicted_ties_measured_apart"] == ["a vs c"]


def test_resume_runs_only_the_repeats_not_yet_stored(bench):
    one_pass = [("w/ddp1",), ("w/hm2-loopback",)]
    stored = [{"name": "w/ddp1"}, {"name": "w/hm2-loopback"}, {"name": "w/ddp1"}]
    assert bench.remaining_plan(one_pass * 3, stored) == [("w/hm2-loopback",), ("w/ddp1",), ("w/hm2-loopback",)]


def test_step_noise_is_the_spread_of_the_steady_steps(bench):
    steady = [{"iterations": [(0.1 * i, 0.1 * i + 0.01, 32) for i in range(200)]}]
    assert bench.step_noise(steady) == pytest.approx(0.0, abs=1e-6)
    drifting = [{"iterations": [(0.1 * i, 0.1 * i + (0.01 if i < 100 else 0.02), 32) for i in range(200)]}]
    assert bench.step_noise(drifting) > 0.4  # the second half steps at half the rate of the first


@pytest.mark.skipif(not RESULTS.exists(), reason="no stored benchmark results")
def test_repredict_rederives_the_stored_runs_without_running_anything(bench, tmp_path):
    copy = tmp_path / "data_parallel.json"
    shutil.copy(RESULTS, copy)
    before = json.loads(copy.read_text())
    assert bench.repredict(copy, []) == 0
    after = json.loads(copy.read_text())
    assert [r["name"] for r in after["runs"]] == [r["name"] for r in before["runs"]]
    assert after["runs"] == before["runs"]  # the runs are kept as measured, records included
    summary = after["summary"]
    assert {"median_abs_error", "ordering_correct", "ordering_correct_strict", "ordering_definition",
            "ordering_correct_beyond_noise", "configurations_invalid", "all_configurations", "meets_target"} <= set(summary)
    invalid = [r for r in after["comparisons"] if not r["valid"]]
    assert all(r["invalid_reasons"] for r in invalid)
    assert set(summary["configurations_invalid"]) == {r["name"] for r in invalid}
    assert summary["configurations_compared"] + len(invalid) == summary["configurations_total"]
    if invalid:  # a configuration not measured leaves the target unmet
        assert summary["meets_target"] is False
    for comparison in after["comparisons"]:
        if comparison["engine"] == "hivemind" and comparison["valid"]:
            # one run: its rounds; repeated runs: a list of each run's rounds, the rate their valid runs' median
            rounds = comparison["rounds"] if isinstance(comparison["rounds"], list) else [comparison["rounds"]]
            rates = [r["group_rate_samples_per_s"] for r in rounds if r["valid"]]
            assert comparison["measured_samples_per_s"] == pytest.approx(statistics.median(rates))


def test_two_worker_ddp_starts_from_the_co_located_compute_when_it_was_measured(bench):
    stored = json.loads(RESULTS.read_text())
    ddp1 = next(r for r in stored["runs"] if r["name"] == "nn_twins_mlp/ddp1")
    config = next(r for r in stored["runs"] if r["name"] == "nn_twins_mlp/ddp2-loopback")
    alone = bench.predict(config, {("nn_twins_mlp", "ddp"): ddp1}, stored["links"])
    assert alone["compute_step_s"] == pytest.approx(ddp1["result"]["step"]["iteration_s"])  # 2 processes, 2 cores
    colocated = json.loads(json.dumps(ddp1))
    colocated.update(engine="ddp-colocated", copies=2)
    colocated["result"]["step"]["iteration_s"] = 2 * ddp1["result"]["step"]["iteration_s"]
    baselines = {("nn_twins_mlp", "ddp"): ddp1, ("nn_twins_mlp", "ddp-colocated"): colocated}
    shared = bench.predict(config, baselines, stored["links"])
    assert shared["compute_step_s"] == pytest.approx(2 * alone["compute_step_s"])
    assert "independent copies" in shared["compute_source"]
    assert shared["samples_per_s"] < alone["samples_per_s"]
    # a co-located measurement of another worker count is not used
    colocated["copies"] = 3
    assert bench.predict(config, baselines, stored["links"])["compute_step_s"] == pytest.approx(alone["compute_step_s"])


def test_step_samples_keep_each_runs_spread_and_drop_the_drift_between_runs(bench):
    def run(periods):
        starts = [0.0]
        for p in periods:
            starts.append(starts[-1] + p)
        return {"records": [{"rank": 0, "iterations": [[s, s + 0.001, 8] for s in starts]}]}

    fast = [0.010, 0.012] * 20           # mean 11 ms
    slow = [0.020, 0.022] * 20           # mean 21 ms: the host slowed between the runs
    samples = bench.step_samples([run(fast), run(slow)])
    assert statistics.fmean(samples) == pytest.approx(0.016, rel=1e-6)  # the median of the runs' means
    assert max(samples) - min(samples) == pytest.approx(0.002, rel=1e-6)  # each run's own spread, not 12 ms
    assert bench.step_samples([{"records": []}]) == ()


def test_two_worker_ddp_adds_the_straggler_and_the_probed_overhead(bench):
    stored = json.loads(RESULTS.read_text())
    ddp1 = next(r for r in stored["runs"] if r["name"] == "nn_twins_mlp/ddp1")
    config = next(r for r in stored["runs"] if r["name"] == "nn_twins_mlp/ddp2-loopback")
    links = {k: v for k, v in stored["links"].items() if k != "ddp_overhead"}
    bare = bench.predict(config, {("nn_twins_mlp", "ddp"): ddp1}, links)
    assert bare["straggler_s"] == 0 and bare["per_step_overhead_s"] == 0  # no records, no probe
    with_records = {**ddp1, "runs": [ddp1]}
    timed = bench.predict(config, {("nn_twins_mlp", "ddp"): with_records}, links)
    assert timed["straggler_s"] > 0 and "per-step times" in timed["compute_source"]
    links["ddp_overhead"] = {"backend": "gloo", "world_size": 2, "plain_step_s": 4e-4, "ddp_step_s": 2e-3,
                             "allreduce_s": 5e-4, "pair_deltas_s": [1.6e-3], "per_step_s": 1.1e-3, "source": "given"}
    probed = bench.predict(config, {("nn_twins_mlp", "ddp"): with_records}, links)
    # the probe's whole DDP cost per step (its tiny all-reduce included) replaces the all-reduce latency
    assert probed["per_step_overhead_s"] == pytest.approx(1.6e-3)
    latency = links["collective"]["latency_s"]
    assert probed["allreduce_s"] == pytest.approx(timed["allreduce_s"] - latency)
    assert probed["step_s"] == pytest.approx(timed["step_s"] - latency + 1.6e-3)
