"""Pipeline strategies: materialisation to WebDataset shards, manifest, resume, loaders, profiling, selection."""

from __future__ import annotations

import json
import tarfile
import time

import numpy as np
import pytest
import torch

from trainwise.errors import TrainwiseError
from trainwise.pipeline import Pipeline, SequenceSource, Step, Strategy, apply, enumerate_strategies
from trainwise.pipeline.codec import decode_wds_sample
from trainwise.pipeline.loader import make_dataloader, open_strategy, touch
from trainwise.pipeline.materialise import MANIFEST, file_sha256, materialise, strategy_dir
from trainwise.pipeline.placement import placement, thesis_chapter5
from trainwise.pipeline.profiler import measure_online, profile_pipeline, sample_indices
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

from trainwise.pipeline.select import DEADLINE_WEIGHTS, cloud_cost_usd, cloud_prices_from_catalog, minmax, presto_scores, select


def _scale(sample):
    return {"__key__": sample["__key__"], "x": sample["data"].astype(np.float32) * 2.0, "label": int(sample["data"][0, 0])}


def _add_one(sample):
    return {**sample, "x": sample["x"] + 1.0}


def _jitter(sample):
    return {**sample, "x": sample["x"] + np.random.default_rng().normal(size=sample["x"].shape).astype(np.float32) * 0}


def toy(n: int = 12, calls: list | None = None, version: str = "1") -> Pipeline:
    items = [np.arange(i, i + 64, dtype=np.int16).reshape(8, 8) for i in range(n)]

    def scale(sample):
        if calls is not None:
            calls.append(sample["__key__"])
        return _scale(sample)

    steps = [Step("scale", scale, version=version), Step("add_one", _add_one), Step("jitter", _jitter, deterministic=False)]
    return Pipeline("toy", SequenceSource(items, storage_bytes=n * 128, name="toy-items"), steps)


def expected_x(i: int) -> np.ndarray:
    return np.arange(i, i + 64, dtype=np.int16).reshape(8, 8).astype(np.float32) * 2 + 1


@pytest.mark.parametrize("fmt,compression", [("npy", "none"), ("npy", "gzip"), ("npy", "zstd"), ("npy", "lz4"),
                                             ("safetensors", "none"), ("safetensors", "zstd")])
def test_materialised_shards_are_webdataset_and_round_trip(tmp_path, fmt, compression):
    import webdataset as wds

    pipeline = toy()
    strategy = Strategy(split=2, format=fmt, compression=compression, shards=3, workers=0)
    directory, manifest = materialise(pipeline, strategy, tmp_path)
    shards = sorted(directory.glob("shard-*.tar"))
    assert len(shards) == 3 and manifest.samples == 12
    # any tar reader: members are key.field.ext[.comp]
    with tarfile.open(shards[0]) as tar:
        names = tar.getnames()
    suffix = {"none": "", "gzip": ".gz", "zstd": ".zst", "lz4": ".lz4"}[compression]
    # webdataset's TarWriter writes a sample's members in sorted order, the reference layout
    assert names[:2] == [f"00000000.label.json{suffix}", f"00000000.x.{'safetensors' if fmt == 'safetensors' else 'npy'}{suffix}"]
    # the webdataset library reads the shards; our decoder turns its raw samples into the stored fields
    raw = list(wds.WebDataset([str(s) for s in shards], shardshuffle=False))
    assert len(raw) == 12
    decoded = [decode_wds_sample(s, manifest.field_kinds) for s in raw]
    for sample in decoded:
        index = int(sample["__key__"])
        np.testing.assert_array_equal(sample["x"], expected_x(index))
        assert sample["label"] == index
    if (fmt, compression) == ("npy", "none"):  # plain .npy members decode with webdataset's own decoder
        auto = next(iter(wds.WebDataset(str(shards[0]), shardshuffle=False).decode()))
        np.testing.assert_array_equal(auto["x.npy"], expected_x(int(auto["__key__"])))
    # and our DataLoader delivers the same samples, with the online step applied
    loader = make_dataloader(pipeline, strategy, tmp_path)
    keys = sorted(int(s["__key__"]) for s in loader)
    assert keys == list(range(12))


