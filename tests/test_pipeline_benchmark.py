"""The pipeline-strategies benchmark's grid, findings and --reanalyse (no timing: that is the benchmark's job)."""

from __future__ import annotations

import itertools
import json
import statistics

import numpy as np
import pytest

from trainwise.pipeline import Pipeline, SequenceSource, Step, Strategy

from benchmark_modules import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("pipeline_strategies")


def _pipeline() -> Pipeline:
    """Three deterministic steps then a random one: splits 0..3 are allowed, 4 is not."""
    items = [np.arange(i, i + 16, dtype=np.float32) for i in range(6)]
    keep = lambda sample: sample  # noqa: E731 - the grid only looks at the step list
    steps = [Step("a", keep), Step("b", keep), Step("c", keep), Step("random", keep, deterministic=False)]
    return Pipeline("grid-toy", SequenceSource(items, storage_bytes=6 * 64), steps)


def test_grid_is_the_full_product_plus_every_other_axis_around_it(bench):
    pipeline = _pipeline()
    ids = [s.id for s in bench.grid(pipeline)]
    assert len(ids) == len(set(ids))
    last = pipeline.max_offline_split
    assert last == 3
    expected = {f"m{m}-npy-{c}-s4-w2p-{k}" for m, c, k in itertools.product(range(last + 1), ("none", "gzip", "zstd", "lz4"),
                                                                             ("none", "page", "app"))}
    expected |= {"online-w2p-none", "online-w2p-page"}
    expected |= {f"m{m}-st-none-s4-w2p-page" for m in range(last + 1)}
    expected |= {f"m{last}-npy-none-s4-w{w}-{k}" for w in ("0p", "1p", "2p", "2t") for k in ("page", "app")}
    expected |= {f"online-w{w}p-page" for w in (0, 1, 2)}
    expected |= {f"m{last}-npy-none-s1-w2p-page"}
    assert set(ids) == expected
    assert len(ids) == 4 * 4 * 3 + 2 + 4 + 6 + 2 + 1  # product, online, safetensors, new last-split workers, new online workers, shards
    assert all(Strategy.parse(i).id == i for i in ids)
    quick = {s.id for s in bench.grid(pipeline, quick=True)}
    assert quick < set(ids) and {"online-w0p-page", f"m{last}-npy-none-s4-w2t-app", f"m{last}-npy-none-s1-w2p-page"} <= quick


def _row(strategy: str, sps: float, bytes_per_sample: float, fraction: float | None = 0.01, storage_mb: float = 1.0) -> dict:
    return {"strategy": strategy, "stored_after": "x", "throughput_sps": sps, "storage_mb": storage_mb, "offline_s": 1.0,
            "bytes_per_sample": bytes_per_sample, "bound_sps": None, "fraction_of_bound": fraction, "cpu_percent": 50.0,
            "cpu_ms_per_sample": 2.0, "disk_read_mb_per_s": 0.0, "epochs": 1}


def _table(online_mb: float, last_mb: float, online_scaling: float, last_scaling: float) -> list[dict]:
    """A pipeline table with split 2 last; 0-worker throughput 100/s, 2-worker scaled as given."""
    rows = [_row("online-w0p-page", 100, online_mb * 1e6), _row("online-w2p-page", 100 * online_scaling, online_mb * 1e6),
            _row("online-w1p-page", 90, online_mb * 1e6),
            _row("m2-npy-none-s4-w0p-page", 100, last_mb * 1e6), _row("m2-npy-none-s4-w2p-page", 100 * last_scaling, last_mb * 1e6),
            _row("m2-npy-none-s4-w2t-page", 120, last_mb * 1e6), _row("m2-npy-none-s4-w0p-app", 400, last_mb * 1e6, None),
            _row("m2-npy-zstd-s4-w2p-page", 50, last_mb * 0.5e6, 0.02, 0.5), _row("m0-npy-none-s4-w2p-page", 60, online_mb * 1e6)]
    return sorted(rows, key=lambda r: -r["throughput_sps"])


