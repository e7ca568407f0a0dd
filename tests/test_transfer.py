"""Transfer of a measured step between GPUs by the device model's per-category ratios."""

from __future__ import annotations

import pytest

from trainwise.catalog import load_catalog
from trainwise.errors import TrainwiseError
from trainwise.predict import device_model as dm
from trainwise.predict.transfer import transfer_step


@pytest.fixture(scope="module")
def char():
    from trainwise.predict.characterise import characterise_named

    return characterise_named("resnet18", 32, "amp_fp16")


def test_same_gpu_is_the_measurement(char):
    h100 = load_catalog().accelerator("H100")
    p = transfer_step(char, h100, h100, 0.05, {"conv": 0.02, "elementwise": 0.01})
    assert p.iteration_s == pytest.approx(0.05)


def test_device_time_scales_by_the_model_ratio_and_the_rest_is_kept(char):
    cat = load_catalog()
    src, tgt = cat.accelerator("T4"), cat.accelerator("A100")
    a, b = dm.predict_iteration(char, src), dm.predict_iteration(char, tgt)
    ratio = b.breakdown_s["conv"] / a.breakdown_s["conv"]
    p = transfer_step(char, src, tgt, 0.1, {"conv": 0.06}, measured_wall_s=0.1)
    assert p.iteration_s == pytest.approx(0.1 * (0.4 + 0.6 * ratio))
    assert p.unattributed_fraction == pytest.approx(0.4)
    assert p.iteration_s < 0.1  # an A100 is faster than a T4 at convolutions


def test_bad_measurements_are_refused(char):
    h100 = load_catalog().accelerator("H100")
    with pytest.raises(TrainwiseError, match="must be positive"):
        transfer_step(char, h100, h100, 0.0, {})
    with pytest.raises(TrainwiseError, match="add up to"):
        transfer_step(char, h100, h100, 0.1, {"conv": 0.2})