def test_manifest_lists_counts_bytes_checksums_hash_and_steps(tmp_path):
    pipeline = toy()
    strategy = Strategy(split=1, compression="zstd", shards=2, workers=0)
    directory, manifest = materialise(pipeline, strategy, tmp_path)
    on_disk = json.loads((directory / MANIFEST).read_text())
    assert on_disk["samples"] == 12 and on_disk["source_samples"] == 12
    assert on_disk["bytes"] == sum((directory / s["name"]).stat().st_size for s in on_disk["shards"])
    for shard in on_disk["shards"]:
        assert file_sha256(directory / shard["name"]) == shard["sha256"]
    assert on_disk["offline_steps"] == [{"name": "scale", "version": "1", "deterministic": True}]
    assert [s["name"] for s in on_disk["online_steps"]] == ["add_one", "jitter"]
    assert on_disk["strategy_hash"] in directory.name and on_disk["split_name"] == "scale"
    assert on_disk["field_kinds"] == {"x": "numpy", "label": "json"}
    # a second run reuses the complete strategy without running the steps again
    calls: list = []
    materialise(toy(calls=calls), strategy, tmp_path)
    assert calls == []


def test_step_version_is_part_of_the_strategy_hash(tmp_path):
    strategy = Strategy(split=1, shards=2, workers=0)
    assert strategy_dir(tmp_path, toy(version="1"), strategy) != strategy_dir(tmp_path, toy(version="2"), strategy)
    assert strategy_dir(tmp_path, toy(), strategy) == strategy_dir(tmp_path, toy(), strategy)


def test_crash_leaves_no_manifest_and_rerun_resumes_finished_shards(tmp_path):
    items = [np.full(4, i, dtype=np.int16) for i in range(12)]
    state = {"fail_at": "00000010", "calls": []}

    def fragile(sample):
        state["calls"].append(sample["__key__"])
        if sample["__key__"] == state["fail_at"]:
            raise RuntimeError("boom")
        return {"__key__": sample["__key__"], "x": sample["data"] * 3}

    pipeline = Pipeline("fragile", SequenceSource(items, storage_bytes=96), [Step("triple", fragile)])
    strategy = Strategy(split=1, shards=3, workers=0)
    with pytest.raises(TrainwiseError, match=r"step 'triple' failed on sample '00000010' \(source index 10\)"):
        materialise(pipeline, strategy, tmp_path)
    directory = strategy_dir(tmp_path, pipeline, strategy)
    assert not (directory / MANIFEST).exists()
    assert not list(directory.glob(".*.tmp"))  # the shard being written was removed, not left half-written
    assert sorted(p.name for p in directory.glob("shard-*.tar")) == ["shard-00000.tar", "shard-00001.tar"]
    with pytest.raises(TrainwiseError, match="not materialised"):
        open_strategy(pipeline, strategy, tmp_path)
    state["fail_at"], state["calls"] = None, []
    _, manifest = materialise(pipeline, strategy, tmp_path)
    assert state["calls"] == ["00000008", "00000009", "00000010", "00000011"]  # only the last shard was rebuilt
    assert manifest.samples == 12
    # rebuild starts over
    state["calls"] = []
    materialise(pipeline, strategy, tmp_path, rebuild=True)
    assert len(state["calls"]) == 12