def _scaling(found: list[dict]) -> dict:
    (finding,) = [f for f in found if f["finding"].startswith("samples ≤ 0.08 MB scale poorly")]
    return finding


def test_worker_scaling_finding_holds_does_not_hold_or_is_untestable(bench):
    small_scales_worse = _table(online_mb=0.002, last_mb=0.5, online_scaling=1.0, last_scaling=1.8)
    assert _scaling(bench.findings("nlp", small_scales_worse, 2))["holds"] is True
    small_scales_better = _table(online_mb=0.002, last_mb=0.5, online_scaling=1.8, last_scaling=1.0)
    finding = _scaling(bench.findings("nlp", small_scales_better, 2))
    assert finding["holds"] is False and "1.80×" in finding["evidence"] and "0.002 MB/sample" in finding["evidence"]
    assert _scaling(bench.findings("nlp", small_scales_worse, 1))["holds"] is None  # 2 workers on one core test nothing
    both_large = _table(online_mb=0.2, last_mb=0.5, online_scaling=1.0, last_scaling=1.8)
    assert _scaling(bench.findings("cv", both_large, 2))["holds"] is None

    across = {f["finding"]: f for f in bench.worker_scaling_across({"nlp": {"full_table": small_scales_worse},
                                                                     "cv": {"full_table": both_large}}, 2)}
    processes = next(f for name, f in across.items() if "processes" in name)
    assert processes["holds"] is True  # small: 1.0×; larger: median of 1.8×, 1.0×, 1.8× = 1.8×
    assert [p["mb_per_sample"] for p in processes["points"]] == sorted(p["mb_per_sample"] for p in processes["points"])
    threads = next(f for name, f in across.items() if "threads" in name)
    assert threads["holds"] is None  # reader threads only at the last split, where both pipelines' samples are large
    against = {f["finding"]: f for f in bench.worker_scaling_across({"nlp": {"full_table": small_scales_better}}, 2)}
    assert next(f for name, f in against.items() if "processes" in name)["holds"] is False


def test_other_findings_read_one_axis_twins(bench):
    found = {f["finding"]: f for f in bench.findings("nlp", _table(0.002, 0.5, 1.0, 1.8), 2)}
    assert found["fully online is never best"]["holds"] is True
    app = found["application caching beats page caching (seed: up to 15×)"]
    assert app["holds"] is True and "m2-npy-none-s4-w0p-app 4.00×" in app["evidence"]
    compression = found["compression helps only without a CPU bottleneck"]
    assert compression["holds"] is True and "m2-npy-zstd-s4-w2p-page 0.28×" in compression["evidence"]  # 50 / 180
    shards = found["concatenating small files into shards helps (seed: 1.4–9× for CV)"]
    assert shards["holds"] is False and "0.60× at 2 workers" in shards["evidence"]


def test_reanalyse_recomputes_findings_and_summary_from_saved_tables(bench, tmp_path, capsys):
    tables = {"nlp": _table(0.002, 0.5, 1.0, 1.8), "cv": _table(0.2, 0.8, 1.5, 1.5)}
    result = {"machine": {"cpu_affinity": [0, 1], "logical_cores": 2}, "bandwidth": {"disk_mb_per_s": 1000.0, "page_cache_mb_per_s": 3000.0},
              "pipelines": {name: {"description": name, "samples": 10, "pick_gap": gap, "full_table": rows, "findings": []}
                            for (name, rows), gap in zip(tables.items(), (0.02, 0.07))},
              "summary": {"seconds": 12.5}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps(result))
    assert bench.reanalyse(path) == 0
    again = json.loads(path.read_text())
    assert again["summary"]["sample_pick_gap_max"] == 0.07 and again["summary"]["seconds"] == 12.5
    assert again["summary"]["worker_scaling_2_to_0_by_pipeline"]["nlp"]["fully online"]["process_2_to_0"] == 1.0
    assert any("all pipelines" in f["finding"] for f in again["findings_across_pipelines"])
    assert all(p["findings"] for p in again["pipelines"].values())
    assert "scale poorly with workers" in capsys.readouterr().out
    assert bench.reanalyse(tmp_path / "missing.json") == 2


