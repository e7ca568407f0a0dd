"""`plan()`: profiles × catalog × objective × constraints → ranked plans. Pure: no I/O, no printing;
the same inputs give the same result and the inputs are not modified.

A candidate is one (offering, market, batch size, epoch option): market on-demand or spot, batch
size the profile's global batch, epoch option one of `epoch_options` (Malta's methodology 2: 5, 10,
20 by default). Each candidate's time and cost (all vectorised over a pandas frame):

    wall     = provisioning + data staging + E[training under interruptions]
    training = predict_total(profile, epochs) (trainwise estimator), from the runtime source
    cost     = price × billed(wall)  (billing granularity and minimum of the offering)
             + dataset egress from object storage + object storage for the run

Provisioning and staging apply to cloud (and reserved) offerings; on-premise machines and this
machine start at once with the data already there. Spot rows add the expected preemption loss
(Young/Daly checkpointing, `costs.spot_expectation`) and its spread to the band.

Ranking is within each epoch option; the primary epoch option (the largest unless given: Malta
found 20 epochs ranks VMs best) is the headline. When the best plan changes across epoch
options, or the runner-up lies within the winner's uncertainty band, a flag says so.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from trainwise.catalog import names
from trainwise.catalog.model import Catalog, Offering, frame_from_offerings
from trainwise.catalog.user import on_premise_price_per_hour
from trainwise.errors import TrainwiseError
from trainwise.core import costs
from trainwise.plan.objectives import Constraints, Objective, format_hours, format_money
from trainwise.plan.pareto import pareto_mask_grouped
from trainwise.plan.scaling import job_global_batch
from trainwise.plan.runtime import (
    DEFAULT_SOURCES,
    NOT_PREDICTED,
    LabelledProfile,
    RuntimeContext,
    RuntimeSource,
    collect,
    resolve_device,
)
from trainwise.predict.same_machine import predict_total
from trainwise.profile.schema import Profile

DEFAULT_EPOCH_OPTIONS = (5, 10, 20)
LOCAL_OFFERING_ID = "local/this-machine"
# An assumed price for this machine when the user gives none: a 2,000 $ workstation amortised over
# 3 years of continuous use, plus 150 W at 0.15 $/kWh (Künas' formula, with power added).
ASSUMED_LOCAL = {"capex_usd": 2000.0, "lifetime_years": 3.0, "power_kw": 0.15, "usd_per_kwh": 0.15}
CONSTRAINT_ORDER = ("cloud", "region", "accelerator", "spot", "min-gpu-memory", "model-fit", "global-batch", "deadline",
                    "budget")
# A recommendation whose global batch grew past one 8-GPU node's weak scaling, or that leaves fewer
# than this many optimizer steps per epoch, gets a flag: its epoch count is the profile's, measured
# (or assumed) at the smaller batch.
LARGE_BATCH_GROWTH = 8
FEW_STEPS_PER_EPOCH = 50


class InfeasiblePlanError(TrainwiseError):
    """No candidate meets the constraints; says which constraint excluded everything and what the
    best infeasible option would be."""

    def __init__(self, message: str, constraint: str | None = None, best_infeasible: dict[str, Any] | None = None):
        super().__init__(message)
        self.constraint = constraint
        self.best_infeasible = best_infeasible


class PlanOptions(BaseModel):
    """Assumptions of the cost model, each overridable; defaults cite their source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provisioning_s: tuple[float, float, float] | None = Field(
        default=None, description="low, expected, high seconds to a running cloud machine; None: per cloud and kind "
                                  "of machine (trainwise.plan.provisioning)")
    provisioning_source: str = "per cloud and kind of machine (trainwise.plan.provisioning)"
    dataset_gb: float | None = Field(default=None, ge=0, description="dataset staged to cloud machines; None: not modelled")
    dataset_source: str = Field(default="user-given --dataset-gb", description="where dataset_gb comes from")
    staging_bytes_per_s: float = Field(default=costs.DEFAULT_STAGING_BYTES_PER_S, gt=0)
    staging_source: str = costs.STAGING_SOURCE
    storage_usd_per_gb_month: float = Field(default=costs.DEFAULT_STORAGE_USD_PER_GB_MONTH, ge=0)
    interruptions_per_hour: float = Field(default=costs.DEFAULT_INTERRUPTIONS_PER_HOUR, ge=0)
    interruption_source: str = costs.INTERRUPTION_SOURCE
    checkpoint_write_s: float | None = Field(default=None, ge=0, description="None: from the model's size")
    estimator: str = "trainwise"
    reference: str | None = Field(default=None, description="offering_id of the reference platform; None: this machine")
    primary_epochs: int | None = Field(default=None, gt=0)
    this_host: str | None = Field(default=None, description="None: socket.gethostname()")
    top_n: int = Field(default=10, gt=0)
    billing: Literal["per_second", "per_minute", "per_hour"] | None = Field(
        default=None, description="override every offering's billing granularity (None: the catalog's)")
    min_billed_seconds: float | None = Field(default=None, ge=0, description="override the minimum billed time")
    distributed: Any = Field(default=None, description="a trainwise.plan.distributed.DistributedOptions: also rank "
                                                       "multi-GPU, multi-node, Hivemind and hybrid groups; None: single machines")


