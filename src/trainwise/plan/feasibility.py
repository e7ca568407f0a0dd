"""Which candidates the constraints keep: `feasible` and the first constraint excluding each row,
the offerings left unpredicted under the same filters, and the error naming the binding constraint
when nothing is feasible."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from trainwise.plan.models import InfeasiblePlanError, plan_ids
from trainwise.plan.objectives import Constraints, Objective, format_hours, format_money
from trainwise.plan.runtime import CPU_ONLY_FIX, NOT_PREDICTED, LabelledProfile

CONSTRAINT_ORDER = ("cloud", "region", "accelerator", "spot", "min-gpu-memory", "model-fit", "global-batch", "deadline",
                    "budget")


def apply_constraints(frame: pd.DataFrame, constraints: Constraints, clouds: set[str], regions: set[str],
                      accelerators: set[str], primary: int) -> dict[str, int]:
    """Mark `feasible` and the first constraint that excludes each candidate (`excluded_by`)."""
    n = len(frame)
    checks: list[tuple[str, np.ndarray]] = []
    if clouds:
        checks.append(("cloud", frame["cloud"].isin(clouds).to_numpy()))
    if regions:
        checks.append(("region", (frame["region"].isin(regions) | frame["zone"].isin(regions)).to_numpy()))
    if accelerators:
        checks.append(("accelerator", frame["accelerator"].isin(accelerators).to_numpy()))
    if not constraints.allow_spot:
        checks.append(("spot", ~frame["_spot"].to_numpy()))
    memory = frame["accelerator_memory_gib"].to_numpy()
    is_gpu = frame["accelerator"].notna().to_numpy()
    if constraints.min_gpu_memory_gib is not None:
        checks.append(("min-gpu-memory", is_gpu & (np.nan_to_num(memory, nan=-1.0) >= constraints.min_gpu_memory_gib)))
    need = frame["device_memory_gib"].to_numpy()
    fits = ~(is_gpu & ~np.isnan(need) & ~np.isnan(memory) & (memory < need))
    if "fits_memory" in frame.columns:  # the device model's per-device memory check (data-parallel rows)
        fits &= frame["fits_memory"].to_numpy(dtype=bool)
    checks.append(("model-fit", fits))
    if constraints.max_global_batch is not None:
        checks.append(("global-batch", global_batch_sizes(frame) <= constraints.max_global_batch))
    if constraints.deadline_s is not None:
        checks.append(("deadline", frame["wall_s"].to_numpy() <= constraints.deadline_s))
    if constraints.budget_usd is not None:
        checks.append(("budget", frame["total_cost"].to_numpy() <= constraints.budget_usd))
    excluded_by = np.full(n, "", dtype=object)
    feasible = np.ones(n, dtype=bool)
    counts: dict[str, int] = {}
    at_primary = (frame["epochs"] == primary).to_numpy()
    for name, ok in checks:
        newly = feasible & ~ok
        excluded_by[newly] = name
        counts[name] = int((newly & at_primary).sum())
        feasible &= ok
    frame["feasible"] = feasible
    frame["excluded_by"] = excluded_by
    return counts


def global_batch_sizes(frame: pd.DataFrame) -> np.ndarray:
    """Samples per optimizer step of each candidate: the figure the runtime source gave (device model:
    the profile's batch per device × devices; DDP: per-worker batch × workers; Hivemind: the target
    batch size), else the profile's own global batch (a measured profile runs as it was measured)."""
    batch = frame["batch_size"].to_numpy(dtype="float64")
    if "global_batch_size" in frame.columns:
        given = frame["global_batch_size"].to_numpy(dtype="float64")
        return np.where(np.isnan(given), batch, given)
    return batch


def list_not_predicted(offerings: pd.DataFrame, runtime: pd.DataFrame, clouds: set[str], regions: set[str],
                       accelerators: set[str], constraints: Constraints, local_ids: set[str]) -> pd.DataFrame:
    """Priced offerings that pass the filters but no runtime source predicts, grouped per cloud and accelerator."""
    predicted_rows = set(runtime["offering_row"].astype("int64").tolist())
    mask = ~offerings.index.isin(list(predicted_rows)) & ~offerings["offering_id"].isin(local_ids)
    mask &= offerings["price_per_hour"].notna() | offerings["spot_price_per_hour"].notna()
    if clouds:
        mask &= offerings["cloud"].isin(clouds)
    if regions:
        mask &= offerings["region"].isin(regions) | offerings["zone"].isin(regions)
    if accelerators:
        mask &= offerings["accelerator"].isin(accelerators)
    if constraints.min_gpu_memory_gib is not None:
        mask &= offerings["accelerator_memory_gib"].fillna(-1) >= constraints.min_gpu_memory_gib
    rest = offerings[mask]
    columns = ["cloud", "accelerator", "accelerator_count", "offerings", "regions", "min_price_per_hour",
               "min_spot_price_per_hour", "catalog", "status"]
    if rest.empty:
        return pd.DataFrame({c: [] for c in columns})
    grouped = rest.assign(accelerator=rest["accelerator"].fillna("none")).groupby(
        ["cloud", "accelerator", "accelerator_count"], dropna=False, sort=True).agg(
        offerings=("offering_id", "size"), regions=("region", "nunique"), min_price_per_hour=("price_per_hour", "min"),
        min_spot_price_per_hour=("spot_price_per_hour", "min"), catalog=("catalog", "first")).reset_index()
    grouped["status"] = NOT_PREDICTED
    return grouped[columns]