def test_eta_comes_from_the_last_run_of_this_grid_or_the_calibration(bench, tmp_path):
    earlier = {"date": "2026-01-01", "machine": {"load_average_at_start": [0.5]}, "plan": {"strategies": {"cv": 10}},
               "pipelines": {"cv": {"seconds": 120.0, "samples": 100, "full_table": [{}] * 10}}}
    path = tmp_path / "earlier.json"
    path.write_text(json.dumps(earlier))
    fixed = bench.FIXED_S_PER_STRATEGY
    seconds, source = bench.estimate_seconds({"cv": (200, 20)}, path)
    assert seconds == pytest.approx(20 * (fixed + 200 * (12.0 - fixed) / 100))
    assert "2026-01-01" in source
    del earlier["plan"]  # a run of the older hand-picked grid is not a basis
    path.write_text(json.dumps(earlier))
    samples, per_strategy = bench.CALIBRATION["cv"]
    seconds, source = bench.estimate_seconds({"cv": (samples, 20)}, path)
    assert seconds == pytest.approx(20 * per_strategy) and "calibration" in source
    seconds, _ = bench.estimate_seconds({"cv": (samples, 20), "other": (10, 2)}, tmp_path / "none.json")
    assert seconds == pytest.approx(20 * per_strategy + 2 * (fixed + 10 * bench.FALLBACK_S_PER_STRATEGY_PER_SAMPLE))


def test_full_product_grid_is_every_combination_once(bench):
    pipeline = _pipeline()
    ids = [s.id for s in bench.full_product_grid(pipeline)]
    assert len(ids) == len(set(ids))
    # splits 0..3 x formats 2 x compressions 4 x shards 2 x (w0, w1p, w2p, w1t, w2t) x caches 3, + online (w0-2 x none/page)
    assert len(ids) == 4 * 2 * 4 * 2 * 5 * 3 + 6
    assert not any("-w0t-" in i for i in ids)  # a main-process read has no worker kind: one strategy, not two
    assert {"m3-st-lz4-s1-w1t-none", "m0-npy-gzip-s4-w2p-app", "online-w1p-none"} <= set(ids)
    assert set(s.id for s in bench.grid(pipeline)) <= set(ids)


def _tiny_reference(name, root, size):
    items = [np.arange(i, i + 32, dtype=np.float32) for i in range(size)]
    steps = [Step("double", lambda s: {"__key__": s["__key__"], "x": s["data"] * 2}), Step("shift", lambda s: {**s, "x": s["x"] + 1})]
    return Pipeline(f"tiny-{name}", SequenceSource(items, storage_bytes=size * 128), steps)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.long
