"""Pareto set of (time, cost) points, both minimised: O(n log n), vectorised.

A point dominates another when it is no worse in both and better in at least one. The Pareto set
holds every point no other point dominates; identical points are all kept (none dominates the
other). This is the set the seeds' cost-vs-time figures (Malta Figures 4.6/4.7) let a reader pick from.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def pareto_mask(x: Any, y: Any) -> np.ndarray:
    """Boolean mask of the non-dominated points of (x, y), both to be minimised. NaN points are never
    members (they are not comparable) and dominate nothing."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    mask = np.zeros(x.shape, dtype=bool)
    valid = np.flatnonzero(~(np.isnan(x) | np.isnan(y)))
    if valid.size == 0:
        return mask
    xv, yv = x[valid], y[valid]
    order = np.lexsort((yv, xv))  # by x, then y
    xs, ys = xv[order], yv[order]
    new = np.ones(order.size, dtype=bool)
    new[1:] = (xs[1:] != xs[:-1]) | (ys[1:] != ys[:-1])
    group = np.cumsum(new) - 1          # identical points share a group
    ys_distinct = ys[new]
    # On distinct points sorted by (x, y), every earlier point has x' <= x; it dominates point i
    # iff y' <= y (equal x forces y' < y, as the points are distinct). So: dominated iff the running
    # minimum of the earlier y's is <= y.
    earlier_min = np.concatenate([[np.inf], np.minimum.accumulate(ys_distinct)[:-1]])
    front_distinct = ys_distinct < earlier_min
    in_front = np.empty(order.size, dtype=bool)
    in_front[order] = front_distinct[group]
    mask[valid] = in_front
    return mask


def pareto_mask_grouped(x: Any, y: Any, groups: Any) -> np.ndarray:
    """`pareto_mask` within each group (e.g. each epoch option)."""
    x = np.asarray(x, dtype="float64")
    y = np.asarray(y, dtype="float64")
    groups = np.asarray(groups)
    mask = np.zeros(x.shape, dtype=bool)
    for value in np.unique(groups):
        where = np.flatnonzero(groups == value)
        mask[where] = pareto_mask(x[where], y[where])
    return mask


def dominates(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Does point a dominate point b (both minimised)?"""
    return a[0] <= b[0] and a[1] <= b[1] and (a[0] < b[0] or a[1] < b[1])
