"""How good the calibrated device model is: leave-one-out predictions, error bands and summaries, whether
it picks the fastest and the cheapest accelerator, and which published rows are plausible enough to fit.

Leave-one-out grouping: by **model**. Every row of one model (all accelerators, precisions, batch
sizes and sources) is held out together, the constants are re-fitted on the rest, and the held-out
rows are predicted. This is the question trainwise answers — a model nobody has measured — and it
prevents leaks a row-wise LOO would allow (the same model's other rows fixing its efficiency).
`loo(group="accelerator")` answers the other question (an accelerator nobody has measured).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trainwise.predict.accelerator_features import generation_of
from trainwise.predict.calibration_fit import build_design, fit, predict_design, predict_rows
from trainwise.predict.calibration_layout import Layout
from trainwise.core.workload import COMPUTE_CATEGORIES
from trainwise.predict.measurements import Measurement, RatioMeasurement, characterise_row, default_catalog
from trainwise.predict.operator_time import compute_peak


@dataclass
class LooResult:
    group: str
    predictions: list[float]
    errors: list[float]  # (predicted - measured) / measured
    held_out: list[str]


def loo(rows: Sequence[Measurement], ratios: Sequence[RatioMeasurement] = (), group: str = "model",
        catalog: Any = None, stacks: bool = True) -> LooResult:
    """Leave-one-group-out predictions of every row (group: model | accelerator | source |
    model_accelerator). `model_accelerator` holds out one model on one accelerator at a time (its
    other accelerators stay in the fit): Habitat's setting, a model known elsewhere predicted on a
    new device."""
    import numpy as np

    catalog = catalog or default_catalog()
    keyf = {"model": lambda m: m.model, "accelerator": lambda m: catalog.accelerator(m.accelerator).name,
            "source": lambda m: m.source.split(":")[0].split(" ")[0],
            "model_accelerator": lambda m: f"{m.model}@{catalog.accelerator(m.accelerator).name}"}[group]
    keys = [keyf(m) for m in rows]
    preds = [0.0] * len(rows)
    for key in dict.fromkeys(keys):
        train = [m for m, k in zip(rows, keys) if k != key]
        test_idx = [i for i, k in enumerate(keys) if k == key]
        train_ratios = [r for r in ratios if (group != "model" or r.model != key)
                        and (group != "model_accelerator" or f"{r.model}@{catalog.accelerator(r.accelerator).name}" != key)
                        and (group != "accelerator" or key not in (catalog.accelerator(r.accelerator).name,
                                                                     catalog.accelerator(r.reference_accelerator).name))]
        res = fit(train, train_ratios, catalog, stacks=stacks)
        test = build_design([rows[i] for i in test_idx], catalog, stacks)
        # accelerators/generations unseen in training keep their prior (multiplier 1)
        # stacks unseen in training keep their prior (factor 1)
        lay = Layout(list(dict.fromkeys(res.layout.accelerators + test.accelerators)),
                     list(dict.fromkeys(res.layout.generations + test.generations)),
                     list(dict.fromkeys(res.layout.stacks + test.stacks)),
                     {**test.twin_names, **res.layout.twin_names})
        x = np.array(lay.from_params(res.params))
        for i, p in zip(test_idx, predict_design(test, lay, x)):
            preds[i] = float(p)
    errors = [(p - m.samples_per_s) / m.samples_per_s for p, m in zip(preds, rows)]
    return LooResult(group=group, predictions=preds, errors=errors, held_out=keys)


def loo_ratios(rows: Sequence[Measurement], ratios: Sequence[RatioMeasurement], catalog: Any = None) -> list[float]:
    """Each ratio predicted by a fit without that ratio's model (rows and ratios of the model held out)."""
    catalog = catalog or default_catalog()
    out = []
    for r in ratios:
        res = fit([m for m in rows if m.model != r.model], [q for q in ratios if q.model != r.model], catalog)
        num = predict_rows(res.params, [r.side(False)], catalog)[0]
        den = predict_rows(res.params, [r.side(True)], catalog)[0]
        out.append(num / den)
    return out


