"""`trainwise profile -- /their/venv/bin/python train.py`: trainwise in its own environment, the job in the
user's, with another torch release and none of trainwise's dependencies (issue 34, zero install)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainwise.profile.runner import ProfileOptions, agent_package_parent, run_profile

SCRIPTS = Path(__file__).parent / "scripts"
# A Python whose environment holds another torch release and nothing of trainwise's (e.g. a venv with
# torch==2.13.0+cpu from the package index): `python3.11 -m venv V && V/bin/pip install torch==2.13.0+cpu`.
OTHER_PYTHON = os.environ.get("TRAINWISE_TEST_OTHER_TORCH_PYTHON")


def test_the_agent_path_holds_trainwise_alone(tmp_path):
    parent = Path(agent_package_parent(tmp_path))
    assert [p.name for p in parent.iterdir()] == ["trainwise"]
    assert (parent / "trainwise" / "profile" / "_child.py").is_file()


@pytest.mark.long
@pytest.mark.skipif(not OTHER_PYTHON, reason="set TRAINWISE_TEST_OTHER_TORCH_PYTHON to a venv's python with another torch")
def test_profiling_a_job_in_another_venv_with_another_torch():
    probe = subprocess.run([OTHER_PYTHON, "-c", "import torch, importlib.util as u; print(torch.__version__); "
                            "print(u.find_spec('pydantic') is None)"], capture_output=True, text=True, check=True)
    other_torch, no_pydantic = probe.stdout.split()
    import torch

    assert other_torch != torch.__version__ and no_pydantic == "True"
    profile = run_profile([OTHER_PYTHON, str(SCRIPTS / "mlp_train.py"), "--epochs", "1"],
                          ProfileOptions(mode="full", characterise=False, host_noise=False), quiet=True)
    assert profile.environment.torch_version == other_torch
    assert len(profile.iterations) == 40 and len(profile.validations) == 1
    manual = run_profile([OTHER_PYTHON, str(SCRIPTS / "clients" / "manual_sgd_lm.py"), "--epochs", "2", "--batches", "8"],
                         ProfileOptions(mode="full", characterise=False, host_noise=False), quiet=True)
    assert len(manual.iterations) == 16 and manual.dataset.iterations_per_epoch == 8
    assert sys.executable != OTHER_PYTHON
