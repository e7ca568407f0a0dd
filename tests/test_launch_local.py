"""The local backend: staging through fsspec with checksums, the executor command, and the
acceptance path — plan the default workload → launch here → model and run record persisted →
`trainwise plan --history` shows the run."""

from __future__ import annotations

import hashlib
import json
import sys

import pytest

from launch_helpers import plan_for
from trainwise.cli import main
from trainwise.errors import TrainwiseError
from trainwise.launch import staging
from trainwise.launch.local_backend import executor_argv, local_command


def test_copy_tree_hashes_and_verifies_every_file(tmp_path):
    source = tmp_path / "src"
    (source / "nested").mkdir(parents=True)
    (source / "a.bin").write_bytes(bytes(range(256)) * 4000)
    (source / "nested" / "b.txt").write_text("digits\n")
    transfer = staging.copy_tree(str(source), str(tmp_path / "dst"))
    assert {f["path"] for f in transfer.files} == {"a.bin", "nested/b.txt"}
    for entry in transfer.files:
        copied = (tmp_path / "dst" / entry["path"]).read_bytes()
        assert hashlib.sha256(copied).hexdigest() == entry["sha256"] == hashlib.sha256(
            (source / entry["path"]).read_bytes()).hexdigest()
    assert transfer.total_bytes == 256 * 4000 + 7


def test_copy_tree_through_another_fsspec_filesystem(tmp_path):
    (tmp_path / "model.bin").write_bytes(b"\x00weights" * 100)
    transfer = staging.copy_tree(str(tmp_path / "model.bin"), "memory://tw-test/models")
    fs, path = staging.filesystem("memory://tw-test/models/model.bin")
    assert fs.cat_file(path) == b"\x00weights" * 100
    assert transfer.files[0]["path"] == "model.bin"


def test_staging_errors_name_the_fix(tmp_path):
    with pytest.raises(TrainwiseError, match="does not exist"):
        staging.copy_tree(str(tmp_path / "missing"), str(tmp_path / "dst"))
    try:
        import s3fs  # noqa: F401
    except ImportError:
        with pytest.raises(TrainwiseError, match="pip install s3fs"):
            staging.copy_tree("s3://tw-bucket/data", str(tmp_path / "dst"))


def test_executor_uses_trainwise_run_or_falls_back_to_profile_full(tmp_path):
    plan = plan_for("aws/use1-az1/p3.2xlarge", checkpoint_uri=str(tmp_path / "ck"))
    command = local_command(plan.command)
    assert command[0] == sys.executable
    argv, how = executor_argv(plan, command=command, checkpoint_dir=str(tmp_path / "ck"), run_dir=tmp_path, use_run=True)
    assert argv[:7] == [sys.executable, "-c", "from trainwise.cli import run; run()", "run", "--engine", "local",
                        "--checkpoint-dir"]
    assert argv[argv.index("--") + 1:] == command and "--output" in argv
    assert how == "trainwise run --engine local"
    argv, how = executor_argv(plan, command=command, checkpoint_dir=None, run_dir=tmp_path, use_run=False)
    assert argv[3:5] == ["profile", "--full"] and argv[argv.index("--") + 1:] == command
    ddp = plan_for("aws/use1-az1/p3.8xlarge", engine="ddp", per_node=4)
    argv, _ = executor_argv(ddp, command=command, checkpoint_dir=None, run_dir=tmp_path, use_run=True)
    assert argv[3:8] == ["run", "--engine", "ddp", "--nproc", "4"]
    two_nodes = plan_for("aws/use1-az1/p3.8xlarge", engine="ddp", per_node=4, nodes=2)
    argv, _ = executor_argv(two_nodes, command=command, checkpoint_dir=None, run_dir=tmp_path, use_run=True)
    assert argv[3:8] == ["run", "--engine", "ddp", "--nproc", "8"] and "--nnodes" not in argv
    with pytest.raises(TrainwiseError, match="needs `trainwise run`"):
        executor_argv(ddp, command=command, checkpoint_dir=None, run_dir=tmp_path, use_run=False)


def test_local_hivemind_run_gets_no_checkpoint_dir_and_trainwise_run_accepts_it(tmp_path, monkeypatch):
    from test_launch_task import parsed_by_trainwise_run

    plan = plan_for("gcp/us-central1-a/n1-standard-8+1xT4", spot=True, nodes=3, engine="hivemind",
                    target_batch_size=768, checkpoint_uri=str(tmp_path / "ck"))
    # run_local always hands a checkpoint folder over; Hivemind peers recover from each other instead
    argv, how = executor_argv(plan, command=["python", "train.py"], checkpoint_dir=str(tmp_path / "ck"),
                              run_dir=tmp_path, use_run=True)
    assert how == "trainwise run --engine hivemind" and "--checkpoint-dir" not in argv
    assert argv[3:9] == ["run", "--engine", "hivemind", "--peers", "3", "--target-batch-size"]
    monkeypatch.setenv("TRAINWISE_MAX_PROCESSES", "8")  # 3 local peers on a 2-core CI machine: allowed on purpose
    options = parsed_by_trainwise_run(argv[3:], monkeypatch)
    assert options.peers == 3 and options.checkpoint is None


