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