def test_corrupted_shard_is_named(tmp_path):
    pipeline = toy()
    strategy = Strategy(split=2, shards=2, workers=0)
    directory, manifest = materialise(pipeline, strategy, tmp_path)
    shard = directory / manifest.shards[1].name
    data = bytearray(shard.read_bytes())
    data[600] ^= 0xFF  # flip one byte inside the first member's payload
    shard.write_bytes(bytes(data))
    with pytest.raises(TrainwiseError, match=f"corrupted shard .*{shard.name}.*sha256"):
        open_strategy(pipeline, strategy, tmp_path)
    shard.write_bytes(bytes(data[:1000]))
    with pytest.raises(TrainwiseError, match=f"corrupted shard .*{shard.name}.*bytes"):
        open_strategy(pipeline, strategy, tmp_path, verify=False)
    # a damaged tar header is reported naming the shard while reading, too
    bad = bytearray((directory / manifest.shards[0].name).read_bytes())
    bad[0:100] = b"\xff" * 100
    bad[148:156] = b"garbage!"
    (directory / manifest.shards[0].name).write_bytes(bytes(bad))
    from trainwise.pipeline.loader import read_shard

    with pytest.raises(TrainwiseError, match="corrupted shard .*shard-00000.tar"):
        list(read_shard(directory / manifest.shards[0].name, manifest.field_kinds))


def test_dataloader_process_and_thread_workers_with_app_cache(tmp_path):
    pipeline = toy(16)
    for strategy_id in ("m2-npy-none-s4-w2p-app", "m2-npy-lz4-s4-w2t-app", "online-w2p-none"):
        strategy = Strategy.parse(strategy_id)
        loader = apply(pipeline, strategy, tmp_path)
        for _ in range(2):  # the second epoch comes from the in-memory cache (app) for the shard strategies
            samples = list(loader)
            assert sorted(int(s["__key__"]) for s in samples) == list(range(16))
            for s in samples:
                assert touch(s) > 0
                np.testing.assert_array_equal(np.asarray(s["x"]), expected_x(int(s["__key__"])))


def test_thread_readers_run_the_online_steps_off_the_main_thread(tmp_path):
    import threading

    seen: list[int] = []

    def record(sample):
        seen.append(threading.get_ident())
        return sample

    base = toy(8)
    pipeline = Pipeline("toy-threads", base.source, [*base.steps, Step("record", record, deterministic=False)])
    for strategy_id, off_main in (("m2-npy-none-s2-w0p-app", False), ("m2-npy-none-s2-w1t-app", True),
                                  ("m2-npy-none-s2-w2t-app", True)):
        seen.clear()
        samples = list(apply(pipeline, Strategy.parse(strategy_id), tmp_path))
        assert len(samples) == 8 and len(seen) == 8
        # one reader thread is a background reader, not the main thread under another name
        assert all(ident != threading.get_ident() for ident in seen) is off_main, strategy_id


def _stuck_in_worker_processes(sample):
    from torch.utils.data import get_worker_info

    if get_worker_info() is not None:  # a forked worker deadlocked on a lock its parent held (never returns)
        time.sleep(3600)
    return sample


@pytest.mark.long
def test_a_stuck_worker_process_stops_the_profile_with_an_error_naming_the_strategy(tmp_path):
    base = toy(6)
    pipeline = Pipeline("toy-stuck", base.source, [*base.steps, Step("stuck", _stuck_in_worker_processes, deterministic=False)])
    strategy = Strategy.parse("online-w1p-none")
    started = time.perf_counter()
    with pytest.raises(TrainwiseError, match=r"strategy online-w1p-none: a DataLoader worker process delivered no sample in 2 s"):
        measure_online(pipeline, strategy, min_seconds=0.1, max_epochs=1, stall_timeout_s=2)
    assert time.perf_counter() - started < 60
    # the same step in the main process is not stuck: the timeout concerns worker processes only
    assert measure_online(pipeline, Strategy.parse("online-w0p-none"), min_seconds=0.1, max_epochs=1, stall_timeout_s=2)["throughput_sps"] > 0