@dataclass(frozen=True)
class PlanResult:
    plans: pd.DataFrame              # every predicted candidate, feasible or not (see PLAN_COLUMNS)
    not_predicted: pd.DataFrame      # offerings with no runtime source, grouped
    primary_epochs: int
    epoch_options: tuple[int, ...]
    objective: Objective
    constraints: Constraints
    flags: tuple[str, ...]
    assumptions: tuple[str, ...]
    exclusions: Mapping[str, int]    # constraint -> candidates it excluded (at the primary epoch option)
    
    catalog_caption: str
    reference: str | None
    profiles: tuple[Mapping[str, Any], ...]
    inconsistencies: tuple[str, ...] = field(default=())
    # reason -> offerings/groups not ranked because they would change the job's global batch
    pruned: Mapping[str, int] = field(default_factory=dict)
    job_global_batch: int | None = None

    @property
    def ranked(self) -> pd.DataFrame:
        """Feasible candidates, best first within each epoch option."""
        feasible = self.plans[self.plans["feasible"]]
        return with_plan_ids(feasible.sort_values(["epochs", "rank"], kind="stable"))

    @property
    def primary(self) -> pd.DataFrame:
        ranked = self.ranked
        return ranked[ranked["epochs"] == self.primary_epochs]

    @property
    def best(self) -> dict[str, Any]:
        return self.primary.iloc[0].to_dict()

    @property
    def pareto(self) -> pd.DataFrame:
        frame = self.plans[self.plans["pareto"]]
        return with_plan_ids(frame.sort_values(["epochs", "wall_s", "total_cost"], kind="stable"))

    def best_per_epochs(self) -> pd.DataFrame:
        ranked = self.ranked
        return ranked[ranked["rank"] == 1]


# ----------------------------------------------------------------------------------- helpers


def default_local_offering() -> Offering:
    price = on_premise_price_per_hour(ASSUMED_LOCAL["capex_usd"], lifetime_years=ASSUMED_LOCAL["lifetime_years"],
                                      power_kw=ASSUMED_LOCAL["power_kw"], usd_per_kwh=ASSUMED_LOCAL["usd_per_kwh"],
                                      round_cents=False)
    note = (f"assumed: a {ASSUMED_LOCAL['capex_usd']:,.0f} $ workstation amortised over {ASSUMED_LOCAL['lifetime_years']:g} y "
            f"(8760 h/y) + {ASSUMED_LOCAL['power_kw'] * 1000:.0f} W at {ASSUMED_LOCAL['usd_per_kwh']} $/kWh = {price:.4f} $/h; "
            "pass --local-offering FILE for your own")
    return Offering(catalog="assumed", offering_id=LOCAL_OFFERING_ID, cloud="local", region="this machine",
                    instance_type="this machine", kind="on_premise", billing="per_second", min_billed_seconds=0.0,
                    price_per_hour=price, price_date="assumed", source="assumed (trainwise default)", notes=(note,))


