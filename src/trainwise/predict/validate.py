"""`trainwise validate`: compare device-model predictions with measured throughputs from a CSV.

For every row of the dataset (columns `model,accelerator,count,per_device_batch,precision,
samples_per_s,source`, optional `seq_len,image_size,task,optimizer,grad_accumulation,memory_format,
framework,notes`; see `measurements.py`) the model is characterised on the meta device, predicted on
the named accelerator, and compared:

- per row: predicted samples/s, relative error (predicted − measured) / measured, the predicted
  error band and whether the measurement falls inside it, whether the model predicts it fits memory;
- summary: median, 90th percentile and max |error|, the fraction inside the band, and the
  best-choice accuracy — for each (model, precision, count) measured on ≥ 2 accelerators, is the
  fastest accelerator (and, where the catalog prices all of them, the cheapest per sample) the
  one the predictions pick?

Rows are predicted with the packaged fit, so rows of the packaged *calibration* set are in-sample
here; the honest numbers for those are the leave-one-model-out ones of `benchmarks/device_model.py`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainwise.errors import TrainwiseError
from trainwise.predict import device_model as dm
from trainwise.predict import device_params as dp
from trainwise.predict.calibration_eval import best_choice, summarise_errors
from trainwise.predict.measurements import characterise_row, load_measurements, stack_of


class RowResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    line: int
    model: str
    accelerator: str
    count: int
    per_device_batch: int
    precision: str
    measured_samples_per_s: float
    predicted_samples_per_s: float
    error: float
    band: float
    within_band: bool
    fits_memory: bool
    memory_required_gib: float
    source: str
    notes: list[str] = []


class ValidationReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: str
    summary: dict[str, Any]
    predictions: list[RowResult]
    best_choice: list[dict[str, Any]]


def validate_dataset(path: str | Path, *, params: dp.DeviceModelParams | None = None, catalog: Any = None,
                     progress: Any = None) -> ValidationReport:
    """Predict every row of `path` and compare with its measured samples/s."""
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    params = params or dp.load_params()
    rows = load_measurements(path, catalog)
    results: list[RowResult] = []
    predicted: list[float] = []
    for i, m in enumerate(rows):
        if progress is not None:
            progress(i, len(rows), m)
        try:
            char = characterise_row(m)
        except TrainwiseError as exc:
            raise TrainwiseError(f"dataset {path} line {m.line}: {exc}") from None
        acc = catalog.accelerator(m.accelerator)
        p = dm.predict_iteration(char, acc, m.count, m.precision, params=params, framework=m.framework,
                                 gradient_accumulation=m.grad_accumulation, stack=stack_of(m), link=m.link)
        err = (p.samples_per_s - m.samples_per_s) / m.samples_per_s
        # the band is on iteration time: measured / predicted time - 1 = predicted / measured samples/s - 1
        time_err = p.samples_per_s / m.samples_per_s - 1.0
        within = abs(time_err) <= p.relative_error
        predicted.append(p.samples_per_s)
        results.append(RowResult(line=m.line, model=m.model, accelerator=acc.name, count=m.count,
                                 per_device_batch=m.per_device_batch, precision=m.precision,
                                 measured_samples_per_s=m.samples_per_s, predicted_samples_per_s=round(p.samples_per_s, 3),
                                 error=round(err, 4), band=p.relative_error, within_band=bool(within),
                                 fits_memory=p.fits_memory, memory_required_gib=round(p.memory_required_gib, 3),
                                 source=m.source, notes=p.notes))
    errors = [r.error for r in results]
    summary = summarise_errors(errors)
    choice = best_choice(rows, predicted, catalog)
    summary.update({"within_band_fraction": round(sum(r.within_band for r in results) / len(results), 4),
                    "best_choice_accuracy": choice["best_choice_accuracy"],
                    "fastest_accuracy": choice["fastest_accuracy"], "cheapest_accuracy": choice["cheapest_accuracy"],
                    "best_choice_groups": len(choice["groups"]),
                    "best_choice_within_5pct_accuracy": choice["within_5pct_accuracy"],
                    "params": ("custom" if params is not dp.load_params() else
                               f"${dp.PARAMS_ENV} ({os.environ[dp.PARAMS_ENV]})" if os.environ.get(dp.PARAMS_ENV)
                               else "packaged fit"),
                    "note": "rows of the packaged calibration set are in-sample here; see benchmarks/results/device_model.json "
                            "for leave-one-model-out errors"})
    return ValidationReport(dataset=str(path), summary=summary, predictions=results, best_choice=choice["groups"])


def report_table(report: ValidationReport) -> Any:
    """A rich Table of the per-row results."""
    from rich.table import Table

    table = Table(title=f"Device model vs measurements ({report.dataset})")
    for col in ("line", "model", "accelerator", "n", "batch", "precision", "measured/s", "predicted/s", "error",
                "band", "in band"):
        table.add_column(col, justify="right" if col not in ("model", "accelerator", "precision") else "left")
    for r in report.predictions:
        table.add_row(str(r.line), r.model, r.accelerator, str(r.count), str(r.per_device_batch), r.precision,
                      f"{r.measured_samples_per_s:,.1f}", f"{r.predicted_samples_per_s:,.1f}", f"{r.error:+.1%}",
                      f"±{r.band:.0%}", "yes" if r.within_band else "no")
    return table


def summary_lines(report: ValidationReport) -> list[str]:
    s = report.summary
    lines = [f"rows {s['rows']}: median |error| {s['median_abs_error']:.1%}, 90th percentile {s['p90_abs_error']:.1%}, "
             f"max {s['max_abs_error']:.1%}; inside the predicted band: {s['within_band_fraction']:.0%}"]
    if s.get("best_choice_groups"):
        fast = s["fastest_accuracy"]
        cheap = s["cheapest_accuracy"]
        lines.append(f"best choice over {s['best_choice_groups']} model groups: fastest right "
                     f"{fast:.0%}" + (f", cheapest right {cheap:.0%}" if cheap is not None else " (no priced groups)"))
        for g in report.best_choice:
            if not g["fastest_correct"] or not g.get("cheapest_correct", True):
                lines.append(f"  {g['model']} {g['precision']} x{g['count']}: fastest measured {g['fastest_measured']}, "
                             f"predicted {g['fastest_predicted']}"
                             + (f"; cheapest measured {g['cheapest_measured']}, predicted {g['cheapest_predicted']}"
                                if "cheapest_measured" in g else ""))
    return lines
