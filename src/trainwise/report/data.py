"""A PlanResult as plain data: the JSON payload and the display rows every renderer shares."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trainwise import __version__
from trainwise.report.terminal import format_duration

# The columns of a plan row that the report tables and the JSON carry, in order.
ROW_COLUMNS = [
    "rank", "plan_id", "offering_id", "cloud", "region", "instance_type", "accelerator", "accelerator_count", "market",
    "kind", "profile", "batch_size", "epochs", "wall_s", "low_s", "high_s", "total_cost", "cost_low", "cost_high",
    "price_per_hour", "billing", "min_billed_seconds", "usd_per_epoch", "usd_per_1m_samples", "speedup",
    "speedup_with_staging", "cost_efficiency", "break_even_speedup", "score", "pareto", "feasible", "excluded_by",
    "provisioning_s", "staging_s", "init_s", "first_epoch_s", "steady_s", "validation_s", "preemption_loss_s",
    "expected_interruptions", "checkpoint_interval_s", "compute_cost", "egress_cost", "storage_cost",
    "relative_error", "time_provenance", "price_provenance", "status",
    # data-parallel rows (plan --distributed; absent otherwise)
    "parallelism", "workers", "granularity", "communication_s", "network_usd_per_hour", "network_egress_cost",
    "scaling_note", "why",
]
BREAKDOWN = [("provisioning_s", "provisioning"), ("staging_s", "data staging"), ("init_s", "init"),
             ("first_epoch_s", "first epoch"), ("steady_s", "steady state"), ("validation_s", "validation"),
             ("preemption_loss_s", "expected preemption loss")]


def _clean(value: Any) -> Any:
    if isinstance(value, (np.floating, float)):
        value = float(value)
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA or value is None:
        return None
    return value


def records(frame: pd.DataFrame, columns: list[str] | None = None) -> list[dict[str, Any]]:
    columns = [c for c in (columns or ROW_COLUMNS) if c in frame.columns]
    return [{k: _clean(v) for k, v in row.items()} for row in frame[columns].to_dict("records")]


def plan_payload(result: Any, top_n: int = 10, *, all_plans: bool = False) -> dict[str, Any]:
    """Everything a reader needs to check the plan: rows with provenance, Pareto set, flags,
    assumptions, catalog date, the seeds' inconsistencies.

    Every ranked plan (`plans`) only with `all_plans`: a catalog-wide plan has tens of thousands of
    rows (~2 KB each as JSON); the report keeps them as a table (`plans.csv.gz`) instead."""
    primary = result.primary
    payload = {
        "trainwise_version": __version__,
        "catalog": result.catalog_caption,
        "objective": result.objective.model_dump(),
        "objective_description": result.objective.describe,
        "constraints": result.constraints.model_dump(),
        "epoch_options": list(result.epoch_options),
        "primary_epochs": result.primary_epochs,
        "reference": result.reference,
        "best": records(primary.head(1))[0] if len(primary) else None,
        "top": records(primary.head(top_n)),
        "pareto": records(result.pareto),
        "best_per_epochs": records(result.best_per_epochs()),
        "plans_total": int(len(result.ranked)),
        "excluded": {k: int(v) for k, v in result.exclusions.items()},
        "not_predicted": records(result.not_predicted, list(result.not_predicted.columns)),
        "profiles": [dict(p) for p in result.profiles],
        "flags": list(result.flags),
        "assumptions": list(result.assumptions),
        "source_inconsistencies": list(result.inconsistencies),
    }
    if all_plans:
        payload["plans"] = records(result.ranked)
    return payload


def plans_table(result: Any) -> pd.DataFrame:
    """Every ranked plan, one row each, with the JSON rows' columns (NaN where a value does not apply);
    the rank is an integer (a rank column that held a NaN once came out as 1.0, 2.0, …)."""
    table = result.ranked[[c for c in ROW_COLUMNS if c in result.ranked.columns]]
    if "rank" in table.columns:
        table = table.assign(rank=table["rank"].astype("Int64"))
    return table


def money(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    value = float(value)
    if value == 0:
        return "$0"
    if abs(value) < 0.01:
        return f"${value:.4f}"
    if abs(value) < 100:
        return f"${value:.2f}"
    return f"${value:,.0f}"


def duration(value: Any) -> str:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return "—"
    return format_duration(float(value))


def ratio(value: Any, suffix: str = "×") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value):.2f}{suffix}"


def percent(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return f"{float(value) * 100:.1f} %"


def cost_efficiency_text(value: Any) -> str:
    """Künas' cost efficiency, 1 − C/C_ref, as a percentage while that reads well;
    past −100 % (more than twice the reference's cost) as the cost ratio, which a "−249,652 %" hides."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if float(value) >= -1.0:
        return percent(value)
    return f"{1.0 - float(value):,.1f}× ref. cost"


def display_row(row: dict[str, Any]) -> dict[str, str]:
    """One plan row as the strings every table shows."""
    rank = row.get("rank")
    return {
        "rank": "" if rank is None or (isinstance(rank, float) and math.isnan(rank)) else str(int(rank)),
        "offering": str(row["offering_id"]),
        "accelerator": f"{row['accelerator']} ×{row['accelerator_count']:g}" if isinstance(row.get("accelerator"), str) else "CPU",
        "market": str(row["market"]),
        "batch": str(row["batch_size"]),
        "epochs": str(row["epochs"]),
        "time": duration(row["wall_s"]),
        "time band": f"{duration(row['low_s'])}–{duration(row['high_s'])}",
        "cost": money(row["total_cost"]),
        "cost band": f"{money(row['cost_low'])}–{money(row['cost_high'])}",
        "$/h": money(row["price_per_hour"]),
        "$/epoch": money(row["usd_per_epoch"]),
        "$/1M samples": money(row["usd_per_1m_samples"]),
        "speedup": ratio(row.get("speedup")),
        "cost eff.": cost_efficiency_text(row.get("cost_efficiency")),
        "break-even": ratio(row.get("break_even_speedup")),
        "time from": str(row["time_provenance"]),
        "price from": str(row["price_provenance"]),
    }