def _describe_constraint(name: str, constraints: Constraints) -> str:
    return {
        "cloud": f"--cloud {','.join(constraints.clouds)}",
        "region": f"--region {','.join(constraints.regions)}",
        "accelerator": f"--accelerator {','.join(constraints.accelerators)}",
        "spot": "--no-spot",
        "min-gpu-memory": f"--min-gpu-memory {constraints.min_gpu_memory_gib:g}" if constraints.min_gpu_memory_gib else "",
        "model-fit": "the model's measured device memory (it must fit)",
        "global-batch": f"--max-global-batch {constraints.max_global_batch}" if constraints.max_global_batch else "",
        "deadline": f"--deadline {format_hours(constraints.deadline_s)}",
        "budget": f"--budget {format_money(constraints.budget_usd)}" if constraints.budget_usd else "",
    }[name]


def infeasible_error(frame: pd.DataFrame, objective: Objective, constraints: Constraints, exclusions: Mapping[str, int],
                     primary: int, not_predicted: pd.DataFrame, profiles: Sequence[LabelledProfile],
                     assume_accelerator: bool = False) -> InfeasiblePlanError:
    """The error naming the constraint that excluded the last candidates and the best option it excluded."""
    at_primary = frame[frame["epochs"] == primary]
    if at_primary.empty:
        devices = ", ".join(sorted({p.device for p in profiles}))
        hint = ""
        if len(not_predicted):
            hint = (f"; {int(not_predicted['offerings'].sum())} offerings match the filters but are "
                    f"{NOT_PREDICTED} — profile the job on one of their accelerators and pass --profile")
        cpu_only = [p.label for p in profiles if p.profile.cpu_only_command]
        if cpu_only and len(cpu_only) == len(profiles) and not assume_accelerator:
            return InfeasiblePlanError(
                f"no offering could be predicted: the command of {', '.join(cpu_only)} never asks torch for an accelerator "
                "(no torch.cuda.is_available(), torch.accelerator, torch_xla), so it would run on the CPU of any machine "
                f"and only this machine applies (price it with --local-offering FILE); {CPU_ONLY_FIX}", None, None)
        return InfeasiblePlanError(f"no offering could be predicted: the profiles were measured on {devices}, and no "
                                   f"offering left by the filters runs on that{hint}", None, None)
    excluded = at_primary[at_primary["excluded_by"] != ""]
    last = next((name for name in reversed(CONSTRAINT_ORDER) if exclusions.get(name)), None)
    culprit = excluded[excluded["excluded_by"] == last] if last else excluded
    # The option to name is the one that relaxing the binding constraint least would admit: under a
    # budget that is the cheapest candidate, under a deadline the fastest, whatever the objective ranks by.
    if last == "budget":
        best = culprit.sort_values(["total_cost", "wall_s"], kind="stable").iloc[0]
    elif objective.kind == "fastest" or last == "deadline":
        best = culprit.sort_values(["wall_s", "total_cost"], kind="stable").iloc[0]
    else:
        best = culprit.sort_values(["total_cost", "wall_s"], kind="stable").iloc[0]
    earlier = [f"{_describe_constraint(n, constraints)} ({exclusions[n]})" for n in CONSTRAINT_ORDER
               if exclusions.get(n) and n != last]
    info = {k: best[k] for k in ("offering_id", "market", "batch_size", "epochs", "wall_s", "total_cost")}
    info["plan_id"] = plan_ids(culprit.loc[[best.name]]).iloc[0]
    message = (f"no plan meets the constraints: {_describe_constraint(last, constraints)} excluded the last "
               f"{exclusions[last]} candidate(s) at {primary} epochs"
               + (f" (earlier: {', '.join(earlier)})" if earlier else "")
               + f"; the best infeasible option is {best['offering_id']} ({best['market']}, batch {best['batch_size']}) "
               f"at {format_hours(best['wall_s'])} for ${best['total_cost']:.4g}")
    if last in ("cloud", "region", "accelerator", "min-gpu-memory") and len(not_predicted):
        message += (f"; {int(not_predicted['offerings'].sum())} offering(s) pass the filters but are {NOT_PREDICTED}: "
                    "profile the job on their accelerator and pass --profile")
    if last == "deadline":
        message += f" — relax the deadline to at least {format_hours(math.ceil(best['wall_s'] / 60) * 60)}"
    elif last == "budget":
        # Rounded up to the cent so that the suggested budget does admit the option it names.
        message += f" — raise the budget to at least {format_money(math.ceil(best['total_cost'] * 100 - 1e-9) / 100)}"
    return InfeasiblePlanError(message, last, info)
