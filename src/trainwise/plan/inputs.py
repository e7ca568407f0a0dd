"""plan()'s inputs, resolved before any candidate exists: the profiles labelled and matched to
catalog accelerators, this machine's offering, the filter names checked against the catalog, and
each profile's predicted training time per epoch option."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from trainwise.catalog import names
from trainwise.catalog.model import Catalog, Offering
from trainwise.catalog.names import resolve_device_name
from trainwise.catalog.user import on_premise_price_per_hour
from trainwise.core import costs
from trainwise.errors import TrainwiseError
from trainwise.plan.objectives import Constraints
from trainwise.plan.runtime import LabelledProfile
from trainwise.predict.same_machine import predict_total
from trainwise.profile.schema import Profile

LOCAL_OFFERING_ID = "local/this-machine"
# An assumed price for this machine when the user gives none: a 2,000 $ workstation amortised over
# 3 years of continuous use, plus 150 W at 0.15 $/kWh (Künas' formula, with power added).
ASSUMED_LOCAL = {"capex_usd": 2000.0, "lifetime_years": 3.0, "power_kw": 0.15, "usd_per_kwh": 0.15}


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


def local_offerings(local: Offering | Catalog | Sequence[Offering] | None) -> list[Offering]:
    """The offerings that price this machine: the given file's one offering, else the assumed workstation."""
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


def label_profiles(profiles: Any, catalog: Catalog, this_host: str) -> list[LabelledProfile]:
    """Each profile with a unique label, its catalog accelerator and whether it was measured here."""
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
        accelerator = resolve_device_name(env.device_name, catalog) if env.device != "cpu" else None
        if label is None:
            label = f"{profile.workload or 'job'}@{env.hostname} b{profile.dataset.global_batch_size}"
        base, n = label, 2
        while label in seen:
            label, n = f"{base} #{n}", n + 1
        seen.add(label)
        out.append(LabelledProfile(label=label, profile=profile, accelerator=accelerator, here=env.hostname == this_host))
    return out


def predict_profiles(profiles: Sequence[LabelledProfile], epoch_options: Sequence[int], estimator: str,
                     checkpoint_write_s: float | None) -> pd.DataFrame:
    """One row per (profile, epoch option): predicted training time, its band and parts, samples, checkpoint cost."""
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


def check_names(catalog_offerings: pd.DataFrame, catalog: Catalog, constraints: Constraints, reference: str | None,
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
