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


def _gpu_profile(char, device_name: str, iteration_s: float = 0.05):
    from trainwise.plan.synthetic import synthetic_profile

    profile = synthetic_profile(device_name=device_name, iteration_s=iteration_s, batch_size=char.per_device_batch,
                                host="gpubox")
    return profile.model_copy(update={"characterisation": char})


def test_a_gpu_profile_moves_to_its_own_familys_gpus_and_keeps_its_data_wait(char):
    """`transfer_from_profile`: the profiled step's data wait kept, the rest scaled by the model's whole-iteration
    ratio; the band the device model's; another family, a CPU profile or a multi-device prediction: None."""
    from trainwise.predict.transfer import transfer_from_profile

    cat = load_catalog()
    profile = _gpu_profile(char, "NVIDIA H100 80GB HBM3")
    steady = profile.steady_state
    pred = dm.predict_iteration(char, cat.accelerator("H200"))
    moved = transfer_from_profile(profile, char, pred, cat)
    ratio = pred.iteration_s / dm.predict_iteration(char, cat.accelerator("H100")).iteration_s
    wait = steady.data_wait.mean_s
    assert wait > 0
    assert moved.iteration_s == pytest.approx(wait + (steady.iteration.mean_s - wait) * ratio)
    assert moved.relative_error == pred.relative_error and moved.high_s == pytest.approx(moved.iteration_s * (1 + pred.relative_error))
    assert moved.provenance.startswith("transferred ±") and moved.provenance.endswith("from H100")
    assert "H100 → H200 ratio" in moved.notes[0]
    same = transfer_from_profile(profile, char, dm.predict_iteration(char, cat.accelerator("H100")), cat)
    assert same.iteration_s == pytest.approx(steady.iteration.mean_s)  # the measured GPU itself: the measurement
    assert transfer_from_profile(profile, char, dm.predict_iteration(char, cat.accelerator("A100")), cat) is None
    assert transfer_from_profile(profile, char, dm.predict_iteration(char, cat.accelerator("H200"), 2), cat) is None
    cpu = _gpu_profile(char, None)
    assert transfer_from_profile(cpu, char, pred, cat) is None


def test_plan_prices_the_profiled_gpus_family_from_the_measured_step(char):
    from trainwise.plan.distributed import single_machine_options
    from trainwise.plan.objectives import Objective
    from trainwise.plan.planner import PlanOptions, plan

    profile = _gpu_profile(char, "NVIDIA A100-SXM4-80GB", iteration_s=0.08)
    result = plan([profile], load_catalog(), Objective(kind="fastest"), epoch_options=[2],
                  options=PlanOptions(this_host="here", distributed=single_machine_options()))
    rows = result.ranked
    one = rows[rows["accelerator_count"] == 1]
    families = one["accelerator"].astype(str)
    moved = one[one["time_source"] == "transferred"]
    assert len(moved) and families[moved.index].str.contains("A100").all()
    modelled = one[families.str.contains("H100|V100|L4|T4")]
    assert len(modelled) and (modelled["time_source"] == "device model").all()
    assert moved["time_provenance"].str.contains("transferred").all()


def test_device_predict_and_predict_from_a_gpu_profile_transfer_within_the_family_only(char, tmp_path):
    import json

    from typer.testing import CliRunner

    from trainwise.cli import app

    path = tmp_path / "h100.json"
    path.write_text(_gpu_profile(char, "NVIDIA H100 80GB HBM3").model_dump_json(), encoding="utf-8")
    result = CliRunner().invoke(app, ["device", "predict", "--from", str(path), "-a", "H200", "-a", "A100", "--json"])
    assert result.exit_code == 0, result.output
    h200, a100 = json.loads(result.output)
    assert h200["provenance"].startswith("transferred") and not a100["provenance"].startswith("transferred")
    shown = CliRunner().invoke(app, ["predict", str(path), "-a", "H200", "--epochs", "1"])
    assert shown.exit_code == 0, shown.output
    assert "transferred iteration on 1 × H200" in " ".join(shown.output.split())


def test_a_family_is_the_die_an_l40s_is_not_an_l4():
    from trainwise.predict.kernel_model import family

    assert family("L40S") != family("L4") and family("P40") != family("P4")
    assert family("H200") == family("GH200") == family("H100-PCIe") == "H100"
    assert family("A100-80GB-PCIe") == family("A100") and family("V100-PCIe-32GB") == family("V100")
