"""Ranking the feasible candidates within each epoch option by the objective, marking the Pareto
set of (wall time, cost), and the metrics against the reference platform."""

from __future__ import annotations

import numpy as np
import pandas as pd

from trainwise.plan.objectives import Objective
from trainwise.plan.pareto import pareto_mask_grouped


def _sort_keys(objective: Objective) -> list[str]:
    if objective.kind in ("fastest", "budget"):
        return ["wall_s", "total_cost"]
    if objective.kind in ("cheapest", "deadline"):
        return ["total_cost", "wall_s"]
    return ["_neg_score", "total_cost", "wall_s"]


def _weighted_score(frame: pd.DataFrame, objective: Objective, within: np.ndarray) -> np.ndarray:
    """PRESTO: per epoch option, each metric min–max normalised over `within` rows, lower-is-better
    inverted (1 − minmax), score = Σ w·m'. Rows outside `within` are scored against the same ranges."""
    from trainwise.plan.objectives import WEIGHTED_METRICS

    score = np.zeros(len(frame))
    epochs = frame["epochs"].to_numpy()
    for e in np.unique(epochs):
        group = epochs == e
        ref = group & within
        if not ref.any():
            ref = group
        for name, weight in objective.weights.items():
            if weight == 0:
                continue
            values = frame[WEIGHTED_METRICS[name]].to_numpy()
            lo, hi = values[ref].min(), values[ref].max()
            normalised = np.zeros(group.sum()) if hi == lo else (values[group] - lo) / (hi - lo)
            score[group] += weight * (1.0 - normalised)
    return score


def rank_candidates(frame: pd.DataFrame, objective: Objective) -> None:
    """`rank` 1, 2, … within each epoch option among the feasible rows (NaN for the rest), by the
    objective's keys, ties broken by the deterministic construction order. numpy lexsort: no frame sort."""
    feasible = frame["feasible"].to_numpy()
    score = _weighted_score(frame, objective, feasible) if objective.kind == "weighted" else np.full(len(frame), np.nan)
    frame["score"] = score
    keys = {"_neg_score": -np.nan_to_num(score, nan=0.0)}
    columns = [frame["epochs"].to_numpy()]
    for key in _sort_keys(objective):
        columns.append(keys[key] if key in keys else frame[key].to_numpy())
    # np.lexsort is stable: rows tied on every key keep the deterministic construction order (_seq).
    order = np.lexsort(tuple(reversed(columns)))
    ordered = order[feasible[order]]
    rank = np.full(len(frame), np.nan)
    if ordered.size:
        epochs = frame["epochs"].to_numpy()[ordered]
        starts = np.flatnonzero(np.concatenate([[True], epochs[1:] != epochs[:-1]]))
        group_start = np.repeat(starts, np.diff(np.concatenate([starts, [ordered.size]])))
        rank[ordered] = np.arange(ordered.size) - group_start + 1
    frame["rank"] = rank


def mark_pareto(frame: pd.DataFrame) -> None:
    """`pareto` in place: the feasible candidates that no other feasible one beats on both wall time
    and cost, within each epoch option."""
    frame["pareto"] = False
    feasible = frame["feasible"].to_numpy()
    if feasible.any():
        mask = pareto_mask_grouped(frame["wall_s"].to_numpy()[feasible], frame["total_cost"].to_numpy()[feasible],
                                   frame["epochs"].to_numpy()[feasible])
        pareto = np.zeros(len(frame), dtype=bool)
        pareto[np.flatnonzero(feasible)[mask]] = True
        frame["pareto"] = pareto


def reference_metrics(frame: pd.DataFrame, reference: str | None, local_ids: set[str], primary: int) -> str | None:
    """speedup, cost efficiency (1 − C/C_ref), break-even speedup (p/p_ref) and the speedup with
    staging S' = S·T/(T + t) against the reference platform, per epoch option. The reference is
    the one given, else this machine, else the best plan at the primary epoch option (Künas:
    state the reference platform — the report does)."""
    target = reference or (next(iter(sorted(local_ids))) if local_ids else None)
    if reference is None and target is not None and not (frame["offering_id"] == target).any():
        target = None  # this machine is not ranked (a slice profile): the best plan is the reference
    market = "on-demand"
    for column in ("speedup", "speedup_with_staging", "cost_efficiency", "break_even_speedup"):
        frame[column] = np.nan
    if target is None:
        best = np.flatnonzero((frame["rank"].to_numpy() == 1) & (frame["epochs"].to_numpy() == primary))
        if best.size == 0:
            return None
        target, market = str(frame["offering_id"].iloc[best[0]]), str(frame["market"].iloc[best[0]])
    is_target = (frame["offering_id"] == target).to_numpy()
    ref_rows = frame.iloc[np.flatnonzero(is_target & (frame["market"] == market).to_numpy())]
    if ref_rows.empty:
        ref_rows = frame.iloc[np.flatnonzero(is_target)]
    if ref_rows.empty:
        return f"{target} (not predicted: no metrics against it)"
    if market != "on-demand":
        target = f"{target} ({market})"
    ref = ref_rows.sort_values("wall_s", kind="stable").groupby("epochs").first()[["wall_s", "training_s", "total_cost",
                                                                                  "price_per_hour"]]
    epochs = frame["epochs"].to_numpy()
    lookup = np.full(int(epochs.max()) + 1 if len(epochs) else 1, -1, dtype="int64")
    lookup[ref.index.to_numpy().astype("int64")] = np.arange(len(ref))
    position = lookup[epochs]
    present = position >= 0

    def column(name: str) -> np.ndarray:
        return np.where(present, ref[name].to_numpy()[np.maximum(position, 0)], np.nan)

    training_ref = column("training_s")
    frame["speedup"] = training_ref / frame["training_s"].to_numpy()
    frame["speedup_with_staging"] = training_ref / (frame["training_s"].to_numpy() + frame["staging_s"].to_numpy())
    frame["cost_efficiency"] = 1.0 - frame["total_cost"].to_numpy() / column("total_cost")
    frame["break_even_speedup"] = frame["price_per_hour"].to_numpy() / column("price_per_hour")
    return target