def _local_offerings(local: Offering | Catalog | Sequence[Offering] | None) -> list[Offering]:
    if local is None:
        return [default_local_offering()]
    if isinstance(local, Offering):
        return [local]
    if isinstance(local, Catalog):
        offerings = list(local.iter_offerings())
        if len(offerings) > 1:
            # The file prices this one machine: which of several it is cannot be guessed.
            names = ", ".join(o.instance_type for o in offerings[:5]) + (", …" if len(offerings) > 5 else "")
            raise TrainwiseError(f"the local offering file {local.origin.removeprefix('user file ')} has {len(offerings)} offerings ({names}); it "
                                 "prices this machine, so keep only the one that describes it")
        return offerings
    return list(local)


def _labelled(profiles: Any, catalog: Catalog, this_host: str) -> list[LabelledProfile]:
    if isinstance(profiles, Profile):
        items: list[tuple[str | None, Profile]] = [(None, profiles)]
    elif isinstance(profiles, Mapping):
        items = list(profiles.items())
    else:
        items = [(None, p) if isinstance(p, Profile) else (p[0], p[1]) for p in profiles]
    if not items:
        raise TrainwiseError("plan needs at least one profile: profile the job (trainwise profile) or pass --profile FILE")
    out: list[LabelledProfile] = []
    seen: set[str] = set()
    for label, profile in items:
        env = profile.environment
        accelerator = resolve_device(env.device_name, catalog) if env.device != "cpu" else None
        if label is None:
            label = f"{profile.workload or 'job'}@{env.hostname} b{profile.dataset.global_batch_size}"
        base, n = label, 2
        while label in seen:
            label, n = f"{base} #{n}", n + 1
        seen.add(label)
        out.append(LabelledProfile(label=label, profile=profile, accelerator=accelerator, here=env.hostname == this_host))
    return out


def _predictions(profiles: Sequence[LabelledProfile], epoch_options: Sequence[int], estimator: str,
                 checkpoint_write_s: float | None) -> pd.DataFrame:
    rows = []
    for item in profiles:
        profile = item.profile
        steady = profile.steady_state
        n_train = profile.dataset.n_train
        state = costs.training_state_bytes(profile.model.gradient_bytes, profile.model.optimizer)
        checkpoint = checkpoint_write_s if checkpoint_write_s is not None else costs.checkpoint_write_s(state)
        for epochs in epoch_options:
            prediction = predict_total(profile, epochs, estimator)
            n_it = prediction.iterations_per_epoch
            samples_per_epoch = n_train if n_train else n_it * profile.dataset.global_batch_size
            init_s = profile.init.total_s
            first_epoch = steady.first_iteration_s + (n_it - 1) * steady.iteration.mean_s
            validation = prediction.breakdown_s.get("validation_s", 0.0)
            steady_s = max(0.0, prediction.total_s - init_s - first_epoch - validation)
            rows.append({"profile": item.label, "epochs": int(epochs), "training_s": prediction.total_s,
                         "training_low_s": prediction.low_s, "training_high_s": prediction.high_s, "init_s": init_s,
                         "first_epoch_s": first_epoch, "steady_s": steady_s, "validation_s": validation,
                         "relative_error": prediction.relative_halfwidth, "samples": float(samples_per_epoch * epochs),
                         "checkpoint_write_s": checkpoint,
                         "device_memory_gib": (profile.memory.peak_device_bytes / 2**30
                                               if profile.memory.peak_device_bytes else np.nan)})
    return pd.DataFrame(rows)


