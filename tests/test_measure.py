"""Measured training throughput (trainwise.predict.measure): the real step the characteriser traces."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from trainwise.agent.trace.optimizers import optimizer_name_of
from trainwise.catalog import load_catalog
from trainwise.core.workload import Category
from trainwise.errors import TrainwiseError
from trainwise.predict import calibration as cal
from trainwise.predict import characterise as ch
from trainwise.predict import measure as me
from trainwise.predict import measurements as meas


pytestmark = pytest.mark.usefixtures("no_disk_cache")


def test_a_measurement_trains_the_traced_step_and_becomes_a_validation_row(tmp_path, catalog):
    m = me.measure_throughput("mnist_cnn", 16, "fp32", device="cpu", warmup_steps=2, min_run_time_s=0.3)
    # the reference workload's own optimizer, as the characteriser costs it
    assert m.optimizer == ch.characterise_named("mnist_cnn", 16).optimizer == "adadelta"
    assert m.samples_per_s > 0 and m.step_time_s_median > 0 and m.step_time_s_iqr >= 0
    assert m.step_time_s_blocks and m.steps_per_block >= 1
    assert m.samples_per_s == pytest.approx(16 / m.step_time_s_median)
    assert min(m.step_time_s_blocks) <= m.step_time_s_median <= max(m.step_time_s_blocks)
    assert m.loss_finite and m.peak_memory_bytes is None and m.cuda_version is None and m.device == "cpu"
    # the row reads back as a measurement the validation command predicts
    row = me.to_validation_row(m, "T4", "measured by trainwise tests")
    path = tmp_path / "rows.csv"
    path.write_text(me.validation_csv_text([row]), encoding="utf-8")
    [loaded] = meas.load_measurements(path, catalog)
    assert (loaded.model, loaded.accelerator, loaded.per_device_batch, loaded.precision) == ("mnist_cnn", "T4", 16, "fp32")
    assert loaded.samples_per_s == pytest.approx(m.samples_per_s, rel=1e-3)
    assert meas.stack_of(loaded) == "pytorch-eager"  # stock PyTorch eager: the reference stack
    assert meas.characterise_row(loaded).optimizer == "adadelta"


def test_precision_switches_are_restored_after_a_measurement():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    me.measure_throughput("nn_twins_mlp", 32, "tf32", device="cpu", warmup_steps=1, min_run_time_s=0.1)
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) == before


def test_amp_measurement_runs_under_autocast_on_cpu():
    m = me.measure_throughput("nn_twins_mlp", 32, "amp_bf16", device="cpu", warmup_steps=1, min_run_time_s=0.1)
    assert m.precision == "amp_bf16" and m.loss_finite and math.isfinite(m.samples_per_s)


@pytest.mark.parametrize("device_name, accelerator", [
    ("NVIDIA H100 80GB HBM3", "H100"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"), ("Tesla T4", "T4"), ("NVIDIA A10G", "A10G"), ("Tesla V100-SXM2-16GB", "V100"),
    ("NVIDIA L4", "L4"), ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe"), ("Tesla V100-PCIE-32GB", "V100-PCIe-32GB"),
    ("NVIDIA GH200 480GB", "GH200"),
])
def test_cuda_device_names_map_to_catalog_accelerators(catalog, device_name, accelerator):
    assert me.accelerator_of_device_name(device_name, catalog) == accelerator


def test_bad_input_is_a_clear_error(catalog):
    with pytest.raises(TrainwiseError, match="no catalog accelerator"):
        me.accelerator_of_device_name("Imaginary Accelerator 9000", catalog)
    with pytest.raises(TrainwiseError, match="no catalog accelerator"):  # not the H100 SXM its family name suggests
        me.accelerator_of_device_name("NVIDIA H100 NVL", catalog)
    with pytest.raises(TrainwiseError, match="batch must be positive"):
        me.measure_throughput("mnist_cnn", 0, device="cpu")
    with pytest.raises(TrainwiseError, match="no torch.optim class"):
        me.make_optimizer("lamb", [torch.nn.Parameter(torch.zeros(2))])
    with pytest.raises(TrainwiseError, match="unknown model"):
        me.measure_throughput("resnet5O", 2, device="cpu")
    if not torch.cuda.is_available():
        with pytest.raises(TrainwiseError, match="cuda"):
            me.measure_throughput("mnist_cnn", 2, device="cuda")


@pytest.mark.parametrize("command", [["device", "measure", "--device", "cpu", "--seconds", "0.1", "--warmup", "1"],
                                     ["device", "characterise"], ["device", "predict", "-a", "V100"]])
def test_a_sequence_longer_than_the_models_positions_is_refused_before_building_it(capsys, monkeypatch, command):
    from trainwise.cli import main
    from trainwise.predict import hf_models

    def no_build(*args, **kwargs):
        raise AssertionError("a sequence the model has no positions for must be refused before the model is built")

    # before: a trace on meta priced the impossible step without a word, a real step died in an IndexError
    monkeypatch.setattr(hf_models, "build", no_build)
    assert main([*command, "hf:distilbert-base-uncased", "--batch", "1", "--seq-len", "600"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    assert lines[0] == ("error: --seq-len 600 is longer than hf:distilbert-base-uncased's 512 positions: "
                        "use --seq-len 512 or less")


@pytest.mark.parametrize("name, cls, momentum", [("sgd", torch.optim.SGD, 0), ("sgd_momentum", torch.optim.SGD, 0.9),
                                                 ("adam", torch.optim.Adam, None), ("adamw", torch.optim.AdamW, None),
                                                 ("rmsprop_momentum", torch.optim.RMSprop, 0.9)])
def test_optimizers_are_the_ones_the_characteriser_costs(name, cls, momentum):
    opt = me.make_optimizer(name, [torch.nn.Parameter(torch.zeros(2))])
    assert type(opt) is cls
    assert optimizer_name_of(opt) == name
    if momentum is not None:
        assert opt.param_groups[0]["momentum"] == momentum


def test_packaged_h100_measurements_are_a_validation_set(catalog):
    rows = meas.load_measurements(meas.MEASURED_H100_CSV, catalog)
    assert len(rows) >= 25 and {r.accelerator for r in rows} == {"H100"}
    assert all(r.source.startswith("measured by trainwise") and meas.stack_of(r) == "pytorch-eager" for r in rows)
    assert {r.precision for r in rows} == {"fp32", "tf32", "amp_fp16", "amp_bf16"}
    # never fitted: no calibration row comes from this source
    assert not any(r.source.startswith("measured by trainwise") for r in meas.load_measurements(meas.CALIBRATION_CSV, catalog))
    assert meas.PACKAGED_DATASETS["measured-h100"] == meas.MEASURED_H100_CSV


def test_validate_takes_a_packaged_dataset_by_name(tmp_path, monkeypatch):
    import json

    import typer
    from typer.testing import CliRunner

    from trainwise.predict.cli import validate_command

    small = tmp_path / "small.csv"
    small.write_text("model,accelerator,count,per_device_batch,precision,samples_per_s,source\n"
                     "mnist_cnn,V100,1,256,fp32,60000,measured by trainwise tests\n", encoding="utf-8")
    monkeypatch.setitem(meas.PACKAGED_DATASETS, "measured-h100", small)
    app = typer.Typer()
    app.command("validate")(validate_command)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["validate", "--dataset", "measured-h100", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["dataset"] == str(small)


@pytest.mark.long
def test_device_measure_command_appends_validation_rows(tmp_path):
    import json

    from typer.testing import CliRunner

    from trainwise.cli import app

    out = tmp_path / "mine.csv"
    args = ["device", "measure", "nn_twins_mlp", "--batch", "64", "--device", "cpu", "--accelerator", "T4",
            "--seconds", "0.2", "--warmup", "1", "--csv", str(out)]
    first = CliRunner().invoke(app, args + ["--json"])
    assert first.exit_code == 0, first.output
    payload = json.loads(first.output)
    assert payload["model"] == "nn_twins_mlp"
    assert "modelled" not in payload  # a CPU measurement is not compared with a GPU's model
    second = CliRunner().invoke(app, args)
    assert second.exit_code == 0, second.output
    assert "samples/s" in second.output and "measured here" in second.output and "device model" not in second.output
    lines = out.read_text(encoding="utf-8").splitlines()
    assert lines[0] == ",".join(me.VALIDATION_COLUMNS) and len(lines) == 3
    assert len(meas.load_measurements(out, load_catalog())) == 2
    # a CSV with other columns is refused, and left as it was
    other = tmp_path / "other.csv"
    other.write_text("a,b\n1,2\n", encoding="utf-8")
    refused = CliRunner().invoke(app, args[:-1] + [str(other)])
    assert refused.exit_code != 0 and "other columns" in str(refused.exception or refused.output)
    assert other.read_text(encoding="utf-8") == "a,b\n1,2\n"
    cpu_only = CliRunner().invoke(app, ["device", "measure", "nn_twins_mlp", "--batch", "8", "--device", "cpu",
                                        "--seconds", "0.1", "--warmup", "1", "--csv", str(tmp_path / "x.csv")])
    assert cpu_only.exit_code != 0 and not (tmp_path / "x.csv").exists()


def test_a_breakdown_splits_a_real_step_by_the_characterisers_categories():
    b = me.measure_breakdown("mnist_cnn", 16, "fp32", device="cpu", warmup_steps=1, profiled_steps=2)
    assert b.step_wall_s > 0 and 0.0 <= b.idle_fraction <= 1.0
    assert set(b.by_category_s) <= set(Category.__args__)
    assert b.by_category_s.get("conv", 0) > 0 and b.by_category_s.get("elementwise", 0) > 0  # (CPU optimizers loop: elementwise)
    assert sum(b.by_category_s.values()) == pytest.approx(b.attributed_s)
    assert [s for *_, s in b.ops] == sorted((s for *_, s in b.ops), reverse=True)
    # on the CPU the operators' own time stands in for kernel time: about the whole step
    assert b.attributed_s <= b.step_wall_s * 1.05


@pytest.mark.parametrize("event, category", [
    ("aten::add_", "elementwise"), ("aten::mul", "elementwise"), ("aten::cudnn_convolution", "conv"),
    ("aten::convolution_backward", "conv"), ("aten::cudnn_batch_norm_backward", "normalisation"),
    ("aten::mm", "matmul"), ("aten::_efficient_attention_backward", "attention"), ("aten::_foreach_addcdiv_", "optimizer"),
    ("aten::_amp_foreach_non_finite_check_and_unscale_", "optimizer"), ("aten::_cudnn_rnn", "matmul"),
    ("aten::copy_", "copy"), ("aten::sum", "reduction"), ("aten::not_an_operator", "other"),
])
def test_profiler_events_map_to_the_characterisers_categories(event, category):
    assert me.category_of_aten(event) == category


@pytest.mark.long
def test_own_measurements_make_an_own_fit_that_every_command_can_use(tmp_path, monkeypatch):
    import json

    from typer.testing import CliRunner

    from trainwise.cli import app
    from trainwise.predict import device_params as dp

    # a small published set keeps the fit fast: ResNet-50 and BERT-base rows of the packaged calibration set
    lines = meas.CALIBRATION_CSV.read_text(encoding="utf-8").splitlines()
    keep = [lines[0]] + [line for line in lines[1:] if line.startswith(("resnet50,", "hf:bert-base-uncased,"))
                         and ",1," in line][:12]
    published = tmp_path / "published.csv"
    published.write_text("\n".join(keep) + "\n", encoding="utf-8")
    monkeypatch.setattr(meas, "CALIBRATION_CSV", published)
    mine = tmp_path / "mine.csv"
    h100 = meas.MEASURED_H100_CSV.read_text(encoding="utf-8").splitlines()
    mine.write_text("\n".join([h100[0]] + [line for line in h100[1:] if line.startswith("resnet50,")]) + "\n", encoding="utf-8")
    out = tmp_path / "fit" / "params.json"

    refused = CliRunner().invoke(app, ["device", "calibrate", "--add", str(mine)])
    assert refused.exit_code != 0 and not out.exists()
    result = CliRunner().invoke(app, ["device", "calibrate", "--add", str(mine), "--output", str(out), "--no-loo", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["written"] == str(out) and report["added"] == [str(mine)]
    own = dp.load_params(out)
    assert own.fitted_on["added"] == [str(mine)] and own.fitted_on["calibration_rows"] > len(keep) - 1
    assert own.bands == dp.load_params(dp.PARAMS_PATH).bands  # no LOO: the packaged bands are kept
    # TRAINWISE_DEVICE_PARAMS makes it the fit every command uses
    monkeypatch.setenv(dp.PARAMS_ENV, str(out))
    assert dp.load_params() == own
    monkeypatch.setenv(dp.PARAMS_ENV, str(tmp_path / "missing.json"))
    with pytest.raises(TrainwiseError, match="do not exist"):
        dp.load_params()
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(TrainwiseError, match="not a trainwise fit"):
        dp.load_params(tmp_path / "broken.json")


def test_calibrate_refuses_an_unwritable_output_before_fitting(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from trainwise.cli import app

    def no_fit(*args, **kwargs):
        raise AssertionError("the output must be checked before the (slow) fit")

    monkeypatch.setattr(cal, "fit_calibration", no_fit)
    mine = tmp_path / "mine.csv"
    mine.write_text(meas.MEASURED_H100_CSV.read_text(encoding="utf-8"), encoding="utf-8")
    before = mine.read_text(encoding="utf-8")
    for output, fragment in ((mine, "would overwrite the input"), (tmp_path, "is a folder"),
                             (mine / "params.json", "is a file, not a folder")):
        result = CliRunner().invoke(app, ["device", "calibrate", "--add", str(mine), "--output", str(output), "--no-loo"])
        assert isinstance(result.exception, TrainwiseError), result.output
        assert fragment in str(result.exception) and "--output" in str(result.exception)
    assert mine.read_text(encoding="utf-8") == before


def test_calibrate_says_how_long_it_takes_before_the_silent_fit(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from trainwise.cli import app

    def fit_that_stops(*args, with_loo, **kwargs):
        raise TrainwiseError(f"fit stopped here (with_loo={with_loo})")

    monkeypatch.setattr(cal, "fit_calibration", fit_that_stops)
    output = tmp_path / "my-fit.json"
    # the README's `trainwise device calibrate --add mine.csv --output my-fit.json` printed nothing for
    # minutes (leave-one-model-out is on by default): the notice must come before the fit starts
    result = CliRunner().invoke(app, ["device", "calibrate", "--output", str(output)])
    assert "fit stopped here (with_loo=True)" in str(result.exception)
    assert "leave-one-model-out: several minutes; --no-loo fits once" in " ".join(result.output.split())
    result = CliRunner().invoke(app, ["device", "calibrate", "--output", str(output), "--no-loo"])
    assert "with_loo=False" in str(result.exception) and "about a minute" in result.output
    result = CliRunner().invoke(app, ["device", "calibrate", "--output", str(output), "--json"])
    assert result.output == ""  # --json prints JSON only


def _no_fit(*args, **kwargs):
    raise AssertionError("the destination must be checked before the (slow) fit")


def test_calibrate_refuses_an_unwritable_packaged_fit_before_fitting(tmp_path, monkeypatch, capsys):
    from trainwise.cli import main
    from trainwise.predict import device_params as dp

    # before: the fit ran (minutes with leave-one-model-out) and then died in a write traceback
    monkeypatch.setattr(cal, "fit_calibration", _no_fit)
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    # /proc refuses new files even to root, whom permission bits do not stop
    for packaged, fragment in ((Path("/proc/trainwise-package/device_model_params.json"), "cannot write in /proc"),
                               (blocker / "device_model_params.json", "is a file, not a folder")):
        monkeypatch.setattr(dp, "PARAMS_PATH", packaged)
        assert main(["device", "calibrate", "--no-loo"]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.strip()]
        assert "Traceback" not in err and len(lines) == 1, err
        assert str(packaged) in lines[0] and fragment in lines[0], err
        assert lines[0].endswith("use --output PATH to write the fit elsewhere (or --no-write to fit without saving)")
    assert blocker.read_text(encoding="utf-8") == ""


def test_calibrate_without_writing_needs_no_writable_destination(monkeypatch):
    from trainwise.cli import main
    from trainwise.predict import device_params as dp

    fitted = []
    monkeypatch.setattr(dp, "PARAMS_PATH", Path("/proc/trainwise-package/device_model_params.json"))
    monkeypatch.setattr(cal, "fit_calibration", lambda *a, **k: fitted.append(1) or (dp.load_params(), None))
    monkeypatch.setattr(cal, "save_params", lambda *a, **k: pytest.fail("--no-write must write nothing"))
    assert main(["device", "calibrate", "--no-loo", "--no-write"]) == 0
    assert fitted == [1]


def test_calibrate_turns_a_write_failing_after_the_fit_into_one_line(tmp_path, monkeypatch, capsys):
    from trainwise.cli import main
    from trainwise.predict import device_params as dp

    def destination_gone(params, path):
        raise PermissionError(13, "Permission denied")

    packaged = tmp_path / "package" / "device_model_params.json"
    monkeypatch.setattr(dp, "PARAMS_PATH", packaged)
    monkeypatch.setattr(cal, "fit_calibration", lambda *a, **k: (dp.load_params(), None))
    monkeypatch.setattr(cal, "save_params", destination_gone)
    assert main(["device", "calibrate", "--no-loo"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"cannot write the fit to {packaged} (Permission denied): use --output PATH" in err
    assert not packaged.exists()


def test_device_measure_on_a_gpu_shows_the_device_models_prediction_beside_it(monkeypatch):
    import json

    from typer.testing import CliRunner

    from trainwise.cli import app

    measured = me.ThroughputMeasurement(
        model="resnet50", per_device_batch=256, precision="amp_fp16", optimizer="sgd_momentum", image_size=224,
        memory_format="nhwc", device="cuda:0", device_name="NVIDIA H100 80GB HBM3", samples_per_s=4690.5,
        step_time_s_median=256 / 4690.5, step_time_s_iqr=0.0003, step_time_s_blocks=[256 / 4690.5], steps_per_block=1,
        warmup_steps=10, warmup_s=20.0, peak_memory_bytes=11 * 2**30, torch_version="2.11.0", cuda_version="13.0",
        loss_finite=True)
    monkeypatch.setattr(me, "measure_throughput", lambda *a, **k: measured)
    args = ["device", "measure", "resnet50", "--batch", "256", "--precision", "amp_fp16", "--memory-format", "nhwc"]
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    modelled = json.loads(result.output)["modelled"]
    assert modelled["accelerator"] == "H100" and modelled["samples_per_s"] > 0
    assert modelled["error"] == pytest.approx(modelled["samples_per_s"] / 4690.5 - 1)
    text = CliRunner().invoke(app, args)
    flat = " ".join(text.output.split())  # rich wraps at the terminal width
    assert text.exit_code == 0 and "device model for H100" in flat and "from the measurement" in flat
