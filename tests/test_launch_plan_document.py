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
from trainwise.plan.models import PlanOptions
from trainwise.plan.planner import plan
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
    with pytest.raises(TrainwiseError, match="may only contain"):
        build_plan_document(result, catalog(), command=COMMAND, model_uri="s3://bucket/$(id)")
    # whatever reaches the document's own validation is one line too, not a pydantic traceback
    with pytest.raises(TrainwiseError, match=r"the plan cannot be saved: `target_batch_size`: .*greater than 0"):
        build_plan_document(result, catalog(), command=COMMAND, engine="hivemind", target_batch_size=0)


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


# ---------------------------------------------------------------- --nodes: the prediction is N machines'


def grouped_result(**constraints):
    from trainwise.plan.distributed import DistributedOptions

    # global batch 256: 2 and 4 nodes split it at 128 and 64 per V100
    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.16, jitter=0.05,
                                batch_size=256)
    return plan([("v100", profile)], catalog(), make_objective("cheapest"), Constraints(clouds=("aws",), **constraints),
                epoch_options=(10,), options=PlanOptions(this_host="elsewhere", distributed=DistributedOptions(
                    node_counts=(2, 4), hivemind=True)))


def with_best(result, offering_id: str, market: str):
    """`result` with the single-machine row of `offering_id` in `market` ranked first."""
    import dataclasses

    plans = result.plans.copy()
    chosen = (plans["offering_id"] == offering_id) & (plans["market"] == market) & (plans["epochs"] == 10)
    assert chosen.sum() == 1 and plans.loc[chosen, "feasible"].all()
    plans.loc[chosen, "rank"] = 0
    return dataclasses.replace(result, plans=plans)


def test_nodes_take_the_planners_n_machine_row_not_the_single_machines():
    result = grouped_result()
    best = result.best
    assert best["offering_id"] == "aws/use2-az2/p3.2xlarge" and best["market"] == "spot"
    one = build_plan_document(result, catalog(), command=COMMAND)
    two = build_plan_document(result, catalog(), command=COMMAND, engine="ddp", nodes=2)
    four = build_plan_document(result, catalog(), command=COMMAND, engine="ddp", nodes=4)
    rows = result.plans.set_index(["offering_id", "market", "epochs"])
    for document, nodes in ((two, 2), (four, 4)):
        row = rows.loc[(f"multi-node/{nodes}x/aws/use2-az2/p3.2xlarge", "spot", 10)]
        assert document.nodes == nodes and document.engine == "ddp"
        assert document.prediction.offering_id == f"multi-node/{nodes}x/aws/use2-az2/p3.2xlarge"
        assert document.prediction.training_s == pytest.approx(row["training_s"])
        assert document.prediction.cost_usd == pytest.approx(row["total_cost"])
        # what SkyPilot launches: N of the machine, priced per machine
        assert document.offering.offering_id == "aws/use2-az2/p3.2xlarge"
        assert document.offering.price_per_hour == pytest.approx(best["price_per_hour"])
    assert one.prediction.training_s == pytest.approx(best["training_s"])
    assert one.prediction.training_s > two.prediction.training_s > four.prediction.training_s
    assert len({one.prediction.cost_usd, two.prediction.cost_usd, four.prediction.cost_usd}) == 3
    assert two.prediction.price_per_hour == pytest.approx(2 * best["price_per_hour"], rel=0.05)


def test_nodes_over_a_zone_the_planner_did_not_group_take_its_regions_group():
    result = grouped_result()
    # the planner groups the cheapest zone of each region (use1-az1 in us-east-1), not use1-az2
    moved = with_best(result, "aws/use1-az2/p3.2xlarge", "spot")
    assert not (result.plans["offering_id"] == "multi-node/2x/aws/use1-az2/p3.2xlarge").any()
    document = build_plan_document(moved, catalog(), command=COMMAND, engine="ddp", nodes=2)
    assert document.prediction.offering_id == "multi-node/2x/aws/use1-az1/p3.2xlarge"
    assert document.offering.offering_id == "aws/use1-az1/p3.2xlarge"  # the machine the prediction is for
    spot_price = catalog().offerings.set_index("offering_id").loc["aws/use1-az1/p3.2xlarge", "spot_price_per_hour"]
    assert document.offering.price_per_hour == pytest.approx(spot_price)
    assert any("aws/use1-az2/p3.2xlarge" in note and "us-east-1" in note for note in document.notes)


