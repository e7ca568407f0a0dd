"""Fitting the per-operator kernel model (`trainwise.predict.kernel_model`): the per-kernel dataset as features,
the host dispatch gap taken out of kernels timed one call at a time, the gradient-boosted fit, and the
leave-one-GPU-family-out split that chooses its settings and its bands. Used by tools/train_kernel_model.py and
benchmarks/device_model.py; predicting needs none of it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainwise.predict.kernel_model import (CLASSES, DATASET_PATH, FEATURE_SETS, FEATURES, MIN_FAMILIES, OP_CLASS,
                                           GpuSpec, Kernel, KernelArrays, base_seconds, family, features_matrix,
                                           kernel_from_dims, regime_coverage, regimes)


@dataclass
class KernelDataset:
    gpus: list[str]
    ops: list[str]
    x: Any          # [rows, features]
    roofline: Any   # seconds
    latency: Any    # seconds (measured)
    dtype_code: Any  # `_DTYPE_CODE` of each row
    kernels: list | None = None  # the `Kernel` of each row (for the roofline rule's residuals, `kernel_rule`)
    sources: list | None = None  # the `source` column of each row

    @property
    def target(self) -> Any:
        import numpy as np

        return np.log(self.latency / base_seconds(self.x))

    def subset(self, mask: Any) -> "KernelDataset":
        import numpy as np

        idx = np.flatnonzero(mask)
        pick = lambda v: None if v is None else [v[i] for i in idx]  # noqa: E731
        return KernelDataset([self.gpus[i] for i in idx], [self.ops[i] for i in idx], self.x[idx], self.roofline[idx],
                             self.latency[idx], self.dtype_code[idx], pick(self.kernels), pick(self.sources))


# NeuSight timed every kernel alone: CUDA events recorded around one Python call of the operator, on an idle GPU,
# synchronised after each call (NeuSight neusight/Dataset/collect.py `measure_once`). The first event is stamped at
# once, the kernel starts only when the host has dispatched it, so each latency carries the host's dispatch gap
# (module call, dispatcher, launch): 25-60 us for a 37-element add, 51-91 us for the smallest nn.Linear, whatever the
# GPU. Inside a training step the host runs ahead of a busy GPU and that gap is hidden. The data's kernels are
# therefore its latencies less the gap of their (GPU, operator): the least (latency - roofline) among that pair's
# rows, an estimate from the kernel data alone. trainwise's own microbenchmarks time many back-to-back calls per
# event pair (benchmarks/kernel_sweep.py) and carry no gap.
# NeuSight's per-kernel test set (`neusight-test`) was collected the same way.
DISPATCH_GAP_SOURCES = frozenset({"neusight", "neusight-test"})
GAP_REFERENCE_SOURCE = "neusight"
# NeuSight turned TF32 off for cuDNN (`torch.backends.cudnn.allow_tf32 = False` in collect.py and trace.py) and ran
# torch 2.1, whose matmuls default to full fp32: its fp32 convolutions ran on the FP32 units, not in TF32 as PyTorch's
# default would run them on Ampere and later. benchmarks/kernel_sweep.py allows TF32 for its `tf32` rows only, so its
# `fp32` convolutions ran on the FP32 units too.
NO_TF32_CONV_SOURCES = frozenset({"neusight", "neusight-test"})
# sources written by benchmarks/kernel_sweep.py: `trainwise-sweep-<GPU>`
SWEEP_SOURCE_PREFIX = "trainwise-sweep-"


def conv_tf32(source: str) -> bool:
    """Whether a source's fp32 convolutions ran in TF32 (PyTorch's default) rather than on the FP32 units."""
    return source not in NO_TF32_CONV_SOURCES and not source.startswith(SWEEP_SOURCE_PREFIX)


# a kernel whose roofline is under a microsecond finishes on any GPU before eager PyTorch dispatches the next call
TINY_ROOFLINE_S = 1e-6


def host_bound(sources: list[str], ops: list[str], latency: Any, roofline: Any) -> Any:
    """Rows of the kernel sweeps that measured the host rather than the kernel (a boolean mask).

    benchmarks/kernel_sweep.py times back-to-back calls per event pair: once the GPU finishes a kernel faster than
    the host dispatches the next (a Python call, the dispatcher, the launch: 7-15 us per call on the lent machines),
    each call's time is the host's, whatever the kernel. The host floor of a (source, operator) is the least
    latency among its kernels with a roofline under `TINY_ROOFLINE_S` (those are host-bound on any GPU); a row whose
    roofline is below that floor could have finished before the host was ready with the next call, so its latency
    bounds the kernel's from above and no more. Those rows are censored, not fitted; a row whose roofline is at or
    above the floor kept the GPU the slower side. A (source, operator) without tiny kernels has no floor."""
    import numpy as np

    floor: dict[tuple[str, str], float] = {}
    for src, op, lat, roof in zip(sources, ops, latency, roofline):
        if src.startswith(SWEEP_SOURCE_PREFIX) and roof < TINY_ROOFLINE_S:
            floor[(src, op)] = min(floor.get((src, op), math.inf), float(lat))
    return np.array([float(roof) < floor.get((src, op), 0.0) for src, op, roof in zip(sources, ops, roofline)],
                    dtype=bool)


def dispatch_gaps(gpus: list[str], ops: list[str], sources: list[str], latency: Any, roofline: Any) -> dict[tuple[str, str], float]:
    """Seconds of host dispatch gap per (GPU, operator) of the rows timed one call per event pair
    (`DISPATCH_GAP_SOURCES`): the least latency in excess of the roofline among that pair's rows of
    `GAP_REFERENCE_SOURCE`, whose grid runs down to kernels too small to take the GPU any time. NeuSight's test set
    (model-sized kernels only, where the excess is mostly the kernel's own) takes its machine's gap from there, and
    a GPU the grid never ran (L4, H100, A100 80GB PCIe) the median gap of the operator over the GPUs it ran."""
    import statistics

    gaps: dict[tuple[str, str], float] = {}
    wanted: set[tuple[str, str]] = set()
    for g, op, src, lat, roof in zip(gpus, ops, sources, latency, roofline):
        if src == GAP_REFERENCE_SOURCE:
            gaps[(g, op)] = min(gaps.get((g, op), math.inf), max(float(lat - roof), 0.0))
        elif src in DISPATCH_GAP_SOURCES:
            wanted.add((g, op))
    by_op: dict[str, list[float]] = {}
    for (_, op), gap in gaps.items():
        by_op.setdefault(op, []).append(gap)
    for key in wanted - gaps.keys():
        if key[1] in by_op:
            gaps[key] = statistics.median(by_op[key[1]])
    return gaps


def load_dataset(path: Path | str = DATASET_PATH, catalog: Any = None, subtract_dispatch_gap: bool = True,
                 drop_host_bound: bool = True) -> KernelDataset:
    """data/kernel_latency.csv as features against each row's GPU (resolved in the catalog); the latencies of rows
    timed one call per event pair lose their (GPU, operator)'s dispatch gap (`dispatch_gaps`) unless
    `subtract_dispatch_gap` is False, and the kernel sweeps' rows that timed the host (`host_bound`) are left out
    unless `drop_host_bound` is False."""
    import csv

    import numpy as np

    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    specs: dict[str, GpuSpec] = {}
    by_gpu: dict[tuple[str, str], tuple[list[str], list[Kernel], list[float]]] = {}
    with Path(path).open(encoding="utf-8") as fh:
        for r in csv.DictReader(line for line in fh if not line.startswith("#")):
            if r["op"] not in OP_CLASS:
                continue
            if r["gpu"] not in specs:
                specs[r["gpu"]] = GpuSpec.of(catalog.accelerator(r["gpu"]))
            ops, kernels, lats = by_gpu.setdefault((r["gpu"], r.get("source") or ""), ([], [], []))
            ops.append(r["op"])
            kernels.append(kernel_from_dims(r["op"], r["dtype"], tuple(int(v) for v in r["dims"].split("x"))))
            lats.append(float(r["latency_us"]) * 1e-6)
    gpus, all_ops, xs, roofs, latencies, codes, sources, all_kernels = [], [], [], [], [], [], [], []
    for (name, source), (ops, kernels, lats) in by_gpu.items():
        all_kernels += kernels
        arrays = KernelArrays.of(kernels)
        codes.append(arrays.dtype)
        x, roof = features_matrix(arrays, specs[name], conv_tf32=conv_tf32(source))
        gpus += [specs[name].name] * len(ops)
        all_ops += ops
        sources += [source] * len(ops)
        xs.append(x)
        roofs.append(roof)
        latencies.append(np.array(lats))
    roofline, latency = np.concatenate(roofs), np.concatenate(latencies)
    if subtract_dispatch_gap:
        gaps = dispatch_gaps(gpus, all_ops, sources, latency, roofline)
        gap = np.array([gaps.get((g, op), 0.0) if src in DISPATCH_GAP_SOURCES else 0.0
                        for g, op, src in zip(gpus, all_ops, sources)])
        # never below the roofline for want of the gap (a reference row's gap is at most its own excess; a test-set
        # kernel may run at the spec's peak, or from a large L2); a latency already under it stays as measured
        latency = np.maximum(latency - gap, np.minimum(latency, roofline))
    data = KernelDataset(gpus, all_ops, np.vstack(xs), roofline, latency, np.concatenate(codes), all_kernels, sources)
    return data.subset(~host_bound(sources, all_ops, latency, roofline)) if drop_host_bound else data


# settings compared on the per-kernel leave-one-GPU-out split (never on end-to-end rows); the candidates keep the
# packaged artifact at or under ~400 KB (a wider grid up to 600 trees and depth 8, 0.13-2.5 MB, scored no better on
# that split: docs/accuracy.md), each with three input sets: the kernel's, plus its bytes against the L2, plus the
# GPU's specs (`FEATURE_SETS`)
_TREES = ({"n_estimators": 150, "max_depth": 6, "learning_rate": 0.1},
          {"n_estimators": 300, "max_depth": 4, "learning_rate": 0.1},
          {"n_estimators": 150, "max_depth": 4, "learning_rate": 0.1},
          {"n_estimators": 150, "max_depth": 4, "learning_rate": 0.05},
          {"n_estimators": 300, "max_depth": 4, "learning_rate": 0.05})
SETTINGS = tuple({**trees, "features": features} for features in FEATURE_SETS for trees in _TREES)
# the selection split fits on every HOLDOUT_THIN-th row (the held-out family is scored on all of its rows)
HOLDOUT_THIN = 2


@dataclass
class FittedModel:
    """A fitted regressor and the columns of `FEATURES` it reads (its settings' feature set)."""

    regressor: Any
    columns: list[int]

    def predict(self, x: Any) -> Any:
        import numpy as np

        return self.regressor.predict(np.asarray(x)[:, self.columns])


def fit_ensemble(data: KernelDataset, settings: dict, seed: int = 0) -> FittedModel:
    from sklearn.ensemble import HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    columns = [FEATURES.index(f) for f in FEATURE_SETS[settings.get("features", "kernel+gpu")]]
    model = HistGradientBoostingRegressor(max_iter=settings["n_estimators"], max_depth=settings["max_depth"],
                                          learning_rate=settings["learning_rate"], max_leaf_nodes=None,
                                          early_stopping=False, random_state=seed)
    with threadpool_limits(1):  # OpenMP threads spin badly on a shared machine; one is faster there
        model.fit(data.x[:, columns], data.target)
    return FittedModel(model, columns)


def systematic_error(predicted: Any, measured: Any, groups: Any, min_rows: int = 20) -> dict[str, float]:
    """{group: time-weighted mean log(predicted / measured)} over the kernels of each group with `min_rows` kernels:
    the part of a group's error a step keeps (its kernels' scatter averages out over the step's sum)."""
    import numpy as np

    groups = np.asarray(groups)
    out = {}
    for g in sorted(set(groups.tolist())):
        sel = groups == g
        if sel.sum() >= min_rows:
            w = measured[sel]
            out[g] = float(np.sum(w * np.log(predicted[sel] / w)) / np.sum(w))
    return out


def predict_held_out(data: KernelDataset, train: Any, test: Any, settings: dict) -> tuple[KernelDataset, Any]:
    """Fit on the `train` rows, predict the `test` rows in a regime the training rows cover on MIN_FAMILIES
    families: (those rows, their predicted seconds, never under the roofline)."""
    import numpy as np

    fitted_on = data.subset(train)
    model = fit_ensemble(fitted_on, settings)
    coverage = regime_coverage(fitted_on)
    in_regime = np.array([len(coverage.get(r, ())) >= MIN_FAMILIES for r in regimes(data.x, data.dtype_code)])
    held = data.subset(test & in_regime)
    return held, np.maximum(held.roofline, base_seconds(held.x) * np.exp(model.predict(held.x)))


def holdout_errors(data: KernelDataset, settings: dict) -> dict[str, Any]:
    """Leave-one-GPU-family-out on the kernel data: per family, median |relative error| of the model and of
    the plain roofline, and the time-weighted mean log-residual per kernel class (the systematic part that
    does not average out over a step: what the band is calibrated on)."""
    import numpy as np

    fams = sorted({family(g) for g in data.gpus})
    fam_of = np.array([family(g) for g in data.gpus])
    out: dict[str, Any] = {"by_gpu": {}, "class_bias": {c: [] for c in CLASSES},
                           "class_bias_by_family": {c: {} for c in CLASSES}, "regime_bias_by_family": {}}
    all_err, all_roof = [], []
    for fam in fams:
        test = fam_of == fam
        if test.sum() < 50 or (~test).sum() < 50:
            continue
        held, pred = predict_held_out(data, ~test & (np.arange(len(test)) % HOLDOUT_THIN == 0), test, settings)
        if len(held.gpus) < 50:
            continue
        err = pred / held.latency - 1
        roof_err = held.roofline / held.latency - 1
        out["by_gpu"][fam] = {"rows": len(held.gpus), "median_abs_error": round(float(np.median(np.abs(err))), 4),
                              "roofline_median_abs_error": round(float(np.median(np.abs(roof_err))), 4)}
        all_err.append(np.abs(err))
        all_roof.append(np.abs(roof_err))
        for r, bias in systematic_error(pred, held.latency, regimes(held.x, held.dtype_code)).items():
            out["regime_bias_by_family"].setdefault(r, {})[fam] = bias
        held_classes = [CLASSES[i] for i in held.x[:, FEATURES.index("class")].astype(int)]
        for c, bias in sorted(systematic_error(pred, held.latency, held_classes).items(), key=lambda kv: CLASSES.index(kv[0])):
            out["class_bias"][c].append(bias)
            out["class_bias_by_family"][c][fam] = bias
    out["median_abs_error"] = round(float(np.median(np.concatenate(all_err))), 4)
    out["roofline_median_abs_error"] = round(float(np.median(np.concatenate(all_roof))), 4)
    out["p90_abs_error"] = round(float(np.quantile(np.concatenate(all_err), 0.9)), 4)
    biases = [abs(b) for per_class in out["class_bias"].values() for b in per_class]
    out["mean_abs_class_bias"] = round(float(np.mean(biases)), 4) if biases else None  # what a step's sum keeps
    return out


def rule_regimes(model_bias: dict[str, dict[str, float]], rule_bias: dict[str, dict[str, float]],
                 held_out: str | None = None) -> list[str]:
    """Regimes the kernel model leaves to the roofline rule: those where, over the GPU families both were scored
    on (every family but `held_out`), the model's mean |systematic error| on a family held out of its fit
    (`model_bias`: {regime: {family: time-weighted mean log-residual}}) is not below the rule's on the same
    family's kernels (`rule_bias`). The learned model has to earn a regime on the per-kernel split; a tie keeps the
    rule, which has no per-kernel fit to overfit, and so does a regime with no family scored but `held_out` (a few
    kernels per GPU, under `systematic_error`'s row floor, are no evidence). None of it reads an end-to-end step time."""
    out = []
    for regime in sorted(set(model_bias) | set(rule_bias)):
        per_family = model_bias.get(regime, {})
        both = [f for f in per_family if f != held_out and f in rule_bias.get(regime, {})]
        if not both or sum(abs(per_family[f]) for f in both) >= sum(abs(rule_bias[regime][f]) for f in both):
            out.append(regime)
    return out


def conformal_quantile(values: Any, level: float = 0.8) -> float:
    """Split-conformal quantile of |values| with the finite-sample correction ceil((n+1) level) / n."""
    v = sorted(abs(x) for x in values)
    if not v:
        return 0.25
    rank = min(len(v), math.ceil((len(v) + 1) * level))
    return v[rank - 1]


def bands_without(by_family: dict[str, dict[str, float]], held_out: str | None = None, level: float = 0.8
                  ) -> dict[str, float]:
    """Per kernel class, the split-conformal quantile of the per-family systematic errors `by_family`
    ({class: {family: time-weighted mean log-residual}}) over every family but `held_out`: the band a GPU of
    family `held_out` gets when its own family may not choose it (cross-conformal, one family per fold; None
    keeps every family, the packaged band)."""
    out = {}
    for c, per_family in by_family.items():
        values = [v for fam, v in per_family.items() if fam != held_out]
        if values:
            out[c] = round(conformal_quantile(values, level), 4)
    return out