def quantile(values: Iterable[float], q: float) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def bands_from_residuals(rows: Sequence[Measurement], errors: Sequence[float], catalog: Any = None,
                         q: float = 0.8) -> dict[str, Any]:
    """Expected |relative error| (the q-quantile of LOO |errors|) per accelerator, generation, kind."""
    catalog = catalog or default_catalog()
    by_acc: dict[str, list[float]] = {}
    by_gen: dict[str, list[float]] = {}
    for m, e in zip(rows, errors):
        acc = catalog.accelerator(m.accelerator)
        by_acc.setdefault(acc.name, []).append(abs(e))
        by_gen.setdefault(generation_of(acc), []).append(abs(e))
    everything = [abs(e) for e in errors]
    glob = quantile(everything, q)

    def shrink(values: list[float]) -> float:
        # few residuals: pull towards the global band (weight n / (n + 3))
        w = len(values) / (len(values) + 3)
        return round(w * quantile(values, q) + (1 - w) * glob, 4)

    return {"quantile": q, "global": round(glob, 4), "by_accelerator": {k: shrink(v) for k, v in by_acc.items()},
            "by_generation": {k: shrink(v) for k, v in by_gen.items()}, "data_parallel_extra": 0.10,
            "source": "leave-one-model-out residuals of data/calibration.csv"}


def summarise_errors(errors: Sequence[float]) -> dict[str, float]:
    absolute = [abs(e) for e in errors]
    return {"rows": len(absolute), "median_abs_error": round(statistics.median(absolute), 4) if absolute else float("nan"),
            "mean_abs_error": round(statistics.fmean(absolute), 4) if absolute else float("nan"),
            "p90_abs_error": round(quantile(absolute, 0.9), 4), "max_abs_error": round(max(absolute), 4) if absolute else float("nan"),
            "signed_median_error": round(statistics.median(errors), 4) if errors else float("nan")}


def best_choice(rows: Sequence[Measurement], predicted: Sequence[float], catalog: Any = None,
                prices: dict[str, float] | None = None) -> dict[str, Any]:
    """Per (model, precision, count, source) group with >= 2 accelerators: is the fastest picked
    correctly, and the cheapest per sample among those with a catalog price (>= 2 priced)?"""
    catalog = catalog or default_catalog()
    prices = prices if prices is not None else accelerator_prices(catalog)
    groups: dict[tuple, list[int]] = {}
    for i, m in enumerate(rows):
        # one benchmark family (source) at a time: comparing accelerators measured by different
        # publishers with different software would reward or punish the model for their disagreement
        family = _family(m)
        groups.setdefault((m.model, m.precision, m.count, m.seq_len, m.image_size, m.task, family), []).append(i)
    out = []
    for key, idx in groups.items():
        names = [catalog.accelerator(rows[i].accelerator).name for i in idx]
        if len(set(names)) < 2:
            continue
        # one entry per accelerator: the best measured configuration of it
        best_meas: dict[str, tuple[float, float]] = {}
        for i, n in zip(idx, names):
            meas, pred = rows[i].samples_per_s, predicted[i]
            if n not in best_meas or meas > best_meas[n][0]:
                best_meas[n] = (meas, pred)
        fastest_true = max(best_meas, key=lambda n: best_meas[n][0])
        fastest_pred = max(best_meas, key=lambda n: best_meas[n][1])
        entry = {"model": key[0], "precision": key[1], "count": key[2], "source": key[-1], "accelerators": sorted(best_meas),
                 "fastest_measured": fastest_true, "fastest_predicted": fastest_pred,
                 # a pick that measured as fast as the best is right (published ties: 12.0 vs 12.0)
                 "fastest_correct": best_meas[fastest_pred][0] >= best_meas[fastest_true][0],
                 # regret: how much slower the predicted pick measured than the true best (0 = right)
                 "fastest_regret": round(best_meas[fastest_true][0] / best_meas[fastest_pred][0] - 1, 4)}
        priced = {n: prices[n] for n in best_meas if n in prices}
        if len(priced) >= 2:  # the cheapest per sample among the accelerators the catalog prices
            cost_true = min(priced, key=lambda n: priced[n] / best_meas[n][0])
            cost_pred = min(priced, key=lambda n: priced[n] / best_meas[n][1])
            regret = (priced[cost_pred] / best_meas[cost_pred][0]) / (priced[cost_true] / best_meas[cost_true][0]) - 1
            entry.update(cheapest_measured=cost_true, cheapest_predicted=cost_pred, cheapest_correct=regret <= 0,
                         cheapest_regret=round(regret, 4))
        out.append(entry)
    fast = [e["fastest_correct"] for e in out]
    cheap = [e["cheapest_correct"] for e in out if "cheapest_correct" in e]
    near = [e["fastest_regret"] <= 0.05 for e in out] + [e["cheapest_regret"] <= 0.05 for e in out if "cheapest_regret" in e]
    return {"groups": out, "fastest_accuracy": round(sum(fast) / len(fast), 4) if fast else None,
            "within_5pct_accuracy": round(sum(near) / len(near), 4) if near else None,
            "median_regret": round(statistics.median([e["fastest_regret"] for e in out]
                                                     + [e["cheapest_regret"] for e in out if "cheapest_regret" in e]), 4)
            if out else None,
            "cheapest_accuracy": round(sum(cheap) / len(cheap), 4) if cheap else None,
            "best_choice_accuracy": round((sum(fast) + sum(cheap)) / (len(fast) + len(cheap)), 4) if fast or cheap else None}


