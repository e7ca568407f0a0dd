"""plan stages what a pipeline strategy stores (PRESTO → plan's data-staging, egress and storage)."""

from __future__ import annotations

import json

import pytest

from trainwise.errors import TrainwiseError
from trainwise.plan.command import build_inputs
from trainwise.plan.staging import staged_dataset


def _result(strategy_id: str, storage_bytes_full: float) -> dict:
    return {"strategy_id": strategy_id, "storage_id": strategy_id, "materialised": strategy_id != "online", "split": 0,
            "split_name": "x", "format": "npy", "compression": "none", "shards": 1, "workers": 0, "worker_kind": "process",
            "cache": "none", "samples": 10, "offline_s": 1.0, "storage_bytes": int(storage_bytes_full / 100),
            "bytes_per_sample": storage_bytes_full / 1000, "throughput_sps": 50.0, "warmup_s": 0.1, "measured_epochs": 1,
            "measured_s": 1.0, "cpu_percent": 50.0, "cpu_s_per_sample": 0.01, "disk_read_bytes_per_s": 1e6,
            "bound_sps": 100.0, "bound_fraction": 0.5, "skipped_samples": 0, "offline_s_full": 100.0,
            "storage_bytes_full": storage_bytes_full, "notes": []}


@pytest.fixture
def pipeline_json(tmp_path):
    path = tmp_path / "pipe.json"
    best = _result("m2-npy-zstd-s1-w0p-none", 3.5e9)
    profile = {"pipeline": "cv", "description": "d", "source_samples": 1000, "profiled_samples": 10, "source_bytes": 10,
               "extrapolation": "x100 from a 10-sample subset", "bandwidth": None, "memory_bytes": 1, "cpu_count": 2,
               "results": [_result("online", 12e9), best]}
    selection = {"best": best, "ranking": [["m2-npy-zstd-s1-w0p-none", 1.0]], "objective": "presto", "weights": [0, 0, 1]}
    path.write_text(json.dumps({"profile": profile, "selection": selection}))
    return path


def test_the_selected_strategy_sets_the_staged_size(pipeline_json):
    gb, how = staged_dataset(pipeline_json)
    assert gb == pytest.approx(3.5)
    assert "m2-npy-zstd-s1-w0p-none" in how and "x100 from a 10-sample subset" in how
    gb, _ = staged_dataset(pipeline_json, "online")
    assert gb == pytest.approx(12.0)


def test_plan_options_and_assumption_carry_the_pipeline_size(pipeline_json):
    _, _, options = build_inputs(pipeline_profile=str(pipeline_json))
    assert options.dataset_gb == pytest.approx(3.5) and "pipeline cv" in options.dataset_source


def test_bad_pipeline_inputs(pipeline_json, tmp_path):
    with pytest.raises(TrainwiseError, match="not in"):
        staged_dataset(pipeline_json, "nope")
    with pytest.raises(TrainwiseError, match="does not exist: write one with `trainwise pipeline profile"):
        staged_dataset(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(TrainwiseError, match="not a pipeline profile"):
        staged_dataset(tmp_path / "bad.json")
    with pytest.raises(TrainwiseError, match="not both"):
        build_inputs(pipeline_profile=str(pipeline_json), dataset_gb=1.0)
    with pytest.raises(TrainwiseError, match="needs --pipeline"):
        build_inputs(pipeline_strategy="online")