def test_numpy_scalar_fields_come_back_as_the_online_pipeline_gives_them(tmp_path):
    seen: dict[str, set] = {}

    def label(sample):
        return {**sample, "label": np.int64(int(sample["data"][0])), "weight": np.float32(0.5), "scale": np.array(2.0)}

    def look(sample):  # an online step sees the same types whatever was stored offline
        seen.setdefault(sample["__key__"], set()).add((type(sample["label"]), type(sample["weight"])))
        return sample

    items = [np.full(4, i, dtype=np.float32) for i in range(6)]
    pipeline = Pipeline("scalars", SequenceSource(items, storage_bytes=96), [Step("label", label), Step("look", look)])
    for fmt in ("npy", "st"):
        for batch_size in (None, 3):
            delivered = {}
            for strategy_id in ("online-w0p-none", f"m1-{fmt}-zstd-s2-w0p-none"):
                apply(pipeline, Strategy.parse(strategy_id), tmp_path)  # materialised (once) where it says so
                loader = make_dataloader(pipeline, Strategy.parse(strategy_id), tmp_path, batch_size=batch_size)
                first = min(loader, key=lambda b: str(b["__key__"]))
                delivered[strategy_id] = {k: (type(v), getattr(v, "dtype", None), np.asarray(v).tolist())
                                          for k, v in first.items() if k != "__key__"}
            online, stored = delivered.values()
            assert online == stored, (fmt, batch_size, online, stored)
            assert online["weight"][1] == torch.float32  # not float64, as a stored JSON number batched
            assert np.asarray(stored["scale"][2]).shape == ((3,) if batch_size else ())  # a 0-d array stays 0-d
    assert all(types == {(np.int64, np.float32)} for types in seen.values()), seen


def test_strategy_ids_round_trip_and_enumeration_respects_determinism():
    pipeline = toy()
    strategies = enumerate_strategies(pipeline, compressions=("none", "zstd"), workers=(0, 2), caches=("none", "app"))
    assert max(s.split for s in strategies) == 2  # split 3 would freeze the non-deterministic jitter
    assert all(Strategy.parse(s.id) == s for s in strategies)
    assert not any(not s.materialised and s.cache == "app" for s in strategies)
    with pytest.raises(TrainwiseError, match="cannot read strategy id"):
        Strategy.parse("m1-npy-brotli-s4-w2p-app")


def test_iterable_source_and_thread_kinds_enumerate(tmp_path):
    pipeline = Pipeline("gen", (np.full(3, i, dtype=np.float32) for i in range(5)), [Step("keep", lambda s: s)])
    assert len(pipeline.source) == 5 and pipeline.source[4]["__key__"] == "00000004"
    strategies = enumerate_strategies(pipeline, compressions=("none",), workers=(2,), worker_kinds=("process", "thread"), caches=("page",))
    assert [s.id for s in strategies if not s.materialised] == ["online-w2p-page"]
    # 0 workers is the main process whatever the kind: listed once
    both = enumerate_strategies(pipeline, splits=(1,), compressions=("none",), workers=(0, 1), worker_kinds=("process", "thread"),
                                caches=("app",), include_online=False)
    assert [s.id for s in both] == ["m1-npy-none-s4-w0p-app", "m1-npy-none-s4-w1p-app", "m1-npy-none-s4-w1t-app"]
    loader = apply(pipeline, "m1-npy-none-s2-w2t-page", tmp_path)
    assert sorted(float(s["data"][0]) for s in loader) == [0, 1, 2, 3, 4]


def test_profile_extrapolates_p_and_s_linearly_from_a_sample(tmp_path):
    pipeline = toy(40)
    strategies = [Strategy.parse("m1-npy-none-s2-w0p-page"), Strategy.parse("m2-npy-zstd-s2-w0p-app"), Strategy.parse("online-w0p-none")]
    profile = profile_pipeline(pipeline, strategies, tmp_path, sample_n=10, min_seconds=0.05, max_epochs=2)
    assert profile.profiled_samples == 10 and profile.source_samples == 40
    assert "extrapolated linearly" in profile.extrapolation and "× 4.00" in profile.extrapolation
    for r in profile.results:
        assert r.storage_bytes_full == pytest.approx(r.storage_bytes * 4)
        assert r.offline_s_full == pytest.approx(r.offline_s * 4)
        assert r.throughput_sps > 0 and r.measured_epochs >= 1
        assert r.epoch_startup_s > 0 and r.steady_throughput_sps > 0
        if r.cache != "none":  # cached: timed over the sample repeated to the full epoch's length
            assert "repeated 4x" in r.notes[0] and r.throughput_sps == r.measured_throughput_sps
        elif not r.notes:  # uncached: the sample's per-epoch start-up once, then its streaming rate
            # (a start-up over half the epoch is not extrapolated: see the next test)
            assert r.throughput_sps == pytest.approx(40 / (r.epoch_startup_s + 40 / r.steady_throughput_sps))
    online = profile.result("online-w0p-none")
    assert online.storage_bytes == 10 * 128 and online.offline_s == 0
    assert sample_indices(40, 10) == [0, 4, 9, 13, 17, 22, 26, 30, 35, 39]


