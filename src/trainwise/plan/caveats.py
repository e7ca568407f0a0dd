"""What a ranking comes with: flags (unmatched profiles, ties within the band, a winner that changes
with the epoch count, a much larger global batch) and the assumptions its figures rest on."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from trainwise.catalog.model import Catalog, Offering
from trainwise.plan.candidates import object_storage_egress
from trainwise.plan.feasibility import global_batch_sizes
from trainwise.plan.models import PlanOptions
from trainwise.plan.objectives import Constraints, Objective, format_hours
from trainwise.plan.runtime import CPU_ONLY_FIX, NOT_PREDICTED, LabelledProfile
from trainwise.plan.scaling import is_slice, job_global_batch

# A recommendation whose global batch grew past one 8-GPU node's weak scaling, or that leaves fewer
# than this many optimizer steps per epoch, gets a flag: its epoch count is the profile's, measured
# (or assumed) at the smaller batch.
LARGE_BATCH_GROWTH = 8
FEW_STEPS_PER_EPOCH = 50


def profile_flags(profiles: Sequence[LabelledProfile], runtime: pd.DataFrame, assume_accelerator: bool = False) -> list[str]:
    """A flag for each profile no offering was priced on, saying why; and for each whose command would leave an
    accelerator idle."""
    flags = []
    used = set(runtime["profile"].unique()) if len(runtime) else set()
    for p in profiles:
        if p.profile.cpu_only_command and not assume_accelerator:
            flags.append(f"profile {p.label}: no GPU/TPU plan (the command never asks torch for one): {CPU_ONLY_FIX}")
        if p.label in used:
            continue
        if p.accelerator is None and p.profile.environment.device != "cpu":
            flags.append(f"profile {p.label}: device {p.device!r} is not an accelerator the catalog knows; not matched to any offering")
        elif p.accelerator is None:
            flags.append(f"profile {p.label}: a CPU profile from {p.host} (not this machine) has no offering to price it on")
        else:
            flags.append(f"profile {p.label}: no single-{p.accelerator} offering in the catalog to price it on")
    return flags


def robustness_flags(frame: pd.DataFrame, objective: Objective, epochs_list: Sequence[int],
                     constraints: Constraints) -> list[str]:
    """Malta's observation: the best choice can flip with the epoch count; and a winner
    whose runner-up lies within its uncertainty band is not a clear winner."""
    flags = []
    top = frame.iloc[np.flatnonzero(frame["rank"].to_numpy() <= 2)]
    winners: dict[int, str] = {}
    by_cost = objective.kind in ("cheapest", "deadline")
    value, low, high = ("total_cost", "cost_low", "cost_high") if by_cost else ("wall_s", "low_s", "high_s")
    for e in epochs_list:
        group = top[top["epochs"] == e].sort_values("rank")
        if group.empty:
            flags.append(f"{e} epochs: no feasible plan")
            continue
        first = group.iloc[0]
        winners[e] = f"{first['offering_id']} ({first['market']}, batch {first['batch_size']})"
        if len(group) > 1:
            second = group.iloc[1]
            if second[low] <= first[high] and first[low] <= second[high]:
                what = "cost" if by_cost else "time"
                flags.append(f"{e} epochs: the top two plans overlap within the {what} uncertainty band — "
                             f"{winners[e]} {_fmt(first, value)} vs {second['offering_id']} ({second['market']}, "
                             f"batch {second['batch_size']}) {_fmt(second, value)}: treat them as tied")
        if constraints.deadline_s is not None and first["high_s"] > constraints.deadline_s:
            flags.append(f"{e} epochs: {winners[e]} meets the deadline on expectation but its band reaches "
                         f"{format_hours(first['high_s'])} > {format_hours(constraints.deadline_s)}")
    if len(set(winners.values())) > 1:
        flags.append("the best plan changes with the epoch count (Malta): "
                     + "; ".join(f"{e} epochs → {w}" for e, w in winners.items()))
    return flags


def large_batch_flags(frame: pd.DataFrame, profiles: Sequence[LabelledProfile], primary: int,
                      constraints: Constraints) -> list[str]:
    """The best plan trains with a much larger global batch than the profile did (weak scaling over
    many devices): its time assumes the profile's epoch count, which a much larger batch may not reach
    the same accuracy in."""
    feasible = frame[frame["feasible"] & (frame["epochs"] == primary)]
    if feasible.empty:
        return []
    best = feasible.sort_values("rank", kind="stable").iloc[0]
    global_batch = float(global_batch_sizes(feasible.loc[[best.name]])[0])
    growth = global_batch / max(1, int(best["batch_size"]))
    n_train = next((p.profile.dataset.n_train for p in profiles if p.label == best["profile"]), None)
    steps_per_epoch = math.ceil(n_train / global_batch) if n_train else None
    few_steps = steps_per_epoch is not None and steps_per_epoch < FEW_STEPS_PER_EPOCH
    if growth < 2 or (growth <= LARGE_BATCH_GROWTH and not few_steps):
        return []
    steps = (f", {steps_per_epoch:,} optimizer step(s) per epoch, {steps_per_epoch * primary:,} in {primary} epochs"
             if steps_per_epoch else "")
    cap = "" if constraints.max_global_batch else f"; to rank only smaller groups, pass --max-global-batch {int(best['batch_size']) * 4}"
    return [f"the best plan ({best['offering_id']}) trains with a global batch of {global_batch:,.0f}, {growth:,.0f}× the "
            f"profiled {int(best['batch_size'])}{steps}: its time assumes the profile's epoch count, which a batch this "
            f"large may not converge in (more epochs or a retuned learning rate; check with `--epochs-from`){cap}"]


def _fmt(row: Any, value: str) -> str:
    if value == "total_cost":
        return f"${row['total_cost']:.4g} (${row['cost_low']:.4g}–${row['cost_high']:.4g})"
    return f"{format_hours(row['wall_s'])} ({format_hours(row['low_s'])}–{format_hours(row['high_s'])})"


def list_assumptions(catalog: Catalog, options: PlanOptions, locals_: Sequence[Offering], frame: pd.DataFrame,
                     predictions: pd.DataFrame) -> list[str]:
    """The cost model's assumptions, each with its figure and source, as the report lists them."""
    egress_price, egress_source = object_storage_egress(catalog)
    if options.provisioning_s is not None:
        low, mid, high = options.provisioning_s
        provisioning_line = (f"provisioning/boot of a cloud machine: {mid / 60:.1f} min (band {low / 60:.0f}–{high / 60:.0f} min) — "
                             f"{options.provisioning_source}; on-premise and this machine: 0")
    else:
        from trainwise.plan.provisioning import describe

        provisioning_line = describe()
    out = [
        f"prices: {catalog.caption}",
        f"training time: trainwise's same-machine estimator (estimator {options.estimator!r}) on each profile; "
        "the band is the steady-state 95 % interval",
        provisioning_line,
        "billing: the whole wall time (boot included) at "
        + (f"{options.billing or 'the offering’s'} granularity and "
           + (f"a {options.min_billed_seconds:g} s minimum" if options.min_billed_seconds is not None else "the offering’s minimum")
           + (" (user override)" if options.billing or options.min_billed_seconds is not None else "")),
    ]
    if options.dataset_gb:
        out.append(f"data staging to cloud machines: {options.dataset_gb:g} GB ({options.dataset_source}) at {options.staging_bytes_per_s / 1e6:.2f} MB/s "
                   f"({options.staging_source}); egress {egress_price:g} $/GB ({egress_source}); storage "
                   f"{options.storage_usd_per_gb_month:g} $/GB-month for the run; staged once, to a bucket in the "
                   "offering's region, from which every machine of a multi-node or Hivemind group reads it (in-region "
                   "reads are free and fast next to the upload), so a group pays the upload, its egress and storage once; "
                   "streaming training data to peers in other regions is the groups' network cost (--bytes-per-sample)")
    else:
        out.append("data staging, egress and storage: not included (dataset size unknown: pass --dataset-gb)")
    checkpoints = sorted(set(np.round(predictions["checkpoint_write_s"].to_numpy(), 2)))
    out.append(f"spot/preemptible: {options.interruptions_per_hour:g} interruptions/h ({options.interruption_source}); "
               f"checkpoint every sqrt(2·C·MTBF) (Young/Daly) with C = "
               + ", ".join(f"{c:g}" for c in checkpoints)
               + (" s (given)" if options.checkpoint_write_s is not None else
                  " s (assumed: 1 s + model and optimizer state at 200 MB/s)")
               + "; restart = provisioning + T(Init); band ±1.96 σ of the interruption count")
    for offering in locals_:
        out.append(f"this machine ({offering.offering_id}): {offering.price_per_hour:.4f} $/h — "
                   + ("; ".join(offering.notes) or offering.source))
    if options.distributed is not None:
        from trainwise.plan.distributed import assumptions as distributed_assumptions

        out += distributed_assumptions(options.distributed)
    else:
        out.append("offerings with more than one accelerator, and accelerators no profile ran on, are listed as "
                   f"'{NOT_PREDICTED}'")
    return out


def slice_assumptions(profiles: Sequence[LabelledProfile]) -> list[str]:
    """A slice profile's full-size step is the device model's: say so for each one."""
    out = []
    for item in profiles:
        if is_slice(item.profile):
            out.append(f"profile {item.label} measured a slice here (batch {item.profile.dataset.global_batch_size}); "
                       f"the full-size step (batch {job_global_batch(item.profile)}) is the device model's, and "
                       "its data loader is assumed to keep up with the devices (real JPEG decoding needs "
                       "enough DataLoader workers)")
    return out
