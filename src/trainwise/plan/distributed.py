"""Data-parallel candidates for `plan()`: multi-GPU machines, N × one machine (DDP), Hivemind groups
in one zone, across continents and clouds, and hybrid (this machine + cloud spot peers).

Enabled through `PlanOptions(distributed=DistributedOptions(...))` (`trainwise plan` does by default; `--single-machine` turns it off).
`expand(...)` adds one synthetic offering row per group (price = the sum of its machines'), and
`data_parallel_source` is the runtime source that predicts them (and every catalog offering with
more than one accelerator) with `trainwise.predict.data_parallel`; each row carries
`parallelism`, `workers`, `granularity`, `communication_s`, `network_usd_per_hour` (egress + data
loading, added to the cost by the planner), `fits_memory` and `scaling_note`. After ranking,
`explain(frame)` writes `why` for every data-parallel row: why it loses to the best single machine
(communication-bound G < 1, egress-bound, memory, or simply slower/dearer), or that it wins.

Per-worker compute comes from a profile measured on the group's accelerator (measured), else from
the device model (modelled ±x %), else — for this machine in a hybrid group — the profile taken here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

from trainwise.errors import TrainwiseError
from trainwise.plan.group_options import (HIVEMIND_COMPUTE_EFFICIENCY,  # noqa: F401 - re-exported
                                          HIVEMIND_ROUND_OVERHEAD_S, DistributedOptions, GroupSpec, PeerSpec,
                                          load_groups, options_from_cli)
from trainwise.plan.scaling import job_global_batch, split_batch
from trainwise.predict import data_parallel as dp
from trainwise.predict.topology import Site, continent_of

HIVEMIND_CALIBRATION_SOURCE = ("fitted to Erben et al.'s A-8 runs (8 x T4, TBS 32K): ~19-24 s per round beyond the "
                               "transfer, peers at 48-64 % of a standalone GPU")
DDP_EXTRA_BAND = 0.10       # the device model's data_parallel_extra band
HIVEMIND_EXTRA_BAND = 0.30  # Erben et al.'s measured averaging times differ from the bandwidth model by up to ~±30-50 %
OPTIONAL_COLUMNS: dict[str, Any] = {"parallelism": "", "workers": 1.0, "granularity": np.nan, "communication_s": np.nan,
                                    "network_usd_per_hour": 0.0, "fits_memory": True, "scaling_note": "",
                                    "global_batch_size": np.nan}


# ----------------------------------------------------------------------------- group building


@dataclass(frozen=True)
class Member:
    offering_row: int | None  # None: this machine
    count: int
    site: Site
    accelerator: str | None
    accelerators_per_machine: int
    price_per_hour: float
    spot_price_per_hour: float


@dataclass(frozen=True)
class Group:
    offering_id: str
    kind: Literal["ddp-node", "ddp-multi-node", "hivemind"]
    members: tuple[Member, ...]
    label: str
    notes: tuple[str, ...] = field(default=())

    @property
    def workers(self) -> int:
        return sum(m.count * (m.accelerators_per_machine if self.kind != "hivemind" else 1) for m in self.members)


def _site(row: pd.Series, name: str, continent: str | None = None) -> Site | None:
    cont = continent or continent_of(str(row["region"]))
    if cont is None:
        return None
    zone = row["zone"] if isinstance(row["zone"], str) else ""
    return Site(name=name, cloud=str(row["cloud"]), region=str(row["region"]), zone=zone, continent=cont)


def _predictable_accelerators(profiles: Sequence[Any]) -> set[str] | None:
    """Accelerators some profile can be priced on: measured ones; None means any (a profile
    carries a characterisation for the device model)."""
    from trainwise.predict.offerings import characterisation_or_none

    measured = {p.accelerator for p in profiles if p.accelerator}
    if any(characterisation_or_none(p.profile) is not None for p in profiles):
        return None
    return measured


def expand(offerings: pd.DataFrame, profiles: Sequence[Any], options: DistributedOptions,
           local_rows: Sequence[int]) -> tuple[pd.DataFrame, dict[str, Group]]:
    """(synthetic offering rows, group per offering_id — the synthetic ones and the catalog's
    multi-accelerator machines)."""
    groups: dict[str, Group] = {}
    counts = offerings["accelerator_count"].to_numpy()
    has_acc = offerings["accelerator"].notna().to_numpy()
    allowed = _predictable_accelerators(profiles)
    ok_acc = has_acc if allowed is None else offerings["accelerator"].isin(allowed).to_numpy()
    # catalog machines with several accelerators: DDP inside the machine
    for row in np.flatnonzero(ok_acc & (counts > 1) & (np.floor(counts) == counts)):
        o = offerings.iloc[row]
        site = _site(o, str(o["offering_id"]), continent_of(str(o["region"])) or "us")
        member = Member(int(row), 1, site, str(o["accelerator"]), int(counts[row]), float(o["price_per_hour"]),
                        float(o["spot_price_per_hour"]))
        groups[str(o["offering_id"])] = Group(str(o["offering_id"]), "ddp-node", (member,),
                                              f"DDP over {int(counts[row])} × {o['accelerator']} in one machine")
    single = offerings[ok_acc & (counts == 1)].copy()
    single = single[single["price_per_hour"].notna() | single["spot_price_per_hour"].notna()]
    single["_cont"] = [continent_of(r) for r in single["region"].astype(str)]
    single = single[single["_cont"].notna()]
    rows: list[dict[str, Any]] = []

    def add(group: Group) -> None:
        groups[group.offering_id] = group
        rows.append(_synthetic_row(group, offerings))

    def member_of(index: int, count: int, continent: str | None = None, name: str | None = None) -> Member:
        o = offerings.loc[index]
        site = _site(o, name or str(o["offering_id"]), continent)
        return Member(int(index), count, site, str(o["accelerator"]), 1, float(o["price_per_hour"]),
                      float(o["spot_price_per_hour"]))

    if len(single):
        by_price = single.assign(_p=single["spot_price_per_hour"].fillna(single["price_per_hour"]))
        # N × the cheapest machine of each (cloud, region, accelerator): DDP across nodes of one zone
        cheapest = by_price.sort_values(["_p", "offering_id"], kind="stable").groupby(
            ["cloud", "region", "accelerator"], sort=True).head(1)
        for index, o in cheapest.iterrows():
            for n in options.node_counts:
                add(Group(f"multi-node/{n}x/{o['offering_id']}", "ddp-multi-node", (member_of(index, n),),
                          f"DDP over {n} × {o['instance_type']} ({o['accelerator']}) in {o['zone'] or o['region']}"))
        if options.hivemind:
            for accelerator, part in by_price.groupby("accelerator", sort=True):
                part = part.sort_values(["_p", "offering_id"], kind="stable")
                best = part.iloc[0]
                for n in options.node_counts:
                    add(Group(f"hivemind/{n}x/{best['offering_id']}", "hivemind", (member_of(part.index[0], n),),
                              f"Hivemind, {n} × {best['instance_type']} ({accelerator}) in one zone"))
                per_continent = part.groupby("_cont", sort=True).head(1)
                if len(per_continent) >= 2:
                    for k in (1, 2):
                        members = tuple(member_of(i, k) for i in per_continent.index)
                        where = "+".join(sorted(per_continent["_cont"]))
                        add(Group(f"hivemind-geo/{k}x{len(members)}/{accelerator}", "hivemind", members,
                                  f"Hivemind, {k} × the cheapest {accelerator} in each of {where}"))
            if local_rows:
                nearby = by_price[by_price["_cont"] == options.local_continent].sort_values(["_p", "offering_id"],
                                                                                            kind="stable")
                if len(nearby):
                    cloud_index = nearby.index[0]
                    local = _local_member(offerings, local_rows[0], options.local_continent)
                    for n in options.node_counts:
                        add(Group(f"hybrid/local+{n}x/{nearby.loc[cloud_index, 'offering_id']}", "hivemind",
                                  (local, member_of(cloud_index, n)),
                                  f"Hivemind, this machine + {n} × {nearby.loc[cloud_index, 'instance_type']} "
                                  f"({nearby.loc[cloud_index, 'accelerator']}) spot in {options.local_continent}"))
    for spec in options.groups:
        members = []
        for peer in spec.peers:
            if peer.offering == "local":
                if not local_rows:
                    raise TrainwiseError(f"group {spec.name}: 'local' needs a profile taken on this machine")
                members.append(_local_member(offerings, local_rows[0], peer.continent or options.local_continent, peer.count))
                continue
            match = np.flatnonzero((offerings["offering_id"] == peer.offering).to_numpy())
            if match.size == 0:
                raise TrainwiseError(f"group {spec.name}: no offering {peer.offering!r} in the catalog: "
                                     "pick one from `trainwise catalog search`")
            o = offerings.iloc[match[0]]
            cont = peer.continent or continent_of(peer.region or str(o["region"]))
            if cont is None:
                raise TrainwiseError(f"group {spec.name}: the continent of {o['region']} is unknown: give continent: us|eu|asia|oce")
            site = Site(name=f"{spec.name}:{peer.offering}", cloud=str(o["cloud"]), region=peer.region or str(o["region"]),
                        zone=peer.zone or (o["zone"] if isinstance(o["zone"], str) else ""), continent=cont)
            members.append(Member(int(match[0]), peer.count, site, o["accelerator"] if isinstance(o["accelerator"], str) else None,
                                  int(o["accelerator_count"]) if o["accelerator_count"] == o["accelerator_count"] else 1,
                                  float(o["price_per_hour"]), float(o["spot_price_per_hour"])))
        add(Group(f"hivemind/{spec.name}", "hivemind", tuple(members), f"Hivemind group {spec.name} (user-defined)"))
    frame = pd.DataFrame(rows, columns=list(offerings.columns)) if rows else offerings.iloc[:0]
    return frame, groups


def _local_member(offerings: pd.DataFrame, row: int, continent: str, count: int = 1) -> Member:
    o = offerings.iloc[row]
    site = Site(name="this machine", cloud="on-premise", region="local", zone="", continent=continent)
    return Member(None, count, site, o["accelerator"] if isinstance(o["accelerator"], str) else None, 1,
                  float(o["price_per_hour"]), float(o["price_per_hour"]))


def _synthetic_row(group: Group, offerings: pd.DataFrame) -> dict[str, Any]:
    members = group.members
    clouds = sorted({m.site.cloud for m in members})
    regions = sorted({m.site.region for m in members})
    cloud_members = [m for m in members if m.offering_row is not None]
    first = offerings.iloc[cloud_members[0].offering_row] if cloud_members else None
    price = sum(m.count * m.price_per_hour for m in members)
    spot = sum(m.count * (m.spot_price_per_hour if not math.isnan(m.spot_price_per_hour) else math.nan) for m in members)
    memory = [offerings.iloc[m.offering_row]["accelerator_memory_gib"] for m in cloud_members]
    return {
        "offering_id": group.offering_id, "catalog": first["catalog"] if first is not None else "assumed",
        "cloud": clouds[0] if len(clouds) == 1 else "+".join(clouds), "region": regions[0] if len(regions) == 1 else "+".join(regions),
        "zone": (members[0].site.zone or None) if len(members) == 1 else None,
        "instance_type": " + ".join(f"{m.count}× {offerings.iloc[m.offering_row]['instance_type'] if m.offering_row is not None else 'this machine'}"
                                    for m in members),
        "accelerator": next((m.accelerator for m in members if m.accelerator), None),
        "source_accelerator": next((m.accelerator for m in members if m.accelerator), None),
        "accelerator_count": float(sum(m.count * m.accelerators_per_machine for m in members)),
        "vcpus": np.nan, "memory_gib": np.nan,
        "accelerator_memory_gib": float(np.nanmin(memory)) if memory and not all(pd.isna(memory)) else np.nan,
        "price_per_hour": price, "spot_price_per_hour": spot, "kind": "cloud",
        "billing": first["billing"] if first is not None else "per_second",
        "min_billed_seconds": first["min_billed_seconds"] if first is not None else 0.0,
        "price_date": first["price_date"] if first is not None else "assumed",
        "source": "sum of " + ", ".join(f"{m.count} × {offerings.iloc[m.offering_row]['offering_id'] if m.offering_row is not None else 'this machine'}"
                                        for m in members),
        "notes": group.label,
    }


# ----------------------------------------------------------------------------- runtime source


@dataclass(frozen=True)
class _Compute:
    worker: dp.WorkerCompute
    relative_error: float
    fits: bool
    memory_note: str
    owner: str  # label of the profile whose measurement (or characterisation) this is
    measured: bool = False  # a profile's measured step, not the device model's


def _compute_for(accelerator: str | None, item: Any, siblings: Sequence[Any], catalog: Any, cache: dict,
                 per_worker_batch: int | None = None) -> _Compute | None:
    """One worker's compute on `accelerator` for profile `item` (None accelerator: this machine) at
    `per_worker_batch` (None: the profile's): measured — by `item` or a sibling profile of the same
    job (workload and batch), its step scaled to the worker's share of the batch — else the device
    model from the profile's characterisation at that batch."""
    from trainwise.plan.scaling import job_global_batch, rebatch

    key = (item.label, accelerator, per_worker_batch)
    if key in cache:
        return cache[key]
    out = None
    for candidate in (item, *siblings):
        measured_here = accelerator is None and candidate.here
        if job_global_batch(candidate.profile) != max(1, candidate.profile.dataset.global_batch_size):
            continue  # measured on a slice at another batch: not the job's step
        if measured_here or (accelerator is not None and candidate.accelerator == accelerator):
            worker = dp.compute_from_profile(candidate.profile).model_copy(
                update={"source": "measured here" if measured_here else candidate.provenance})
            if per_worker_batch is not None and per_worker_batch != worker.per_worker_batch_size:
                # compute-bound steps scale with the samples in them (the measured step, split)
                factor = per_worker_batch / worker.per_worker_batch_size
                worker = worker.model_copy(update={
                    "step_time_s": worker.step_time_s * factor,
                    "step_time_samples_s": tuple(t * factor for t in worker.step_time_samples_s),
                    "per_worker_batch_size": per_worker_batch,
                    "source": f"{worker.source}, scaled to batch {per_worker_batch}"})
            out = _Compute(worker, candidate.profile.steady_state.iteration.relative_ci95_halfwidth, True, "",
                           candidate.label, measured=True)
            break
    if out is None and accelerator is not None and catalog is not None:
        from trainwise.predict import device_model as dm
        from trainwise.predict.offerings import characterisation_or_none

        char = characterisation_or_none(item.profile)
        if char is not None:
            if per_worker_batch is not None:
                char = rebatch(char, per_worker_batch)
            from trainwise.plan.scaling import is_slice

            per_sample_wait = (0.0 if is_slice(item.profile) else
                               dm.host_overhead_from_profile(item.profile) / max(1, item.profile.dataset.global_batch_size))
            try:
                pred = dm.predict_iteration(char, catalog.accelerator(accelerator), 1, None,
                                            per_sample_wait * char.per_device_batch)
                note = "" if pred.fits_memory else (f"memory: needs ~{pred.memory_required_gib:.1f} GiB per device, "
                                                    f"{accelerator} has ~{pred.memory_available_gib:.1f} GiB usable")
                out = _Compute(dp.WorkerCompute(step_time_s=pred.iteration_s, per_worker_batch_size=char.per_device_batch,
                                                source=f"{pred.provenance} (device model)"),
                               pred.relative_error, pred.fits_memory, note, item.label)
            except TrainwiseError:
                out = None
    cache[key] = out
    return out


def data_parallel_source(offerings: pd.DataFrame, context: Any) -> pd.DataFrame:
    """Runtime rows for every group in `context.groups` (see the module docstring)."""
    from trainwise.plan.runtime import (REASON_CPU_ONLY, REASON_NO_XLA, RUNTIME_COLUMNS, leaves_accelerators_idle,
                                        runs_on_xla, xla_kind)

    groups: dict[str, Group] = getattr(context, "groups", None) or {}
    options: DistributedOptions = getattr(context, "distributed", None) or DistributedOptions()
    if not groups:
        return pd.DataFrame({c: [] for c in RUNTIME_COLUMNS})
    row_of = pd.Series(np.arange(len(offerings)), index=offerings["offering_id"].to_numpy())
    row_of = row_of[~row_of.index.duplicated(keep="last")]
    egress_prices = context.catalog.egress if context.catalog is not None else None
    network = options.net()
    cache: dict = {}
    is_xla: dict = {}  # accelerator -> a TPU/Trainium (xla_kind), looked up once
    records: list[dict[str, Any]] = []
    for profile_idx, item in enumerate(context.profiles):
        if leaves_accelerators_idle(item, context):
            context.leave_idle(REASON_CPU_ONLY, len(groups))
            continue
        predictions = context.predictions[context.predictions["profile"] == item.label][
            ["epochs", "init_s", "validation_s"]].to_dict("records")
        profile = item.profile
        siblings = [other for other in context.profiles if other is not item and other.profile.workload == profile.workload
                    and other.profile.dataset.global_batch_size == profile.dataset.global_batch_size]
        n_train = profile.dataset.n_train or ((profile.dataset.iterations_per_epoch or 1) * max(1, profile.dataset.global_batch_size))
        parameters = profile.model.trainable_parameters or profile.model.parameters
        gradient_bytes = profile.model.gradient_bytes or parameters * 4
        job_batch = job_global_batch(profile)
        xla_ok = runs_on_xla(item, context)
        for offering_id, group in groups.items():
            if offering_id not in row_of.index:
                continue
            if not xla_ok and any(is_xla.setdefault(m.accelerator, xla_kind(context.catalog, m.accelerator))
                                  for m in group.members):
                context.leave_idle(REASON_NO_XLA)
                continue
            # the job's global batch, split over the group's workers (Hivemind: over its peers per round)
            if group.kind == "hivemind":
                # peers accumulate samples until the round holds the target batch: any split works, as
                # long as each peer's share stays above the floor
                peers = sum(m.count for m in group.members)
                round_batch = options.target_batch_size or job_batch
                per_worker, reason = split_batch(round_batch - round_batch % peers, peers)
            else:
                per_worker, reason = split_batch(job_batch, group.workers)
            if per_worker is None:
                if group.kind != "ddp-node":  # catalog machines are counted by the device-model source
                    context.prune(reason)
                continue
            computes = [_compute_for(m.accelerator if m.offering_row is not None else None, item, siblings,
                                     context.catalog, cache, per_worker) for m in group.members]
            if any(c is None for c in computes):
                continue
            # one row per group and job: the profile that measured the (first) cloud machine owns it,
            # so its device memory and its init/validation apply
            owner = next((c.owner for m, c in zip(group.members, computes) if m.offering_row is not None), item.label)
            if owner != item.label:
                continue
            if group.kind == "ddp-node" and not computes[0].measured:
                # Several accelerators in one machine with no measured step on them: the device model
                # predicts the whole machine (its all-reduce fitted to published multi-GPU
                # throughputs), as it does for `plan --single-machine` and `predict -a X -n N` — one
                # offering, one model. With a measured step, DDP extrapolates the measurement.
                continue
            fits = all(c.fits for c in computes)
            memory_note = "; ".join(c.memory_note for c in computes if c.memory_note)
            network_usd = 0.0
            if group.kind in ("ddp-node", "ddp-multi-node"):
                member, compute = group.members[0], computes[0]
                if group.kind == "ddp-node":
                    link = dp.intra_node_link(context.catalog.accelerator(member.accelerator))
                    overlap = 1.0
                else:
                    link = dp.inter_node_link(member.site.cloud, network)
                    overlap = 1.0
                if job_batch > n_train:
                    continue  # a global batch larger than the training set: less than one step per epoch
                pred = dp.predict_ddp(compute.worker, int(gradient_bytes), group.workers, link,
                                      algorithm="node" if group.kind == "ddp-node" else "auto", overlap=overlap)
                samples_per_s, g, comm = pred.samples_per_s, pred.granularity, pred.exposed_communication_s
                global_batch = pred.global_batch_size
                band = compute.relative_error + DDP_EXTRA_BAND
                how = ""
                if group.kind == "ddp-node":  # NCCL inside one machine: where its two constants come from
                    floor_s, fraction = dp.node_allreduce_terms(group.workers)
                    how = (f" (NCCL in one machine: {fraction:.0%} of it, {floor_s * 1e6:.0f} µs a call, from XLA's "
                           f"measured H100/B200 all-reduces, ±{dp.NODE_ALLREDUCE_HELD_OUT_ERROR:.0%} held out)")
                what = (f"modelled ±{band * 100:.0f} %: DDP {group.workers} workers, per-worker batch "
                        f"{compute.worker.per_worker_batch_size} (global {pred.global_batch_size}), all-reduce over "
                        f"{link.bandwidth_bps / 1e9:.3g} Gb/s{how}; compute {compute.worker.source}")
                notes = list(pred.notes)
            else:
                peers = []
                for m, c in zip(group.members, computes):
                    for k in range(m.count):
                        site = m.site.model_copy(update={"name": f"{m.site.name}#{k}" if m.count > 1 else m.site.name})
                        price = m.price_per_hour
                        rate = c.worker.samples_per_s * options.hivemind_compute_efficiency
                        peers.append(dp.HivemindPeer(name=site.name, samples_per_s=rate, site=site,
                                                     price_per_hour=0.0 if math.isnan(price) else price,
                                                     source=c.worker.source))
                tbs = options.target_batch_size or job_batch
                if tbs > n_train:
                    continue  # an averaging round per more than an epoch: not the same training job
                pred = dp.predict_hivemind(peers, int(parameters), tbs, network=network,
                                           peer_throughput_cap_bps=options.peer_throughput_cap_bps,
                                           dpu_overlap=options.dpu_overlap,
                                           round_overhead_s=options.hivemind_round_overhead_s,
                                           state_average_every=options.hivemind_average_state_every)
                costs = dp.hivemind_costs(peers, pred, egress_prices, bytes_per_sample=options.bytes_per_sample)
                network_usd = costs.egress_usd_per_hour + costs.data_loading_usd_per_hour
                samples_per_s, g, comm = pred.samples_per_s, pred.granularity, pred.comm_s
                global_batch = tbs
                band = max(c.relative_error for c in computes) + HIVEMIND_EXTRA_BAND
                what = (f"modelled ±{band * 100:.0f} %: Hivemind {len(peers)} peers, TBS {tbs}, slowest link "
                        f"{pred.slowest_pair_bandwidth_bps / 1e6:,.0f} Mb/s; egress {costs.egress_usd_per_hour:.3g} $/h; "
                        f"compute {', '.join(dict.fromkeys(c.worker.source for c in computes))}")
                notes = list(pred.notes)
            if memory_note:
                notes.append(memory_note)
            # Validation has no gradients to exchange: the validation set is split over the workers
            # (as training is), each validating at its compute speed. The profile's own validation
            # time scales by its machine's training rate over the group's summed compute rate (the
            # device-model rows scale it the same way, trainwise.plan.runtime.device_model).
            profile_rate = max(1, profile.dataset.global_batch_size) / profile.steady_state.iteration.mean_s
            per_member = [m.count * (m.accelerators_per_machine if group.kind != "hivemind" else 1) for m in group.members]
            group_compute_rate = sum(c.worker.samples_per_s * k for c, k in zip(computes, per_member))
            for pred_row in predictions:
                epochs = int(pred_row["epochs"])
                samples = epochs * n_train
                train_s = samples / samples_per_s
                epoch_s = n_train / samples_per_s
                validation = float(pred_row["validation_s"]) * profile_rate / group_compute_rate
                total = float(pred_row["init_s"]) + train_s + validation
                half = (train_s + validation) * band
                records.append({
                    "offering_row": int(row_of[offering_id]), "profile": item.label, "epochs": epochs,
                    "training_s": total, "training_low_s": max(0.0, total - half), "training_high_s": total + half,
                    "init_s": float(pred_row["init_s"]), "first_epoch_s": epoch_s, "steady_s": max(0.0, train_s - epoch_s),
                    "validation_s": validation, "time_provenance": what, "relative_error": half / total if total > 0 else 0.0,
                    "time_source": "data-parallel model", "_profile_idx": profile_idx,
                    "parallelism": group.kind, "workers": float(group.workers), "granularity": g, "communication_s": comm,
                    "network_usd_per_hour": network_usd, "fits_memory": fits, "scaling_note": "; ".join(notes),
                    "global_batch_size": float(global_batch)})
    if not records:
        return pd.DataFrame({c: [] for c in RUNTIME_COLUMNS})
    out = pd.DataFrame.from_records(records)
    for column in ("profile", "time_provenance", "time_source", "parallelism"):
        out[column] = out[column].astype("category")
    return out


# ----------------------------------------------------------------------------- explanations


def explain(frame: pd.DataFrame) -> None:
    """`why` for each data-parallel row, against the best single-machine plan of the same epoch
    option and market (the objective's order: the planner's `rank`; every profile of the job)."""
    if "parallelism" not in frame.columns:
        return
    kind = frame["parallelism"].astype(object).fillna("").to_numpy()
    distributed = kind != ""
    why = np.full(len(frame), "", dtype=object)
    if not distributed.any():
        frame["why"] = why
        return
    keys = ["epochs", "market"]
    single = frame[~distributed & frame["feasible"].to_numpy()]
    best: dict[tuple, dict[str, Any]] = {}
    for record in single.sort_values("rank", kind="stable")[keys + ["offering_id", "wall_s", "total_cost"]].astype(
            {"market": object, "offering_id": object}).to_dict("records"):
        best.setdefault((record["epochs"], record["market"]), record)
    columns = keys + ["profile", "granularity", "price_per_hour", "network_usd_per_hour", "feasible", "excluded_by", "fits_memory",
                      "scaling_note", "communication_s", "wall_s", "total_cost", "rank"]
    subset = frame.iloc[np.flatnonzero(distributed)][columns].astype(
        {"market": object, "excluded_by": object, "scaling_note": object})
    texts = []
    for row in subset.to_dict("records"):
        reasons = []
        g = row["granularity"]
        hourly = row["price_per_hour"] + row["network_usd_per_hour"]
        note = str(row["scaling_note"])
        memory = next((n for n in note.split("; ") if n.startswith("memory")), "")
        if not row["feasible"]:
            reasons.append(f"excluded by {row['excluded_by']}" + (f" ({memory})" if memory else ""))
        elif memory:
            reasons.append(memory)
        if g == g and g < 1:
            reasons.append(f"communication-bound: G = {g:.2g} < 1 (communication {row['communication_s']:.3g} s per step/round)")
        if hourly > 0 and row["network_usd_per_hour"] > 0.5 * hourly:
            reasons.append(f"egress-bound: network {row['network_usd_per_hour']:.3g} $/h is "
                           f"{row['network_usd_per_hour'] / hourly:.0%} of its {hourly:.3g} $/h")
        ref = best.get((row["epochs"], row["market"]))
        if ref is not None:
            speed = ref["wall_s"] / row["wall_s"] if row["wall_s"] > 0 else math.inf
            cost = row["total_cost"] / ref["total_cost"] if ref["total_cost"] > 0 else math.inf
            versus = f"{speed:.2f}× the speed and {cost:.2f}× the cost of the best single machine {ref['offering_id']}"
            if row["rank"] == 1:
                reasons.insert(0, f"wins: {versus}")
            elif not reasons:
                reasons.append(("slower" if speed < 1 else "costlier" if cost > 1 else "ranked lower") + f": {versus}")
            else:
                reasons.append(versus)
        elif row["rank"] == 1:
            reasons.insert(0, "wins")
        elif not reasons:
            reasons.append(f"ranked {row['rank']:.0f}: no single-machine plan in this market to compare with")
        texts.append("; ".join(reasons))
    why[np.flatnonzero(distributed)] = texts
    frame["why"] = why


def single_machine_options() -> DistributedOptions:
    """`plan --single-machine`: machines as the catalog sells them — a machine with several
    accelerators is still DDP inside it — and no groups of machines."""
    return DistributedOptions(node_counts=(), hivemind=False)


def assumptions(options: DistributedOptions) -> list[str]:
    """The data-parallel model's assumptions, for the plan's assumptions list."""
    net = options.net()
    ddp = [
        "data parallel: every row keeps the job's global batch, split over the workers (strong scaling); a split that "
        "does not divide evenly or leaves fewer than 8 samples per device is not ranked (the plan says how many); "
        "all-reduce in 25 MiB buckets overlapped with backward, ring or tree (the cheaper); intra-machine "
        "links from the catalog's interconnect, between machines the intra-cloud bandwidth Erben et al. (VLDB 2024) measured",
    ]
    if not options.hivemind and not options.node_counts and not options.groups:
        return ddp
    return ddp + [
        f"Hivemind rows: TBS {options.target_batch_size or 'the profile global batch'}, fp16 averaging over the "
        f"slowest pair (one TCP stream, window {net.tcp_window_bytes / 1e6:.1f} MB: {net.tcp_window_source or 'given'}), "
        f"{dp.HIVEMIND_MATCHMAKING_MIN_S:g} s matchmaking minimum, "
        + (f"per-peer averaging capped at {options.peer_throughput_cap_bps / 1e9:.2g} Gb/s, " if options.peer_throughput_cap_bps
           else "")
        + f"{options.hivemind_round_overhead_s:g} s per round and peers at {options.hivemind_compute_efficiency:.0%} of "
        f"their standalone speed ({HIVEMIND_CALIBRATION_SOURCE}); delayed-parameter-update overlap {options.dpu_overlap:g}",
        "network: " + (net.description or "user network file")[:200],
        "egress: each peer's averaging traffic ("
        + ("gradient rounds only" if options.hivemind_average_state_every is None
           else f"gradient rounds plus parameter averaging every {options.hivemind_average_state_every} epoch(s)")
        + ") split equally over the other peers, priced by the sender's cloud (Erben et al. "
        f"Table 1 via the catalog); data loading {options.bytes_per_sample:g} bytes/sample from object storage at 0.01 $/GB",
        f"hybrid groups place this machine in {options.local_continent!r} (assumed; --local-continent)",
    ]
