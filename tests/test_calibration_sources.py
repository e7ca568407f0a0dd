"""Packaged calibration rows against what their cited benchmark configurations actually ran."""

from __future__ import annotations


from trainwise.predict import measurements as meas


def _rows(path, catalog):
    return meas.load_measurements(path, catalog)


def test_lambda_80gb_ncf_fp16_rows_are_tf32(catalog):
    # lambdal/deeplearning-benchmark pytorch/scripts/config_v1/config_pytorch_80GB.sh@b45b0ec: the "FP16" NCF set
    # passes no --amp (ncf.py autocasts only with it), so those fp16-table rows ran in TF32 at batch 10M
    ncf = [m for m in _rows(meas.CALIBRATION_CSV, catalog) if m.model == "ncf"]
    on_80gb = [m for m in ncf if m.accelerator in ("A100-80GB", "H100", "H100-PCIe")]
    assert on_80gb and all(m.precision == "tf32" for m in on_80gb)
    assert {m.per_device_batch for m in on_80gb} == {8_000_000, 10_000_000}
    assert all("--amp" in m.notes for m in on_80gb if m.per_device_batch == 10_000_000)
    # configs that pass --amp (16/24/40/48 GB) keep their AMP rows
    assert {m.accelerator for m in ncf if m.precision == "amp_fp16"} == {"RTX8000", "V100", "A10", "A100", "A6000"}


def test_dle_efficientnet_v100_batches_follow_configs_yml(catalog):
    # NVIDIA/DeepLearningExamples ConvNets/configs.yml@0fadac2, platform DGX1V-16G (the README's training scripts)
    expected = {("efficientnet_b0", "fp32"): 64, ("efficientnet_b0", "amp_fp16"): 128,
                ("efficientnet_b4", "fp32"): 16, ("efficientnet_b4", "amp_fp16"): 32}
    for path in (meas.CALIBRATION_CSV, meas.VALIDATION_CSV):
        for m in _rows(path, catalog):
            if m.model.startswith("efficientnet") and m.accelerator == "V100":
                assert m.per_device_batch == expected[(m.model, m.precision)], (path.name, m.line)