def test_nodes_without_a_row_to_predict_them_are_refused_in_one_line():
    result = grouped_result()
    # the planner's Hivemind group of V100s is another machine (the cheapest V100 anywhere, on Azure)
    with pytest.raises(TrainwiseError, match=r"no row for 2 × aws/use2-az2/p3.2xlarge \(spot\) with Hivemind.*"
                                             r"Hivemind rows: hivemind/2x/azure/westus3/Standard_NC6s_v3: re-plan"):
        build_plan_document(result, catalog(), command=COMMAND, engine="hivemind", nodes=2)
    with pytest.raises(TrainwiseError, match=r"no row for 3 × aws/use2-az2/p3.2xlarge \(spot\) with DDP.*rows: none"):
        build_plan_document(result, catalog(), command=COMMAND, engine="ddp", nodes=3)
    # a 4-GPU machine: the planner groups single-accelerator machines only; the error names the rows it has
    four_gpus = with_best(result, "aws/use1-az1/p3.8xlarge", "spot")
    with pytest.raises(TrainwiseError, match=r"its 2-node DDP rows: multi-node/2x/aws/[^ ]*p3.2xlarge, .*re-plan"):
        build_plan_document(four_gpus, catalog(), command=COMMAND, nodes=2)
    with pytest.raises(TrainwiseError, match="--single-machine ranked no groups"):
        build_plan_document(v100_result(), catalog(), command=COMMAND, engine="ddp", nodes=2)
    with pytest.raises(TrainwiseError, match="--engine local runs one process"):
        build_plan_document(result, catalog(), command=COMMAND, engine="local", nodes=2)


@pytest.mark.long
def test_plan_save_nodes_end_to_end(tmp_path, capsys):
    from trainwise.cli import main

    # global batch 48: 2 and 3 nodes split it at 24 and 16 per V100
    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.3, batch_size=48).save(
        tmp_path / "v100.json")
    base = ["plan", "--profile", str(profile), "--catalog", "packaged", "--cloud", "aws", "--epoch-options", "10",
            "--out-dir", str(tmp_path / "out"), "--checkpoint-uri", "s3://bucket/ckpt"]
    saved = {}
    for nodes in (1, 2, 3):  # 3 is not in the default --node-counts 2,4,8: --save --nodes 3 ranks it too
        path = tmp_path / f"n{nodes}.json"
        assert main([*base, "--save", str(path), "--engine", "ddp", "--nodes", str(nodes), "--", "python", "t.py"]) == 0
        saved[nodes] = load_plan(path)
    capsys.readouterr()
    assert [saved[n].nodes for n in (1, 2, 3)] == [1, 2, 3]
    assert saved[2].prediction.offering_id.startswith("multi-node/2x/")
    assert saved[3].prediction.offering_id.startswith("multi-node/3x/")
    times = [saved[n].prediction.training_s for n in (1, 2, 3)]
    costs = [saved[n].prediction.cost_usd for n in (1, 2, 3)]
    assert times[0] > times[1] > times[2] and len(set(costs)) == 3


