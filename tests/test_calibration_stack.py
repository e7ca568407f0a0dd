"""Software-stack term of the device model: source families, the reference stack, fit and LOO."""

from __future__ import annotations

import math

import pytest

from trainwise.predict import calibration_eval as ce
from trainwise.predict import calibration_fit as cf
from trainwise.predict import calibration_layout as cl
from trainwise.predict import device_model as dm
from trainwise.predict import device_params as dp
from trainwise.predict import measurements as meas
from trainwise.predict.characterise import characterise_named


def _row(model: str, accelerator: str, samples_per_s: float, source: str, **extra) -> meas.Measurement:
    return meas.Measurement(model=model, accelerator=accelerator, count=1, per_device_batch=256, precision="fp32",
                            samples_per_s=samples_per_s, source=source, **extra)


def test_stack_of_maps_sources_to_families():
    assert meas.stack_of(_row("resnet50", "V100", 1, "lambdal/deeplearning-benchmark:pytorch/x.csv")) == dp.REFERENCE_STACK
    assert meas.stack_of(_row("resnet50", "V100", 1, "NVIDIA/DeepLearningExamples:PyTorch/x/README.md")) == "nvidia-dle"
    assert meas.stack_of(_row("seismic_fcn", "K80", 1, "Malta, 'Selecting Efficient Virtual Machines for Training Deep Learning Models on the Cloud' (MSc dissertation, UNICAMP 2021) Table 4.1")) == "seed-malta-keras"
    assert meas.stack_of(_row("convnext_large", "T4", 1, "Erben, 'Performance Optimization in Deep Learning Systems' (PhD dissertation, TUM 2024)")) == "seed-erben"
    # an explicit column wins; an unknown publisher is its own (unfitted) stack
    assert meas.stack_of(_row("resnet50", "V100", 1, "NVIDIA/DeepLearningExamples:x", stack="pytorch-eager")) == dp.REFERENCE_STACK
    assert meas.stack_of(_row("resnet50", "V100", 1, "my-lab measurements, 2026")) == "my-lab"


def test_every_packaged_row_has_a_known_stack(catalog):
    known = {family for _, family in meas.STACK_OF_SOURCE}
    for path in (meas.CALIBRATION_CSV, meas.VALIDATION_CSV, meas.MEASURED_H100_CSV):
        for m in meas.load_measurements(path, catalog):
            assert meas.stack_of(m) in known, (path.name, m.line, m.source)


def test_predict_iteration_is_at_the_reference_stack_unless_told(catalog):
    char = characterise_named("mnist_cnn", 256, "fp32")
    acc = catalog.accelerator("V100")
    params = dp.DeviceModelParams(stack_factors={"nvidia-dle": 1.25})
    plain = dm.predict_iteration(char, acc, params=params)
    assert dm.predict_iteration(char, acc, params=params, stack=dp.REFERENCE_STACK).iteration_s == plain.iteration_s
    assert dm.predict_iteration(char, acc, params=params, stack="unknown-lab").iteration_s == plain.iteration_s
    fused = dm.predict_iteration(char, acc, params=params, stack="nvidia-dle")
    assert fused.samples_per_s == pytest.approx(plain.samples_per_s * 1.25, rel=1e-9)


def test_vectorised_model_applies_the_stack_factor_like_predict_iteration(catalog):
    params = dp.DeviceModelParams(stack_factors={"nvidia-dle": 1.3, "seed-malta-keras": 0.8})
    rows = [_row("mnist_cnn", "V100", 1000, "NVIDIA/DeepLearningExamples:x"),
            _row("mnist_cnn", "K80", 1000, "lambdal/deeplearning-benchmark:x"),
            _row("seismic_fcn", "K80", 1000, "Malta, MSc dissertation", framework="tensorflow")]
    design = cf.build_design(rows, catalog)
    assert design.stacks == ["nvidia-dle", "seed-malta-keras"]  # the reference stack has no parameter
    layout = cl.Layout(design.accelerators, design.generations, design.stacks)
    vector = cf.predict_design(design, layout, layout.from_params(params))
    assert list(vector) == pytest.approx(cf.predict_rows(params, rows, catalog), rel=1e-6)


