"""`trainwise profile -- /their/venv/bin/python train.py`: trainwise in its own environment, the job in the
user's, with another torch release and none of trainwise's dependencies (issue 34, zero install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainwise.errors import TrainwiseError
from trainwise.profile.runner import ProfileOptions, agent_package_parent, resolve_command, run_profile

SCRIPTS = Path(__file__).parent / "scripts"
# A Python whose environment holds another torch release and nothing of trainwise's (e.g. a venv with
# torch==2.13.0+cpu from the package index): `python3.11 -m venv V && V/bin/pip install torch==2.13.0+cpu`.
OTHER_PYTHON = os.environ.get("TRAINWISE_TEST_OTHER_TORCH_PYTHON")


def test_the_agent_path_holds_trainwise_alone(tmp_path):
    parent = Path(agent_package_parent(tmp_path))
    assert [p.name for p in parent.iterdir()] == ["trainwise"]
    assert (parent / "trainwise" / "profile" / "_child.py").is_file()


def _fake_env(tmp_path: Path, version: str = "3.12") -> Path:
    """PREFIX/bin/python: a stand-in interpreter that answers the version probe with `version`."""
    python = tmp_path / "userenv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f"#!/bin/sh\necho {version}\n")
    python.chmod(0o755)
    return python


def test_python_means_the_activated_environments_interpreter(tmp_path, monkeypatch):
    """trainwise installed on its own (pipx/uv tool): `-- python train.py` in a shell with the user's venv
    activated runs the job with that venv's interpreter, not trainwise's."""
    python = _fake_env(tmp_path)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    monkeypatch.setenv("PATH", f"{python.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("VIRTUAL_ENV", str(python.parent.parent))
    assert resolve_command(["python", "train.py", "--epochs", "1"]) == [str(python), "train.py", "--epochs", "1"]
    monkeypatch.delenv("VIRTUAL_ENV")  # nothing activated: the interpreter trainwise runs in
    assert resolve_command(["python", "train.py"]) == [sys.executable, "train.py"]
    monkeypatch.setenv("CONDA_PREFIX", str(python.parent.parent))
    monkeypatch.setenv("CONDA_DEFAULT_ENV", "base")  # conda's base, active in every shell unasked: not a choice
    assert resolve_command(["python", "train.py"])[0] == sys.executable
    monkeypatch.setenv("CONDA_DEFAULT_ENV", "myenv")
    assert resolve_command(["python", "train.py"])[0] == str(python)
    assert resolve_command(["python3", "train.py"])[0] == sys.executable  # the shell finds no python3 there
    # a reference workload runs where trainwise is installed
    assert resolve_command(["python", "-m", "trainwise.workloads.mnist_cnn"])[0] == sys.executable


def test_a_job_python_too_old_for_the_agent_is_refused_before_the_launch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    old = _fake_env(tmp_path, "3.9")
    with pytest.raises(TrainwiseError, match=r"is Python 3\.9; .*needs Python 3\.10 or newer"):
        resolve_command([str(old), "train.py"])
    assert resolve_command([str(_fake_env(tmp_path / "new", "3.13")), "train.py"])[1] == "train.py"
    with pytest.raises(TrainwiseError, match=r"^no such script: trian\.py \(looked in .*\): give its path$"):
        resolve_command(["python", "trian.py"])  # before anything starts, not the job's traceback


@pytest.mark.long
@pytest.mark.skipif(not OTHER_PYTHON, reason="set TRAINWISE_TEST_OTHER_TORCH_PYTHON to a venv's python with another torch")
def test_profiling_a_job_in_another_venv_with_another_torch():
    probe = subprocess.run([OTHER_PYTHON, "-c", "import torch, importlib.util as u; print(torch.__version__); "
                            "print(u.find_spec('pydantic') is None)"], capture_output=True, text=True, check=True)
    other_torch, no_pydantic = probe.stdout.split()
    import torch

    assert other_torch != torch.__version__ and no_pydantic == "True"
    profile = run_profile([OTHER_PYTHON, str(SCRIPTS / "mlp_train.py"), "--epochs", "1"],
                          ProfileOptions(mode="full", host_noise=False), quiet=True)
    assert profile.environment.torch_version == other_torch
    # the step traced there without pydantic, validated here (was: "characterisation skipped: No module named ...")
    assert profile.characterisation is not None, profile.notes
    assert profile.characterisation.torch_version == other_torch and profile.characterisation.total_flops() > 0
    assert len(profile.iterations) == 40 and len(profile.validations) == 1
    manual = run_profile([OTHER_PYTHON, str(SCRIPTS / "clients" / "manual_sgd_lm.py"), "--epochs", "2", "--batches", "8"],
                         ProfileOptions(mode="full", characterise=False, host_noise=False), quiet=True)
    assert len(manual.iterations) == 16 and manual.dataset.iterations_per_epoch == 8
    assert sys.executable != OTHER_PYTHON


@pytest.mark.long
@pytest.mark.skipif(not OTHER_PYTHON, reason="set TRAINWISE_TEST_OTHER_TORCH_PYTHON to a venv's python with another torch")
def test_running_a_job_in_another_venv_with_checkpoints(tmp_path):
    """`trainwise run -- /their/venv/bin/python train.py`: the run agent arms there from trainwise alone (none of
    trainwise's own environment on the job's path) and writes its checkpoints."""
    from trainwise.run.launcher import run_job
    from trainwise.run.options import CheckpointOptions, RunOptions

    result = run_job(RunOptions(checkpoint=CheckpointOptions(directory=str(tmp_path / "ck"), every_batches=10)),
                     [OTHER_PYTHON, str(SCRIPTS / "mlp_train.py"), "--epochs", "1"], workdir=str(tmp_path / "work"))
    assert result.exit_codes == [0]
    assert result.checkpoint.written >= 3, result
    # the job's path reached trainwise alone: the folder it appended holds nothing else
    assert [p.name for p in (tmp_path / "work" / "agent-path").iterdir()] == ["trainwise"]
