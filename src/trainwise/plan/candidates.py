"""The candidate frame: one row per (runtime row × market with a price), built column by column
with numpy takes, then priced in place by the cost model (wall time, band, billed cost, egress,
storage)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from trainwise.catalog.model import Catalog
from trainwise.core import costs
from trainwise.plan.models import PlanOptions

_OFFERING_FIELDS = ["offering_id", "catalog", "cloud", "region", "zone", "instance_type", "accelerator",
                    "accelerator_count", "accelerator_memory_gib", "kind", "billing", "min_billed_seconds"]


def take_categorical(values: pd.Series, idx: np.ndarray) -> pd.Categorical:
    """values[idx] as a Categorical: the (small) offerings column is factorised once, and the
    candidates get integer codes — no per-row string work for 100,000 rows."""
    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    return pd.Categorical.from_codes(codes[idx], categories=pd.Index(uniques, dtype=object))


def expand_markets(runtime: pd.DataFrame, offerings: pd.DataFrame, local_ids: set[str] | frozenset[str] = frozenset()) -> pd.DataFrame:
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
            data[column] = take_categorical(source, idx)
    data["min_billed_seconds"] = np.nan_to_num(data["min_billed_seconds"], nan=0.0)
    # numeric/boolean helpers, computed once per offering (the cost model and filters use them)
    data["_spot"] = is_spot
    # Provisioning and staging are for machines still to be rented: this machine (a local offering,
    # whatever its kind — a cloud VM one is already on is priced as cloud) is up and has the data.
    data["_cloudy"] = ((kind != "on_premise") & ~offerings["offering_id"].isin(local_ids)).to_numpy()[idx]
    data["_granularity_s"] = billing.map(costs.GRANULARITY_S).to_numpy(dtype="float64")[idx]
    data["_seq"] = np.arange(sel.size)
    return pd.DataFrame(data)


def price_provenance(offerings: pd.DataFrame, catalog: Catalog) -> pd.Series:
    """Where each price comes from, decided once per (catalog, price date): the packaged or imported
    snapshot, the papers' prices (`seed-2021`), a user file, or trainwise's assumed local price."""
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


def object_storage_egress(catalog: Catalog) -> tuple[float, str]:
    """The catalog's object-storage egress price per GB and its source, else Erben et al.'s."""
    rows = catalog.egress[catalog.egress["scope"] == "object_storage"] if len(catalog.egress) else catalog.egress
    if len(rows):
        return float(rows["usd_per_gb"].iloc[0]), str(rows["source"].iloc[0])
    return 0.01, "Erben et al. §4: object-storage egress 0.01 $/GB"


def apply_cost_model(frame: pd.DataFrame, catalog: Catalog, options: PlanOptions) -> None:
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

    egress_usd_per_gb, _ = object_storage_egress(catalog)
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
