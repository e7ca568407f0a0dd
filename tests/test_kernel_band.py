"""The kernel core's 80 % band: cross-conformal by GPU family, the roofline-rule operators calibrated per class."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from trainwise.catalog import load_catalog
from trainwise.predict import kernel_fit as kf
from trainwise.predict import kernel_model as km
from trainwise.predict import kernel_rule as kr
from trainwise.predict.device_params import load_params
from trainwise.predict.kernel_core import FALLBACK_BAND_MIN, KernelCore, kernel_band

from benchmark_modules import load_benchmark

BY_FAMILY = {"gemm": {"A100": 0.1, "H100": -0.9, "P100": 0.2, "T4": -0.3, "V100": 0.25},
             "conv": {"A100": 0.05, "H100": 2.0}}


def test_a_held_out_family_never_chooses_its_own_band():
    packaged = kf.bands_without(BY_FAMILY)
    assert packaged["gemm"] == 0.9  # n = 5: the ceil(6 x 0.8) = 5th smallest |bias|, the largest
    without = kf.bands_without(BY_FAMILY, "H100")
    assert without == {"gemm": 0.3, "conv": 0.05}
    # whatever the held-out family's own errors are, its band is the same
    changed = {c: {**v, "H100": 50.0} for c, v in BY_FAMILY.items()}
    assert kf.bands_without(changed, "H100") == without
    assert kf.bands_without(BY_FAMILY, "L4") == packaged  # a family without kernel data: every family counts


def _model(meta):
    return SimpleNamespace(meta=meta)


def test_the_roofline_rule_operators_take_their_class_band():
    meta = {"band80_by_class": {"gemm": 0.2, "elementwise": 0.1},
            "fallback_band80_by_class": {"conv": 0.5, "gemm": 1.0}}
    core = KernelCore(["conv (float16)", "attention"], fallback_s=6.0, class_s={"gemm": 3.0, "elementwise": 1.0},
                      fallback_class_s={"conv": 4.0})
    band, _ = kernel_band(core, 0.1, 10.0, 1, load_params(), _model(meta))
    # 0.3 x 0.2 + 0.1 x 0.1 (kernel classes) + 0.4 x 0.5 (rule, conv) + 0.2 x max(0.1, floor) (no class)
    assert band == pytest.approx(0.06 + 0.01 + 0.2 + 0.2 * FALLBACK_BAND_MIN)
    # an artifact without the rule's bands keeps the floor for every fallback operator
    old, _ = kernel_band(core, 0.1, 10.0, 1, load_params(), _model({"band80_by_class": meta["band80_by_class"]}))
    assert old == pytest.approx(0.07 + 0.6 * FALLBACK_BAND_MIN)


def test_the_rule_prices_kernels_as_it_prices_a_step():
    catalog, params = load_catalog(), load_params()
    acc = catalog.accelerator("A100")
    big = km.kernel_from_dims("mm", "fp32", (1, 8192, 8192, 8192))
    add = km.kernel_from_dims("add", "fp32", (8192, 8192))
    t_mm, t_add = kr.rule_seconds([big, add], acc, params)
    assert big.flops / (acc.fp32_tflops * 1e12) < t_mm < 5 * big.flops / (acc.fp32_tflops * 1e12)
    assert add.bytes / (acc.memory_bw_gbs * 1e9) < t_add < 5 * add.bytes / (acc.memory_bw_gbs * 1e9)
    # an fp32 convolution that ran without TF32 is priced on the FP32 units: slower than in TF32
    conv = km.kernel_from_dims("conv", "fp32", (64, 256, 256, 3, 56, 1, 1))
    tf32, fp32 = kr.rule_seconds([conv, conv], acc, params, [True, False])
    assert fp32 > 2 * tf32


def test_packaged_fallback_bands_are_the_conformal_quantile_of_the_rule_errors():
    meta = km.load_kernel_model().meta
    assert meta["fallback_band80_by_class"] == kf.bands_without(meta["fallback_class_bias_by_family"])
    assert meta["band80_by_class"] == kf.bands_without(meta["class_bias_by_family"])
    assert set(meta["fallback_class_bias_by_family"]["gemm"]) >= {"A100", "H100", "V100"}


def test_the_end_to_end_scale_alternative_is_cross_conformal():
    ev = load_benchmark("_kernel_eval")
    rows = [{"gpu": "A100", "error": 0.1, "band": 0.2}, {"gpu": "A100", "error": 0.05, "band": 0.2},
            {"gpu": "V100", "error": 0.3, "band": 0.2}, {"gpu": "H100", "error": 0.4, "band": 0.2},
            {"gpu": "H200", "error": 0.6, "band": 0.2}]
    out = ev.e2e_scale_cross_conformal(rows)
    h100 = out["scale_by_held_out_family"]["H100"]  # H100 and H200 are one family: neither sets it
    assert h100 == pytest.approx(1.5)  # 3 other rows: the ceil(4 x 0.8) = 4th > 3 -> the largest, 0.3 / 0.2
    rows[4]["error"] = 100.0
    assert ev.e2e_scale_cross_conformal(rows)["scale_by_held_out_family"]["H100"] == h100


def test_the_published_comparison_splits_the_gpus_neusight_trained_on_from_those_new_to_it():
    ev = load_benchmark("_kernel_eval")
    pub = lambda e: {"NeuSight": e}  # noqa: E731
    rows = [{"gpu": "H100", "error": 0.02, "published_abs_error": pub(0.01)},
            {"gpu": "L4", "error": -0.04, "published_abs_error": pub(0.03)},
            {"gpu": "V100-PCIe-32GB", "error": 0.3, "published_abs_error": pub(0.1)},
            {"gpu": "A100-80GB-PCIe", "error": -0.1, "published_abs_error": pub(0.05)}]
    out = ev.published_side_by_side(rows)
    assert out["NeuSight"]["rows"] == 4
    new, seen = out["by_neusight_training"]["gpu_new_to_both"], out["by_neusight_training"]["gpu_family_in_neusight_fit_only"]
    assert new["gpus"] == ["H100", "L4"] and seen["gpus"] == ["A100-80GB-PCIe", "V100-PCIe-32GB"]
    assert new["NeuSight"]["trainwise_median_abs_error_same_rows"] == pytest.approx(0.03)
    assert seen["NeuSight"]["published_median_abs_error"] == pytest.approx(0.075)


def test_a_held_out_family_never_chooses_which_regimes_the_model_keeps():
    """The evaluation's model for a held-out family leaves to the rule the regimes `kernel_fit.rule_regimes` picks
    from the other families' per-kernel errors: whatever the held-out family's own errors, the list is the same."""
    import copy

    import numpy as np

    ev = load_benchmark("_kernel_eval")
    data = kf.load_dataset()
    held = ev.HeldOutModels(data=data.subset(np.arange(len(data.gpus)) % 40 == 0))
    held.settings = {"n_estimators": 5, "max_depth": 2, "learning_rate": 0.3, "features": "kernel"}
    model_bias, rule_bias = held.meta["regime_bias_by_family"], held.meta["fallback_regime_bias_by_family"]
    expected = kf.rule_regimes(model_bias, rule_bias, "T4")
    assert held.without("T4").meta["rule_regimes"] == expected
    held.meta = copy.deepcopy(held.meta)
    for per_family in held.meta["regime_bias_by_family"].values():  # the model now hopeless on the T4
        if "T4" in per_family:
            per_family["T4"] = 9.0
    assert kf.rule_regimes(held.meta["regime_bias_by_family"], rule_bias) != kf.rule_regimes(model_bias, rule_bias)
    held.cache.clear()
    assert held.without("T4").meta["rule_regimes"] == expected


def test_neusight_in_model_linear_times_are_joined_to_the_graph_by_node_name():
    """tools/build_neusight_e2e.py keeps a label node's forward time only where the traced graph says that node is
    exactly one Linear kernel (its dims as the graph gives them)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "build_neusight_e2e", Path(__file__).resolve().parents[1] / "tools" / "build_neusight_e2e.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    graph = ("Name,FwOps\nq,\"[['Linear', (1024, 1024, 4096)]]\"\nsm,\"[['VECsoftmax', (8, 512)]]\"\n"
             "two,\"[['Linear', (8, 8, 8)], ['VECadd', (8, 8)]]\"\nzero,\"[['Linear', (4, 4, 4)]]\"\n")
    label = "Name,fw_latency\nq,0.7\nsm,0.2\ntwo,0.1\nzero,0\nmissing,1.0\n"
    assert tool.label_linear_fw(label, graph) == [[1024, 1024, 4096, 0.7]]


