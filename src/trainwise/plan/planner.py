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

import socket
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from trainwise.catalog.model import Catalog, Offering, frame_from_offerings
from trainwise.errors import TrainwiseError
from trainwise.plan.candidates import apply_cost_model, expand_markets, price_provenance, take_categorical
from trainwise.plan.caveats import large_batch_flags, list_assumptions, profile_flags, robustness_flags, slice_assumptions
from trainwise.plan.feasibility import apply_constraints, infeasible_error, list_not_predicted
from trainwise.plan.inputs import check_names, label_profiles, local_offerings, predict_profiles
from trainwise.plan.models import PlanOptions, PlanResult
from trainwise.plan.objectives import Constraints, Objective
from trainwise.plan.ranking import mark_pareto, rank_candidates, reference_metrics
from trainwise.plan.runtime import DEFAULT_SOURCES, RuntimeContext, RuntimeSource, collect
from trainwise.plan.scaling import job_global_batch

DEFAULT_EPOCH_OPTIONS = (5, 10, 20)


def check_inputs(catalog: Catalog, constraints: Constraints, options: PlanOptions | None = None,
                 local_offering: Offering | Catalog | None = None) -> None:
    """Validate the filter and reference names against the catalog before any expensive step
    (profiling): unknown clouds, regions, accelerators or offerings get suggestions."""
    options = options or PlanOptions()
    local_ids = {o.offering_id for o in local_offerings(local_offering)}
    check_names(catalog.offerings, catalog, constraints, options.reference, local_ids)


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

    labelled = label_profiles(profiles, catalog, this_host)
    locals_ = local_offerings(local_offering) if any(p.here for p in labelled) else []
    local_ids = {o.offering_id for o in locals_}
    base = catalog.offerings
    local_frame = frame_from_offerings(locals_) if locals_ else base.iloc[:0]
    offerings = pd.concat([base, local_frame], ignore_index=True) if len(local_frame) else base.reset_index(drop=True)
    offerings = offerings.drop_duplicates("offering_id", keep="last").reset_index(drop=True)
    clouds, regions, accelerators = check_names(offerings, catalog, constraints, options.reference, local_ids)

    predictions = predict_profiles(labelled, epochs_list, options.estimator, options.checkpoint_write_s)
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
                             catalog=catalog, groups=groups, distributed=options.distributed,
                             assume_accelerator=options.assume_accelerator)
    runtime = collect(offerings, context, sources)
    extra = predictions[["profile", "epochs", "samples", "checkpoint_write_s", "device_memory_gib"]]
    runtime = runtime.merge(extra, on=["profile", "epochs"], how="left")

    if options.billing is not None or options.min_billed_seconds is not None:
        offerings = offerings.copy()
        if options.billing is not None:
            offerings["billing"] = options.billing
        if options.min_billed_seconds is not None:
            offerings["min_billed_seconds"] = float(options.min_billed_seconds)
    candidates = expand_markets(runtime, offerings, local_ids)
    candidates["price_provenance"] = take_categorical(price_provenance(offerings, catalog),
                                                      candidates["offering_row"].to_numpy())
    apply_cost_model(candidates, catalog, options)
    flags: list[str] = []
    exclusions = apply_constraints(candidates, constraints, clouds, regions, accelerators, primary)
    rank_candidates(candidates, objective)
    reference_label = reference_metrics(candidates, options.reference, local_ids, primary)
    if options.distributed is not None:
        dist.explain(candidates)
    mark_pareto(candidates)

    not_predicted = list_not_predicted(offerings, runtime, clouds, regions, accelerators, constraints, local_ids)
    flags += profile_flags(labelled, runtime, options.assume_accelerator)
    if not (candidates["feasible"].to_numpy() & (candidates["epochs"].to_numpy() == primary)).any():
        raise infeasible_error(candidates, objective, constraints, exclusions, primary, not_predicted, labelled,
                              options.assume_accelerator)
    flags += robustness_flags(candidates, objective, epochs_list, constraints)
    flags += large_batch_flags(candidates, labelled, primary, constraints)
    assumptions = list_assumptions(catalog, options, locals_, candidates, predictions) + slice_assumptions(labelled)
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
                      pruned=dict(sorted(context.pruned.items(), key=lambda kv: -kv[1])), idle=dict(context.idle),
                      job_global_batch=job_global_batch(labelled[0].profile) if len(labelled) == 1 else None)
