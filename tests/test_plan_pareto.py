"""Pareto set correctness (property tests): no member is dominated, every non-member is dominated
by some member; identical points and NaNs handled."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwise.plan.pareto import dominates, pareto_mask, pareto_mask_grouped

# Small integer grids make ties (equal x, equal y, identical points) frequent.
coords = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=0, max_size=40)


@settings(max_examples=300, deadline=None)
@given(coords)
def test_pareto_set_properties(points):
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    mask = pareto_mask(x, y)
    members = [points[i] for i in np.flatnonzero(mask)]
    for i, point in enumerate(points):
        if mask[i]:
            assert not any(dominates(other, point) for other in points)
        else:
            assert any(dominates(member, point) for member in members)
    if points:
        assert mask.any()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e6, allow_nan=False)), max_size=60))
def test_pareto_on_floats_matches_brute_force(points):
    x = np.array([p[0] for p in points], dtype=float)
    y = np.array([p[1] for p in points], dtype=float)
    brute = np.array([not any(dominates(o, p) for o in points) for p in points], dtype=bool)
    assert (pareto_mask(x, y) == brute).all()


def test_identical_points_and_nan():
    mask = pareto_mask([1, 1, 2, np.nan, 0.5], [1, 1, 0.5, 0, np.nan])
    assert mask.tolist() == [True, True, True, False, False]
    assert pareto_mask([], []).tolist() == []


def test_grouped():
    mask = pareto_mask_grouped([1, 2, 1, 2], [2, 1, 1, 2], [5, 5, 10, 10])
    assert mask.tolist() == [True, True, True, False]