def test_a_sample_epoch_mostly_spent_before_its_first_sample_is_not_extrapolated(tmp_path, monkeypatch):
    from trainwise.pipeline import profiler

    def measured(profiled, strategy, manifest, min_seconds, max_epochs, repeat=1):
        assert repeat == 1  # uncached strategies are not repeated
        # 2 reader threads on a short epoch: 10 samples in 2.5 ms, the first after 1.9 ms
        startup = 0.0019 if strategy.worker_kind == "thread" else 0.0002
        return {"throughput_sps": 4000.0, "measured_throughput_sps": 4000.0, "epoch_startup_s": startup,
                "steady_throughput_sps": 9 / (0.0025 - startup), "warmup_s": 0.0, "measured_epochs": 100, "measured_s": 0.25,
                "cpu_percent": 50.0, "cpu_s_per_sample": 1e-4, "disk_read_bytes_per_s": 0.0}

    monkeypatch.setattr(profiler, "measure_online", measured)
    strategies = [Strategy.parse("m1-npy-none-s2-w2t-none"), Strategy.parse("m1-npy-none-s2-w0p-none")]
    profile = profile_pipeline(toy(40), strategies, tmp_path, sample_n=10)
    threads, main = profile.result("m1-npy-none-s2-w2t-none"), profile.result("m1-npy-none-s2-w0p-none")
    assert threads.throughput_sps == 4000.0 and "not extrapolated" in threads.notes[0]
    assert main.throughput_sps == pytest.approx(40 / (0.0002 + 40 / main.steady_throughput_sps)) and not main.notes