def test_full_product_resumes_chunk_by_chunk_and_restarts_on_another_cpu(bench, tmp_path, monkeypatch):
    real_bandwidth = bench.measure_read_bandwidth
    full_grid = bench.full_product_grid
    monkeypatch.setattr(bench, "reference_pipeline", _tiny_reference)
    # three storage variants (online, m0 none s1, m0 none s4 at npy) keep the test short
    monkeypatch.setattr(bench, "full_product_grid",
                        lambda p: [s for s in full_grid(p) if s.storage_id in ("online", "m0-npy-none-s1", "m0-npy-none-s4")])
    monkeypatch.setattr(bench, "measure_read_bandwidth", lambda work, n: real_bandwidth(work, 1 << 20))
    monkeypatch.setattr(bench, "SAMPLE_MIN_S", 0.0)
    monkeypatch.setattr(bench, "FULL_MIN_S", 0.0)
    monkeypatch.setattr(bench, "SAMPLE_MAX_EPOCHS", 1)
    monkeypatch.setattr(bench, "FULL_MAX_EPOCHS", 1)
    monkeypatch.setattr(bench, "CONFIRM_MIN_S", 0.0)
    monkeypatch.setattr(bench, "PAIRED_MIN_S", 0.0)
    monkeypatch.setattr(bench, "machine", lambda: {"cpu": "cpu A"})
    out = tmp_path / "full.json"
    args = (["nilm"], {"nilm": 20}, 0.1, tmp_path / "work", out)
    assert bench.run_full_product(*args, stop_after_s=0.0, chunk=1) == 0  # one chunk, then a clean stop
    state = json.loads(out.read_text())["pipelines"]["nilm"]
    assert not state["complete"] and len(state["done_storage"]) == 1 and len(state["chunks"]) == 1
    first = state["done_storage"][0]
    assert bench.run_full_product(*args, stop_after_s=None, chunk=1) == 0  # resumes: the saved chunk is not redone
    saved = json.loads(out.read_text())
    state = saved["pipelines"]["nilm"]
    assert state["complete"] and state["done_storage"][0] == first and len(state["chunks"]) == 3
    assert len(state["full_table"]) == state["strategies"] == len(state["sample_table"])
    assert 0.0 <= state["pick_gap"] < 1.0 and state["best_full"] == state["full_table"][0]["strategy"]
    assert saved["summary"]["pipelines_complete"] == ["nilm"] and saved["summary"]["complete"] is False  # 1 of 4 pipelines
    # the gap the summary quotes comes from the leaders re-timed side by side, the single pass's beside it
    confirmed = state["confirmed"]
    assert confirmed["picked_from_sample"] in confirmed["sample_leaders"] and confirmed["picked_from_sample"] in confirmed["full_candidates"]
    assert all(len(c["repeats"]) == bench.CONFIRM_ROUNDS for c in confirmed["sample_leaders"].values())
    assert all(len(c["repeats"]) == bench.FULL_CONFIRM_ROUNDS for c in confirmed["full_candidates"].values())
    assert len(confirmed["pick_to_best_ratio_by_round"]) == bench.FULL_CONFIRM_ROUNDS
    # the gap: the pick against the best alone, in rounds apart from those that chose the best
    paired = confirmed["paired"]
    if confirmed["picked_from_sample"] == confirmed["best_full"]:
        assert confirmed["pick_gap"] == 0.0 and paired["ratios"] == []
    else:
        assert len(paired["ratios"]) == bench.PAIRED_ROUNDS
        assert confirmed["pick_gap"] == pytest.approx(1 - statistics.median(paired["ratios"]), abs=1e-3)
    assert saved["summary"]["sample_pick_gap_by_pipeline"] == {"nilm": confirmed["pick_gap"]}
    assert saved["summary"]["single_pass_pick_gap_by_pipeline"] == {"nilm": state["pick_gap"]}
    assert confirmed["min_seconds_per_timing"] == 0.0
    del saved["pipelines"]["nilm"]["confirmed"]  # a pipeline completed before the re-timing existed gets it on a rerun
    out.write_text(json.dumps(saved))
    assert bench.run_full_product(*args, stop_after_s=None, chunk=1) == 0
    again = json.loads(out.read_text())
    assert "confirmed" in again["pipelines"]["nilm"] and len(again["pipelines"]["nilm"]["chunks"]) == 3
    again["pipelines"]["nilm"]["confirmed"]["method"] = "an older method"  # re-timed another way: done again, the old kept
    out.write_text(json.dumps(again))
    assert bench.run_full_product(*args, stop_after_s=None, chunk=1) == 0
    again = json.loads(out.read_text())["pipelines"]["nilm"]
    assert again["confirmed"]["method"] == bench.CONFIRM_METHOD and again["confirmed_before"][0]["method"] == "an older method"
    monkeypatch.setattr(bench, "machine", lambda: {"cpu": "cpu B"})
    assert bench.run_full_product(*args, stop_after_s=0.0, chunk=1) == 0  # another CPU: that pipeline starts over
    state = json.loads(out.read_text())["pipelines"]["nilm"]
    assert state["cpu"] == "cpu B" and not state["complete"] and len(state["chunks"]) == 1