def _check_names(catalog_offerings: pd.DataFrame, catalog: Catalog, constraints: Constraints, reference: str | None,
                 local_ids: set[str]) -> tuple[set[str], set[str], set[str]]:
    """Validate filter names against the catalog; unknown names get suggestions."""
    clouds_known = sorted(catalog_offerings["cloud"].dropna().unique().tolist()) if constraints.clouds else []
    clouds: set[str] = set()
    for cloud in constraints.clouds:
        match = [c for c in clouds_known if c.lower() == cloud.strip().lower()]
        if not match:
            near = names.suggest(cloud, clouds_known)
            hint = f"did you mean {', '.join(near)}?" if near else f"the catalog has {', '.join(clouds_known)}"
            raise TrainwiseError(f"--cloud {cloud}: no such cloud in catalog {catalog.name}: {hint}")
        clouds.add(match[0])
    regions_known = (sorted(set(catalog_offerings["region"].dropna()) | set(catalog_offerings["zone"].dropna()))
                     if constraints.regions else [])
    regions: set[str] = set()
    for region in constraints.regions:
        match = [r for r in regions_known if r.lower() == region.strip().lower()]
        if not match:
            near = names.suggest(region, regions_known)
            hint = f"did you mean {', '.join(near)}?" if near else catalog.regions_hint()
            raise TrainwiseError(f"--region {region}: no such region or zone in catalog {catalog.name}: {hint}")
        regions.add(match[0])
    accelerators = {catalog.accelerator(name).name for name in constraints.accelerators}
    if reference is not None and reference not in local_ids and not (catalog_offerings["offering_id"] == reference).any():
        near = names.suggest(reference, catalog_offerings["offering_id"].dropna().tolist() + sorted(local_ids))
        hint = f"did you mean {', '.join(near)}?" if near else "pass an offering_id from `trainwise catalog search`"
        raise TrainwiseError(f"unknown reference offering {reference!r}: {hint}")
    return clouds, regions, accelerators


def _price_provenance(offerings: pd.DataFrame, catalog: Catalog) -> pd.Series:
    """Where each price comes from, decided once per (catalog, price date): the packaged or imported
    snapshot, the seed documents' prices, a user file, or trainwise's assumed local price."""
    names_ = offerings["catalog"].fillna("").to_numpy(dtype=object)
    dates = offerings["price_date"].fillna("undated").to_numpy(dtype=object)
    sources = offerings["source"].fillna("").to_numpy(dtype=object)
    keys, first, inverse = np.unique(np.char.add(names_.astype(str), np.char.add("\x00", dates.astype(str))),
                                     return_index=True, return_inverse=True)
    labels = []
    for position in first:
        name, date, source = names_[position], dates[position], sources[position]
        if name == "assumed":
            labels.append("assumed (amortised workstation; see assumptions)")
        elif name == "seed-2021":
            labels.append(f"seed-2021 ({date})")
        elif name.startswith("user:") or " offering " in f" {source}":
            labels.append(f"user file ({source.rsplit(' offering ', 1)[0]})")
        else:
            labels.append(f"catalog {name}, {date} snapshot")
    return pd.Series(np.array(labels, dtype=object)[inverse.reshape(-1)], index=offerings.index)


def _egress_price(catalog: Catalog) -> tuple[float, str]:
    rows = catalog.egress[catalog.egress["scope"] == "object_storage"] if len(catalog.egress) else catalog.egress
    if len(rows):
        return float(rows["usd_per_gb"].iloc[0]), str(rows["source"].iloc[0])
    return 0.01, "Erben et al. §4: object-storage egress 0.01 $/GB"


# ----------------------------------------------------------------------------------- plan()


def check_inputs(catalog: Catalog, constraints: Constraints, options: PlanOptions | None = None,
                 local_offering: Offering | Catalog | None = None) -> None:
    """Validate the filter and reference names against the catalog before any expensive step
    (profiling): unknown clouds, regions, accelerators or offerings get suggestions."""
    options = options or PlanOptions()
    local_ids = {o.offering_id for o in _local_offerings(local_offering)}
    _check_names(catalog.offerings, catalog, constraints, options.reference, local_ids)


