"""Device model: roofline behaviour, tensor-core eligibility, memory fit, bands, names, validation CSVs."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from trainwise.catalog import load_catalog
from trainwise.core.workload import OpRecord, WorkloadCharacterisation
from trainwise.errors import TrainwiseError
from trainwise.predict import accelerator_features as af
from trainwise.predict import calibration_eval as ce
from trainwise.predict import calibration_fit as cf
from trainwise.predict import calibration_layout as cl
from trainwise.predict import device_model as dm
from trainwise.predict import device_params as dp
from trainwise.predict import measurements as meas
from trainwise.predict import operator_time as ot
from trainwise.predict.characterise import characterise_named

HEADER = "model,accelerator,count,per_device_batch,precision,samples_per_s,source"


pytestmark = pytest.mark.usefixtures("no_disk_cache")


def _char(records: list[OpRecord], batch: int = 1, precision: str = "fp32", **extra) -> WorkloadCharacterisation:
    base = dict(model="synthetic", per_device_batch=batch, precision=precision, optimizer="none", inputs=[],
                records=records, parameters=0, trainable_parameters=0, parameter_tensors=0, parameter_bytes=0,
                gradient_bytes=0, optimizer_state_bytes=0, activation_bytes=0, amp_weight_copy_bytes=0,
                peak_temporary_bytes=0)
    base.update(extra)
    return WorkloadCharacterisation(**base)


def _mm(flops: float, nbytes: float, dtype: str = "float32", align: int = 16, count: int = 1) -> OpRecord:
    return OpRecord(op="aten.mm.default", category="matmul", phase="forward", count=count, flops=flops,
                    bytes_read=nbytes, bytes_written=0, dtype=dtype, align=align)


def _ew(nbytes: float) -> OpRecord:
    return OpRecord(op="aten.add.Tensor", category="elementwise", phase="forward", count=1, flops=0,
                    bytes_read=nbytes, bytes_written=0, dtype="float32")


def test_roofline_compute_and_memory_bound(catalog):
    params = dp.DeviceModelParams()
    v100 = catalog.accelerator("V100")
    big = dm.predict_iteration(_char([_mm(4e12, 1e6)]), v100, params=params)
    bigger = dm.predict_iteration(_char([_mm(8e12, 1e6)]), v100, params=params)
    assert big.compute_bound_fraction == pytest.approx(1.0)
    assert bigger.device_s / big.device_s == pytest.approx(2.0, rel=1e-3)  # compute-bound: time ~ FLOPs
    expected = 4e12 / (15.7e12 * params.e_compute["fp32"]["matmul"] * (15.7e12 / ot.PEAK_REF) ** -params.alpha["matmul"])
    assert big.device_s == pytest.approx(expected + params.t_launch_s, rel=1e-6)
    # a matmul with little arithmetic intensity is memory-bound: time ~ bytes / bandwidth
    thin = dm.predict_iteration(_char([_mm(1e6, 9e9)]), v100, params=params)
    assert thin.compute_bound_fraction == 0.0
    assert thin.device_s == pytest.approx(9e9 / (900e9 * params.e_memory["elementwise"]) + params.t_launch_s, rel=1e-6)
    ew = dm.predict_iteration(_char([_ew(9e9)]), v100, params=params)
    assert ew.breakdown_s["elementwise"] == pytest.approx(thin.device_s, rel=1e-4)
    # the same memory-bound work is faster on a higher-bandwidth part
    h100 = dm.predict_iteration(_char([_ew(9e9)]), catalog.accelerator("H100"), params=params)
    assert h100.device_s < ew.device_s / 3


def test_small_kernels_are_launch_and_host_bound(catalog):
    params = dp.DeviceModelParams()
    tiny = _char([_mm(1e3, 1e3, count=5000)])
    p = dm.predict_iteration(tiny, catalog.accelerator("H100"), params=params)
    assert p.host_bound_s > p.device_s
    assert any("host-bound" in n for n in p.notes)
    assert p.iteration_s >= 5000 * params.t_host_op_s


def test_tensor_core_eligibility_by_dtype_and_alignment(catalog):
    v100, a100, t4, k80 = (catalog.accelerator(n) for n in ("V100", "A100", "T4", "K80"))
    assert ot.compute_peak(v100, "amp_fp16", "matmul", "float16", 8, 1) == (125e12, "tc16")
    assert ot.compute_peak(v100, "amp_fp16", "matmul", "float16", 2, 1) == (31.3e12, "fp32")  # misaligned: vector FP16
    assert ot.compute_peak(v100, "amp_fp16", "conv", "float16", 1, 64)[1] == "fp32"  # depthwise: no tensor cores
    assert ot.compute_peak(v100, "amp_fp16", "conv", "float16", 4, 32)[1] == "tc16"  # ResNeXt groups of 4 channels
    assert ot.compute_peak(a100, "tf32", "matmul", "float32", 16, 1) == (156e12, "tf32")
    assert ot.compute_peak(a100, "fp32", "matmul", "float32", 16, 1) == (19.5e12, "fp32")  # matmul TF32 off by default
    assert ot.compute_peak(a100, "fp32", "conv", "float32", 16, 1) == (156e12, "tf32")  # cuDNN TF32 on by default
    assert ot.compute_peak(v100, "tf32", "matmul", "float32", 16, 1) == (15.7e12, "fp32")  # no TF32 before Ampere
    assert ot.compute_peak(a100, "amp_bf16", "matmul", "bfloat16", 8, 1) == (312e12, "tc16")
    assert ot.compute_peak(t4, "amp_bf16", "matmul", "bfloat16", 8, 1)[1] == "fp32"  # Turing: no BF16 tensor cores
    assert ot.compute_peak(k80, "amp_fp16", "matmul", "float16", 8, 1) == (4.365e12, "fp32")
    tpu = catalog.accelerator("TPU-v3")
    assert ot.compute_peak(tpu, "fp32", "matmul", "float32", 16, 1) == (123e12, "tpu")  # XLA: one bf16 MXU pass
    # end to end: AMP on a tensor-core GPU beats FP32 by far, on a K80 it cannot
    fp32 = characterise_named("resnet50", 32, "fp32")
    amp = characterise_named("resnet50", 32, "amp_fp16")
    gain_v100 = dm.predict_iteration(fp32, v100).iteration_s / dm.predict_iteration(amp, v100).iteration_s
    gain_k80 = dm.predict_iteration(fp32, k80).iteration_s / dm.predict_iteration(amp, k80).iteration_s
    # (K80: AMP only halves the memory-bound traffic; no FP16 math throughput gain)
    assert gain_v100 > 1.5 and gain_k80 < 1.5 and gain_v100 > gain_k80 + 0.5


def test_seed_4xT4_ddp_roberta_xlm_runs_out_of_memory(catalog):
    # Erben et al. (VLDB 2024) §6: "the 4xT4 PyTorch DDP [...] The NLP experiments ran OOM" (RoBERTa-XLM, FP16)
    char = characterise_named("hf:xlm-roberta-large", 8, "amp_fp16", 512, optimizer="adam")
    t4 = dm.predict_iteration(char, catalog.accelerator("T4"), count=4)
    assert not t4.fits_memory
    assert t4.memory_required_gib > t4.memory_available_gib
    assert any("out of memory" in n for n in t4.notes)
    assert t4.memory_breakdown_gib["ddp_buckets"] > 2.0  # 560M fp32 gradients bucketed by DDP
    assert dm.predict_iteration(char, catalog.accelerator("A100-80GB"), count=4).fits_memory
    # the CV model of the same experiment did run on 4xT4
    conv = characterise_named("convnext_large", 32, "amp_fp16", optimizer="none")
    assert dm.predict_iteration(conv, catalog.accelerator("T4"), count=4).fits_memory


def test_unknown_accelerator_suggests_nearest_names(catalog):
    with pytest.raises(TrainwiseError, match="V100"):
        dm.resolve_accelerator("V1OO", catalog)
    with pytest.raises(TrainwiseError, match="did you mean"):
        dm.resolve_accelerator("A100-80G", catalog)
    assert dm.resolve_accelerator("tesla t4", catalog).name == "T4"


def test_unsupported_operator_widens_the_band(catalog):
    plain = _char([_mm(4e12, 1e6)])
    other = OpRecord(op="aten._fft_r2c.default", category="other", phase="forward", count=1, flops=1e6,
                     bytes_read=4e9, bytes_written=4e9, dtype="float32")
    odd = _char([_mm(4e12, 1e6), other], unsupported_ops=["_fft_r2c"])
    v100 = catalog.accelerator("V100")
    a = dm.predict_iteration(plain, v100)
    b = dm.predict_iteration(odd, v100)
    assert b.relative_error > a.relative_error
    assert b.unsupported_ops == ["_fft_r2c"]
    assert any("_fft_r2c" in n for n in b.notes)
    assert a.provenance.startswith("modelled ±")


def test_data_parallel_and_tpu(catalog):
    char = characterise_named("resnet50", 64, "amp_fp16")
    v100 = catalog.accelerator("V100")
    one = dm.predict_iteration(char, v100, 1)
    eight = dm.predict_iteration(char, v100, 8)
    assert one.samples_per_s < eight.samples_per_s < 8 * one.samples_per_s
    assert eight.relative_error > one.relative_error
    pcie = dm.predict_iteration(char, catalog.accelerator("V100-PCIe"), 8)
    assert pcie.communication_s > eight.communication_s  # PCIe all-reduce is slower than NVLink
    tpu = dm.predict_iteration(characterise_named("inceptionv3_dr", 256, "fp32"), catalog.accelerator("TPU-v3-8"))
    assert tpu.host_bound_s == 0 and tpu.samples_per_s > 0


def test_predict_all_is_fast_and_sorted(catalog):
    char = characterise_named("resnet50", 256, "fp32")
    start = time.perf_counter()
    preds = dm.predict_all(char, catalog)
    assert time.perf_counter() - start < 3.0  # < 1 s on an idle machine (see benchmarks/device_model.py)
    assert len(preds) >= 25
    assert [p.iteration_s for p in preds] == sorted(p.iteration_s for p in preds)
    names = [p.accelerator for p in preds]
    assert names.index("H100") < names.index("V100") < names.index("K80")
    assert all(p.relative_error > 0 for p in preds)


def test_packaged_params_and_calibration_consistency(catalog):
    params = dp.load_params()
    assert params.bands.get("by_accelerator") and params.fitted_on.get("loo_group") == "model"
    # the vectorised model the fit optimises is the one predict_iteration evaluates
    rows = [meas.Measurement(model="mnist_cnn", accelerator="V100", count=1, per_device_batch=256, precision="fp32",
                             samples_per_s=1000, source="test"),
            meas.Measurement(model="resnet50", accelerator="A100", count=2, per_device_batch=64, precision="amp_fp16",
                             samples_per_s=1000, source="test", memory_format="nhwc"),
            meas.Measurement(model="seismic_fcn", accelerator="K80", count=1, per_device_batch=128, precision="fp32",
                             samples_per_s=1000, source="test", framework="tensorflow"),
            meas.Measurement(model="resnet50", accelerator="V100", count=8, per_device_batch=64, precision="amp_fp16",
                             samples_per_s=1000, source="test", link="host")]
    design = cf.build_design(rows, catalog)
    layout = cl.Layout(design.accelerators, design.generations, twin_names=design.twin_names)
    vector = cf.predict_design(design, layout, layout.from_params(params))
    direct = cf.predict_rows(params, rows, catalog)
    assert list(vector) == pytest.approx(direct, rel=1e-6)


def test_fit_and_leave_one_model_out_on_a_small_set(catalog):
    rows = [meas.Measurement(model=m, accelerator=a, count=1, per_device_batch=b, precision="fp32",
                             samples_per_s=s, source="synthetic")
            for m, a, b, s in (("mnist_cnn", "V100", 256, 60000.0), ("mnist_cnn", "K80", 256, 20000.0),
                               ("seismic_fcn", "V100", 256, 9000.0), ("seismic_fcn", "K80", 256, 3000.0))]
    res = cf.fit(rows, (), catalog)
    assert 0.02 <= res.params.e_compute["fp32"]["conv"] <= 1.0
    loo = ce.loo(rows, (), "model", catalog)
    assert len(loo.errors) == 4 and set(loo.held_out) == {"mnist_cnn", "seismic_fcn"}
    summary = ce.summarise_errors(loo.errors)
    assert set(summary) >= {"median_abs_error", "p90_abs_error", "max_abs_error"}


# ---- validation CSVs -------------------------------------------------------------------------

def _csv(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "data.csv"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize("text, message", [
    ("", "empty"),
    ("model,accelerator,count\nresnet50,V100,1\n", "lacks column"),
    (HEADER + "\n", "no rows"),
    (HEADER + "\nresnet50,V100,1,64,fp64,300,x\n", "line 2.*precision"),
    (HEADER + "\nresnet50,V100,1,64,fp32,-3,x\n", "line 2.*samples_per_s"),
    (HEADER + "\nresnet50,V100,0,64,fp32,300,x\n", "line 2.*count"),
    (HEADER + "\nresnet50,V100,1,abc,fp32,300,x\n", "line 2.*per_device_batch"),
    (HEADER + "\nresnet50,V100,1,64,fp32,300,\n", "line 2.*source"),
    (HEADER + "\nresnet50,V1000,1,64,fp32,300,x\n", "line 2.*unknown accelerator.*V100"),
    (HEADER + "\nresnet50,V100,1,64,fp32,300,x,extra\n", "line 2.*more fields"),
])
def test_validation_csv_errors_name_line_and_column(tmp_path, catalog, text, message):
    with pytest.raises(TrainwiseError, match=message):
        meas.load_measurements(_csv(tmp_path, text), catalog)


def test_validation_csv_allows_extra_columns_and_reports(tmp_path, catalog):
    from trainwise.predict.cli import validate_command
    from trainwise.predict.validate import validate_dataset

    path = _csv(tmp_path, HEADER + ",seq_len,whatever\n"
                "mnist_cnn,V100,1,256,fp32,60000,somewhere,,x\n"
                "mnist_cnn,K80,1,256,fp32,20000,somewhere,,y\n"
                "hf:bert-base-uncased,T4,1,8,amp_fp16,40,somewhere,128,z\n")
    report = validate_dataset(path, catalog=catalog)
    assert report.summary["rows"] == 3
    assert {"median_abs_error", "p90_abs_error", "best_choice_accuracy"} <= set(report.summary)
    assert report.best_choice and report.best_choice[0]["fastest_measured"] == "V100"
    app = typer.Typer()
    app.command("validate")(validate_command)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["validate", "--dataset", str(path), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["summary"]["rows"] == 3 and len(payload["predictions"]) == 3
    bad = CliRunner().invoke(app, ["validate", "--dataset", str(tmp_path / "missing.csv")])
    assert bad.exit_code != 0 and "does not exist" in str(bad.exception)
    # ... and says what to pass instead (the old message named only the path)
    assert "or a packaged set (validation, calibration, measured-h100)" in str(bad.exception)


def test_packaged_datasets_parse_and_cite_sources(catalog):
    for path, least in ((meas.CALIBRATION_CSV, 150), (meas.VALIDATION_CSV, 15)):
        rows = meas.load_measurements(path, catalog)
        assert len(rows) >= least
        assert all(r.source for r in rows)
    assert any(r.count > 1 for r in meas.load_measurements(meas.VALIDATION_CSV, catalog))
    ratios = meas.load_ratios()
    assert any(r.accelerator.startswith("TPU") for r in ratios)


def test_links_no_nvlink_is_not_nvlink_and_host_path_is_pcie(catalog):
    # "PCIe Gen3 x16 (low-profile); no NVLink" once read as NVLink (130 GB/s for a T4)
    assert af.link_bandwidth_gbs(catalog.accelerator("T4")) == 10.0
    assert af.link_bandwidth_gbs(catalog.accelerator("A10")) == 20.0
    v100 = catalog.accelerator("V100")
    assert af.link_bandwidth_gbs(v100) == 130.0
    # NCCL_P2P_DISABLE=1: through host memory over the V100's PCIe Gen3, whatever NVLink it has
    assert af.link_bandwidth_gbs(v100, "host") == af.link_bandwidth_gbs(v100, "pcie") == 10.0
    with pytest.raises(TrainwiseError, match="unknown link"):
        af.link_bandwidth_gbs(v100, "infiniband")
    char = characterise_named("hf:bert-base-uncased", 16, "fp32", seq_len=128)
    fast = dm.predict_iteration(char, v100, count=8)
    slow = dm.predict_iteration(char, v100, count=8, link="host")
    assert slow.communication_s > fast.communication_s and slow.iteration_s > fast.iteration_s
    with pytest.raises(ValueError, match="link"):
        meas.Measurement(model="resnet50", accelerator="V100", count=2, per_device_batch=8, precision="fp32",
                         samples_per_s=1, source="x", link="carrier-pigeon")


def test_host_path_beyond_one_socket_runs_at_the_cross_socket_pace(catalog):
    v100 = catalog.accelerator("V100")
    char = characterise_named("hf:bert-base-uncased", 16, "fp32", seq_len=128)
    assert not af.crosses_sockets("host", af.HOST_PATH_GPUS_PER_SOCKET) and af.crosses_sockets("host", 8)
    assert not af.crosses_sockets("nvlink", 8) and not af.crosses_sockets("auto", 8)
    same = dp.DeviceModelParams(ddp_overlap_host=0.01, t_allreduce_s=1e-12, host_cross_socket=1.0)
    half = same.model_copy(update={"host_cross_socket": 0.5})
    # ring bytes 2(n-1)/n x gradients at half the bandwidth: exactly twice the exposed exchange at 8
    assert dm.predict_iteration(char, v100, count=8, link="host", params=half).communication_s == pytest.approx(
        2 * dm.predict_iteration(char, v100, count=8, link="host", params=same).communication_s)
    # within one socket, and off the host path, the parameter does nothing
    for count, link in ((4, "host"), (8, "nvlink")):
        assert dm.predict_iteration(char, v100, count=count, link=link, params=half).communication_s == pytest.approx(
            dm.predict_iteration(char, v100, count=count, link=link, params=same).communication_s)
    # the vectorised fit path agrees with the public predict path on a cross-socket row
    row = meas.Measurement(model="hf:bert-base-uncased", accelerator="V100", count=8, per_device_batch=16,
                           precision="fp32", samples_per_s=100, source="t", seq_len=128, link="host")
    design = cf.build_design([row], catalog)
    lay = cl.Layout(design.accelerators, design.generations, design.stacks, design.twin_names)
    vectorised = cf.predict_design(design, lay, lay.from_params(half))[0]
    assert vectorised == pytest.approx(cf.predict_rows(half, [row], catalog)[0], rel=1e-6)


def test_compute_twins_share_the_fitted_multiplier(catalog):
    v16, v32, a100 = (catalog.accelerator(n) for n in ("V100", "V100-32GB", "A100"))
    assert af.compute_twin_key(v16) == af.compute_twin_key(v32) != af.compute_twin_key(a100)
    params = dp.DeviceModelParams(g_compute={"V100": 0.9}, g_compute_twin={af.compute_twin_key(v16): 0.9})
    assert af.compute_multiplier(params, v32) == 0.9  # V100-32GB has no entry of its own: its twin's
    assert af.compute_multiplier(params, a100) == 1.0
    rows = [meas.Measurement(model="mnist_cnn", accelerator=n, count=1, per_device_batch=64, precision="fp32",
                             samples_per_s=1000, source="t") for n in ("V100", "V100-32GB")]
    design = cf.build_design(rows, catalog)
    assert len(design.accelerators) == 1 and sorted(design.twin_names[design.accelerators[0]]) == ["V100", "V100-32GB"]


def test_superlinear_multi_device_rows_are_excluded_and_ties_are_right_picks(catalog):
    def row(acc, count, sps, source="pub:x"):
        return meas.Measurement(model="resnet50", accelerator=acc, count=count, per_device_batch=64, precision="fp32",
                                samples_per_s=sps, source=source)

    rows = [row("V100", 1, 300), row("V100", 8, 2200), row("V100", 8, 3000), row("V100", 8, 3000, "other:y")]
    kept, dropped = ce.plausible_rows(rows, catalog)
    assert [m.samples_per_s for m in kept] == [300, 2200, 3000]  # another publisher's 8-GPU row has no 1-GPU row
    assert len(dropped) == 1 and dropped[0]["reason"].startswith("superlinear") and dropped[0]["scaling_efficiency"] == 1.25
    # two accelerators published at the same throughput: either pick is right
    tie = [row("V100", 1, 300), row("A100", 1, 300)]
    for predicted in ([310.0, 290.0], [290.0, 310.0]):
        assert ce.best_choice(tie, predicted, catalog)["groups"][0]["fastest_correct"]
    assert not ce.best_choice([row("V100", 1, 300), row("A100", 1, 600)], [310.0, 290.0], catalog)["groups"][0][
        "fastest_correct"]


def test_device_predict_cli_link_option(capsys):
    from trainwise.cli import main

    args = ["device", "predict", "resnet50", "--batch", "64", "-a", "V100", "-n", "8", "--json"]
    assert main(args) == 0
    auto = json.loads(capsys.readouterr().out)[0]
    assert main(args + ["--link", "host"]) == 0
    host = json.loads(capsys.readouterr().out)[0]
    assert host["communication_s"] > auto["communication_s"] and host["samples_per_s"] < auto["samples_per_s"]
    assert main(args + ["--link", "carrier-pigeon"]) != 0
    err = capsys.readouterr().err
    assert "unknown --link" in err and "host" in err and "Traceback" not in err


def test_device_predict_takes_several_accelerators_in_the_order_given(capsys):
    from trainwise.cli import main

    args = ["device", "predict", "resnet50", "--batch", "64", "--json"]
    assert main(args + ["-a", "A40", "-a", "L4", "-a", "A40"]) == 0
    assert [p["accelerator"] for p in json.loads(capsys.readouterr().out)] == ["A40", "L4"]
    assert main(args + ["-a", "L4", "-a", "NoSuchGPU"]) != 0
    err = capsys.readouterr().err
    assert "NoSuchGPU" in err and "Traceback" not in err


def test_device_predict_from_a_profile_counts_its_data_wait_like_predict_does(capsys, tmp_path):
    from trainwise.cli import main
    from trainwise.plan.synthetic import synthetic_profile

    # the synthetic profile waits ~10 % of each 40 ms step for data, which a faster device keeps paying
    path = synthetic_profile(workload="nn_twins_mlp", iteration_s=0.04).save(tmp_path / "twins.json")
    assert main(["device", "predict", "--from", str(path), "-a", "V100", "--json"]) == 0
    device = json.loads(capsys.readouterr().out)[0]
    assert main(["predict", str(path), "-a", "V100", "--epochs", "1", "--json", str(tmp_path / "p.json")]) == 0
    capsys.readouterr()
    assert device["iteration_s"] == pytest.approx(json.loads((tmp_path / "p.json").read_text())[0]["iteration"]["iteration_s"])
    assert main(["device", "predict", "--from", str(path), "-a", "V100", "--host-overhead", "0", "--json"]) == 0
    bare = json.loads(capsys.readouterr().out)[0]
    from trainwise.profile.schema import load_profile

    waited_s = dm.host_overhead_from_profile(load_profile(path))
    assert waited_s > 0.003 and device["iteration_s"] - bare["iteration_s"] == pytest.approx(waited_s, rel=0.01)


def test_device_predict_from_a_missing_file_says_what_to_pass(capsys, tmp_path):
    from trainwise.cli import main

    # the old message was only "PATH does not exist"
    assert main(["device", "predict", "--from", str(tmp_path / "nothere.json")]) != 0
    err = capsys.readouterr().err
    assert "--from" in err and "does not exist: pass a profile (`trainwise profile -o FILE`) or a characterisation" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("args, fragment", [
    (["hf:roberta-base", "--task", "foo"], "unknown task 'foo' for an hf: model (--task): use one of mlm, mlm15, clm, qa, cls"),
    (["hf:roberta-base", "--task", "mlmm"], "did you mean mlm?"),
    (["resnet50", "--seq-len", "128"], "--seq-len applies to hf: models; resnet50 (torchvision) takes --image-size"),
    (["hf:roberta-base", "--image-size", "64"], "--image-size applies to image models; hf:roberta-base takes --seq-len"),
    (["nn_twins_mlp", "--task", "mlm"], "nn_twins_mlp has a fixed input: drop --task"),
    (["hf:roberta-base", "--seq-len", "-5"], "the sequence length (--seq-len) must be a positive whole number (got -5)"),
    (["hf:roberta-base", "--seq-len", "0"], "the sequence length (--seq-len) must be a positive whole number (got 0)"),
    (["hf:bert-base-uncased", "--seq-len", "4096"],
     "--seq-len 4096 is longer than hf:bert-base-uncased's 512 positions: use --seq-len 512 or less"),
    (["hf:roberta-base", "--seq-len", "513"], "--seq-len 513 is longer than hf:roberta-base's 512 positions"),
    (["hf:gpt2", "--seq-len", "1025"], "--seq-len 1025 is longer than hf:gpt2's 1024 positions: use --seq-len 1024 or less"),
    (["resnet50", "--image-size", "0"], "the image size (--image-size) must be a positive whole number (got 0)"),
    (["resnet50", "--host-overhead", "-1"], "--host-overhead) must be a finite number of seconds >= 0 (got -1)"),
    (["resnet50", "--host-overhead", "nan"], "--host-overhead) must be a finite number of seconds >= 0 (got nan)"),
    (["resnet50", "--memory-format", "xyz"], "unknown memory format 'xyz' (--memory-format): use nchw or nhwc"),
])
def test_device_predict_cli_refuses_impossible_step_options(capsys, monkeypatch, args, fragment):
    from trainwise.cli import main
    from trainwise.predict import characterise

    def no_trace(*a, **k):
        raise AssertionError("refused options must not reach the trace")

    monkeypatch.setattr(characterise, "characterise_model", no_trace)
    monkeypatch.setenv("TRAINWISE_NO_CACHE", "1")  # a cached characterisation would skip the trace anyway
    assert main(["device", "predict", *args, "--batch", "8", "-a", "V100"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], err


@pytest.mark.parametrize("name, longest", [("bert-base-uncased", 512), ("distilbert-base-uncased", 512),
                                           ("roberta-base", 512), ("xlm-roberta-large", 512), ("gpt2-medium", 1024)])
def test_an_hf_model_takes_sequences_up_to_its_positions_and_no_longer(name, longest):
    from trainwise.predict.characterise import named_step

    # RoBERTa's 514 position rows hold 512 tokens: its positions start after the padding index
    assert named_step(f"hf:{name}", 1, longest).seq_len == longest
    with pytest.raises(TrainwiseError, match=f"--seq-len {longest + 1} is longer than hf:{name}'s {longest} positions"):
        named_step(f"hf:{name}", 1, longest + 1)


def test_an_hf_config_file_bounds_the_sequence_and_the_default(tmp_path):
    from trainwise.predict import hf_models
    from trainwise.predict.characterise import named_step

    short = tmp_path / "short-bert.json"
    short.write_text(json.dumps({**hf_models.load_config("bert-base-uncased"), "max_position_embeddings": 128}))
    # not given: 512 would not fit, the model's own 128 is the default
    assert named_step(f"hf:{short}", 1).seq_len == 128
    with pytest.raises(TrainwiseError, match=f"--seq-len 129 is longer than hf:{short}'s 128 positions"):
        named_step(f"hf:{short}", 1, 129)
    # older GPT-2 configs name the context n_ctx
    old_gpt2 = {k: v for k, v in hf_models.load_config("gpt2").items() if k != "n_positions"} | {"n_ctx": 256}
    assert hf_models.max_seq_len(old_gpt2) == 256
    # a RoBERTa config with another padding index moves the first position with it
    assert hf_models.max_seq_len({**hf_models.load_config("roberta-base"), "pad_token_id": 0}) == 513


def test_hf_task_and_memory_format_spellings_are_normalised():
    from trainwise.predict.characterise import characterise_named

    upper, lower = (characterise_named("hf:roberta-base", 2, seq_len=16, task=task).model_dump(exclude={"trace_seconds"})
                    for task in ("MLM", "mlm"))
    assert upper == lower
    assert characterise_named("resnet18", 2, memory_format="Channels_Last").memory_format == "nhwc"


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0])
def test_priors_stay_gaussian_under_the_soft_l1_loss(scale):
    import numpy as np

    r = np.linspace(-25.0, 25.0, 101)
    transformed = cf.gaussian_under_soft_l1(r, scale)
    # least_squares' soft-L1 cost of a residual f: scale**2 * 2 (sqrt(1 + (f/scale)**2) - 1)
    cost = scale ** 2 * 2.0 * (np.sqrt(1.0 + (transformed / scale) ** 2) - 1.0)
    assert np.allclose(cost, r ** 2, rtol=1e-9, atol=1e-9)
    assert np.all(np.sign(transformed) == np.sign(r))


def test_channels_last_16_bit_batch_norm_streams_once_nchw_does_not():
    acc = load_catalog().accelerator("V100")
    elementwise, normalisation = ot._MEM_INDEX["elementwise"], ot._MEM_INDEX["normalisation"]
    for layout, expected in (("nhwc", elementwise), ("nchw", normalisation)):
        char = characterise_named("resnet50", 8, "amp_fp16", image_size=64, memory_format=layout)
        features = ot.op_features(char, acc, "amp_fp16")
        bn = [i for i, r in enumerate(char.records) if "batch_norm" in r.op and r.dtype == "float16"]
        assert bn, "resnet50 under AMP has 16-bit batch-norm records"
        assert {int(features.memory_index[i]) for i in bn} == {expected}, layout


def _gemm(m: int, k: int, n: int, nbytes: float | None = None) -> OpRecord:
    return OpRecord(op="aten.mm.default", category="matmul", phase="forward", count=1, flops=2.0 * m * k * n,
                    bytes_read=2.0 * (m * k + k * n) if nbytes is None else nbytes,
                    bytes_written=2.0 * m * n if nbytes is None else 0.0, dtype="float16", shapes=[[m, k], [k, n]])


def test_padded_tiles_waste_the_padding_of_small_or_odd_dimensions(catalog):
    a100 = catalog.accelerator("A100")
    tile = ot.WAVE_TILE
    # N (output channels) pads to the 128-wide tile, K to the 32-deep main-loop step; M is not padded
    assert ot.padding_utilisation(_gemm(1000, 256, 256)) == 1.0
    assert ot.padding_utilisation(_gemm(1000, 256, 64)) == pytest.approx(0.5)
    assert ot.padding_utilisation(_gemm(1000, 256, 192)) == pytest.approx(0.75)
    assert ot.padding_utilisation(_gemm(1000, 48, 256)) == pytest.approx(0.75)
    assert ot.padding_utilisation(_gemm(1001, 256, 256)) == 1.0
    # a 1x1 convolution with 64 output channels over 16 input channels: N half a tile, K half a step
    conv = OpRecord(op="aten.convolution.default", category="conv", phase="forward", count=1,
                    flops=2.0 * (8 * 56 * 56) * 64 * 16, bytes_read=1e6, bytes_written=1e6, dtype="float16",
                    shapes=[[8, 16, 56, 56], [64, 16, 1, 1]])
    assert ot.padding_utilisation(conv) == pytest.approx(0.25)
    # grouped convolutions keep their own efficiency (g_grouped); unknown layouts are not padded
    grouped = conv.model_copy(update={"groups": 2, "shapes": [[8, 16, 56, 56], [64, 8, 1, 1]]})
    assert ot.padding_utilisation(grouped) == 1.0
    assert ot.padding_utilisation(_mm(1e9, 1e6)) == 1.0
    # the wave utilisation carries it: a full wave of half-used tiles is half used
    assert ot.wave_utilisation(_gemm(108 * tile, 256, 64), a100.cores) == pytest.approx(0.5)


def test_small_operators_run_below_peak_by_wave_quantisation(catalog):
    a100, tpu = catalog.accelerator("A100"), catalog.accelerator("TPU-v3")  # 108 SMs
    tile = ot.WAVE_TILE
    # 108 tiles fill one wave exactly; 109 need a second, almost empty one
    assert ot.wave_utilisation(_gemm(108 * tile, 64, tile), a100.cores) == pytest.approx(1.0)
    assert ot.wave_utilisation(_gemm(109 * tile, 64, tile), a100.cores) == pytest.approx(109 / 216)
    # a short reduction cannot be split: 4 tiles keep 4 of 108 SMs busy
    assert ot.wave_utilisation(_gemm(2 * tile, 256, 2 * tile), a100.cores) == pytest.approx(4 / 108)
    # a long one is (split-K): the weight gradient of a large batch fills the GPU
    assert ot.wave_utilisation(_gemm(2 * tile, 5_000_000, 2 * tile), a100.cores) == pytest.approx(1.0)
    # convolutions tile batch x output pixels by output channels (implicit GEMM)
    conv = OpRecord(op="aten.convolution.default", category="conv", phase="forward", count=1,
                    flops=2.0 * (8 * 7 * 7) * 512 * (512 * 9), bytes_read=1e6, bytes_written=1e6, dtype="float16",
                    shapes=[[8, 512, 7, 7], [512, 512, 3, 3]])
    assert ot.work_units(conv) == (math.ceil(8 * 49 / tile) * 4, 512 * 9)
    # unknown layouts and TPUs are not quantised
    assert ot.wave_utilisation(_mm(1e9, 1e6), a100.cores) == 1.0
    assert ot.op_features(_char([_gemm(2 * tile, 256, 2 * tile)], precision="amp_fp16"), tpu, "amp_fp16").wave[0] == 1.0
    # end to end (compute-bound): with the full quantisation the 109-tile GEMM takes two waves' time
    # for 1 % more work; with none it takes 1 % longer
    for exponent, expected in ((1.0, 2.0), (0.0, 109 / 108)):
        params = dp.DeviceModelParams(wave_exponent=exponent, t_launch_s=0.0)
        full, tail = (dm.predict_iteration(_char([_gemm(tiles * tile, 4096, tile, nbytes=1.0)], precision="amp_fp16"),
                                           a100, params=params) for tiles in (108, 109))
        assert full.compute_bound_fraction == 1.0
        assert tail.device_s / full.device_s == pytest.approx(expected, rel=1e-6)


def test_a_host_sensitive_step_says_so(catalog):
    h100 = catalog.accelerator("H100")
    small = dm.predict_iteration(characterise_named("resnet50_cifar10", 256, "amp_fp16"), h100, precision="amp_fp16")
    assert small.host_bound_s > dm.HOST_SENSITIVE_SHARE * small.device_s
    assert any(n.startswith("host-sensitive") and "trainwise device measure" in n for n in small.notes)
    large = dm.predict_iteration(characterise_named("resnet50", 256, "amp_fp16"), h100, precision="amp_fp16")
    assert large.host_bound_s < dm.HOST_SENSITIVE_SHARE * large.device_s
    assert not any(n.startswith("host-sensitive") for n in large.notes)


def test_a_link_for_one_device_is_refused_not_ignored(capsys):
    from trainwise.cli import main

    # one device exchanges no gradients: --link used to be accepted and change nothing
    assert main(["device", "predict", "resnet50", "--batch", "64", "-a", "V100", "--link", "host"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "--link host" in err and "--count 2 or more" in err and "Traceback" not in err


def test_predict_a_profile_with_a_link_for_one_device_is_refused(tmp_path, capsys):
    from trainwise.cli import main

    # refused before the profile is even read
    assert main(["predict", str(tmp_path / "missing.json"), "-a", "V100", "--link", "nvlink"]) == 2
    assert "--count 2 or more" in capsys.readouterr().err


def test_validation_on_an_accelerator_speeds_up_per_sample_under_gradient_accumulation():
    # The profile's iteration is 4 micro-batches of 16 (64 samples), the traced step one micro-batch: before,
    # the speed-up compared a 4-micro-batch step with a 1-micro-batch step and cut validation 4x too much.
    from types import SimpleNamespace

    from trainwise.predict.offerings import device_full_run, device_iterations_per_epoch

    profile = SimpleNamespace(steady_state=SimpleNamespace(iteration=SimpleNamespace(mean_s=0.4)),
                              init=SimpleNamespace(total_s=5.0),
                              dataset=SimpleNamespace(n_train=None, iterations_per_epoch=100, batches_per_iteration=4.0))
    pred = SimpleNamespace(iteration_s=0.01, count=1, relative_error=0.1)
    same_batch = device_full_run(profile, pred, 1, 40.0, 400)
    accumulated = device_full_run(profile, pred, 1, 40.0, 400, samples_per_step=(64.0, 16.0))
    assert same_batch.validation_s == pytest.approx(40.0 / 40)  # the step's speed-up, 0.4 / 0.01
    assert accumulated.validation_s == pytest.approx(40.0 / 10)  # per sample: 0.4 s / 64 against 0.01 s / 16
    # 100 optimizer steps of 4 micro-batches of 16 are 6,400 samples: 400 traced steps, not 100
    char = SimpleNamespace(per_device_batch=16)
    assert device_iterations_per_epoch(profile, char, 1) == 400
    assert device_iterations_per_epoch(profile, char, 4) == 100