def test_leaders_are_re_timed_interleaved_and_ranked_by_their_median(tmp_path, monkeypatch):
    from trainwise.pipeline import profiler

    # First pass: B's one timing was lucky (1,050/s); re-timed, A is steadily faster than B.
    first = {"m1-npy-none-s2-w0p-app": 1000.0, "m2-npy-none-s2-w0p-app": 1050.0, "m1-npy-none-s2-w0p-page": 960.0,
             "online-w0p-none": 500.0}
    repeats = {"m1-npy-none-s2-w0p-app": [1010.0, 990.0, 1005.0], "m2-npy-none-s2-w0p-app": [900.0, 910.0, 905.0],
               "m1-npy-none-s2-w0p-page": [950.0, 955.0, 945.0]}
    calls: list[str] = []
    seen: dict[str, int] = {}

    def measured(profiled, strategy, manifest, min_seconds, max_epochs):
        calls.append(strategy.id)
        seen[strategy.id] = seen.get(strategy.id, 0) + 1
        sps = first[strategy.id] if seen[strategy.id] == 1 else repeats[strategy.id][seen[strategy.id] - 2]
        return {"throughput_sps": sps, "measured_throughput_sps": sps, "epoch_startup_s": 0.0, "steady_throughput_sps": sps,
                "warmup_s": 0.0, "measured_epochs": 10, "measured_s": 1.0, "cpu_percent": 50.0, "cpu_s_per_sample": 1e-4,
                "disk_read_bytes_per_s": 0.0}

    monkeypatch.setattr(profiler, "measure_online", measured)
    profile = profile_pipeline(toy(12), [Strategy.parse(i) for i in first], tmp_path)
    assert select(profile).best.strategy_id == "m2-npy-none-s2-w0p-app"  # one timing each: the lucky one wins
    assert [r.strategy_id for r in profiler.leaders(profile.results)] == ["m2-npy-none-s2-w0p-app", "m1-npy-none-s2-w0p-app",
                                                                          "m1-npy-none-s2-w0p-page"]  # within 10 % of 1,050
    calls.clear()
    confirmed = profiler.confirm_leaders(toy(12), profile, tmp_path, rounds=2)
    leader_ids = ["m2-npy-none-s2-w0p-app", "m1-npy-none-s2-w0p-app", "m1-npy-none-s2-w0p-page"]
    # round-robin, not one strategy's repeats back to back; every other round reversed (drift cancels)
    assert calls == leader_ids + leader_ids[::-1]
    a = confirmed.result("m1-npy-none-s2-w0p-app")
    # ranked by the side-by-side repeats only: the first timings were minutes apart
    assert a.throughput_repeats_sps == [1010.0, 990.0] and a.throughput_sps == 1000.0  # median of 1010, 990
    b = confirmed.result("m2-npy-none-s2-w0p-app")
    assert b.throughput_sps == 905.0 and "median of 2 timings" in b.notes[-1] and "1050.0/s" in b.notes[-1]
    assert confirmed.result("online-w0p-none") == profile.result("online-w0p-none")  # not a leader: untouched
    assert select(confirmed).best.strategy_id == "m1-npy-none-s2-w0p-app"
    assert not any("not resolved" in n for n in select(confirmed).notes)  # the ranges 990-1010 and 950-955 do not overlap
    # a leader whose re-timings overlap the pick's: the user is told the pick among them is within noise
    tied = confirmed.model_copy(update={"results": [
        r.model_copy(update={"throughput_repeats_sps": [1000.0, 940.0]}) if r.strategy_id == "m1-npy-none-s2-w0p-page" else r
        for r in confirmed.results]})
    notes = [n for n in select(tied).notes if "not resolved" in n]
    assert select(tied).best.strategy_id == "m1-npy-none-s2-w0p-app" and len(notes) == 1
    assert "m1-npy-none-s2-w0p-page" in notes[0] and "m2-npy-none-s2-w0p-app" not in notes[0]
    # a single strategy in the lead has nothing to be told apart from
    calls.clear()
    alone = profile.model_copy(update={"results": [profile.result("online-w0p-none"), profile.result("m2-npy-none-s2-w0p-app")]})
    assert profiler.confirm_leaders(toy(12), alone, tmp_path) is alone and calls == []


def test_cached_strategies_are_timed_on_the_sample_repeated_to_the_full_epoch(tmp_path):
    from trainwise.pipeline.loader import make_dataloader
    from trainwise.pipeline.materialise import materialise

    pipeline = toy(40)
    sample = pipeline.with_source(pipeline.source.subset(sample_indices(40, 10)))
    for strategy_id in ("m1-npy-none-s2-w1t-app", "m1-npy-none-s2-w1p-page", "online-w0p-page"):
        strategy = Strategy.parse(strategy_id)
        manifest = materialise(sample, strategy, tmp_path) if strategy.materialised else None
        keys = [s["__key__"] for s in make_dataloader(sample, strategy, manifest=manifest, verify=False, repeat=4)]
        assert len(keys) == 40 and len(set(keys)) == 10, strategy_id  # each of the 10 samples 4 times
        assert len(make_dataloader(sample, strategy, manifest=manifest, verify=False, repeat=4).dataset) == 40