def plan(profiles: Any, catalog: Catalog, objective: Objective | None = None, constraints: Constraints | None = None, *,
         epoch_options: Sequence[int] = DEFAULT_EPOCH_OPTIONS, local_offering: Offering | Catalog | None = None,
         options: PlanOptions | None = None, sources: Sequence[RuntimeSource] = DEFAULT_SOURCES) -> PlanResult:
    """Rank every predicted (offering × market × batch size × epoch option) for `objective` under
    `constraints`. Raises InfeasiblePlanError when nothing is feasible at the primary epoch option."""
    objective = objective or Objective()
    constraints = (constraints or Constraints()).with_objective(objective)
    options = options or PlanOptions()
    epochs_list = tuple(sorted({int(e) for e in epoch_options}))
    if not epochs_list or any(e <= 0 for e in epochs_list):
        raise TrainwiseError(f"epoch options must be positive whole numbers (got {list(epoch_options)!r})")
    primary = options.primary_epochs or max(epochs_list)
    if primary not in epochs_list:
        epochs_list = tuple(sorted({*epochs_list, primary}))
    this_host = options.this_host or socket.gethostname()

    labelled = _labelled(profiles, catalog, this_host)
    locals_ = _local_offerings(local_offering) if any(p.here for p in labelled) else []
    local_ids = {o.offering_id for o in locals_}
    base = catalog.offerings
    local_frame = frame_from_offerings(locals_) if locals_ else base.iloc[:0]
    offerings = pd.concat([base, local_frame], ignore_index=True) if len(local_frame) else base.reset_index(drop=True)
    offerings = offerings.drop_duplicates("offering_id", keep="last").reset_index(drop=True)
    clouds, regions, accelerators = _check_names(offerings, catalog, constraints, options.reference, local_ids)

    predictions = _predictions(labelled, epochs_list, options.estimator, options.checkpoint_write_s)
    groups: dict = {}
    if options.distributed is not None:
        from trainwise.plan import distributed as dist

        local_positions = np.flatnonzero(offerings["offering_id"].isin(local_ids).to_numpy()).tolist()
        group_rows, groups = dist.expand(offerings, labelled, options.distributed, local_positions)
        if len(group_rows):
            offerings = pd.concat([offerings, group_rows.astype(offerings.dtypes.to_dict(), errors="ignore")],
                                  ignore_index=True)
        sources = (dist.data_parallel_source, *sources)
    context = RuntimeContext(profiles=tuple(labelled), predictions=predictions, local_offering_ids=frozenset(local_ids),
                             catalog=catalog, groups=groups, distributed=options.distributed)
    runtime = collect(offerings, context, sources)
    extra = predictions[["profile", "epochs", "samples", "checkpoint_write_s", "device_memory_gib"]]
    runtime = runtime.merge(extra, on=["profile", "epochs"], how="left")

    if options.billing is not None or options.min_billed_seconds is not None:
        offerings = offerings.copy()
        if options.billing is not None:
            offerings["billing"] = options.billing
        if options.min_billed_seconds is not None:
            offerings["min_billed_seconds"] = float(options.min_billed_seconds)
    candidates = _expand_markets(runtime, offerings, local_ids)
    candidates["price_provenance"] = _take_categorical(_price_provenance(offerings, catalog),
                                                       candidates["offering_row"].to_numpy())
    _cost_model(candidates, catalog, options)
    flags: list[str] = []
    exclusions = _apply_constraints(candidates, constraints, clouds, regions, accelerators, primary)
    _rank(candidates, objective)
    reference_label = _reference_metrics(candidates, options.reference, local_ids, primary)
    if options.distributed is not None:
        dist.explain(candidates)
    candidates["pareto"] = False
    feasible = candidates["feasible"].to_numpy()
    if feasible.any():
        mask = pareto_mask_grouped(candidates["wall_s"].to_numpy()[feasible], candidates["total_cost"].to_numpy()[feasible],
                                   candidates["epochs"].to_numpy()[feasible])
        pareto = np.zeros(len(candidates), dtype=bool)
        pareto[np.flatnonzero(feasible)[mask]] = True
        candidates["pareto"] = pareto

    not_predicted = _not_predicted(offerings, runtime, clouds, regions, accelerators, constraints, local_ids)
    flags += _profile_flags(labelled, runtime)
    if not (candidates["feasible"].to_numpy() & (candidates["epochs"].to_numpy() == primary)).any():
        raise _infeasible(candidates, objective, constraints, exclusions, primary, not_predicted, labelled)
    flags += _robustness_flags(candidates, objective, epochs_list, constraints)
    flags += _large_batch_flags(candidates, labelled, primary, constraints)
    assumptions = _assumptions(catalog, options, locals_, candidates, predictions)
    from trainwise.plan.scaling import is_slice

    for item in labelled:
        if is_slice(item.profile):
            assumptions.append(f"profile {item.label} measured a slice here (batch {item.profile.dataset.global_batch_size}); "
                               f"the full-size step (batch {job_global_batch(item.profile)}) is the device model's, and "
                               "its data loader is assumed to keep up with the devices (real JPEG decoding needs "
                               "enough DataLoader workers)")
    plans = candidates.drop(columns=["offering_row", "_spot", "_cloudy", "_granularity_s", "_seq"])
    profile_rows = tuple({"label": p.label, "host": p.host, "device": p.device, "accelerator": p.accelerator,
                          "provenance": p.provenance, "batch_size": p.profile.dataset.global_batch_size,
                          "workload": p.profile.workload, "created_at": p.profile.created_at,
                          "notes": tuple(str(n) for n in p.profile.notes)} for p in labelled)
    from trainwise.plan.metrics import inconsistencies

    return PlanResult(plans=plans, not_predicted=not_predicted, primary_epochs=primary, epoch_options=epochs_list,
                      objective=objective, constraints=constraints, flags=tuple(flags), assumptions=tuple(assumptions),
                      exclusions=dict(exclusions), catalog_caption=catalog.caption, reference=reference_label,
                      profiles=profile_rows,
                      inconsistencies=tuple(f"{i.where}: stated {i.stated}, inputs give {i.computed:.3g} — {i.explanation}"
                                            for i in inconsistencies()),
                      pruned=dict(sorted(context.pruned.items(), key=lambda kv: -kv[1])),
                      job_global_batch=job_global_batch(labelled[0].profile) if len(labelled) == 1 else None)


