"""Fixtures shared by the device-model test modules."""

from __future__ import annotations

import pytest

from trainwise.catalog import load_catalog


@pytest.fixture(scope="module")
def catalog():
    """The catalog as loaded by default (packaged data plus any user catalog)."""
    return load_catalog()


@pytest.fixture
def no_disk_cache(monkeypatch):
    """Characterise from scratch, and write nothing under ~/.cache (TRAINWISE_NO_CACHE)."""
    monkeypatch.setenv("TRAINWISE_NO_CACHE", "1")


@pytest.fixture(autouse=True)
def no_host_noise_from_this_machine(tmp_path_factory, monkeypatch):
    """Profiles in tests never carry a `trainwise host-noise` measurement kept on the developer's
    machine (CI has none): point the store at an empty folder. Tests that want one save it there."""
    monkeypatch.setenv("TRAINWISE_HOST_NOISE_DIR", str(tmp_path_factory.getbasetemp() / "host_noise_store"))


@pytest.fixture(autouse=True)
def test_checkpoint_key(tmp_path_factory, monkeypatch):
    """Checkpoints written by tests are signed with a key under the test run's temp folder, never with (or
    by creating) the developer's ~/.config/trainwise/checkpoint.key. Subprocesses inherit it."""
    import os

    path = tmp_path_factory.getbasetemp() / "checkpoint.key"
    if not path.exists():
        path.write_text(os.urandom(32).hex() + "\n")
        path.chmod(0o600)
    monkeypatch.delenv("TRAINWISE_CHECKPOINT_KEY", raising=False)
    monkeypatch.setenv("TRAINWISE_CHECKPOINT_KEY_FILE", str(path))


@pytest.fixture(autouse=True)
def no_other_activated_environment(monkeypatch):
    """`python` in a test's job command is the interpreter running the tests, whatever venv or conda environment
    the shell that started pytest has activated (`profile.runner.job_python` would take that one)."""
    monkeypatch.delenv("VIRTUAL_ENV", raising=False)
    monkeypatch.delenv("CONDA_PREFIX", raising=False)
    monkeypatch.delenv("CONDA_DEFAULT_ENV", raising=False)