def test_fit_learns_a_publishers_factor_from_its_other_models(catalog):
    # synthetic truth: publisher B is 1.4x faster than the reference on every model
    base = dp.DeviceModelParams()
    shapes = [("mnist_cnn", "V100"), ("mnist_cnn", "K80"), ("seismic_fcn", "V100"), ("seismic_fcn", "K80"),
              ("resnet50_cifar10", "V100"), ("resnet50_cifar10", "K80")]
    rows = []
    for model, acc in shapes:
        truth = cf.predict_rows(base, [_row(model, acc, 1, "lab-a")], catalog)[0]
        rows.append(_row(model, acc, truth, "lambdal/x"))
        rows.append(_row(model, acc, truth * 1.4, "lab-b:x", stack="lab-b"))
    res = cf.fit(rows, (), catalog)
    assert set(res.params.stack_factors) == {"lab-b"}
    # the 1.4x is carried by the throughput factor and the fusion factor together (with a wide fusion
    # prior the split between them is not identified by uniform data); what matters is the prediction
    assert res.params.stack_factors["lab-b"] > 1.1
    fitted = cf.predict_rows(res.params, rows, catalog)
    for i in range(0, len(rows), 2):
        assert fitted[i + 1] / fitted[i] == pytest.approx(1.4, rel=0.08)
    # leave-one-model-out: the held-out model's lab-b rows are predicted with the factor learnt from
    # lab-b's other models, so they come out ~1.4x the held-out reference rows
    loo = ce.loo(rows, (), "model", catalog)
    for i in range(0, len(rows), 2):
        assert loo.predictions[i + 1] / loo.predictions[i] == pytest.approx(1.4, rel=0.1)
    # without the term both publishers get one prediction and the residuals are ~+-20 %
    flat = ce.loo(rows, (), "model", catalog, stacks=False)
    assert all(math.isclose(flat.predictions[i], flat.predictions[i + 1], rel_tol=1e-9) for i in range(0, len(rows), 2))
    assert ce.summarise_errors(loo.errors)["median_abs_error"] < ce.summarise_errors(flat.errors)["median_abs_error"]


def test_a_stack_seen_only_in_the_held_out_model_keeps_its_prior(catalog):
    rows = [_row("mnist_cnn", "V100", 60000, "lambdal/x"), _row("mnist_cnn", "K80", 20000, "lambdal/x"),
            _row("seismic_fcn", "V100", 9000, "lambdal/x"), _row("seismic_fcn", "K80", 3000, "lambdal/x"),
            _row("seismic_fcn", "V100", 20000, "only-here:x", stack="only-here")]
    loo = ce.loo(rows, (), "model", catalog)
    # rows 2 and 4: same model/accelerator, one at the reference stack, one at a stack no other model has
    assert loo.predictions[4] == pytest.approx(loo.predictions[2], rel=1e-9)


def test_stack_fusion_speeds_up_only_the_fusable_memory_bound_operators(catalog):
    char = characterise_named("resnet50", 64, "amp_fp16")
    acc = catalog.accelerator("V100")
    plain = dm.predict_iteration(char, acc, params=dp.DeviceModelParams(), stack="lab")
    fused = dm.predict_iteration(char, acc, params=dp.DeviceModelParams(stack_fusion={"lab": 2.0}), stack="lab")
    assert fused.iteration_s < plain.iteration_s
    for category in ("conv", "matmul", "embedding"):  # compute-bound kernels and embeddings are not fused
        assert fused.breakdown_s.get(category) == plain.breakdown_s.get(category)
    # the memory-bound normalisation/elementwise kernels run at (about) half the time: launches stay
    for category in ("normalisation", "elementwise"):
        assert fused.breakdown_s[category] < 0.6 * plain.breakdown_s[category]
    # the reference stack and stacks without a fitted fusion factor are untouched
    assert dm.predict_iteration(char, acc, params=dp.DeviceModelParams(stack_fusion={"lab": 2.0})).iteration_s == \
        plain.iteration_s


def test_vectorised_model_applies_the_stack_fusion_like_predict_iteration(catalog):
    params = dp.DeviceModelParams(stack_factors={"nvidia-dle": 1.1}, stack_fusion={"nvidia-dle": 1.8, "seed-malta-keras": 0.4})
    rows = [_row("resnet50_cifar10", "V100", 1000, "NVIDIA/DeepLearningExamples:x"),
            _row("resnet50_cifar10", "V100", 1000, "lambdal/deeplearning-benchmark:x"),
            _row("seismic_fcn", "K80", 1000, "Malta, MSc dissertation", framework="tensorflow")]
    design = cf.build_design(rows, catalog)
    layout = cl.Layout(design.accelerators, design.generations, design.stacks)
    vector = cf.predict_design(design, layout, layout.from_params(params))
    assert list(vector) == pytest.approx(cf.predict_rows(params, rows, catalog), rel=1e-6)
    assert vector[0] > 1.1 * vector[1]  # fused and faster than the reference


def test_no_shared_tensorflow_efficiency_and_no_stack_term_on_a_bound():
    layout = cl.Layout(["V100"], ["volta"], ["seed-malta-keras", "lambda-tf-cnn-benchmarks"])
    # TensorFlow rows are carried by their stacks' factors; a TF-wide multiplier fought them
    assert "tf_eff" not in layout.index
    assert layout.to_params(layout.prior).tensorflow_efficiency == 1.0
    packaged = dp.load_params()
    for name, values, (low, high) in (("stack_factors", packaged.stack_factors, cl.STACK_FACTOR_BOUNDS),
                                      ("stack_fusion", packaged.stack_fusion, cl.STACK_FUSION_BOUNDS)):
        for stack, value in values.items():
            assert low * 1.02 < value < high / 1.02, (name, stack, value)