def test_presto_objective_matches_the_digest_formula():
    p, s, t = [10.0, 0.0, 5.0], [300.0, 100.0, 200.0], [50.0, 10.0, 90.0]
    # PRESTO (Erben et al., SIGMOD 2022): p' = 1 - minmax(p), s' = 1 - minmax(s), t' = minmax(t); score = w·(p', s', t')
    p_n, s_n, t_n = np.array([0.0, 1.0, 0.5]), np.array([0.0, 1.0, 0.5]), np.array([0.5, 0.0, 1.0])
    np.testing.assert_allclose(presto_scores(p, s, t), t_n)  # default weights (0, 0, 1)
    np.testing.assert_allclose(presto_scores(p, s, t, DEADLINE_WEIGHTS), p_n + t_n)
    np.testing.assert_allclose(presto_scores(p, s, t, (0.5, 2, 1)), 0.5 * p_n + 2 * s_n + t_n)
    np.testing.assert_allclose(minmax([3, 3, 3]), [0, 0, 0])
    with pytest.raises(TrainwiseError):
        presto_scores(p, s, t, (0, 0, 0))


def _results(tmp_path):
    pipeline = toy(8)
    ids = ["online-w0p-none", "m1-npy-none-s2-w0p-page", "m2-npy-none-s2-w0p-app"]
    return profile_pipeline(pipeline, [Strategy.parse(i) for i in ids], tmp_path, min_seconds=0.05, max_epochs=2)


def test_selection_default_keep_up_and_cloud_prices(tmp_path):
    profile = _results(tmp_path)
    fastest = max(profile.results, key=lambda r: r.throughput_sps)
    assert select(profile).best.strategy_id == fastest.strategy_id
    slowest = min(r.throughput_sps for r in profile.results)
    keep = select(profile, required_samples_per_s=slowest * 1.0001)
    assert keep.keeps_up and len(keep.excluded) == 1
    impossible = select(profile, required_samples_per_s=fastest.throughput_sps * 10)
    assert impossible.keeps_up is False and "no strategy keeps up" in impossible.notes[0]
    prices = cloud_prices_from_catalog("current", vcpus=4)
    assert prices.offline_compute_usd_per_hour > 0 and prices.storage_usd_per_gb_month == 0.005 and prices.transfer_usd_per_gb == 0.01
    r = profile.results[1]
    assert cloud_cost_usd(r, prices, 2.0) == pytest.approx(r.offline_s_full / 3600 * prices.offline_compute_usd_per_hour
                                                           + r.storage_bytes_full / 1e9 * 0.005 * 2.0)
    cloud = select(profile, prices=prices, cloud_weights=(1, 0))  # cost only: the online strategy costs nothing offline
    assert cloud.objective == "cloud" and cloud.best.strategy_id == "online-w0p-none"


def test_required_samples_per_s_from_the_device_model():
    from trainwise.pipeline.select import required_samples_per_s
    from trainwise.predict.characterise import characterise_named
    from trainwise.predict.offerings import device_predictions

    char = characterise_named("mnist_cnn", 64)
    need = required_samples_per_s(char, "V100")
    assert need == pytest.approx(device_predictions(char, "V100")[0].samples_per_s)
    assert need > required_samples_per_s(char, "K80")


def test_placement_and_thesis_chapter5_arithmetic():
    thesis = thesis_chapter5()
    assert thesis["size_reduction"] == pytest.approx(44.18, abs=0.01)  # published ≈ 44×
    assert thesis["bandwidth_reduction"] == pytest.approx(11.58, abs=0.01)  # published ≈ 11.5×
    plan = placement(8204.5e6, 185.7e6, 600.0, bandwidth_bytes_per_s=8.75e6, transfer_usd_per_gb=0.01, offline_compute_usd_per_hour=2.0)
    assert plan.upload_reduction == pytest.approx(44.18, abs=0.01)
    assert plan.edge.upload_s == pytest.approx(185.7e6 / 8.75e6)
    assert plan.cloud.upload_s == pytest.approx(8204.5e6 / 8.75e6)
    assert plan.cloud.total_usd == pytest.approx(8.2045 * 0.01 + 600 / 3600 * 2.0)
    assert plan.best_by_time == "edge" and plan.best_by_cost == "edge"
    with pytest.raises(TrainwiseError):
        placement(0, 1, 1)
