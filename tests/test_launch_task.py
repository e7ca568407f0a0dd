"""Plan → SkyPilot task: resources, mounts, setup/run, validation by the real `skypilot` package
(offline: its catalog written from the packaged snapshot under a temporary HOME), the packaged
schema, the time estimator, and what the `run` script really executes under bash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from launch_helpers import ARGV_RECORDER, COMMAND, catalog, four_plans, head_identity, plan_for
from trainwise.errors import TrainwiseError
from trainwise.launch.package import WHEEL_MOUNT_DIR
from trainwise.launch.skypilot_task import dump_yaml, task_config, time_estimator, validate_packaged


def _installed_wheel(mounts: dict) -> str:
    """Pops and checks the wheel mount: this checkout is installed from source, so launch uploads a wheel built from it."""
    (path,) = [p for p in mounts if p.startswith(WHEEL_MOUNT_DIR + "/")]
    local = Path(mounts.pop(path))
    assert local.is_file() and local.name == Path(path).name and local.name.startswith("trainwise-")
    return path


def test_single_node_on_demand_task():
    config = task_config(four_plans()["on-demand"])
    assert config["resources"] == {"cloud": "aws", "region": "us-east-1", "instance_type": "p3.2xlarge",
                                   "accelerators": {"V100": 1}, "use_spot": False, "disk_size": 100}
    assert config["num_nodes"] == 1
    mounts = dict(config["file_mounts"])
    wheel = _installed_wheel(mounts)
    assert mounts == {"/trainwise/model": {"source": "s3://tw-models/mnist", "mode": "MOUNT"}}
    assert f"python -m pip install {wheel}" in config["setup"]  # the wheel of this trainwise, never an unpublished version
    # no checkpoint bucket: the run records go to the model bucket, which outlives the cluster
    assert config["run"].splitlines()[-1] == ("trainwise run --engine local --output /trainwise/model/run-node\"${SKYPILOT_NODE_RANK}\".json "
                                              "-- python train.py --epochs 3 --lr 0.1")


def test_a_plan_without_buckets_writes_its_run_records_on_the_node():
    config = task_config(plan_for("aws/use1-az1/p3.2xlarge", name="no-buckets"))
    mounts = dict(config["file_mounts"])
    _installed_wheel(mounts)
    assert mounts == {}
    assert "--output /tmp/run-node" in config["run"].splitlines()[-1]


def test_spot_task_is_a_recoverable_managed_job_with_buckets():
    config = task_config(four_plans()["spot"])
    assert config["resources"]["use_spot"] is True
    assert config["resources"]["job_recovery"] == {"strategy": "FAILOVER", "max_restarts_on_errors": 3}
    assert config["file_mounts"]["/trainwise/data"] == {"source": "s3://tw-datasets/mnist", "mode": "COPY"}
    assert config["file_mounts"]["/trainwise/checkpoints"] == {"source": "s3://tw-checkpoints/mnist", "mode": "MOUNT"}
    assert config["envs"]["TRAINWISE_CHECKPOINT_DIR"] == "/trainwise/checkpoints"
    assert "--checkpoint-dir /trainwise/checkpoints" in config["run"]


def test_spot_without_checkpoint_bucket_is_refused():
    with pytest.raises(TrainwiseError, match="checkpoint bucket"):
        task_config(plan_for("aws/use1-az1/p3.2xlarge", spot=True))
    with pytest.raises(TrainwiseError, match="local path"):
        task_config(plan_for("aws/use1-az1/p3.2xlarge", spot=True, checkpoint_uri="/home/me/ckpt"))


def test_gcp_task_names_host_zone_and_accelerator():
    config = task_config(four_plans()["hivemind"], head_identity=head_identity())
    assert config["resources"]["cloud"] == "gcp" and config["resources"]["zone"] == "us-central1-a"
    assert config["resources"]["instance_type"] == "n1-standard-8"
    assert config["resources"]["accelerators"] == {"T4": 1}
    assert config["num_nodes"] == 4


def test_local_offering_is_not_a_cloud_task():
    plan = plan_for("aws/use1-az1/p3.2xlarge")
    local = plan.model_copy(update={"offering": plan.offering.model_copy(update={"cloud": "local", "kind": "on_premise"})})
    with pytest.raises(TrainwiseError, match="--backend local"):
        task_config(local)


def test_yaml_round_trips_and_packaged_schema_accepts_all_four():
    for plan in four_plans().values():
        config = task_config(plan, head_identity=head_identity())
        text = dump_yaml(config)
        assert yaml.safe_load(text) == config
        validate_packaged(config, catalog())


@pytest.mark.parametrize("field,value,fragment", [
    ("instance_type", "p9.bogus", "instance type 'p9.bogus'"),
    ("region", "mars-1", "region 'mars-1'"),
    ("accelerators", {"A100-80GB": 1}, "accelerator 'A100-80GB' is not offered by aws p3.2xlarge"),
    ("accelerators", {"V100": 2}, "V100:2 is not offered"),
    ("disk_size", 1, "disk_size"),
    ("use_spots", True, "use_spots"),
])
def test_packaged_schema_rejects_bad_resources(field, value, fragment):
    config = task_config(four_plans()["on-demand"])
    config["resources"][field] = value
    with pytest.raises(TrainwiseError, match=fragment.replace("(", r"\(")):
        validate_packaged(config, catalog())


def test_time_estimator_gives_trainwise_times_per_accelerator():
    from trainwise.launch.plan_document import Alternative

    plan = plan_for("aws/use1-az1/p3.2xlarge", training_s=1234.4)
    plan = plan.model_copy(update={"alternatives": [Alternative(accelerator="T4", sky_accelerator="T4", accelerator_count=1,
                                                                instance_types=["g4dn.xlarge"], training_s=5000.0,
                                                                time_source="test input")]})
    estimate = time_estimator(plan)

    class Resources:  # the two attributes SkyPilot's optimizer's Resources exposes to an estimator
        def __init__(self, accelerators, instance_type=None):
            self.accelerators, self.instance_type = accelerators, instance_type

    assert estimate(Resources({"V100": 1})) == 1234
    assert estimate(Resources({"t4": 1})) == 5000
    assert estimate(Resources(None, "g4dn.xlarge")) == 5000
    with pytest.raises(ValueError, match="no prediction"):
        estimate(Resources({"H100": 8}))


# ---------------------------------------------------------------- the real skypilot package

SKY_CHECK = textwrap.dedent("""
    import json, sys
    from trainwise.launch.sky_catalog import write_skypilot_catalog
    import os
    write_skypilot_catalog(os.environ["HOME"])
    import sky
    from trainwise.launch.plan_document import load_plan
    from trainwise.launch.skypilot_task import time_estimator
    out = {}
    for name in sys.argv[1:]:
        task = sky.Task.from_yaml(name + ".yaml")
        try:
            task.validate()
        except Exception as exc:
            out[name] = {"error": type(exc).__name__ + ": " + str(exc)[:200]}
            continue
        (r,) = task.resources
        task.set_time_estimator(time_estimator(load_plan(name + ".plan.json")))
        out[name] = {"cloud": str(r.cloud), "region": r.region, "zone": r.zone, "instance_type": r.instance_type,
                     "accelerators": r.accelerators, "use_spot": r.use_spot, "num_nodes": task.num_nodes,
                     "recovery": r.job_recovery, "estimate_s": task.estimate_runtime(r),
                     "storage": sorted(task.storage_mounts), "run": task.run, "file_mounts": task.file_mounts}
    print(json.dumps(out, default=str))
