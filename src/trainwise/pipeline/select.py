"""Pick a strategy: PRESTO's objective (Erben et al., SIGMOD 2022), a cloud-price variant, a keep-up constraint.

PRESTO (Erben's dissertation, §3.3): each metric is min–max normalised over the strategies; lower-is-better
metrics are inverted, p' = 1 − minmax(p), s' = 1 − minmax(s), t' = minmax(t), and
score = w_p·p' + w_s·s' + w_t·t', highest best. Default weights (0, 0, 1): fastest throughput; the
paper's "deadline" example is (1, 0, 1). A metric equal for every strategy normalises to 0.

Cloud variant: p and s priced, cost = p [h] × offline compute $/h + s [GB] × storage $/GB-month ×
months; score = w_cost·(1 − minmax(cost)) + w_t·minmax(t), default (1, 1) (a trainwise choice, stated).

Keep-up constraint: only strategies with t ≥ the samples/s the accelerator consumes; that figure
comes from the device model (`required_samples_per_s`) or is given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from trainwise.errors import TrainwiseError
from trainwise.pipeline.profiler import PipelineProfile, StrategyResult

DEFAULT_WEIGHTS = (0.0, 0.0, 1.0)
DEADLINE_WEIGHTS = (1.0, 0.0, 1.0)
DEFAULT_CLOUD_WEIGHTS = (1.0, 1.0)


def minmax(values: Any) -> np.ndarray:
    x = np.asarray(values, dtype="float64")
    low, high = np.min(x), np.max(x)
    if not math.isfinite(high - low) or high == low:
        return np.zeros_like(x)
    return (x - low) / (high - low)


def presto_scores(p: Any, s: Any, t: Any, weights: Sequence[float] = DEFAULT_WEIGHTS) -> np.ndarray:
    """score = w_p·(1 − minmax(p)) + w_s·(1 − minmax(s)) + w_t·minmax(t) (PRESTO)."""
    w_p, w_s, w_t = (float(w) for w in weights)
    if min(w_p, w_s, w_t) < 0 or w_p + w_s + w_t == 0:
        raise TrainwiseError(f"weights must be non-negative and not all zero (got {tuple(weights)})")
    return w_p * (1 - minmax(p)) + w_s * (1 - minmax(s)) + w_t * minmax(t)


class CloudPrices(BaseModel):
    offline_compute_usd_per_hour: float = Field(ge=0)
    storage_usd_per_gb_month: float = Field(ge=0)
    transfer_usd_per_gb: float = Field(ge=0, description="moving the stored data to the training site")
    sources: dict[str, str]


def cloud_prices_from_catalog(catalog: Any = "current", *, cloud: str | None = None, instance_type: str | None = None,
                              vcpus: int | None = None) -> CloudPrices:
    """Prices from the packaged catalog (`trainwise.catalog.load_catalog`).

    Offline compute: `instance_type` on `cloud` if given, else the catalog's cheapest on-demand price
    per vCPU-hour × `vcpus` (default: this machine's CPUs). The catalog lists accelerator hosts only,
    so that per-vCPU price includes a GPU share and overstates a CPU-only VM: said in the source.
    Storage: the catalog has no storage prices; Erben et al.'s Backblaze B2 0.005 $/GB-month (core.costs).
    Transfer: the catalog's object-storage egress price.
    """
    import os

    from trainwise.catalog import load_catalog
    from trainwise.core.costs import DEFAULT_STORAGE_USD_PER_GB_MONTH, STORAGE_SOURCE

    cat = load_catalog(catalog) if isinstance(catalog, str) else catalog
    if instance_type is not None:
        if cloud is None:
            raise TrainwiseError("--instance-type needs --cloud (e.g. --cloud aws --instance-type g4dn.xlarge)")
        offering = cat.get(cloud, instance_type)
        if offering.price_per_hour is None:
            raise TrainwiseError(f"{cloud} {instance_type} has no on-demand price in catalog {cat.name}")
        compute, compute_source = offering.price_per_hour, f"{cat.caption}: {cloud} {instance_type} on-demand"
    else:
        frame = cat.offerings
        if cloud is not None:
            frame = cat.search(cloud=cloud)
        frame = frame[frame["price_per_hour"].notna() & (frame["vcpus"] > 0)]
        if frame.empty:
            raise TrainwiseError(f"catalog {cat.name} has no priced offering with vCPUs{' on ' + cloud if cloud else ''}")
        per_vcpu = (frame["price_per_hour"] / frame["vcpus"]).min()
        n = vcpus or os.cpu_count() or 1
        compute = float(per_vcpu * n)
        compute_source = (f"{cat.caption}: cheapest on-demand {per_vcpu:.4f} $/vCPU-h × {n} vCPUs (accelerator hosts only in the "
                          "catalog: overstates a CPU-only VM)")
    try:
        transfer = cat.egress_price("object-storage", "object_storage")
        transfer_source = f"{cat.caption}: object-storage egress"
    except TrainwiseError:
        transfer, transfer_source = 0.01, "Erben et al. (VLDB 2024) §4: Backblaze B2 egress 0.01 $/GB"
    return CloudPrices(offline_compute_usd_per_hour=compute, storage_usd_per_gb_month=DEFAULT_STORAGE_USD_PER_GB_MONTH,
                       transfer_usd_per_gb=transfer,
                       sources={"offline_compute": compute_source, "storage": STORAGE_SOURCE + " (the catalog has no storage prices)",
                                "transfer": transfer_source})


def cloud_cost_usd(result: StrategyResult, prices: CloudPrices, storage_months: float = 1.0) -> float:
    return (result.offline_s_full / 3600 * prices.offline_compute_usd_per_hour
            + result.storage_bytes_full / 1e9 * prices.storage_usd_per_gb_month * storage_months)


def required_samples_per_s(profile_or_characterisation: Any, accelerator: str, count: int = 1, catalog: Any = None) -> float:
    """Samples/s the accelerator(s) consume in training, from trainwise's device model.

    Accepts a training Profile (or its JSON path) with a workload characterisation, or a
    WorkloadCharacterisation; returns the modelled `samples_per_s` (its expected error travels with
    the device model's DevicePrediction).
    """
    from pathlib import Path

    from trainwise.core.workload import WorkloadCharacterisation
    from trainwise.predict.offerings import characterisation_or_none, device_predictions

    item = profile_or_characterisation
    if isinstance(item, (str, Path)):
        from trainwise.profile.schema import load_profile

        item = load_profile(item)
    char = item if isinstance(item, WorkloadCharacterisation) else characterisation_or_none(item)
    if char is None:
        raise TrainwiseError("this profile cannot be modelled (no workload characterisation): re-profile it or pass --required-sps")
    return float(device_predictions(char, accelerator, count, catalog=catalog)[0].samples_per_s)


class Selection(BaseModel):
    best: StrategyResult
    ranking: list[tuple[str, float]] = Field(description="(strategy id, score), best first, feasible strategies only")
    objective: str
    weights: tuple[float, ...]
    required_samples_per_s: float | None = None
    excluded: list[str] = Field(default_factory=list, description="strategies too slow for the accelerator")
    keeps_up: bool | None = None
    notes: list[str] = Field(default_factory=list)


def unresolved_leaders(best: StrategyResult, candidates: Sequence[StrategyResult]) -> list[str]:
    """A note naming the re-timed strategies this machine could not tell apart from `best`.

    Two strategies are told apart when the ranges of their side-by-side re-timings (confirm_leaders) do
    not overlap; otherwise which one is faster is within this machine's noise, and the user should know
    the pick among them is not resolved (and may prefer the cheaper one to store or to build).
    """
    if len(best.throughput_repeats_sps) < 2:
        return []
    low, high = min(best.throughput_repeats_sps), max(best.throughput_repeats_sps)
    tied = [r for r in candidates if r.strategy_id != best.strategy_id and len(r.throughput_repeats_sps) >= 2
            and min(r.throughput_repeats_sps) <= high and max(r.throughput_repeats_sps) >= low]
    if not tied:
        return []
    listed = ", ".join(f"{r.strategy_id} (median {r.throughput_sps:.0f}/s, {min(r.throughput_repeats_sps):.0f}–"
                       f"{max(r.throughput_repeats_sps):.0f})" for r in tied)
    return [f"not resolved on this machine: the re-timings of {best.strategy_id} ({low:.0f}–{high:.0f}/s) overlap those of "
            f"{listed}; any of them is as fast within this machine's noise (more --confirm-rounds, or a quieter machine, "
            "can tell them apart)"]


def select(profile: PipelineProfile | Sequence[StrategyResult], weights: Sequence[float] = DEFAULT_WEIGHTS, *,
           required_samples_per_s: float | None = None, prices: CloudPrices | None = None,
           cloud_weights: Sequence[float] = DEFAULT_CLOUD_WEIGHTS, storage_months: float = 1.0) -> Selection:
    """The best strategy (full-dataset p and s: extrapolated when the profile was sampled)."""
    results = list(profile.results if isinstance(profile, PipelineProfile) else profile)
    if not results:
        raise TrainwiseError("no profiled strategies to choose from")
    notes: list[str] = []
    excluded: list[str] = []
    candidates = results
    if required_samples_per_s is not None:
        if required_samples_per_s <= 0:
            raise TrainwiseError(f"required samples/s must be positive (got {required_samples_per_s})")
        candidates = [r for r in results if r.throughput_sps >= required_samples_per_s]
        excluded = [r.strategy_id for r in results if r.throughput_sps < required_samples_per_s]
        if not candidates:
            fastest = max(results, key=lambda r: r.throughput_sps)
            notes.append(f"no strategy keeps up with {required_samples_per_s:.0f} samples/s (fastest {fastest.strategy_id}: "
                         f"{fastest.throughput_sps:.0f}/s): the input pipeline will bound training; picking the best anyway")
            candidates = results
    t = np.array([r.throughput_sps for r in candidates])
    if prices is None:
        scores = presto_scores([r.offline_s_full for r in candidates], [r.storage_bytes_full for r in candidates], t, weights)
        objective, used = "presto", tuple(float(w) for w in weights)
    else:
        w_cost, w_t = (float(w) for w in cloud_weights)
        if min(w_cost, w_t) < 0 or w_cost + w_t == 0:
            raise TrainwiseError(f"cloud weights must be non-negative and not all zero (got {tuple(cloud_weights)})")
        cost = np.array([cloud_cost_usd(r, prices, storage_months) for r in candidates])
        scores = w_cost * (1 - minmax(cost)) + w_t * minmax(t)
        objective, used = "cloud", (w_cost, w_t)
    order = np.argsort(-scores, kind="stable")
    best = candidates[int(order[0])]
    keeps = None if required_samples_per_s is None else best.throughput_sps >= required_samples_per_s
    notes += unresolved_leaders(best, candidates)
    return Selection(best=best, ranking=[(candidates[i].strategy_id, float(scores[i])) for i in order], objective=objective,
                     weights=used, required_samples_per_s=required_samples_per_s, excluded=excluded, keeps_up=keeps, notes=notes)