def test_kernel_vs_in_model_gemm_ratio_reads_the_same_shape_on_the_same_gpu():
    ev = load_benchmark("_kernel_eval")
    measured = {("L4", "mm", "1x1024x4096x1024"): 1.5e-3, ("H100", "mm", "1x1024x4096x1024"): 1.0e-4,
                ("L4", "mm", "1x2048x4096x1024"): 9.0}  # a shape no label node has
    doc = {"label_linear_fw": {"L4": {"w": [[1024, 1024, 4096, 1.0], [1024, 1024, 4096, 0.5], [64, 64, 64, 1.0]]},
                               "H100": {"w": [[1024, 1024, 4096, 0.1]]}, "V100-PCIe-32GB": {"w": [[8, 8, 8, 1.0]]}}}
    out = ev.label_kernel_consistency(doc, measured)
    assert out["L4"]["nodes"] == 2 and out["L4"]["median_ratio"] == pytest.approx(2.25)
    assert out["H100"]["median_ratio"] == pytest.approx(1.0)
    assert "V100-PCIe-32GB" not in out  # no shape in common: no ratio


def test_a_groups_systematic_error_weighs_each_kernel_by_its_time():
    """A step keeps the time-weighted mean log-residual of its kernels: a 3-ms kernel right and a 1-ms kernel 2x
    too slow leave log(2) / 4; a group under `min_rows` kernels has no value."""
    import math

    import numpy as np

    out = kf.systematic_error(np.array([2.0, 3.0, 5.0]), np.array([1.0, 3.0, 4.0]), ["a", "a", "b"], min_rows=2)
    assert out == {"a": pytest.approx(math.log(2) / 4)}