""")


@pytest.mark.long
def test_real_skypilot_loads_all_four_offline(tmp_path):
    pytest.importorskip("sky")
    home = tmp_path / "home"
    home.mkdir()
    names = []
    for name, plan in four_plans().items():
        (tmp_path / f"{name}.yaml").write_text(dump_yaml(task_config(plan, head_identity=head_identity())))
        plan.save(tmp_path / f"{name}.plan.json")
        names.append(name)
    broken = task_config(four_plans()["on-demand"])
    broken["resources"]["instance_type"] = "p9.bogus"
    (tmp_path / "broken.yaml").write_text(dump_yaml(broken))
    four_plans()["on-demand"].save(tmp_path / "broken.plan.json")
    # what the packaged schema refuses about local sources, SkyPilot refuses too
    (tmp_path / "noworkdir.yaml").write_text(dump_yaml(task_config(four_plans()["on-demand"], workdir="/nonexistent")))
    (tmp_path / "nodata.yaml").write_text(dump_yaml(task_config(plan_for("aws/use1-az1/p3.2xlarge",
                                                                         dataset_uri=str(tmp_path / "missing")))))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "SKYPILOT_"))}
    env.update(HOME=str(home), NO_PROXY="*")
    done = subprocess.run([sys.executable, "-c", SKY_CHECK, *names, "broken", "noworkdir", "nodata"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["on-demand"]["cloud"] == "AWS" and out["on-demand"]["instance_type"] == "p3.2xlarge"
    assert out["on-demand"]["accelerators"] == {"V100": 1} and out["on-demand"]["use_spot"] is False
    assert out["on-demand"]["estimate_s"] == 3600
    assert out["spot"]["use_spot"] is True and out["spot"]["recovery"]["strategy"] == "FAILOVER"
    assert out["spot"]["storage"] == ["/trainwise/checkpoints", "/trainwise/data", "/trainwise/model"]
    assert out["ddp"]["num_nodes"] == 2 and out["ddp"]["accelerators"] == {"V100": 4}
    assert "--nnodes \"${SKYPILOT_NUM_NODES}\" --node-rank \"${SKYPILOT_NODE_RANK}\"" in out["ddp"]["run"]
    assert out["hivemind"]["cloud"] == "GCP" and out["hivemind"]["zone"] == "us-central1-a"
    assert out["hivemind"]["num_nodes"] == 4 and out["hivemind"]["use_spot"] is True
    assert f"/tcp/31337/p2p/{head_identity().peer_id}" in out["hivemind"]["run"]
    assert out["hivemind"]["file_mounts"]["/trainwise/hivemind/head.key"] == head_identity().local_path
    assert "Invalid instance type 'p9.bogus'" in out["broken"]["error"]
    assert "Workdir must be a valid directory" in out["noworkdir"]["error"]
    assert "does not exist locally" in out["nodata"]["error"]


def test_packaged_schema_refuses_local_sources_skypilot_could_not_upload(tmp_path):
    plan = four_plans()["on-demand"]
    (tmp_path / "code").mkdir()
    (tmp_path / "train.py").write_text("print('train')\n")
    validate_packaged(task_config(plan, workdir=str(tmp_path / "code")), catalog())
    with pytest.raises(TrainwiseError, match="--code-dir .*/nowhere does not exist: give the folder"):
        validate_packaged(task_config(plan, workdir=str(tmp_path / "nowhere")), catalog())
    with pytest.raises(TrainwiseError, match="train.py is not a folder"):
        validate_packaged(task_config(plan, workdir=str(tmp_path / "train.py")), catalog())
    with_data = plan_for("aws/use1-az1/p3.2xlarge", dataset_uri=str(tmp_path / "code"))
    validate_packaged(task_config(with_data), catalog())  # a local dataset folder that exists is uploaded
    missing = plan_for("aws/use1-az1/p3.2xlarge", dataset_uri=str(tmp_path / "data"),
                       requirements=str(tmp_path / "requirements.txt"))
    with pytest.raises(TrainwiseError, match=r"dataset URI \(--dataset-uri\): .*/data does not exist here"):
        validate_packaged(task_config(missing), catalog())
    (tmp_path / "data").mkdir()
    with pytest.raises(TrainwiseError, match=r"requirements file \(--requirements\): .*requirements.txt does not exist"):
        validate_packaged(task_config(missing), catalog())


def test_launch_refuses_a_missing_workdir_in_one_line(tmp_path, capsys):
    from trainwise.cli import main

    four_plans()["on-demand"].save(tmp_path / "plan.json")
    code = main(["launch", str(tmp_path / "plan.json"), "--dry-run", "--validate", "packaged", "--code-dir",
                 str(tmp_path / "nonexistent"), "-o", str(tmp_path / "t.yaml")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --code-dir") and "does not exist" in err and "Traceback" not in err
    assert not (tmp_path / "t.yaml").exists()


# ---------------------------------------------------------------- what bash really runs


def run_script(script: str, tmp_path: Path, **env_vars: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    recorder = bin_dir / "trainwise"
    recorder.write_text(ARGV_RECORDER)
    recorder.chmod(0o755)
    calls = Path(f"{recorder}.calls")
    calls.unlink(missing_ok=True)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), **env_vars}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in calls.read_text().splitlines()]


def test_multinode_ddp_run_gets_node_rank_and_head_address(tmp_path):
    script = task_config(four_plans()["ddp"])["run"]
    (argv,) = run_script(script, tmp_path, SKYPILOT_NODE_RANK="1", SKYPILOT_NUM_NODES="2",
                         SKYPILOT_NODE_IPS="10.0.0.5\n10.0.0.6", SKYPILOT_NUM_GPUS_PER_NODE="4")
    assert argv == ["run", "--engine", "ddp", "--nproc", "4", "--nnodes", "2", "--node-rank", "1", "--master-addr",
                    "10.0.0.5", "--master-port", "29500", "--checkpoint-dir", "/trainwise/checkpoints", "--output",
                    "/trainwise/checkpoints/run-node1.json", "--", *COMMAND]


def test_hivemind_run_joins_the_head_peer_except_on_the_head(tmp_path):
    script = task_config(four_plans()["hivemind"], head_identity=head_identity())["run"]
    ips = "10.1.0.1\n10.1.0.2\n10.1.0.3\n10.1.0.4"
    (head,) = run_script(script, tmp_path, SKYPILOT_NODE_RANK="0", SKYPILOT_NUM_NODES="4", SKYPILOT_NODE_IPS=ips)
    (other,) = run_script(script, tmp_path, SKYPILOT_NODE_RANK="2", SKYPILOT_NUM_NODES="4", SKYPILOT_NODE_IPS=ips)
    assert head[:7] == ["run", "--engine", "hivemind", "--peers", "1", "--target-batch-size", "4096"]
    assert head[7:13] == ["--host", "0.0.0.0", "--port", "31337", "--identity", "/trainwise/hivemind/head.key"]
    assert "--initial-peers" not in head
    # libp2p dials a peer by id: the full address, with the head's peer id computed at launch time
    assert other[7:9] == ["--initial-peers", f"/ip4/10.1.0.1/tcp/31337/p2p/{head_identity().peer_id}"]
    assert "--identity" not in other
    assert other[other.index("--") + 1:] == COMMAND


def test_multinode_hivemind_task_mounts_the_head_identity_and_needs_one():
    config = task_config(four_plans()["hivemind"], head_identity=head_identity())
    assert config["file_mounts"]["/trainwise/hivemind/head.key"] == head_identity().local_path
    key = Path(head_identity().local_path).read_bytes()
    text = dump_yaml(config)
    assert head_identity().peer_id in text and key.hex() not in text and "BEGIN" not in text
    with pytest.raises(TrainwiseError, match="head peer's identity"):
        task_config(four_plans()["hivemind"])
    # one node: no head to dial, no identity needed
    single = plan_for("gcp/us-central1-a/n1-standard-8+1xT4", engine="hivemind", per_node=2, target_batch_size=64)
    assert "/trainwise/hivemind/head.key" not in task_config(single)["file_mounts"]


class _Parsed(Exception):
    """Stops `trainwise run` once it has parsed and validated its options."""


def parsed_by_trainwise_run(argv: list[str], monkeypatch) -> object:
    """The RunOptions `trainwise run` builds from `argv` (as the task's run line executes it),
    validated as run_job does first; nothing is started."""
    from trainwise.cli import main
    from trainwise.run import launcher

    seen = []

    def run_job(options, command, **_):
        options.validate()
        seen.append(options)
        raise _Parsed()

    monkeypatch.setattr(launcher, "run_job", run_job)
    with pytest.raises(_Parsed):
        main(list(argv))
    return seen[0]


def test_hivemind_task_passes_no_checkpoint_dir_and_trainwise_run_accepts_it(tmp_path, monkeypatch):
    plan = four_plans()["hivemind"]  # spot, with a checkpoint bucket
    config = task_config(plan, head_identity=head_identity())
    assert "--checkpoint-dir" not in config["run"]
    # the bucket is still mounted: the nodes' run records go there (and whatever the script saves)
    assert config["file_mounts"]["/trainwise/checkpoints"] == {"source": "gs://tw-checkpoints/mnist", "mode": "MOUNT"}
    ips = "10.1.0.1\n10.1.0.2\n10.1.0.3\n10.1.0.4"
    (head,) = run_script(config["run"], tmp_path, SKYPILOT_NODE_RANK="0", SKYPILOT_NUM_NODES="4", SKYPILOT_NODE_IPS=ips)
    (other,) = run_script(config["run"], tmp_path, SKYPILOT_NODE_RANK="3", SKYPILOT_NUM_NODES="4", SKYPILOT_NODE_IPS=ips)
    assert other[other.index("--output") + 1] == "/trainwise/checkpoints/run-node3.json"
    # the head's key is mounted at a fixed path on the cluster; here it is the local file
    head[head.index("--identity") + 1] = head_identity().local_path
    for argv in (head, other):
        options = parsed_by_trainwise_run(argv, monkeypatch)
        assert options.engine == "hivemind" and options.checkpoint is None and options.target_batch_size == 4096


def test_spot_hivemind_needs_no_checkpoint_bucket_and_says_what_a_preemption_costs():
    plan = plan_for("gcp/us-central1-a/n1-standard-8+1xT4", spot=True, nodes=3, engine="hivemind",
                    target_batch_size=768, model_uri="gs://tw-models/hm")
    config = task_config(plan, head_identity=head_identity())
    assert "/trainwise/checkpoints" not in config["file_mounts"] and "--checkpoint-dir" not in config["run"]
    assert config["file_mounts"]["/trainwise/model"] == {"source": "gs://tw-models/hm", "mode": "MOUNT"}
    validate_packaged(config, catalog())
    # other engines still need the bucket to resume after a preemption
    with pytest.raises(TrainwiseError, match="checkpoint bucket"):
        task_config(plan_for("gcp/us-central1-a/n1-standard-8+1xT4", spot=True, nodes=3, engine="ddp"))


@pytest.mark.parametrize("name", ["on-demand", "hivemind"])
def test_launch_output_is_checked_before_anything_is_written(tmp_path, capsys, name):
    from trainwise.cli import main

    plan_path = tmp_path / "plan.json"
    four_plans()[name].save(plan_path)
    before = plan_path.read_bytes()
    (tmp_path / "adir").mkdir()
    cases = [(str(plan_path), "would overwrite the input"), (str(tmp_path / "adir"), "is a folder"),
             ("/proc/t.yaml", "/proc/t.yaml")]
    for output, fragment in cases:
        code = main(["launch", str(plan_path), "--dry-run", "--validate", "packaged", "-o", output])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in err and len(errors) == 1, err
        assert errors[0].startswith(("error: --output", "error: cannot write --output")) and fragment in errors[0], err
    assert plan_path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "plan.json"]  # no task, no head key
    assert not list((tmp_path / "adir").iterdir())


SKY_QUIET = textwrap.dedent("""
    import json, logging, sys
    from trainwise.cli import main
    code = main(["launch", "plan.json", "--dry-run", "-o", "task.yaml"])
    from sky.utils import annotations
    print(json.dumps({"code": code, "handlers": [type(h).__name__ for h in logging.getLogger("sky").handlers],
                      "on_api_server": annotations.is_on_api_server}))
""")


@pytest.mark.long
def test_skypilot_output_stays_off_the_terminal_when_its_catalog_cannot_be_fetched(tmp_path):
    pytest.importorskip("sky")
    four_plans()["on-demand"].save(tmp_path / "plan.json")
    with __import__("socket").socket() as s:  # a proxy nobody listens on: "offline", whatever the network
        s.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{s.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "SKYPILOT_"))
           and k.lower() not in ("no_proxy", "https_proxy", "http_proxy")}
    env.update(HOME=str(tmp_path / "home"), HTTPS_PROXY=proxy, HTTP_PROXY=proxy)
    done = subprocess.run([sys.executable, "-c", SKY_QUIET], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=240)
    out = done.stdout + done.stderr
    assert "<sky-payload>" not in out and "Failed to fetch" not in out and "Traceback" not in out, out[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "could not download its price catalog" in errors[0], out[-3000:]
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state["code"] == 2 and not (tmp_path / "task.yaml").exists()
    # SkyPilot's logging and server-side flag are as they were (a later sky.launch still shows its progress)
    assert state["handlers"] == ["EnvAwareHandler"] and state["on_api_server"] is True


def test_an_offline_catalog_failure_names_the_offline_validator(monkeypatch):
    # `launch --dry-run` offline used to say only "connect once, or put the catalog CSVs under
    # ~/.sky/catalogs/", although `--validate packaged` checks the task with no network at all.
    sky = pytest.importorskip("sky")
    from trainwise.launch.skypilot_task import validate_with_skypilot

    def offline(config):
        raise ConnectionError("HTTPSConnectionPool(host='raw.githubusercontent.com', port=443): Max retries exceeded")

    monkeypatch.setattr(sky.Task, "from_yaml_config", staticmethod(offline))
    config = task_config(four_plans()["on-demand"])
    with pytest.raises(TrainwiseError, match=r"could not download its price catalog .*`--validate packaged`"):
        validate_with_skypilot(config)
