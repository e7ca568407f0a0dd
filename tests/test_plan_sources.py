"""The runtime source is pluggable: a later device model adds rows without touching the planner."""

from __future__ import annotations

import pandas as pd

from trainwise.catalog import load_catalog
from trainwise.plan import Objective, PlanOptions, plan
from trainwise.plan.runtime import DEFAULT_SOURCES, RUNTIME_COLUMNS, RuntimeContext
from trainwise.plan.synthetic import synthetic_profile


def fake_device_model(offerings: pd.DataFrame, context: RuntimeContext) -> pd.DataFrame:
    """Predicts A100 offerings as 2x faster than the V100 profile (a stand-in for the device model)."""
    a100 = offerings.index[(offerings["accelerator"] == "A100") & (offerings["accelerator_count"] == 1.0)]
    base = context.predictions
    rows = []
    for row in a100:
        for rec in base.to_dict("records"):
            rows.append({"offering_row": row, "profile": rec["profile"], "epochs": rec["epochs"],
                         "training_s": rec["training_s"] / 2, "training_low_s": rec["training_s"] / 2 * 0.8,
                         "training_high_s": rec["training_s"] / 2 * 1.2, "init_s": rec["init_s"],
                         "first_epoch_s": rec["first_epoch_s"] / 2, "steady_s": rec["steady_s"] / 2,
                         "validation_s": rec["validation_s"] / 2, "time_provenance": "modelled ±20 %",
                         "relative_error": 0.2, "time_source": "device model"})
    return pd.DataFrame(rows, columns=list(RUNTIME_COLUMNS))


def test_a_third_source_plugs_in():
    catalog = load_catalog("packaged")
    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02)
    options = PlanOptions(this_host="here", provisioning_s=(0.0, 0.0, 0.0))
    without = plan([profile], catalog, Objective(kind="fastest"), options=options)
    assert "A100" not in set(without.plans["accelerator"])
    result = plan([profile], catalog, Objective(kind="fastest"), options=options,
                  sources=(*DEFAULT_SOURCES, fake_device_model))
    a100 = result.plans[result.plans["accelerator"] == "A100"]
    assert len(a100) > 0 and set(a100["time_provenance"]) == {"modelled ±20 %"}
    v100 = result.plans[result.plans["accelerator"] == "V100"]
    assert set(v100["time_provenance"]) == {"measured on gpubox (imported) on V100"}
    assert result.best["accelerator"] == "A100"
    left = result.not_predicted
    assert left[(left["accelerator"] == "A100") & (left["accelerator_count"] == 1.0)].empty  # now predicted
    assert not left[(left["accelerator"] == "A100") & (left["accelerator_count"] > 1.0)].empty  # multi-GPU: still not