_OFFERING_FIELDS = ["offering_id", "catalog", "cloud", "region", "zone", "instance_type", "accelerator",
                    "accelerator_count", "accelerator_memory_gib", "kind", "billing", "min_billed_seconds"]


def _take_categorical(values: pd.Series, idx: np.ndarray) -> pd.Categorical:
    """values[idx] as a Categorical: the (small) offerings column is factorised once, and the
    candidates get integer codes — no per-row string work for 100,000 rows."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return pd.Categorical.from_codes(codes[idx], categories=pd.Index(uniques, dtype=object))


def _expand_markets(runtime: pd.DataFrame, offerings: pd.DataFrame, local_ids: set[str] | frozenset[str] = frozenset()) -> pd.DataFrame:
    """One row per (runtime row, market with a price), built column by column with numpy takes."""
    rows = runtime["offering_row"].to_numpy().astype("int64")
    on_demand = offerings["price_per_hour"].to_numpy()[rows]
    spot = offerings["spot_price_per_hour"].to_numpy()[rows]
    sel_on = np.flatnonzero(~np.isnan(on_demand))
    sel_spot = np.flatnonzero(~np.isnan(spot))
    sel = np.concatenate([sel_on, sel_spot])
    is_spot = np.concatenate([np.zeros(sel_on.size, dtype=bool), np.ones(sel_spot.size, dtype=bool)])
    data: dict[str, Any] = {}
    for column in runtime.columns:
        values = runtime[column]
        data[column] = values.array.take(sel) if isinstance(values.dtype, pd.CategoricalDtype) else values.to_numpy()[sel]
    data["market"] = pd.Categorical.from_codes(is_spot.astype("int8"), categories=["on-demand", "spot"])
    data["price_per_hour"] = np.where(is_spot, spot[sel], on_demand[sel])
    idx = rows[sel]
    kind = offerings["kind"].fillna("cloud")
    billing = offerings["billing"].fillna("per_second")
    for column in _OFFERING_FIELDS:
        if column in ("accelerator_count", "accelerator_memory_gib", "min_billed_seconds"):
            data[column] = offerings[column].to_numpy(dtype="float64")[idx]
        else:
            source = kind if column == "kind" else billing if column == "billing" else offerings[column]
            data[column] = _take_categorical(source, idx)
    data["min_billed_seconds"] = np.nan_to_num(data["min_billed_seconds"], nan=0.0)
    # numeric/boolean helpers, computed once per offering (the cost model and filters use them)
    data["_spot"] = is_spot
    # Provisioning and staging are for machines still to be rented: this machine (a local offering,
    # whatever its kind — a cloud VM one is already on is priced as cloud) is up and has the data.
    data["_cloudy"] = ((kind != "on_premise") & ~offerings["offering_id"].isin(local_ids)).to_numpy()[idx]
    data["_granularity_s"] = billing.map(costs.GRANULARITY_S).to_numpy(dtype="float64")[idx]
    data["_seq"] = np.arange(sel.size)
    return pd.DataFrame(data)


def plan_ids(frame: pd.DataFrame) -> pd.Series:
    """"offering | market | batch B | E epochs": a readable, unique id of each candidate (built on
    demand for the rows shown, not for every candidate)."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    return (frame["offering_id"].astype(str) + " | " + frame["market"].astype(str) + " | batch "
            + frame["batch_size"].astype(str) + " | " + frame["epochs"].astype(str) + " epochs")


