"""Calibration of the device model on published measurements: the fit every prediction uses, with error
bands from its leave-one-model-out residuals, written to the packaged `data/device_model_params.json`.

The rows are `measurements`, the fit is `calibration_fit` (priors: `calibration_layout`), the
leave-one-out errors and the bands `calibration_eval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainwise.predict import device_params, measurements
from trainwise.predict.calibration_eval import (
    LooResult,
    bands_from_residuals,
    loo,
    plausible_rows,
    quantile,
    summarise_errors,
)
from trainwise.predict.calibration_fit import fit
from trainwise.predict.device_model import predict_iteration
from trainwise.predict.device_params import DeviceModelParams, load_params
from trainwise.predict.measurements import characterise_row, default_catalog, load_measurements, load_ratios, stack_of


def fit_calibration(extra: Sequence[str | Path] = (), *, with_loo: bool = True,
                    catalog: Any = None) -> tuple[DeviceModelParams, LooResult | None]:
    """Fit on the packaged calibration set plus the rows of `extra` CSVs (a user's own measurements,
    e.g. `trainwise device measure --csv`), with error bands from the leave-one-model-out residuals
    (`with_loo=False`: a single fit, the packaged fit's bands kept)."""
    catalog = catalog or default_catalog()
    rows = load_measurements(measurements.CALIBRATION_CSV, catalog)
    for path in extra:
        rows = rows + load_measurements(path, catalog)
    rows, _ = plausible_rows(rows, catalog)
    ratios = load_ratios(measurements.RATIOS_CSV)
    res = fit(rows, ratios, catalog)
    fitted_on: dict[str, Any] = {"calibration_rows": len(rows), "ratio_rows": len(ratios), "loo_group": "model",
                                 "added": [str(p) for p in extra]}
    if not with_loo:
        fitted_on["bands"] = "kept from the packaged fit (no leave-one-model-out run)"
        return res.params.model_copy(update={"bands": load_params_packaged().bands, "fitted_on": fitted_on}), None
    loo_res = loo(rows, ratios, "model", catalog)
    bands = bands_from_residuals(rows, loo_res.errors, catalog)
    kinds: dict[str, list[float]] = {"compute": [], "memory": []}
    for m, e in zip(rows, loo_res.errors):
        char = characterise_row(m)
        p = predict_iteration(char, catalog.accelerator(m.accelerator), m.count, m.precision, params=res.params,
                              framework=m.framework, gradient_accumulation=m.grad_accumulation,
                              stack=stack_of(m), link=m.link)
        kinds["compute" if p.compute_bound_fraction >= 0.5 else "memory"].append(abs(e))
    bands["by_kind"] = {k: round(quantile(v, bands["quantile"]), 4) for k, v in kinds.items() if v}
    fitted_on["loo_median_abs_error"] = summarise_errors(loo_res.errors)["median_abs_error"]
    return res.params.model_copy(update={"bands": bands, "fitted_on": fitted_on}), loo_res


def load_params_packaged() -> DeviceModelParams:
    return load_params(device_params.PARAMS_PATH) if device_params.PARAMS_PATH.is_file() else DeviceModelParams()


def save_params(params: DeviceModelParams, path: str | Path) -> Path:
    """Write a fit atomically (readable by everyone: the packaged file is installed data)."""
    import json
    import os

    from trainwise._io import atomic_write_text

    target = atomic_write_text(path, json.dumps(params.model_dump(mode="json"), indent=1, sort_keys=True))
    os.chmod(target, 0o644)
    device_params._load_params_cached.cache_clear()
    return target


def fit_packaged(write: bool = True, catalog: Any = None) -> tuple[DeviceModelParams, LooResult]:
    """Fit on the packaged calibration set, derive the bands from its LOO residuals, save the JSON."""
    params, loo_res = fit_calibration(catalog=catalog)
    assert loo_res is not None
    if write:
        save_params(params, device_params.PARAMS_PATH)
    return params, loo_res
