"""Train the per-operator kernel model and write src/trainwise/predict/data/kernel_model.json.

Settings (`kernel_fit.SETTINGS`: trees, and which inputs: `kernel_model.FEATURE_SETS`) are chosen on a
leave-one-GPU-family-out split of the per-kernel data only, by the mean |time-weighted error| per (held-out family,
kernel class), the part of a kernel's error a training step keeps;
the 80 % band per kernel class is the split-conformal quantile of the held-out families' time-weighted mean
log-residuals, and the band of the operators the kernel core leaves to the roofline rule is the same quantile of
the rule's own per-family systematic error on the kernel data (`kernel_rule`). Both keep the per-family values
(`class_bias_by_family`, `fallback_class_bias_by_family`) so that an evaluation holding a family out can drop it.
End-to-end step times are never read here.
Run: .venv/bin/python tools/train_kernel_model.py [--exclude GPU ...] [--output PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from trainwise.predict import kernel_fit as kf
from trainwise.predict import kernel_model as km
from trainwise.predict import kernel_rule as kr


def build(exclude: list[str], output: Path, select: bool = True) -> dict:
    t0 = time.perf_counter()
    data = kf.load_dataset()
    import numpy as np

    keep = np.array([km.family(g) not in {km.family(e) for e in exclude} for g in data.gpus])
    data = data.subset(keep)
    candidates = []
    for settings in (kf.SETTINGS if select else kf.SETTINGS[:1]):
        held = kf.holdout_errors(data, settings)
        # a step sums its kernels: their systematic per-class error stays, their scatter averages out (the band is
        # calibrated on the same per-family class bias); the median |error| over kernels only breaks ties
        candidates.append(((held["mean_abs_class_bias"], held["median_abs_error"]), settings, held))
        print(f"settings {settings}: per-kernel leave-one-GPU-out median |error| {held['median_abs_error']:.3f} "
              f"(roofline {held['roofline_median_abs_error']:.3f}), mean |class bias| {held['mean_abs_class_bias']:.3f}",
              flush=True)
    _, settings, held = min(candidates, key=lambda c: c[0])
    model = kf.fit_ensemble(data, settings)
    bias_by_family = {c: {f: round(x, 5) for f, x in v.items()} for c, v in held["class_bias_by_family"].items() if v}
    band = kf.bands_without(bias_by_family)  # from the values stored, so the artifact's meta checks against itself
    rule_bias, rule_regime_bias = kr.rule_biases(data)  # the rule prices every kernel once, grouped twice
    regime_bias = {r: {f: round(x, 5) for f, x in v.items()} for r, v in held["regime_bias_by_family"].items()}
    meta = {"settings": settings, "coverage": km.regime_coverage(data), "min_families": km.MIN_FAMILIES, "rows": len(data.gpus), "gpus": sorted(set(data.gpus)), "excluded": exclude,
            "kernel_holdout": {k: v for k, v in held.items() if not k.startswith("class_bias")}, "band80_by_class": band,
            "candidates": [{"settings": s, "mean_abs_class_bias": h["mean_abs_class_bias"],
                            "median_abs_error": h["median_abs_error"]} for _, s, h in candidates],
            "class_bias": {c: [round(x, 5) for x in v] for c, v in held["class_bias"].items()},
            "class_bias_by_family": bias_by_family,
            "fallback_band80_by_class": kf.bands_without(rule_bias), "fallback_class_bias_by_family": rule_bias,
            "regime_bias_by_family": regime_bias, "fallback_regime_bias_by_family": rule_regime_bias,
            "rule_regimes": kf.rule_regimes(regime_bias, rule_regime_bias),
            "dataset": str(km.DATASET_PATH.name), "fit_seconds": round(time.perf_counter() - t0, 1)}
    artifact = km.ensemble_to_json(model, meta)
    tmp = output.with_suffix(".tmp")
    tmp.write_text(json.dumps(artifact, separators=(",", ":")), encoding="utf-8")
    tmp.replace(output)
    return artifact


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--exclude", nargs="*", default=[], help="GPU families left out of the fit (e.g. H100)")
    ap.add_argument("--output", type=Path, default=km.ARTIFACT_PATH)
    ap.add_argument("--no-select", action="store_true", help="fit the first setting without the selection split")
    args = ap.parse_args(argv)
    art = build(args.exclude, args.output, not args.no_select)
    print(json.dumps(art["meta"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