def test_the_rule_prices_the_kernels_once_for_both_groupings():
    """kernel_rule.rule_biases: by class and by regime from one pricing; a class's value is the time-weighted mean
    of its regimes' (same kernels, same weights)."""
    import numpy as np

    data = kf.load_dataset()
    fams = np.array([km.family(g) for g in data.gpus])
    deepbench = np.array([s == "deepbench" for s in data.sources])  # its fp16 GEMMs: the tensor-core regime
    data = data.subset(np.isin(fams, ["T4", "V100"]) & (deepbench | (np.arange(len(data.gpus)) % 20 == 0)))
    by_class, by_regime = kr.rule_biases(data)
    assert set(by_class["gemm"]) == {"T4", "V100"}
    gemm_regimes = [r for r in by_regime if r.startswith("gemm")]
    assert "gemm|simt|32" in gemm_regimes and "gemm|tensor|16" in gemm_regimes
    fam = np.array([km.family(g) for g in data.gpus])
    cls = np.array([km.OP_CLASS[op] for op in data.ops])
    sel = (fam == "T4") & (cls == "gemm")
    reg = np.array(km.regimes(data.x, data.dtype_code))[sel]
    w = {r: data.latency[sel][reg == r].sum() for r in gemm_regimes}
    assert all((reg == r).sum() >= kr.MIN_CLASS_ROWS for r in gemm_regimes)  # each regime has a T4 value
    mixed = sum(w[r] * by_regime[r]["T4"] for r in gemm_regimes) / sum(w.values())
    assert by_class["gemm"]["T4"] == pytest.approx(mixed, abs=1e-4)


def test_the_forward_and_backward_spans_add_up_to_the_step_both_measured_and_predicted():
    """NeuSight's harness times a step's forward and backward apart; the packaged rows keep both spans (they add up
    to the step), and the evaluation's prediction of each span adds up to its prediction of the step."""
    import numpy as np

    ev = load_benchmark("_kernel_eval")
    doc = json.loads(ev.NEUSIGHT_E2E.read_text(encoding="utf-8"))
    for r in doc["rows"]:
        assert r["measured_forward_ms"] > 0 and r["measured_backward_ms"] > 0
        assert r["measured_forward_ms"] + r["measured_backward_ms"] == pytest.approx(r["measured_ms"], rel=1e-9)
    data = kf.load_dataset()
    held = ev.HeldOutModels(data=data.subset(np.arange(len(data.gpus)) % 40 == 0))
    held.settings = {"n_estimators": 5, "max_depth": 2, "learning_rate": 0.3, "features": "kernel"}
    acc = load_catalog().accelerator("V100-PCIe-32GB")
    wl = doc["workloads"]["bert_large-train-512-2"]
    gpu, model = km.GpuSpec.of(acc), held.without(acc.name)
    passes = ev.predict_neusight_passes(wl, gpu, model)
    assert passes["forward"] > 0 and passes["backward"] > passes["forward"]  # a backward does about twice the GEMMs
    assert passes["forward"] + passes["backward"] == pytest.approx(ev.predict_neusight(wl, gpu, model)[0], rel=1e-9)
    rows = [{"gpu": "A", "measured_forward_ms": 1.0, "measured_backward_ms": 3.0, "error_forward": -0.5,
             "error_backward": 0.1}, {"gpu": "A", "measured_forward_ms": 2.0, "measured_backward_ms": 2.0,
                                      "error_forward": 0.2, "error_backward": -0.3}]
    out = ev.by_pass(rows)
    assert out["forward"]["median_abs_error"] == pytest.approx(0.35) and out["backward"]["median_abs_error"] == pytest.approx(0.2)
    assert out["label_backward_over_forward_by_gpu"] == {"A": 2.0}