def test_history_without_runs_is_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TRAINWISE_HISTORY_DIR", str(tmp_path / "none"))
    assert main(["plan", "--history"]) == 2
    assert "no past runs" in capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["--timeout", "600"], "--timeout applies to --backend local only: add --backend local"),
    (["--work-dir", "runs", "--timeout", "5"], "--timeout, --work-dir apply to --backend local only"),
    (["--backend", "local", "-o", "task.yaml"], "--output describes the SkyPilot task, which --backend local does not write"),
    (["--backend", "local", "--code-dir", "src", "--validate", "packaged"], "--code-dir, --validate describe the SkyPilot task"),
])
def test_an_option_of_the_other_backend_is_refused_before_the_plan_is_read(tmp_path, capsys, args, fragment):
    # they used to be dropped without a word (`--timeout 600` on a cloud launch limited nothing)
    assert main(["launch", str(tmp_path / "missing.json"), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and fragment in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_launch_bad_plan_is_one_line(tmp_path, capsys):
    (tmp_path / "bad.json").write_text('{"schema_version": 1, "name": "Bad Name"}')
    assert main(["launch", str(tmp_path / "bad.json"), "--backend", "local"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: plan") and "Traceback" not in err
    assert main(["launch", str(tmp_path / "missing.json")]) == 2
    assert "trainwise plan --save" in capsys.readouterr().err


@pytest.mark.long
@pytest.mark.slow
def test_acceptance_plan_launch_local_persist_history(tmp_path, monkeypatch, capsys):
    """plan the default workload (mnist_cnn, small) → launch --backend local → model + record → --history."""
    from safetensors.torch import load_file

    monkeypatch.setenv("TRAINWISE_HISTORY_DIR", str(tmp_path / "history"))
    monkeypatch.chdir(tmp_path)
    dataset = tmp_path / "dataset"
    dataset.mkdir()
    (dataset / "labels.csv").write_text("index,label\n" + "".join(f"{i},{i % 10}\n" for i in range(200)))
    job = ["python", "-m", "trainwise.workloads.mnist_cnn", "--epochs", "1", "--train-samples", "512",
           "--val-samples", "128", "--batch-size", "64"]
    assert main(["profile", "-k", "5", "--max-seconds", "3", "--val-batches", "1", "--epoch2-iterations", "1",
                 "--workload", "mnist_cnn", "-o", "profile.json", "--", *job]) == 0
    assert main(["plan", "--profile", "profile.json", "--epoch-options", "1", "--objective", "cheapest",
                 "--out-dir", "out", "--save", "plan.json", "--dataset-uri", str(dataset),
                 "--checkpoint-uri", str(tmp_path / "checkpoints"), "--model-uri", str(tmp_path / "models"), "--", *job]) == 0
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["schema_version"] == 1 and plan["command"] == job and plan["here"] is not None
    assert plan["prediction"]["time_source"] and plan["prediction"]["price_source"]
    capsys.readouterr()
    assert main(["launch", "plan.json", "--backend", "local", "--work-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    (run_dir,) = (tmp_path / "models").iterdir()
    weights = load_file(run_dir / "model" / "mnist_cnn.safetensors")
    assert any(key.endswith("weight") for key in weights)
    record = json.loads((run_dir / "run-record.json").read_text())
    assert record["run_id"] == run_dir.name and record["exit_code"] == 0
    assert record["measured_training_s"] > 0 and record["predicted"]["training_s"] == plan["here"]["training_s"]
    assert record["dataset"]["files"][0]["sha256"] == hashlib.sha256((dataset / "labels.csv").read_bytes()).hexdigest()
    assert record["model_files"][0]["path"] == "mnist_cnn.safetensors"
    assert record["executed_with"] in ("trainwise run --engine local", "trainwise profile --full (trainwise run not available)")
    assert (tmp_path / "history" / f"{record['run_id']}.json").is_file()
    assert "measured" in out and "predicted" in out
    assert main(["plan", "--history"]) == 0
    history = capsys.readouterr().out
    assert record["run_id"][:9] in history and "this machine" in history


def test_without_skypilot_launch_says_what_is_missing_and_dry_run_uses_the_packaged_schema(tmp_path, monkeypatch, capsys):
    from launch_helpers import four_plans

    monkeypatch.setitem(sys.modules, "sky", None)  # as if `skypilot` were not installed
    four_plans()["spot"].save(tmp_path / "plan.json")
    assert main(["launch", str(tmp_path / "plan.json"), "-o", str(tmp_path / "task.yaml")]) == 2
    err = capsys.readouterr().err
    assert "SkyPilot is not installed: pip install 'skypilot[aws]==0.14.1'" in " ".join(err.split())
    assert main(["launch", str(tmp_path / "plan.json"), "--dry-run", "-o", str(tmp_path / "task.yaml")]) == 0
    assert "packaged schema and catalog (SkyPilot is not installed)" in " ".join(capsys.readouterr().out.split())
    assert (tmp_path / "task.yaml").is_file()


def test_a_command_running_a_local_script_gets_this_directory_as_workdir(tmp_path, monkeypatch, capsys):
    import yaml
    from launch_helpers import four_plans

    from trainwise.launch.skypilot_task import local_files_in_command

    monkeypatch.setitem(sys.modules, "sky", None)
    four_plans()["spot"].save(tmp_path / "plan.json")  # its command: python train.py --epochs 3 --lr 0.1
    monkeypatch.chdir(tmp_path)
    # no train.py here: nothing to sync, no workdir
    assert main(["launch", "plan.json", "--dry-run", "-o", "task.yaml"]) == 0
    assert "workdir" not in yaml.safe_load((tmp_path / "task.yaml").read_text())
    capsys.readouterr()
    (tmp_path / "train.py").write_text("print('train')\n")
    assert local_files_in_command(["python", "train.py", "--config=a.yaml", "-m", "/abs/x.py"], tmp_path) == ["train.py"]
    assert main(["launch", "plan.json", "--dry-run", "-o", "task.yaml"]) == 0
    assert "workdir: . (the command names train.py" in " ".join(capsys.readouterr().out.split())
    assert yaml.safe_load((tmp_path / "task.yaml").read_text())["workdir"] == "."
    # an explicit --code-dir wins (a folder that exists: SkyPilot syncs it)
    (tmp_path / "src").mkdir()
    assert main(["launch", "plan.json", "--dry-run", "-o", "task.yaml", "--code-dir", "src"]) == 0
    assert yaml.safe_load((tmp_path / "task.yaml").read_text())["workdir"] == "src"
    # the old --workdir still works, hidden and deprecated, with a warning
    assert main(["launch", "plan.json", "--dry-run", "-o", "task.yaml", "--workdir", "src"]) == 0
    assert "--workdir is deprecated: use --code-dir" in " ".join(capsys.readouterr().err.split())
    assert main(["launch", "--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--code-dir" in help_text and "--workdir" not in help_text and "--work-dir" in help_text


def test_a_cloud_launch_that_would_keep_nothing_is_refused_before_anything_runs(tmp_path, monkeypatch, capsys):
    from launch_helpers import plan_for

    from trainwise.launch import sky_backend

    def not_reached(plan):
        raise AssertionError("the plan is refused before SkyPilot is asked anything")

    monkeypatch.setattr(sky_backend, "missing_for_launch", not_reached)
    plan_for("aws/use1-az1/p3.2xlarge", name="no-buckets").save(tmp_path / "plan.json")
    assert main(["launch", str(tmp_path / "plan.json"), "-o", str(tmp_path / "task.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.count("error:") == 1 and "Traceback" not in err
    assert "trained model and the run records would be lost" in err and "--model-uri" in err and "--keep-cluster" in err
    assert not (tmp_path / "task.yaml").exists()
    # a spot plan cannot keep its cluster: only a bucket helps
    plan_for("aws/use1-az1/p3.2xlarge", spot=True, name="spot-no-buckets").save(tmp_path / "spot.json")
    assert main(["launch", str(tmp_path / "spot.json"), "-o", str(tmp_path / "task.yaml")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--model-uri" in err and "--keep-cluster" not in err
    assert main(["launch", str(tmp_path / "spot.json"), "--keep-cluster", "-o", str(tmp_path / "task.yaml")]) == 2
    assert "a managed spot job always ends its cluster" in " ".join(capsys.readouterr().err.split())
    # --dry-run writes the task for the user to launch; nothing is torn down that they did not ask for
    assert main(["launch", str(tmp_path / "plan.json"), "--dry-run", "--validate", "packaged",
                 "-o", str(tmp_path / "task.yaml")]) == 0
    assert main(["launch", str(tmp_path / "plan.json"), "--dry-run", "--keep-cluster", "-o", str(tmp_path / "t2.yaml")]) == 2
    assert not (tmp_path / "t2.yaml").exists()


def test_keep_cluster_launches_a_plan_without_buckets_and_leaves_its_cluster_up(tmp_path, monkeypatch, capsys):
    from launch_helpers import plan_for

    from trainwise.launch import sky_backend

    launched = {}
    monkeypatch.setattr(sky_backend, "missing_for_launch", lambda plan: None)
    monkeypatch.setattr(sky_backend, "launch_with_skypilot",
                        lambda plan, config, keep_cluster=False: launched.update(keep=keep_cluster) or "launched")
    plan_for("aws/use1-az1/p3.2xlarge", name="no-buckets").save(tmp_path / "plan.json")
    assert main(["launch", str(tmp_path / "plan.json"), "--keep-cluster", "--validate", "packaged",
                 "-o", str(tmp_path / "task.yaml")]) == 0
    assert launched == {"keep": True}