def accelerator_prices(catalog: Any = None) -> dict[str, float]:
    """Cheapest on-demand USD per accelerator-hour in the catalog, per accelerator."""
    catalog = catalog or default_catalog()
    frame = catalog.offerings
    frame = frame[frame["price_per_hour"].notna() & frame["accelerator"].notna() & (frame["accelerator_count"] > 0)]
    per = (frame["price_per_hour"] / frame["accelerator_count"]).groupby(frame["accelerator"]).min()
    return {str(k): float(v) for k, v in per.items()}


def implied_utilisation(m: Measurement, catalog: Any = None) -> float:
    """Measured FLOP/s of a row as a fraction of the peak its dominant operators can use.

    A row above 1.0 is physically impossible (a mislabelled precision, a per-node figure, a
    different workload) and is excluded from the fit by `plausible_rows`.
    """
    catalog = catalog or default_catalog()
    char = characterise_row(m)
    acc = catalog.accelerator(m.accelerator)
    by_cat = {k: sum(r.total_flops for r in char.records if r.category == k) for k in COMPUTE_CATEGORIES}
    cat = max(by_cat, key=by_cat.get)
    dtype = {"amp_fp16": "float16", "amp_bf16": "bfloat16"}.get(m.precision, "float32")
    peak, _ = compute_peak(acc, m.precision, cat, dtype, 16, 1)
    flops_per_sample = char.total_flops() / char.per_device_batch
    return m.samples_per_s / m.count * flops_per_sample / peak


# A synchronous data-parallel run cannot process more samples per device per second than one device
# alone at the same per-device batch; beyond this tolerance (run-to-run noise of one publisher: Lambda's
# four H100 SXM5 systems publish BERT-base 812-877 seq/s, 8 %) a multi-device row contradicts its own
# single-device row and is excluded (which of the two is off cannot be told).
SUPERLINEAR_TOLERANCE = 0.08


def _family(m: Measurement) -> str:
    """The publisher family of a measurement's source (one benchmark suite)."""
    return m.source.split(":")[0].split(" ")[0].split("/")[0]


def plausible_rows(rows: Sequence[Measurement], catalog: Any = None, limit: float = 1.0
                   ) -> tuple[list[Measurement], list[dict[str, Any]]]:
    """(rows kept, rows excluded with the reason): rows implying more than `limit` of the peak, and
    multi-device rows faster per device than the same publisher's single-device row (superlinear)."""
    catalog = catalog or default_catalog()

    def key(m: Measurement) -> tuple:
        return (m.model, catalog.accelerator(m.accelerator).name, m.precision, m.per_device_batch, m.seq_len,
                m.image_size, m.task, _family(m))

    single = {key(m): m.samples_per_s for m in rows if m.count == 1}
    kept, dropped = [], []
    for m in rows:
        u = implied_utilisation(m, catalog)
        entry = {"line": m.line, "model": m.model, "accelerator": m.accelerator, "count": m.count,
                 "precision": m.precision, "samples_per_s": m.samples_per_s, "implied_peak_fraction": round(u, 3),
                 "source": m.source}
        one = single.get(key(m)) if m.count > 1 else None
        if u > limit:
            dropped.append({**entry, "reason": f"implies {u:.0%} of the peak"})
        elif one is not None and m.samples_per_s / m.count > one * (1 + SUPERLINEAR_TOLERANCE):
            efficiency = m.samples_per_s / m.count / one
            dropped.append({**entry, "scaling_efficiency": round(efficiency, 3),
                            "reason": f"superlinear: {efficiency:.2f}x the same source's single-device throughput "
                                      "per device"})
        else:
            kept.append(m)
    return kept, dropped