def with_plan_ids(frame: pd.DataFrame) -> pd.DataFrame:
    if "plan_id" in frame.columns:
        return frame
    out = frame.copy()
    out.insert(0, "plan_id", plan_ids(frame))
    return out


def _cost_model(frame: pd.DataFrame, catalog: Catalog, options: PlanOptions) -> None:
    """Adds time, band, cost and metric columns in place (the frame is the planner's own)."""
    cloudy = frame["_cloudy"].to_numpy()
    spot = frame["_spot"].to_numpy()
    if options.provisioning_s is not None:
        low_p, mid_p, high_p = options.provisioning_s
        frame["provisioning_source"] = options.provisioning_source
    else:
        from trainwise.plan.provisioning import provisioning_table

        low_p, mid_p, high_p, sources = provisioning_table(frame)
        frame["provisioning_source"] = pd.Categorical(np.where(cloudy, sources, "already running"))
    provisioning = np.where(cloudy, mid_p, 0.0)
    provisioning_low = np.where(cloudy, low_p, 0.0)
    provisioning_high = np.where(cloudy, high_p, 0.0)
    dataset_gb = options.dataset_gb or 0.0
    staging = np.where(cloudy, costs.staging_seconds(dataset_gb * 1e9, options.staging_bytes_per_s), 0.0)
    training = frame["training_s"].to_numpy()
    rate = np.where(spot, options.interruptions_per_hour, 0.0)
    restart = provisioning + frame["init_s"].to_numpy()
    spot_model = costs.spot_expectation(training, rate, frame["checkpoint_write_s"].to_numpy(), restart)
    expected = spot_model["expected_s"]
    factor = np.where(training > 0, expected / np.where(training > 0, training, 1.0), 1.0)
    spread = 1.96 * spot_model["std_s"]
    wall = provisioning + staging + expected
    low = provisioning_low + staging + np.maximum(frame["training_low_s"].to_numpy() * factor - spread,
                                                  frame["training_low_s"].to_numpy())
    high = provisioning_high + staging + frame["training_high_s"].to_numpy() * factor + spread
    frame["provisioning_s"] = provisioning
    frame["staging_s"] = staging
    frame["preemption_loss_s"] = spot_model["loss_s"]
    frame["expected_interruptions"] = spot_model["interruptions"]
    frame["checkpoint_interval_s"] = spot_model["interval_s"]
    frame["wall_s"] = wall
    frame["low_s"] = np.minimum(low, wall)
    frame["high_s"] = np.maximum(high, wall)
    with np.errstate(invalid="ignore", divide="ignore"):
        frame["relative_band"] = np.where(wall > 0, (frame["high_s"] - frame["low_s"]) / 2 / wall, 0.0)
    billing = frame["_granularity_s"].to_numpy()
    minimum = frame["min_billed_seconds"].to_numpy()
    price = frame["price_per_hour"].to_numpy()

    def billed_cost(seconds: np.ndarray) -> np.ndarray:
        billed = np.ceil(np.maximum(seconds, minimum) / billing - 1e-9) * billing
        return billed / 3600.0 * price

    egress_usd_per_gb, _ = _egress_price(catalog)
    egress = np.where(cloudy, costs.egress_cost(dataset_gb, egress_usd_per_gb), 0.0)
    storage = np.where(cloudy, costs.storage_cost(dataset_gb, options.storage_usd_per_gb_month, wall), 0.0)
    frame["compute_cost"] = billed_cost(wall)
    frame["egress_cost"] = egress
    frame["storage_cost"] = storage
    # fixed costs, whatever the training takes: the machine's time to boot and stage, egress, storage
    frame["fixed_cost"] = (provisioning + staging) / 3600.0 * price + egress + storage
    # data-parallel groups: the peers' network egress and data loading, per hour of the run
    network_rate = frame["network_usd_per_hour"].to_numpy() if "network_usd_per_hour" in frame.columns else None
    network = network_rate * wall / 3600.0 if network_rate is not None else 0.0
    if network_rate is not None:
        frame["network_egress_cost"] = network
    frame["total_cost"] = frame["compute_cost"] + egress + storage + network
    frame["fixed_cost"] = np.minimum(frame["fixed_cost"].to_numpy(), frame["total_cost"].to_numpy())
    frame["cost_low"] = billed_cost(frame["low_s"].to_numpy()) + egress + storage + (
        network_rate * frame["low_s"].to_numpy() / 3600.0 if network_rate is not None else 0.0)
    frame["cost_high"] = billed_cost(frame["high_s"].to_numpy()) + egress + storage + (
        network_rate * frame["high_s"].to_numpy() / 3600.0 if network_rate is not None else 0.0)
    frame["usd_per_epoch"] = frame["total_cost"] / frame["epochs"]
    frame["usd_per_1m_samples"] = frame["total_cost"] / frame["samples"] * 1e6
    frame["status"] = "predicted"


