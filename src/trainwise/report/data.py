"""A PlanResult as plain data: the JSON payload and the display rows every renderer shares."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from trainwise import __version__
from trainwise.core.units import format_duration

# The columns of a plan row that the report tables and the JSON carry, in order.
ROW_COLUMNS = [
    "rank", "plan_id", "offering_id", "cloud", "region", "instance_type", "accelerator", "accelerator_count", "market",
    "kind", "profile", "batch_size", "epochs", "wall_s", "low_s", "high_s", "total_cost", "cost_low", "cost_high",
    "price_per_hour", "billing", "min_billed_seconds", "usd_per_epoch", "usd_per_1m_samples", "speedup",
    "speedup_with_staging", "cost_efficiency", "break_even_speedup", "score", "pareto", "feasible", "excluded_by",
    "provisioning_s", "staging_s", "init_s", "first_epoch_s", "steady_s", "validation_s", "preemption_loss_s",
    "expected_interruptions", "checkpoint_interval_s", "compute_cost", "egress_cost", "storage_cost",
    "relative_error", "time_provenance", "price_provenance", "provisioning_source", "fixed_cost", "status",
    # data-parallel rows (plan --distributed; absent otherwise)
    "parallelism", "workers", "granularity", "communication_s", "network_usd_per_hour", "network_egress_cost",
    "scaling_note", "why",
]
BREAKDOWN = [("provisioning_s", "provisioning"), ("staging_s", "data staging"), ("init_s", "init"),
             ("first_epoch_s", "first epoch"), ("steady_s", "steady state"), ("validation_s", "validation"),
             ("preemption_loss_s", "expected preemption loss")]


def time_parts(row: dict[str, Any]) -> list[tuple[str, float]]:
    """The wall time of a plan in the four parts a reader decides on: provisioning, data staging,
    training (start-up, epochs, validation) and the expected loss to spot preemptions."""
    def get(column: str) -> float:
        value = row.get(column)
        return 0.0 if value is None or value != value else max(0.0, float(value))

    training = sum(get(c) for c in ("init_s", "first_epoch_s", "steady_s", "validation_s"))
    return [("provisioning", get("provisioning_s")), ("staging", get("staging_s")), ("training", training),
            ("preemption", get("preemption_loss_s"))]


def accelerators_text(row: dict[str, Any]) -> str:
    """"A100 ×8", a fractional GPU as "A10 ×1/3" (never 0.333333), "CPU" without one."""
    from fractions import Fraction

    name = row.get("accelerator")
    if not isinstance(name, str):
        return "CPU"
    count = row.get("accelerator_count")
    if count is None or count != count:
        return name
    if float(count).is_integer():
        return f"{name} ×{int(count)}"
    return f"{name} ×{Fraction(float(count)).limit_denominator(16)}"


def cost_ratio(cost: Any, reference: Any) -> str:
    """Cost against a reference cost as one unit everywhere: "0.42×", "3.1×", "4,311×"."""
    if cost is None or reference is None or not reference or cost != cost or reference != reference:
        return "—"
    value = float(cost) / float(reference)
    if value >= 100:
        return f"{value:,.0f}×"
    return f"{value:.2f}×" if value < 10 else f"{value:.1f}×"


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
        "job_global_batch": result.job_global_batch,
        "pruned": {k: int(v) for k, v in (result.pruned or {}).items()},
        "idle": {k: int(v) for k, v in (result.idle or {}).items()},
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
    """Cost efficiency 1 − C/C_ref (Künas, "cloud TPUs vs a local GPU cluster" MSc thesis), shown in one unit for
    every row: the cost ratio C/C_ref ("0.33×", "4,311×"), never a mix of percentages and ratios."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    return cost_ratio(1.0 - float(value), 1.0)


def display_row(row: dict[str, Any]) -> dict[str, str]:
    """One plan row as the strings every table shows."""
    rank = row.get("rank")
    return {
        "rank": "" if rank is None or (isinstance(rank, float) and math.isnan(rank)) else str(int(rank)),
        "offering": str(row["offering_id"]),
        "accelerator": accelerators_text(row),
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
        "cost vs ref.": cost_efficiency_text(row.get("cost_efficiency")),
        "break-even": ratio(row.get("break_even_speedup")),
        "time from": str(row["time_provenance"]),
        "price from": str(row["price_provenance"]),
    }
