"""The Pareto chart of cost vs time (the seeds' cost-vs-time figures, Malta Figures 4.6/4.7), with
matplotlib's Agg backend: no display, no network, PNG bytes out."""

from __future__ import annotations

import io
from typing import Any

import numpy as np

MAX_BACKGROUND_POINTS = 3000
_MARKERS = {"on-demand": "o", "spot": "^"}


def pareto_chart_png(result: Any, *, dpi: int = 110) -> bytes:
    """PNG of every feasible candidate at the primary epoch option (cost vs wall time), the Pareto
    front, the best plan, and the infeasible candidates faintly; error bars = uncertainty bands."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    plans = result.plans
    at = plans[plans["epochs"] == result.primary_epochs]
    feasible = at[at["feasible"]]
    infeasible = at[~at["feasible"]]
    front = feasible[feasible["pareto"]].sort_values("wall_s")
    fig = Figure(figsize=(9.0, 5.6), dpi=dpi)
    ax = fig.add_subplot(1, 1, 1)
    hours = 3600.0

    def thin(frame):
        if len(frame) <= MAX_BACKGROUND_POINTS:
            return frame
        step = int(np.ceil(len(frame) / MAX_BACKGROUND_POINTS))
        return frame.sort_values(["total_cost", "wall_s"], kind="stable").iloc[::step]

    if len(infeasible):
        bg = thin(infeasible)
        ax.scatter(bg["wall_s"] / hours, bg["total_cost"], s=10, marker="x", color="#bbbbbb", linewidths=0.7,
                   label=f"excluded by a constraint ({len(infeasible)})", zorder=1)
    clouds = sorted(feasible["cloud"].dropna().unique().tolist())
    palette = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"]
    for i, cloud in enumerate(clouds):
        for market, marker in _MARKERS.items():
            part = thin(feasible[(feasible["cloud"] == cloud) & (feasible["market"] == market)])
            if part.empty:
                continue
            ax.scatter(part["wall_s"] / hours, part["total_cost"], s=22, marker=marker, alpha=0.55,
                       color=palette[i % len(palette)], label=f"{cloud} {market} ({len(part)})", zorder=2)
    if len(front):
        xerr = np.vstack([(front["wall_s"] - front["low_s"]) / hours, (front["high_s"] - front["wall_s"]) / hours])
        yerr = np.vstack([front["total_cost"] - front["cost_low"], front["cost_high"] - front["total_cost"]])
        ax.errorbar(front["wall_s"] / hours, front["total_cost"], xerr=np.clip(xerr, 0, None), yerr=np.clip(yerr, 0, None),
                    fmt="none", ecolor="#d62728", alpha=0.5, elinewidth=1, zorder=3)
        ax.step(front["wall_s"] / hours, front["total_cost"], where="post", color="#d62728", linewidth=1.6,
                label=f"Pareto front ({len(front)})", zorder=4)
        ax.scatter(front["wall_s"] / hours, front["total_cost"], s=40, facecolors="none", edgecolors="#d62728", zorder=5)
    if len(feasible):
        best = result.primary.iloc[0]
        ax.scatter([best["wall_s"] / hours], [best["total_cost"]], s=240, marker="*", color="#ffd700", edgecolors="black",
                   zorder=6, label=f"best: {best['offering_id']} ({best['market']})")
    values_x = at["wall_s"].to_numpy() / hours
    values_y = at["total_cost"].to_numpy()
    positive_x = values_x[values_x > 0]
    positive_y = values_y[values_y > 0]
    if positive_x.size and positive_x.max() / positive_x.min() > 20:
        ax.set_xscale("log")
    if positive_y.size and positive_y.max() / positive_y.min() > 20:
        ax.set_yscale("log")
    ax.set_xlabel("expected wall time (hours): provisioning + staging + training + expected preemption loss")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"Cost vs time, {result.primary_epochs} epochs — {result.objective.describe}", fontsize=11)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="best", framealpha=0.85)
    fig.text(0.01, 0.005, result.catalog_caption, fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