def _apply_constraints(frame: pd.DataFrame, constraints: Constraints, clouds: set[str], regions: set[str],
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


def _rank(frame: pd.DataFrame, objective: Objective) -> None:
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


def _reference_metrics(frame: pd.DataFrame, reference: str | None, local_ids: set[str], primary: int) -> str | None:
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


def _not_predicted(offerings: pd.DataFrame, runtime: pd.DataFrame, clouds: set[str], regions: set[str],
                   accelerators: set[str], constraints: Constraints, local_ids: set[str]) -> pd.DataFrame:
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


def _profile_flags(profiles: Sequence[LabelledProfile], runtime: pd.DataFrame) -> list[str]:
    flags = []
    used = set(runtime["profile"].unique()) if len(runtime) else set()
    for p in profiles:
        if p.label in used:
            continue
        if p.accelerator is None and p.profile.environment.device != "cpu":
            flags.append(f"profile {p.label}: device {p.device!r} is not an accelerator the catalog knows; not matched to any offering")
        elif p.accelerator is None:
            flags.append(f"profile {p.label}: a CPU profile from {p.host} (not this machine) has no offering to price it on")
        else:
            flags.append(f"profile {p.label}: no single-{p.accelerator} offering in the catalog to price it on")
    return flags


def _robustness_flags(frame: pd.DataFrame, objective: Objective, epochs_list: Sequence[int],
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


def _large_batch_flags(frame: pd.DataFrame, profiles: Sequence[LabelledProfile], primary: int,
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


def _infeasible(frame: pd.DataFrame, objective: Objective, constraints: Constraints, exclusions: Mapping[str, int],
                primary: int, not_predicted: pd.DataFrame, profiles: Sequence[LabelledProfile]) -> InfeasiblePlanError:
    at_primary = frame[frame["epochs"] == primary]
    if at_primary.empty:
        devices = ", ".join(sorted({p.device for p in profiles}))
        hint = ""
        if len(not_predicted):
            hint = (f"; {int(not_predicted['offerings'].sum())} offerings match the filters but are "
                    f"{NOT_PREDICTED} — profile the job on one of their accelerators and pass --profile")
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


def _assumptions(catalog: Catalog, options: PlanOptions, locals_: Sequence[Offering], frame: pd.DataFrame,
                 predictions: pd.DataFrame) -> list[str]:
    egress_price, egress_source = _egress_price(catalog)
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
