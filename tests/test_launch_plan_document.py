"""`trainwise plan --save`: the Plan document from real `plan()` results (single machines and the
planner's groups of identical machines), its validation and its versioned JSON."""

from __future__ import annotations

import json

import pytest

from launch_helpers import catalog
from trainwise.errors import TrainwiseError
from trainwise.launch.plan_document import build_plan_document, load_plan
from trainwise.launch.skypilot_task import task_config, validate_packaged
from trainwise.plan.objectives import Constraints, make_objective
from trainwise.plan.planner import PlanOptions, plan
from trainwise.plan.synthetic import synthetic_profile

COMMAND = ["python", "train.py", "--epochs", "10"]


def v100_result(**options):
    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02, jitter=0.05)
    return plan([("v100", profile)], catalog(), make_objective("cheapest"), Constraints(clouds=("aws",)),
                epoch_options=(10,), options=PlanOptions(this_host="elsewhere", **options))


def test_single_machine_plan_document_round_trips(tmp_path):
    result = v100_result()
    best = result.best
    document = build_plan_document(result, catalog(), command=COMMAND, checkpoint_uri="s3://tw-ck/run",
                                   model_uri="s3://tw-models/run")
    assert document.offering.offering_id == best["offering_id"] and document.nodes == 1
    assert document.offering.spot == (best["market"] == "spot")
    assert document.prediction.training_s == pytest.approx(best["training_s"])
    assert document.prediction.cost_usd == pytest.approx(best["total_cost"])
    assert document.prediction.time_source == str(best["time_provenance"]) and document.prediction.price_source
    assert document.alternatives and all(a.training_s > 0 for a in document.alternatives)
    assert document.name == "synthetic"  # from the profile's workload name
    document.save(tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == document
    assert json.loads((tmp_path / "plan.json").read_text())["schema_version"] == 1
    validate_packaged(task_config(document), catalog())


def test_group_of_identical_machines_becomes_nodes_and_engine():
    from trainwise.plan.distributed import DistributedOptions

    try:
        result = v100_result(distributed=DistributedOptions(node_counts=(4,), hivemind=True))
    except TypeError:
        pytest.skip("this planner has no distributed options")
    rows = result.plans[result.plans["feasible"] & (result.plans["epochs"] == result.primary_epochs)]
    grouped = rows[rows["offering_id"].astype(str).str.match(r"^(multi-node|hivemind)/4x/")]
    assert len(grouped), "the planner ranked no group of 4 identical machines"
    from trainwise.launch.plan_document import resolve_group

    for _, row in grouped.head(5).iterrows():
        machine, nodes, engine = resolve_group(row.to_dict(), catalog())
        assert nodes == 4 and engine == ("ddp" if str(row["offering_id"]).startswith("multi-node") else "hivemind")
        assert str(row["offering_id"]).endswith(machine["offering_id"])


def test_bad_inputs_are_refused():
    result = v100_result()
    with pytest.raises(TrainwiseError, match="--engine"):
        build_plan_document(result, catalog(), command=COMMAND, engine="mpi")
    with pytest.raises(TrainwiseError, match="training command"):
        build_plan_document(result, catalog(), command=[])
    with pytest.raises(TrainwiseError, match="lower-case"):
        build_plan_document(result, catalog(), command=COMMAND, name="Bad;Name")
    with pytest.raises(ValueError, match="may only contain"):
        build_plan_document(result, catalog(), command=COMMAND, model_uri="s3://bucket/$(id)")


def test_load_plan_errors_are_one_line(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(TrainwiseError, match="not valid JSON"):
        load_plan(tmp_path / "x.json")
    (tmp_path / "v.json").write_text('{"schema_version": 99}')
    with pytest.raises(TrainwiseError, match="schema version 99"):
        load_plan(tmp_path / "v.json")
    from trainwise.plan.synthetic import synthetic_profile

    synthetic_profile().save(tmp_path / "profile.json")  # a profile passed where a plan belongs
    with pytest.raises(TrainwiseError, match="is a profile, not a plan: make a plan from it with `trainwise plan --profile"):
        load_plan(tmp_path / "profile.json")


def test_hivemind_plan_notes_say_how_it_recovers():
    result = v100_result()
    assert result.best["market"] == "spot"
    document = build_plan_document(result, catalog(), command=COMMAND, engine="hivemind",
                                   checkpoint_uri="s3://tw-ck/hm")
    notes = " ".join(document.notes)
    assert "keeps no checkpoints" in notes and "receives the run records" in notes
    assert "restarts from the beginning" in notes and "spot plan without --checkpoint-uri" not in notes
    plain = build_plan_document(result, catalog(), command=COMMAND)
    assert plain.notes == ["spot plan without --checkpoint-uri: a preempted run restarts from the beginning"]


@pytest.mark.parametrize("option, value, fragment", [
    ("--checkpoint-uri", "gs://ck/hm", "--checkpoint-uri 'gs://ck/hm': bucket name 'ck' is not valid: use 3-222"),
    ("--model-uri", "s3://tw-models/$(id)", "--model-uri 's3://tw-models/$(id)': the path after the bucket may only"),
    ("--dataset-uri", "s3://Bad_Bucket/data", "--dataset-uri 's3://Bad_Bucket/data': bucket name 'Bad_Bucket'"),
    ("--dataset-uri", " ", "--dataset-uri is empty: give a local path or a bucket URI"),
    ("--requirements", "req\nuirements.txt", "--requirements 'req\\nuirements.txt' contains a control character"),
])
def test_plan_save_checks_uris_before_planning(tmp_path, capsys, monkeypatch, option, value, fragment):
    from trainwise.cli import main
    from trainwise.plan import command as plan_command

    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02).save(
        tmp_path / "v100.json")

    def no_planning(**_):
        raise AssertionError("planned before the URIs were checked")

    monkeypatch.setattr(plan_command, "run_plan_command", no_planning)
    code = main(["plan", "--profile", str(profile), "--catalog", "packaged", "--out-dir", str(tmp_path / "out"),
                 "--save", str(tmp_path / "x.json"), option, value, "--", "python", "train.py"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and "Traceback" not in err and len(errors) == 1 and fragment in errors[0], err
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "out").exists()