def test_identical_twins_spread_reads_w1t_against_w0p(bench):
    rows = [{"strategy": "m3-npy-none-s4-w0p-app", "throughput_sps": 100.0}, {"strategy": "m3-npy-none-s4-w1t-app", "throughput_sps": 110.0},
            {"strategy": "m2-npy-none-s4-w0p-page", "throughput_sps": 50.0}, {"strategy": "m2-npy-none-s4-w1t-page", "throughput_sps": 40.0},
            {"strategy": "m2-npy-none-s4-w2t-page", "throughput_sps": 10.0}]
    spread = bench.identical_twins_spread(rows)
    assert spread == {"pairs": 2, "median": pytest.approx(0.15), "p90": pytest.approx(0.1), "max": pytest.approx(0.2)}
    assert bench.identical_twins_spread(rows[4:]) is None
    # chunks measured with a real one-thread reader have no twins to read
    result = {"pipelines": {"cv": {"complete": True, "sample_table": rows, "full_table": rows, "pick_gap": 0.0, "best_full": "x",
                                   "best_full_sps": 1.0, "strategies": 5, "chunks": [{"started": "t", "one_reader_thread": "background thread"}]}}}
    assert bench.summarise_full_product(result)["identical_twins_spread"] == {}


def test_the_gap_is_timed_pick_against_best_alone_apart_from_the_rounds_that_chose_the_best(bench, monkeypatch, tmp_path):
    # sample: B leads; full data: A is the best in the selection rounds; the paired rounds set the gap
    sample_rows = [{"strategy": "m0-npy-none-s1-w0p-app", "throughput_sps": 100.0},
                   {"strategy": "m0-npy-none-s4-w0p-app", "throughput_sps": 99.0}]
    full_rows = [{"strategy": "m0-npy-none-s1-w0p-app", "throughput_sps": 100.0},
                 {"strategy": "m0-npy-none-s4-w0p-app", "throughput_sps": 98.0}]
    a, b = "m0-npy-none-s1-w0p-app", "m0-npy-none-s4-w0p-app"
    calls = []

    def remeasure(pipeline, strategies, root, *, rounds, min_seconds, max_epochs, sample_n=None):
        ids = [s.id for s in strategies]
        calls.append((ids, rounds, min_seconds, sample_n))
        if sample_n is not None:  # the sample's leaders: b is faster
            return {a: [90.0] * rounds, b: [95.0] * rounds}
        if len(calls) == 2:  # selection rounds on the full data: a looks 20 % faster (luckily)
            return {i: [120.0 if i == a else 100.0] * rounds for i in ids}
        return {a: [100.0, 104.0] * (rounds // 2), b: [98.0, 100.0] * (rounds // 2)}  # alone, side by side: ~2-4 % apart

    monkeypatch.setattr(bench, "remeasure", remeasure)
    confirmed = bench.confirm_pick(None, sample_rows, full_rows, tmp_path, sample_n=2)
    assert confirmed["picked_from_sample"] == b and confirmed["best_full"] == a
    assert confirmed["selection_rounds_gap"] == pytest.approx(1 - 100 / 120, abs=1e-4)
    assert calls[2] == ([b, a], bench.PAIRED_ROUNDS, bench.PAIRED_MIN_S, None)  # the two alone, on the full data
    assert confirmed["pick_gap"] == pytest.approx(1 - statistics.median([0.98, 100 / 104] * 5), abs=1e-4)
