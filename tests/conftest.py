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