@pytest.mark.parametrize("args, fragment", [
    (["--engine", "local", "--nodes", "2"], "--engine local runs one process on one machine"),
    (["--single-machine", "--nodes", "2"], "drop --single-machine"),
    (["--engine", "mpi"], "--engine mpi: use one of local, ddp, hivemind"),
    (["--nodes", "0"], "--nodes must be at least 1"),
])
def test_plan_save_choices_are_checked_before_planning(tmp_path, capsys, monkeypatch, args, fragment):
    from trainwise.cli import main
    from trainwise.plan import command as plan_command

    def no_planning(**_):
        raise AssertionError("planned before --engine/--nodes were checked")

    monkeypatch.setattr(plan_command, "run_plan_command", no_planning)
    code = main(["plan", "--catalog", "packaged", "--out-dir", str(tmp_path / "out"), "--save", str(tmp_path / "x.json"),
                 *args, "--", "python", "train.py"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and fragment in errors[0] and "Traceback" not in err, err


@pytest.mark.parametrize("args, fragment", [
    (["--nodes", "4"], "--nodes goes into a saved plan: use `trainwise plan save plan.json`, or drop it"),
    (["--checkpoint-uri", "s3://my-ckpt/run1", "--engine", "ddp"], "--engine, --checkpoint-uri go into a saved plan"),
    (["--", "python", "train.py"], "a training command after -- goes into a saved plan"),
])
def test_save_only_options_without_save_are_refused_before_planning(tmp_path, capsys, monkeypatch, args, fragment):
    # they used to be dropped without a word: `plan --nodes 4` ranked and reported as if never asked
    from trainwise.cli import main
    from trainwise.plan import command as plan_command

    def no_planning(**_):
        raise AssertionError("planned although the options asked for a saved plan")

    monkeypatch.setattr(plan_command, "run_plan_command", no_planning)
    code = main(["plan", "--catalog", "packaged", "--out-dir", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and fragment in errors[0] and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_plan_saved_with_a_command_predicts_the_commands_own_epochs(tmp_path, capsys):
    """`plan --save -- python train.py --epochs 1` predicted the plan's largest epoch option (20), a run
    20x longer than the one the saved command launches."""
    from trainwise.cli import main

    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02).save(
        tmp_path / "v100.json")
    base = ["plan", "--profile", str(profile), "--catalog", "packaged", "--cloud", "aws", "--single-machine",
            "--out-dir", str(tmp_path / "out"), "--checkpoint-uri", "s3://bucket/ckpt"]
    one, twenty = tmp_path / "one.json", tmp_path / "twenty.json"
    assert main([*base, "--save", str(one), "--", "python", "t.py", "--epochs", "1"]) == 0
    assert "headline: 1 epoch, the training command's --epochs" in capsys.readouterr().out
    assert main([*base, "--save", str(twenty), "--", "python", "t.py", "--num-epochs=20"]) == 0
    capsys.readouterr()
    saved_one, saved_twenty = load_plan(one), load_plan(twenty)
    assert saved_one.prediction.epochs == 1 and saved_twenty.prediction.epochs == 20
    assert saved_twenty.prediction.training_s > 10 * saved_one.prediction.training_s
    # an explicit --epochs that contradicts the command is refused before anything is written
    assert main([*base, "--save", str(tmp_path / "x.json"), "--epochs", "5", "--", "python", "t.py", "--epochs", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--epochs 5 but the training command trains --epochs 1" in err
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("change, fragment", [
    (lambda d: d["offering"].update(instance_type="p3.2xlarge;$(touch x)"), "instance type 'p3.2xlarge;$(touch x)' has characters"),
    (lambda d: d["offering"].update(region="us-east-1\ninjected: true"), "region 'us-east-1\\ninjected: true' has characters"),
    (lambda d: d["prediction"].update(low_s=10.0, high_s=1.0), "an interval's low end must not exceed its high end"),
])
def test_a_hostile_or_inconsistent_plan_document_is_refused(tmp_path, change, fragment):
    document = build_plan_document(v100_result(), catalog(), command=COMMAND)
    data = json.loads(document.model_dump_json())
    change(data)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TrainwiseError) as excinfo:
        load_plan(path)
    assert fragment in str(excinfo.value)


def test_a_plan_document_with_non_utf8_command_bytes_round_trips(tmp_path):
    import os

    command = ["python", "train.py", "--data", os.fsdecode(b"/d_\xff")]
    document = build_plan_document(v100_result(), catalog(), command=command)
    document.save(tmp_path / "plan.json")  # PydanticSerializationError before
    assert os.fsencode(load_plan(tmp_path / "plan.json").command[-1]) == b"/d_\xff"


@pytest.mark.long
def test_plan_save_refuses_a_spot_plan_launch_could_not_run(tmp_path, capsys):
    """`launch` refuses a spot plan with no checkpoint bucket (a preempted run could not resume):
    `plan --save` refuses it when saving, naming the fix, and writes nothing."""
    from trainwise.cli import main

    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02).save(
        tmp_path / "v100.json")
    base = ["plan", "--profile", str(profile), "--catalog", "packaged", "--cloud", "aws", "--epoch-options", "10",
            "--single-machine", "--out-dir", str(tmp_path / "out")]
    path = tmp_path / "spot.json"
    assert main([*base, "--save", str(path), "--", "python", "t.py"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "spot machine" in err and "--checkpoint-uri s3://BUCKET/PATH" in err and "--no-spot" in err
    assert not path.exists()
    assert main([*base, "--save", str(path), "--checkpoint-uri", "s3://bucket/ckpt", "--", "python", "t.py"]) == 0
    assert load_plan(path).offering.spot
    assert main([*base, "--no-spot", "--save", str(tmp_path / "od.json"), "--", "python", "t.py"]) == 0
