"""The Pareto chart of cost vs time (the cost-vs-time figures of Malta's dissertation on choosing GPU
VMs from short profiles), with matplotlib's Agg backend: no display, no network, PNG bytes out.

What it shows: every ranked plan at the headline epoch count, faded unless it is on the Pareto front
(no plan both faster and cheaper); the front as a step line; the best plan of each of the top
distinct choices labelled with its rank; engines (one machine, DDP, Hivemind) by colour and marker;
the legend outside the plotting area, so it never covers a point."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

MAX_BACKGROUND_POINTS = 3000
LABELLED_CHOICES = 6
ENGINES = {"single": ("one machine", "o", "#1f77b4"), "DDP": ("DDP", "s", "#2ca02c"),
           "Hivemind": ("Hivemind", "^", "#9467bd")}


def _engines(frame) -> np.ndarray:
    if "parallelism" not in frame.columns:
        return np.full(len(frame), "single", dtype=object)
    kind = frame["parallelism"].astype(object).fillna("").astype(str).to_numpy()
    return np.where(kind == "", "single", np.where(kind == "hivemind", "Hivemind", "DDP"))


def add_bundled_fonts() -> int:
    """Give matplotlib back the fonts it ships when its font list lacks them; returns how many files were added.

    matplotlib caches its font list per user (~/.cache/matplotlib/fontlist-v<format>.json) under a cache-format
    version that several releases share, and trusts any list of that version whose files exist: a list written by
    an install without the bundled fonts (a distribution's matplotlib uses the system's) hides STIX and
    Computer Modern from every other install. Its mathtext, which the log axes' tick labels use, then prints a
    `findfont` warning per missing family on each run (21 lines in `make run` here) and falls back to DejaVu Sans.
    The fonts are added to this process's font manager only; the user's cache file is left as it is."""
    import matplotlib
    from matplotlib import font_manager

    bundled = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    if not bundled.is_dir():
        return 0
    manager = font_manager.fontManager
    known = {Path(entry.fname).resolve() for entry in manager.ttflist}
    missing = [path for path in sorted(bundled.glob("*.ttf")) if path.resolve() not in known]
    for path in missing:
        manager.addfont(path)
    return len(missing)


def pareto_chart_png(result: Any, *, dpi: int = 100) -> bytes:
    """PNG of the ranked plans at the headline epoch option (cost vs wall time)."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    add_bundled_fonts()
    from matplotlib.figure import Figure

    from trainwise.report.terminal import distinct_choices

    hours = 3600.0
    primary = result.primary
    fig = Figure(figsize=(8.4, 5.0), dpi=dpi)
    ax = fig.add_axes((0.09, 0.11, 0.58, 0.8))

    def thin(frame):
        if len(frame) <= MAX_BACKGROUND_POINTS:
            return frame
        step = int(np.ceil(len(frame) / MAX_BACKGROUND_POINTS))
        return frame.iloc[::step]

    engines = _engines(primary)
    front = primary[primary["pareto"].to_numpy(dtype=bool)]
    dominated = primary[~primary["pareto"].to_numpy(dtype=bool)]
    dominated_engines = engines[~primary["pareto"].to_numpy(dtype=bool)]
    front_engines = engines[primary["pareto"].to_numpy(dtype=bool)]
    for engine, (label, marker, colour) in ENGINES.items():
        part = thin(dominated[dominated_engines == engine])
        if len(part):
            ax.scatter(part["wall_s"] / hours, part["total_cost"], s=12, marker=marker, color=colour, alpha=0.12,
                       linewidths=0, zorder=1)
        on_front = front[front_engines == engine]
        count = int((engines == engine).sum())
        if count:
            ax.scatter(on_front["wall_s"] / hours, on_front["total_cost"], s=34, marker=marker, color=colour,
                       edgecolors="black", linewidths=0.5, zorder=4, label=f"{label}: {count:,} plans")
    if len(front):
        ordered = front.sort_values("wall_s")
        ax.step(ordered["wall_s"] / hours, ordered["total_cost"], where="post", color="#d62728", linewidth=1.4,
                zorder=3, label=f"Pareto front ({len(front)} plans)")
    ax.scatter([], [], s=12, color="#888888", alpha=0.3, label="faded: dominated")
    choices, _ = distinct_choices(primary, LABELLED_CHOICES)
    for n, (_, row) in enumerate(choices.iterrows()):
        x, y = row["wall_s"] / hours, row["total_cost"]
        ax.scatter([x], [y], s=240 if n == 0 else 90, marker="*" if n == 0 else "D", color="#ffd700" if n == 0 else "white",
                   edgecolors="black", linewidths=0.8, zorder=6)
        ax.annotate(f"#{int(row['rank'])}", (x, y), xytext=(6, 6 if n % 2 == 0 else -12), textcoords="offset points",
                    fontsize=8, weight="bold", zorder=7)
    legend_rows = [f"#{int(r['rank'])} {str(r['instance_type'])[:22]} {r['market']}" for _, r in choices.iterrows()]
    x_values = primary["wall_s"].to_numpy() / hours
    y_values = primary["total_cost"].to_numpy()
    if x_values.size and x_values.min() > 0 and x_values.max() / x_values.min() > 20:
        ax.set_xscale("log")
    if y_values.size and y_values.min() > 0 and y_values.max() / y_values.min() > 20:
        ax.set_yscale("log")
    ax.set_xlabel("expected wall time (h): boot + staging + training + preemption")
    ax.set_ylabel("expected cost (USD)")
    ax.set_title(f"Cost vs time, {result.primary_epochs} epochs — {result.objective.describe}", fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, frameon=False)
    fig.text(0.69, 0.5, "labelled: best of each choice\n" + "\n".join(legend_rows), fontsize=7.5, va="top",
             family="monospace")
    fig.text(0.01, 0.01, result.catalog_caption[:150], fontsize=6.5, color="#555555")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()
