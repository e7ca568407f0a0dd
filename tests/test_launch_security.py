"""Hostile names, paths and commands: a safely quoted task or a clear refusal, never an injected
command; no credential value ever written to a task, a plan or a run record."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from launch_helpers import ARGV_RECORDER, four_plans, head_identity, plan_for
from trainwise.errors import TrainwiseError
from trainwise.launch import safety
from trainwise.launch.skypilot_task import dump_yaml, task_config

HOSTILE_ARGS = [
    "; touch PWNED_SEMI;",
    "$(touch PWNED_SUBST)",
    "`touch PWNED_TICK`",
    "a'b\"c",
    "line1\nline2; touch PWNED_NEWLINE",
    "${HOME}",
    "&& touch PWNED_AND",
    "| touch PWNED_PIPE",
    "--lr=0.1 > PWNED_REDIRECT",
    "",
    "'; touch PWNED_QUOTE; echo '",
    "*",
]


def execute(script: str, tmp_path: Path, **env_vars: str) -> list[list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    recorder = bin_dir / "trainwise"
    recorder.write_text(ARGV_RECORDER)
    recorder.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": "/nonexistent-home", "SKYPILOT_NODE_RANK": "0",
           "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": "10.0.0.1\n10.0.0.2", **env_vars}
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    calls = Path(f"{recorder}.calls")
    return [json.loads(line) for line in calls.read_text().splitlines()] if calls.exists() else []


@pytest.mark.parametrize("engine,nodes", [("local", 1), ("ddp", 2), ("hivemind", 2)])
def test_hostile_command_arguments_reach_the_program_verbatim(tmp_path, engine, nodes):
    command = ["python", "train.py", *HOSTILE_ARGS]
    plan = plan_for("aws/use1-az1/p3.8xlarge", nodes=nodes, engine=engine, per_node=4 if engine == "ddp" else 1,
                    target_batch_size=256 if engine == "hivemind" else None, command=command)
    config = task_config(plan, head_identity=head_identity() if engine == "hivemind" else None)
    assert yaml.safe_load(dump_yaml(config)) == config
    (argv,) = execute(config["run"], tmp_path)
    assert argv[argv.index("--") + 1:] == command
    assert not list(tmp_path.glob("PWNED*")), "a hostile argument was executed"


def test_hostile_requirements_path_and_package_spec_are_quoted(tmp_path):
    plan = plan_for("aws/use1-az1/p3.2xlarge", requirements="reqs $(touch PWNED_REQ).txt")
    config = task_config(plan, trainwise_spec="trainwise==0.1.0; touch PWNED_SPEC")
    # the requirements file is uploaded by SkyPilot to a fixed path; the user's path is only a mount source
    assert config["file_mounts"]["/trainwise/requirements.txt"] == "reqs $(touch PWNED_REQ).txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    python = bin_dir / "python"
    python.write_text(ARGV_RECORDER)
    python.chmod(0o755)
    subprocess.run(["bash", "-c", config["setup"]], cwd=tmp_path, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, check=True,
                   timeout=60)
    calls = [json.loads(line) for line in Path(f"{python}.calls").read_text().splitlines()]
    assert calls == [["-m", "pip", "install", "-r", "/trainwise/requirements.txt"],
                     ["-m", "pip", "install", "trainwise==0.1.0; touch PWNED_SPEC"]]
    assert not list(tmp_path.glob("PWNED*"))


@pytest.mark.parametrize("name", ["job; rm -rf /", "Job", "$(whoami)", "a\nb", "x" * 64, "-lead", "with space", ""])
def test_hostile_names_are_refused(name):
    with pytest.raises((TrainwiseError, ValueError)):
        plan_for("aws/use1-az1/p3.2xlarge", name=name)
    with pytest.raises(TrainwiseError, match="lower-case letters"):
        safety.check_name(name)


@pytest.mark.parametrize("uri,fragment", [
    ("s3://bucket/$(touch x)", "may only contain"),
    ("s3://bucket/a;b", "may only contain"),
    ("s3://bucket/a`id`", "may only contain"),
    ("s3://bucket/a b", "may only contain"),
    ("s3://Bad_Bucket!/x", "bucket name"),
    ("s3://bucket/a\nb", "control character"),
    ("gs://b/x\r", "control character"),
    ("/data/\x00x", "control character"),
])
def test_hostile_uris_are_refused(uri, fragment):
    with pytest.raises(TrainwiseError, match=fragment):
        safety.check_uri(uri, "dataset URI")
    with pytest.raises((TrainwiseError, ValueError)):
        plan_for("aws/use1-az1/p3.2xlarge", dataset_uri=uri)


def test_odd_but_harmless_local_paths_are_kept_as_data(tmp_path):
    odd = str(tmp_path / "my data's \"dir\" $(x)")
    assert safety.check_uri(odd, "dataset URI") == odd
    config = task_config(plan_for("aws/use1-az1/p3.2xlarge", dataset_uri=odd))
    assert config["file_mounts"]["/trainwise/data"] == odd      # YAML data, never a shell word
    assert odd not in config["run"] and odd not in config["setup"]
    assert yaml.safe_load(dump_yaml(config))["file_mounts"]["/trainwise/data"] == odd


SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_no_credential_reaches_task_plan_or_record(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE")
    monkeypatch.setenv("HF_TOKEN", "hf_abcdefghijklmnopqrstuvwxyz")
    for plan in four_plans().values():
        text = dump_yaml(task_config(plan, head_identity=head_identity()))
        assert SECRET not in text and "AKIAIOSFODNN7EXAMPLE" not in text and "hf_abc" not in text
        assert "AWS_SECRET_ACCESS_KEY" not in text
        written = plan.save(tmp_path / f"{plan.name}.json").read_text()
        assert SECRET not in written


def test_a_command_carrying_a_credential_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    plan = plan_for("aws/use1-az1/p3.2xlarge", command=["python", "train.py", "--key", SECRET])
    with pytest.raises(TrainwiseError, match=r"\$AWS_SECRET_ACCESS_KEY"):
        dump_yaml(task_config(plan))
    with pytest.raises(TrainwiseError, match=r"\$AWS_SECRET_ACCESS_KEY"):
        plan.save(tmp_path / "plan.json")
    assert not (tmp_path / "plan.json").exists()


def test_nul_in_a_command_is_refused():
    with pytest.raises(TrainwiseError, match="NUL"):
        task_config(plan_for("aws/use1-az1/p3.2xlarge", command=["python", "a\x00b"]))


def test_quote_argv_only_leaves_trainwise_expressions_unquoted():
    line = safety.quote_argv(["echo", "$(id)", safety.ShellExpr('"${SKYPILOT_NODE_RANK}"')])
    assert line == "echo '$(id)' \"${SKYPILOT_NODE_RANK}\""
    with pytest.raises(TypeError):
        safety.quote_argv(["echo", 3])  # type: ignore[list-item]
