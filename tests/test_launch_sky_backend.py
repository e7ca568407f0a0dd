"""`trainwise launch` without --dry-run against the installed SkyPilot (0.14, a client of an API
server): every `sky.*` name trainwise calls exists there, the calls bind to its signatures, and
without a reachable API server the launch stops in one line naming it, before anything is written."""

from __future__ import annotations

import ast
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest

from launch_helpers import four_plans
from trainwise.launch import sky_backend

sky = pytest.importorskip("sky")
LAUNCH_SOURCES = sorted((Path(sky_backend.__file__).parent).glob("*.py"))


def sky_names(path: Path) -> set[str]:
    """Dotted names rooted at `sky` (`sky.jobs.launch`, `sky.client.sdk.enabled_clouds`) and at the
    `sdk` module imported from it, as the source uses them."""
    tree = ast.parse(path.read_text())
    roots = {"sky": "sky"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "sky":
            for alias in node.names:
                roots[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):  # `sky.jobs.launch` also yields `sky.jobs`: both must exist
            parts = []
            inner = node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in roots:
                names.add(".".join([roots[inner.id], *reversed(parts)]))
    return names


def test_every_sky_name_the_launch_code_uses_exists_in_the_installed_skypilot():
    import importlib

    used = set().union(*(sky_names(path) for path in LAUNCH_SOURCES))
    assert {"sky.client.sdk.enabled_clouds", "sky.get", "sky.launch", "sky.jobs.launch", "sky.stream_and_get"} <= used
    missing = []
    for name in sorted(used):
        parts = name.split(".")
        obj = importlib.import_module(parts[0])
        for i, part in enumerate(parts[1:], start=1):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                try:
                    obj = importlib.import_module(".".join(parts[:i + 1]))
                except ImportError:
                    missing.append(name)
                    break
    assert not missing, f"not in skypilot {sky.__version__}: {missing}"


def test_enabled_clouds_is_a_request_to_the_api_server(monkeypatch):
    from sky.client import sdk

    def get(request_id):
        assert request_id == "request-1"  # the id enabled_clouds() returned, not a list
        return ["AWS", "Kubernetes"]

    monkeypatch.setattr(sdk, "enabled_clouds", mock.create_autospec(sdk.enabled_clouds, return_value="request-1"))
    monkeypatch.setattr(sky, "get", mock.create_autospec(sky.get, side_effect=get))
    assert sky_backend.missing_for_launch(four_plans()["on-demand"]) is None
    assert sky_backend.missing_for_launch(four_plans()["hivemind"]) == (
        "cloud GCP is not enabled in SkyPilot (enabled: aws, kubernetes): set up its credentials and run `sky check gcp`")


@pytest.mark.parametrize("name, call", [("on-demand", "launch"), ("spot", "jobs")])
def test_launch_calls_bind_to_the_installed_sdk(monkeypatch, name, call):
    plan = four_plans()[name]
    task = sky.Task(name=plan.name, run="true")
    monkeypatch.setattr(sky_backend, "validate_with_skypilot", lambda config: task)
    launch = mock.create_autospec(sky.launch, return_value="launch-request")
    jobs_launch = mock.create_autospec(sky.jobs.launch, return_value="jobs-request")
    stream = mock.create_autospec(sky.stream_and_get,
                                  side_effect=lambda rid: ([7], None) if rid == "jobs-request" else (3, None))
    monkeypatch.setattr(sky, "launch", launch)
    monkeypatch.setattr(sky.jobs, "launch", jobs_launch)
    monkeypatch.setattr(sky, "stream_and_get", stream)
    line = sky_backend.launch_with_skypilot(plan, {})
    if call == "launch":
        launch.assert_called_once_with(task, cluster_name=plan.name, down=True)
        assert not jobs_launch.called and "job 3" in line
    else:
        jobs_launch.assert_called_once_with(task, name=plan.name)
        assert not launch.called and "job id [7]" in line
    assert task.time_estimator_func is not None  # trainwise's prediction, for in-process optimizers


def test_keep_cluster_launches_without_tearing_down(monkeypatch):
    plan = four_plans()["on-demand"]
    task = sky.Task(name=plan.name, run="true")
    monkeypatch.setattr(sky_backend, "validate_with_skypilot", lambda config: task)
    launch = mock.create_autospec(sky.launch, return_value="launch-request")
    monkeypatch.setattr(sky, "launch", launch)
    monkeypatch.setattr(sky, "stream_and_get", mock.create_autospec(sky.stream_and_get, return_value=(3, None)))
    line = sky_backend.launch_with_skypilot(plan, {}, keep_cluster=True)
    launch.assert_called_once_with(task, cluster_name=plan.name, down=False)
    assert f"sky down {plan.name}" in line


def test_the_checkpoint_key_is_a_secret_never_in_the_task_yaml(tmp_path, monkeypatch):
    from trainwise.launch.skypilot_task import dump_yaml, task_config
    from trainwise.run.checkpoint_key import KEY_ENV, load_key

    key = load_key()  # the test run's key file (conftest): what `trainwise run` on the cluster must verify with
    plan = four_plans()["spot"]
    assert plan.checkpoint_uri
    config = task_config(plan)
    text = dump_yaml(config)
    task = sky.Task.from_yaml_config(json.loads(json.dumps(config)))  # the real task, without the catalog check
    monkeypatch.setattr(sky_backend, "validate_with_skypilot", lambda config: task)
    built = sky_backend.sky_task(plan, config)
    assert built is task
    assert {name: value.get_secret_value() for name, value in task.secrets.items()} == {KEY_ENV: key.secret.hex()}
    assert KEY_ENV not in task.envs
    # the remote `trainwise run` reads it back to the same key
    monkeypatch.setenv(KEY_ENV, task.secrets[KEY_ENV].get_secret_value())
    assert load_key().secret == key.secret
    # no form of the key in what is written to disk, nor in SkyPilot's own YAML of the task
    redacted = json.dumps(task.to_yaml_config(use_user_specified_yaml=True), default=str)
    for written in (text, json.dumps(config), redacted):
        assert key.secret.hex() not in written and key.secret.hex().upper() not in written
        assert key.secret.decode("latin-1") not in written
    assert KEY_ENV not in json.dumps(config["envs"]) and not any(KEY_ENV in str(v) for v in config["file_mounts"].values())


def test_a_plan_without_checkpoints_passes_no_secret(monkeypatch):
    plan = four_plans()["on-demand"]
    assert not plan.checkpoint_uri
    assert sky_backend.checkpoint_secrets(plan) == {}


def test_the_task_yaml_is_refused_when_it_would_hold_the_key(monkeypatch):
    from trainwise.errors import TrainwiseError
    from trainwise.launch.skypilot_task import dump_yaml, task_config

    secret = os.urandom(32).hex()
    monkeypatch.setenv("TRAINWISE_CHECKPOINT_KEY", secret)
    config = task_config(four_plans()["spot"])
    config["envs"]["LEAK"] = secret  # e.g. the key typed into the training command
    with pytest.raises(TrainwiseError, match="TRAINWISE_CHECKPOINT_KEY"):
        dump_yaml(config)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.long
def test_without_an_api_server_launch_says_so_in_one_line_and_writes_nothing(tmp_path):
    plan_path = tmp_path / "plan.json"
    four_plans()["on-demand"].save(plan_path)
    endpoint = f"http://127.0.0.1:{free_port()}"
    # A configured endpoint that is not a local one: SkyPilot reports it instead of starting a server.
    # In a child process: SkyPilot caches the server URL for the whole process.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GOOGLE_", "SKYPILOT_"))}
    env.update(HOME=str(tmp_path / "home"), SKYPILOT_API_SERVER_ENDPOINT=endpoint, NO_PROXY="*")
    code = ("import sys; from trainwise.cli import main; "
            f"sys.exit(main(['launch', {str(plan_path)!r}, '--validate', 'packaged', '-o', {str(tmp_path / 't.yaml')!r}]))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert len(errors) == 1 and errors[0].startswith("error: no SkyPilot API server answers"), done.stderr
    assert endpoint in errors[0] and "sky api start" in errors[0] and "sky api login" in errors[0]
    assert not (tmp_path / "t.yaml").exists() and not list(tmp_path.glob("*.key"))  # checked before writing
    assert json.loads(plan_path.read_text())["name"] == "single-od"