def test_transfer_from_a_gpu_measured_exactly_as_modelled_gives_the_models_prediction_of_the_target():
    """`transfer_across_gpus` scales each measured class share on GPU A by the model's B ÷ A ratio: where A's spans
    and per-class shares are exactly what the model predicts on A, the transfer to B is the model's own B (its error
    the no-GPU path's); A measured 10 % slower throughout moves B 10 % slower."""
    import copy

    import numpy as np

    ev = load_benchmark("_kernel_eval")
    data = kf.load_dataset()
    held = ev.HeldOutModels(data=data.subset(np.arange(len(data.gpus)) % 40 == 0))
    held.settings = {"n_estimators": 5, "max_depth": 2, "learning_rate": 0.3, "features": "kernel"}
    catalog = load_catalog()
    real = json.loads(ev.NEUSIGHT_E2E.read_text(encoding="utf-8"))
    name = "bert_large-train-512-2"
    wl = real["workloads"][name]
    a, b = "V100-PCIe-32GB", "H100"
    model_b = held.without(b)  # the transfer prices both GPUs with the model that has not seen the target
    on_a = ev.predict_neusight_by_class(wl, km.GpuSpec.of(catalog.accelerator(a)), model_b)
    fw_a = sum(on_a["fw"].values())
    bw_a = sum(on_a["bw"].values()) + sum(on_a.get("acc", {}).values())
    doc = {"workloads": {name: wl}, "rows": [
        {"gpu": a, "workload": name, "measured_ms": fw_a + bw_a, "measured_forward_ms": fw_a, "measured_backward_ms": bw_a},
        {"gpu": b, "workload": name, "measured_ms": 100.0, "measured_forward_ms": 40.0, "measured_backward_ms": 60.0}],
        "label_class_ms": {a: {name: on_a}}}
    te = load_benchmark("_transfer_eval")
    out = te.transfer_across_gpus(doc, catalog, held)
    (pair,) = out["pairs"]  # B -> A is not scored: B has no per-node shares
    assert pair["source"] == a and pair["target"] == b
    assert pair["transfer_error"] == pytest.approx(pair["no_gpu_error"], abs=2e-4)
    slower = copy.deepcopy(doc)
    for key in ("measured_ms", "measured_forward_ms", "measured_backward_ms"):
        slower["rows"][0][key] *= 1.1
    (moved,) = te.transfer_across_gpus(slower, catalog, held)["pairs"]
    assert 1 + moved["transfer_error"] == pytest.approx(1.1 * (1 + pair["transfer_error"]), rel=1e-3)


def test_label_class_ms_sums_each_nodes_time_by_its_heaviest_kernel_and_expands_the_layer():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "build_neusight_e2e", Path(__file__).resolve().parents[1] / "tools" / "build_neusight_e2e.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    graph = ("Name,OpName,FwOps,BwOps,AccOps\n"
             "emb,x,\"[['MEM', ((4,),)]]\",[],[]\n"
             "transformer_h_0_ln_1,ln,\"[['VECln', (8, 16)]]\",\"[['VECln', (8, 16)], ['VECadd', (8, 16)]]\",[]\n"
             "fc,linear,\"[['Linear', (8, 16, 16)], ['VECadd', (8, 16)]]\",\"[['Linear', (8, 16, 16)]]\",\"[['VECadd', (1, 16)]]\"\n"
             "add_15,add,\"[['VECadd', (8, 16)]]\",[],[]\n"
             "head,linear,\"[['Linear', (8, 16, 100)]]\",[],[]\n")
    label = ("Name,fw_latency,bw_latency,acc_latency\nemb,0.5,0,0\ntransformer_h_0_ln_1,1.0,2.0,0\n"
             "fc,3.0,6.0,0.25\nadd_15,0.5,0,0\nhead,4.0,0,0\nnot_in_graph,9,9,9\n")
    out = mod.label_class_ms(label, graph, 10, "gpt2_large")
    # the layer (transformer_h_0_ln_1 .. add_15) x 10; a node with a Linear and an add is a GEMM node
    assert out["fw"] == {"mem": 0.5, "norm": 10.0, "gemm": 34.0, "elementwise": 5.0}
    assert out["bw"] == {"norm": 20.0, "gemm": 60.0} and out["acc"] == {"elementwise": 2.5}
