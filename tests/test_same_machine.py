"""trainwise's estimator and the Malta adapters on synthetic profiles (no subprocess)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwise.errors import TrainwiseError
from trainwise.predict.same_machine import predict_total, relative_error, trainwise_estimate
from trainwise.profile.schema import PROFILE_SCHEMA_VERSION, closure_warmup, load_profile, profile_from_raw


def raw_profile(iteration_s: list[float], *, init_s: float = 2.0, batches_per_epoch: int = 100,
                val_batch_s: list[float] | None = None, val_total: int = 20, epoch2: list[float] | None = None,
                gap_s: float = 0.0, mode: str = "sampled") -> dict:
    """A raw recorder record: epoch 1 with `iteration_s`, optional validation and epoch-2 iterations."""
    t = init_s
    iterations = []
    for wall in iteration_s:
        iterations.append({"index": len(iterations), "epoch": 0, "start_s": t, "end_s": t + wall, "data_wait_s": wall * 0.1,
                           "samples": 32, "batches": 1})
        t += wall
    epochs = [{"index": 0, "start_s": init_s, "end_s": t, "iterations": len(iteration_s), "truncated": True,
               "batches_per_epoch": batches_per_epoch}]
    validations = []
    if val_batch_s:
        starts = []
        v0 = t
        for wall in val_batch_s:
            starts.append(t)
            t += wall
        validations.append({"epoch": 0, "start_s": v0, "end_s": t, "batch_starts_s": starts, "data_wait_s": [0.0] * len(starts),
                            "samples": 64 * len(starts), "truncated": True, "batches_total": val_total})
    t += gap_s
    if epoch2:
        epochs.append({"index": 1, "start_s": t, "end_s": None, "iterations": len(epoch2), "truncated": False,
                       "batches_per_epoch": batches_per_epoch})
        for wall in epoch2:
            iterations.append({"index": len(iterations), "epoch": 1, "start_s": t, "end_s": t + wall, "data_wait_s": 0.0,
                               "samples": 32, "batches": 1})
            t += wall
    return {
        "raw_format_version": 1, "mode": mode, "config": {}, "stop_reason": "sampled",
        "stability": {"iterations": len(iteration_s), "stable": True, "relative_drift": 0.0},
        "marks": {"bootstrap": 0.1, "torch_import_start": 0.1, "torch_imported": 1.5, "first_iteration_start": init_s},
        "iterations": iterations, "validations": validations, "epochs": epochs,
        "loaders": {"train": {"batches_per_pass": batches_per_epoch, "dataset_size": batches_per_epoch * 32, "drop_last": False, "num_workers": 0},
                    "val": {"batches_per_pass": val_total, "dataset_size": val_total * 64, "drop_last": False, "num_workers": 0}},
        "model": {"parameters": 10, "trainable_parameters": 10, "gradient_bytes": 40, "device": "cpu", "parameter_dtypes": ["float32"], "optimizer": "SGD"},
        "environment": {"python_version": "3.11", "platform": "linux", "hostname": "h", "cpu_model": "cpu", "logical_cores": 2,
                        "torch_version": "2.14.1", "torch_threads": 2, "device": "cpu", "device_name": None},
        "memory": {"peak_rss_bytes": 1 << 20, "peak_device_bytes": None},
        "training_end_s": t, "recorded_until_s": t, "explicit_steps": False, "notes": [],
    }


def make(iteration_s, **kw):
    return profile_from_raw(raw_profile(iteration_s, **kw), command=["python", "t.py"], process_wall_s=10.0, exit_code=0)


def test_exact_for_constant_iteration_times():
    profile = make([0.5] * 30, init_s=3.0, val_batch_s=[0.2] * 5, val_total=20, epoch2=[0.5] * 4)
    prediction = trainwise_estimate(profile, epochs=10)
    expected = 3.0 + 10 * 100 * 0.5 + 10 * 20 * 0.2
    assert prediction.total_s == pytest.approx(expected)
    assert prediction.low_s == pytest.approx(expected) and prediction.high_s == pytest.approx(expected)


def test_warmup_is_dropped_and_epoch_start_cost_is_added():
    profile = make([5.0, 2.0] + [1.0] * 30, init_s=1.0, epoch2=[1.5, 1.0, 1.0])
    s = profile.steady_state
    assert s.warmup_iterations == 2
    assert s.iteration.mean_s == pytest.approx(1.0)
    assert s.first_iteration_s == 5.0
    assert s.epoch_start_extra_s == pytest.approx(0.5)
    p = trainwise_estimate(profile, epochs=3)
    # init + E·N·t + each warm-up iteration's excess once (It1 − t, It2 − t: measured, not extrapolated)
    # + (E − 1)·epoch-start extra
    assert p.total_s == pytest.approx(1.0 + 3 * 100 * 1.0 + 4.0 + 1.0 + 2 * 0.5)


def one_step_epochs(step_s: list[float], backward_passes: list[int] | None = None, cap: int | None = None):
    """A full-batch loop: every epoch one optimizer step, then an evaluation (a GCN, an LBFGS fit)."""
    raw = raw_profile([step_s[0]], init_s=1.0, batches_per_epoch=1)
    t = raw["iterations"][0]["end_s"]
    for k, wall in enumerate(step_s[1:], start=1):
        raw["epochs"].append({"index": k, "start_s": t, "end_s": t + wall, "iterations": 1, "truncated": False,
                              "batches_per_epoch": 1})
        raw["iterations"].append({"index": k, "epoch": k, "start_s": t, "end_s": t + wall, "data_wait_s": 0.0,
                                  "samples": 32, "batches": 1})
        t += wall
    for it, count in zip(raw["iterations"], backward_passes or []):
        it["backward_passes"] = count
    raw["model"]["closure_evaluation_cap"] = cap
    return profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)


def test_one_iteration_epochs_pool_their_steps_into_one_steady_state():
    # before: epoch 1's only (cold) step was the steady state and every later step an "epoch start"
    profile = one_step_epochs([3.0] + [1.0] * 20)
    s = profile.steady_state
    assert s.warmup_iterations == 1 and s.iteration.n == 20 and s.iteration.mean_s == pytest.approx(1.0)
    assert s.epoch_start_extra_s is None
    assert trainwise_estimate(profile, epochs=100).breakdown_s["iterations_s"] == pytest.approx(100 * 1.0 + 2.0)


def test_a_closure_optimizers_converging_steps_are_measured_not_extrapolated():
    # LBFGS: 10 steps of 6 closure evaluations (0.6 s), then it converges to one (0.1 s a step)
    profile = one_step_epochs([0.7] + [0.6] * 9 + [0.1] * 10, [6] * 10 + [1] * 10, cap=6)
    s = profile.steady_state
    assert s.warmup_iterations == 10 and s.iteration.mean_s == pytest.approx(0.1)
    p = trainwise_estimate(profile, epochs=360)
    assert p.breakdown_s["iterations_s"] == pytest.approx(360 * 0.1 + 0.6 + 9 * 0.5)
    assert "closure evaluations" not in p.note


def test_closure_steps_still_at_the_cap_make_the_estimate_an_upper_bound():
    profile = one_step_epochs([0.7] + [0.6] * 19, [6] * 20, cap=6)
    p = trainwise_estimate(profile, epochs=360)
    iterations_s = p.breakdown_s["iterations_s"]
    assert iterations_s == pytest.approx(360 * 0.6 + 0.1)
    # the low end takes a step of one evaluation: a sixth of the measured steps
    assert p.low_s == pytest.approx(p.total_s - iterations_s * 5 / 6)
    assert "6 closure evaluations each (its max_iter is 6)" in p.note
    # a fluctuating count below the cap (mini-batch LBFGS) is neither a converging phase nor capped
    steady = one_step_epochs([0.7] + [0.5, 0.3] * 10, [5, 3] * 10 + [5], cap=6)
    assert closure_warmup(steady.iterations) == 0
    assert "closure evaluations" not in trainwise_estimate(steady, epochs=10).note


def test_a_profile_of_a_loop_without_a_dataloader_reads_back(tmp_path):
    # no DataLoader counted a sample: global batch 0 means "not seen", which the reader must accept
    raw = raw_profile([0.1] * 10)
    for it in raw["iterations"]:
        it["samples"] = 0
    raw["validations"] = [{"epoch": 0, "start_s": 9.0, "end_s": 9.2, "batch_starts_s": [9.0, 9.1], "data_wait_s": [0.0, 0.0],
                           "samples": 0, "truncated": False, "batches_total": 2}]
    profile = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)
    assert profile.dataset.global_batch_size == 0 and profile.dataset.val_batch_size is None
    path = tmp_path / "p.json"
    path.write_text(profile.model_dump_json())
    assert load_profile(path).dataset.global_batch_size == 0


def test_a_profile_that_ended_inside_epoch_1_says_validation_after_it_was_not_seen():
    # a loop without a DataLoader whose epoch was too long to wait out: its profile is epoch 1 alone, truncated
    ended_inside = trainwise_estimate(make([0.5] * 30), epochs=4)
    assert "ended inside epoch 1, before any validation after it" in ended_inside.note
    # a profile that went on into epoch 2 and saw no validation between: the script has none
    went_on = trainwise_estimate(make([0.5] * 30, epoch2=[0.5] * 4), epochs=4)
    assert "no validation pass observed: validation time not included" in went_on.note
    assert "ended inside epoch 1" not in went_on.note


def test_what_a_script_does_after_training_counts_when_the_profile_saw_it():
    """A profile that ran the script to its end measured its tail (a final test, a save, the exit): the prediction
    adds it once, whatever the epochs; a sampled profile, which stopped the script, adds nothing."""
    raw = raw_profile([0.5] * 30, init_s=3.0, batches_per_epoch=30)
    raw["stop_reason"] = "script_exited"
    raw["epochs"][0]["truncated"] = False
    end = raw["epochs"][0]["end_s"]
    whole = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=end + 2.5, exit_code=0)
    for epochs in (1, 4):
        p = trainwise_estimate(whole, epochs=epochs)
        assert p.breakdown_s["after_training_s"] == pytest.approx(2.5)
        assert p.total_s == pytest.approx(3.0 + epochs * 30 * 0.5 + 2.5)
        assert "after training, measured" in p.note
    assert trainwise_estimate(whole, epochs=1).total_s == pytest.approx(whole.process_wall_s)
    raw["stop_reason"] = "sampled"
    sampled = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=end + 2.5, exit_code=0)
    assert trainwise_estimate(sampled, epochs=4).breakdown_s["after_training_s"] == 0.0


def test_between_epoch_gap_is_counted_once_per_epoch_boundary():
    profile = make([1.0] * 20, init_s=0.0, val_batch_s=[0.1] * 4, val_total=4, epoch2=[1.0] * 3, gap_s=2.0)
    p = trainwise_estimate(profile, epochs=4)
    assert p.breakdown_s["between_epochs_s"] == pytest.approx(3 * 2.0)
    assert p.breakdown_s["validation_s"] == pytest.approx(4 * 0.4)


def test_malta_adapters_use_the_named_inputs():
    profile = make([3.0, 1.2] + [1.0] * 20, init_s=2.0, val_batch_s=[0.1] * 4, val_total=4)
    eq54 = predict_total(profile, 5, "eq5.4")
    assert eq54.total_s == pytest.approx(2.0 + 3.0 + (5 * 100 - 1) * 1.2)
    eq53 = predict_total(profile, 5, "eq5.3")
    assert eq53.total_s == pytest.approx(eq54.total_s + 5 * 0.4)
    averaged = predict_total(profile, 5, "averaged")
    mean_2_to_10 = (1.2 + 8 * 1.0) / 9
    assert averaged.total_s == pytest.approx(2.0 + 3.0 + mean_2_to_10 * (100 - 1) + 0.4 + 4 * (mean_2_to_10 * 100 + 0.4))
    with pytest.raises(TrainwiseError, match="two complete epochs"):
        predict_total(profile, 5, "eq5.1")
    with pytest.raises(TrainwiseError, match="unknown estimator"):
        predict_total(profile, 5, "eq9.9")


@pytest.mark.parametrize("epochs", [0, -3])
def test_non_positive_epochs_rejected(epochs):
    profile = make([1.0] * 10)
    with pytest.raises(TrainwiseError, match="positive"):
        trainwise_estimate(profile, epochs)


def test_a_band_wider_than_the_estimate_stops_at_the_measured_start_up():
    # A few wildly different steps (a shared host mid-sample) give a band wider than the estimate
    # itself; its low end used to be clamped to 0 ("0.0 ms–4.0 min"), below the start-up the profile
    # measured and every run pays.
    profile = make([0.5, 0.01, 0.01, 3.0, 0.01, 0.01], init_s=5.0)
    prediction = trainwise_estimate(profile, 3)
    assert prediction.total_s - (prediction.high_s - prediction.total_s) < 0  # the symmetric band would go below 0
    assert prediction.low_s == pytest.approx(profile.init.total_s)
    assert prediction.low_s <= prediction.total_s <= prediction.high_s


iteration_lists = st.lists(st.floats(min_value=1e-4, max_value=10.0, allow_nan=False), min_size=3, max_size=40)


@settings(max_examples=60, deadline=None)
@given(iteration_lists, st.integers(min_value=1, max_value=50), st.sampled_from(["trainwise", "eq5.4", "eq5.3", "averaged"]))
def test_estimators_never_negative_and_monotone_in_epochs(times, epochs, estimator):
    profile = make(times, val_batch_s=[0.05, 0.04], val_total=10)
    a = predict_total(profile, epochs, estimator)
    b = predict_total(profile, epochs + 1, estimator)
    assert a.total_s >= 0 and a.low_s >= 0
    if estimator == "trainwise":
        assert a.low_s >= profile.init.total_s
    assert b.total_s >= a.total_s
    assert a.low_s <= a.total_s <= a.high_s
    # the breakdown a report shows adds up to the total
    assert sum(a.breakdown_s.values()) == pytest.approx(a.total_s, rel=1e-9, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(st.floats(min_value=1e-3, max_value=5.0), st.integers(min_value=3, max_value=30), st.integers(min_value=1, max_value=30))
def test_all_estimators_agree_for_constant_iterations_without_validation(t, n, epochs):
    profile = make([t] * n, init_s=1.0)
    expected = 1.0 + epochs * 100 * t
    for estimator in ("trainwise", "eq5.4", "averaged"):
        assert predict_total(profile, epochs, estimator).total_s == pytest.approx(expected, rel=1e-9)


def test_relative_error_convention():
    assert relative_error(100.0, 95.0) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        relative_error(0.0, 1.0)


def test_profile_roundtrip_and_bad_files(tmp_path):
    profile = make([1.0] * 10)
    path = profile.save(tmp_path / "p.json")
    assert load_profile(path) == profile
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TrainwiseError, match="not valid JSON"):
        load_profile(tmp_path / "bad.json")
    old = json.loads(path.read_text())
    old["schema_version"] = 0
    (tmp_path / "old.json").write_text(json.dumps(old))
    with pytest.raises(TrainwiseError, match=f"schema version 0.*reads version {PROFILE_SCHEMA_VERSION}"):
        load_profile(tmp_path / "old.json")
    broken = json.loads(path.read_text())
    broken["iterations"]["wall_s"][0] = -1
    (tmp_path / "broken.json").write_text(json.dumps(broken))
    with pytest.raises(TrainwiseError, match="malformed at `iterations.wall_s.0`"):
        load_profile(tmp_path / "broken.json")
    # schema version 1 kept a row per iteration: still read, as the same profile
    columns = json.loads(path.read_text())["iterations"]
    rows = [{"index": i, **dict(zip(columns, values)), "compute_s": 0.9} for i, values in enumerate(zip(*columns.values()))]
    version1 = {**json.loads(path.read_text()), "schema_version": 1, "iterations": rows}
    (tmp_path / "v1.json").write_text(json.dumps(version1))
    assert load_profile(tmp_path / "v1.json") == profile
    rows[3]["samples"] = -2
    (tmp_path / "v1.json").write_text(json.dumps(version1))
    with pytest.raises(TrainwiseError, match="malformed at `iterations.samples.3`"):
        load_profile(tmp_path / "v1.json")
    # json reads Infinity and NaN (trainwise writes neither): refused where they are, not predicted with
    for where, value in ((("init", "total_s"), float("inf")), (("iterations", "wall_s", 2), float("nan")),
                         (("init", "total_s"), float("-inf"))):
        edited = json.loads(path.read_text())
        target = edited
        for key in where[:-1]:
            target = target[key]
        target[where[-1]] = value
        (tmp_path / "edited.json").write_text(json.dumps(edited))
        dotted = ".".join(map(str, where))
        with pytest.raises(TrainwiseError, match=rf"profile .*edited.json is malformed at `{dotted}`: -?(inf|nan) is not a finite number"):
            load_profile(tmp_path / "edited.json")
    with pytest.raises(TrainwiseError, match="does not exist"):
        load_profile(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(TrainwiseError, match="not a trainwise profile"):
        load_profile(tmp_path / "other.json")


def test_zeros_in_the_optimizer_state_widen_the_band_downwards_only():
    from trainwise.profile.schema import OptimizerStateZeros

    base = make([0.1] * 30)
    plain = trainwise_estimate(base, 3)
    stake = OptimizerStateZeros(optimizer="Adam", state="exp_avg_sq", elements=2_560_000, zeros=1_480_000,
                                sqrt_state_ns_per_element=2.7, sqrt_zero_ns_per_element=3.8,
                                sqrt_normal_ns_per_element=0.3, step_time_at_stake_s=0.012)
    zeroed = trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": stake}), 3)
    assert zeroed.total_s == pytest.approx(plain.total_s) and zeroed.high_s == pytest.approx(plain.high_s)
    assert zeroed.low_s == pytest.approx(plain.low_s - plain.breakdown_s["iterations_s"] * 0.12)
    assert "58% zeros" in zeroed.note and "12% of a step" in zeroed.note and "9.0x" in zeroed.note
    assert "keeps the measured step" in zeroed.note  # no counts during the run: nothing to model the fill-in with
    # below 2 % of the step the zeros are inside the steady-state spread: no note, no wider band
    small = stake.model_copy(update={"step_time_at_stake_s": 0.001})
    same = trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": small}), 3)
    assert same.low_s == pytest.approx(plain.low_s) and "zeros" not in same.note
    # the profile keeps the record through a save and a load
    assert OptimizerStateZeros.model_validate(stake.model_dump()).zero_fraction == pytest.approx(1_480_000 / 2_560_000)


def _decaying_zeros(tau: float, kappa: float, sparse: int, steps: list[int]) -> list[tuple[int, int]]:
    return [(s, round(sparse * math.exp(-((s / tau) ** kappa)))) for s in steps]


def test_the_state_zeros_fill_in_law_is_fitted_and_its_speed_up_predicted():
    from trainwise.predict import state_zeros
    from trainwise.profile.schema import OptimizerStateZeros

    sparse, elements = 2_560_000, 2_700_000
    counted = _decaying_zeros(140.0, 0.75, sparse, [1, 2, 3, 4, 5, 8, 11, 16, 17])
    # the state as timed when sampling stopped (step 25): the excess is 10 ms per step
    last = round(sparse * math.exp(-((25 / 140.0) ** 0.75)))
    zeros = OptimizerStateZeros(optimizer="Adam", state="exp_avg_sq", elements=elements, zeros=last, steps=25,
                                sparse_elements=sparse, trajectory=counted, sqrt_state_ns_per_element=0.3 + 0.010 / elements * 1e9,
                                sqrt_zero_ns_per_element=5.1, sqrt_normal_ns_per_element=0.3, step_time_at_stake_s=0.010)
    model = state_zeros.fit(zeros)
    assert model is not None and model.points == 9  # step 1 is left out (the state is created by the first step)
    assert model.tau_steps == pytest.approx(140.0, rel=1e-3) and model.kappa == pytest.approx(0.75, rel=1e-3)
    # the modelled excess at the last count is the one measured there
    assert float(model.excess_s(25.0)) == pytest.approx(0.010, rel=1e-3)
    assert float(model.excess_s(5000.0)) < 1e-6  # no zeros left long after
    # a long run loses (nearly) the whole excess the measured window carried, on every step after the fill-in
    window = (6, 25)
    correction = state_zeros.iterations_correction_s(model, 20_000, window)
    carried = float(np.mean(model.excess_s(np.arange(6, 26, dtype=float))))
    fill_in_s = float(np.sum(model.excess_s(np.arange(1, 20_001, dtype=float))))
    assert correction == pytest.approx(fill_in_s - 20_000 * carried)
    assert -20_000 * carried < correction < -0.9 * 20_000 * carried
    # too few counts, or zeros that do not go away: no law
    assert state_zeros.fit(zeros.model_copy(update={"trajectory": counted[:2], "steps": None})) is None
    flat = [(s, sparse // 2) for s, _ in counted]
    assert state_zeros.fit(zeros.model_copy(update={"trajectory": flat, "zeros": sparse // 2})) is None


def test_a_fitted_fill_in_moves_the_prediction_and_keeps_half_of_it_in_the_band():
    from trainwise.profile.schema import OptimizerStateZeros

    base = make([0.06] * 30)
    plain = trainwise_estimate(base, 3)
    sparse = 2_560_000
    counted = _decaying_zeros(140.0, 0.75, sparse, [1, 2, 3, 4, 5, 8, 11, 16, 17, 26])
    zeros = OptimizerStateZeros(optimizer="Adam", state="exp_avg_sq", elements=sparse, zeros=counted[-1][1], steps=26,
                                sparse_elements=sparse, trajectory=counted, sqrt_state_ns_per_element=0.3 + 0.010 / sparse * 1e9,
                                sqrt_zero_ns_per_element=5.1, sqrt_normal_ns_per_element=0.3, step_time_at_stake_s=0.010)
    modelled = trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": zeros}), 3)
    correction = modelled.breakdown_s["state_zeros_correction_s"]
    assert correction < 0 and modelled.total_s == pytest.approx(plain.total_s + correction)
    assert sum(modelled.breakdown_s.values()) == pytest.approx(modelled.total_s)
    assert modelled.high_s == pytest.approx(plain.high_s + correction / 2)  # half the correction stays in the band
    assert modelled.low_s == pytest.approx(plain.low_s + correction)
    assert "decay like exp(-(s/140)^0.75)" in modelled.note and "half of it kept in the band" in modelled.note
    totals = [trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": zeros}), e).total_s for e in range(1, 8)]
    assert totals == sorted(totals) and totals[0] > 0  # still monotone in epochs


def test_a_fill_in_model_claiming_most_of_the_step_is_not_believed():
    from trainwise.profile.schema import OptimizerStateZeros

    base = make([0.006] * 30)  # a 6 ms step of which the counts would put 10 ms in the square root
    sparse = 2_560_000
    counted = _decaying_zeros(140.0, 0.75, sparse, [1, 2, 3, 4, 5, 8, 11, 16, 17, 26])
    zeros = OptimizerStateZeros(optimizer="Adam", state="exp_avg_sq", elements=sparse, zeros=counted[-1][1], steps=26,
                                sparse_elements=sparse, trajectory=counted, sqrt_state_ns_per_element=0.3 + 0.010 / sparse * 1e9,
                                sqrt_zero_ns_per_element=5.1, sqrt_normal_ns_per_element=0.3, step_time_at_stake_s=0.010)
    plain = trainwise_estimate(base, 3)
    guarded = trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": zeros}), 3)
    assert guarded.total_s == pytest.approx(plain.total_s) and "keeps the measured step" in guarded.note
    assert [trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": zeros}), e).total_s for e in (1, 2, 3)] == sorted(
        trainwise_estimate(base.model_copy(update={"optimizer_state_zeros": zeros}), e).total_s for e in (1, 2, 3))


def test_validation_every_n_steps_seen_in_the_sampled_epoch_is_counted_per_epoch():
    """The synthetic form of test_profile's --validate-every 10 run: a sampled first epoch (40 iterations
    each) of 25 iterations with a pass after steps 10 and 20 is 4 passes per epoch, every 10 steps."""
    from trainwise.predict.same_machine import validation_passes_per_epoch

    raw = raw_profile([0.01] * 25, batches_per_epoch=40, val_total=200, epoch2=[0.01, 0.01])
    shift, validations = 0.0, []
    for it in raw["iterations"]:
        it["start_s"] += shift
        it["end_s"] += shift
        if it["epoch"] == 0 and it["index"] in (9, 19):  # a pass of 3 timed batches after steps 10 and 20
            starts = [it["end_s"] + 0.02 * k for k in range(3)]
            validations.append({"epoch": 0, "start_s": it["end_s"], "end_s": it["end_s"] + 0.06, "batch_starts_s": starts,
                                "data_wait_s": [0.0] * 3, "samples": 48, "truncated": True, "batches_total": 200})
            shift += 0.06
    raw["epochs"][0]["end_s"] += shift
    raw["epochs"][1]["start_s"] += shift
    raw["validations"] = validations
    raw["training_end_s"] = raw["recorded_until_s"] = raw["iterations"][-1]["end_s"]
    profile = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)
    assert validation_passes_per_epoch(profile, 40) == (4, 10)
    assert "4 passes per epoch, 12 in all" in predict_total(profile, 3).note
    # without the mid-epoch passes: one pass per epoch, at its end
    assert validation_passes_per_epoch(make([0.01] * 25, batches_per_epoch=40, val_batch_s=[0.02] * 3), 40) == (1, None)


def _without_a_dataloader(raw: dict) -> dict:
    for it in raw["iterations"]:
        it["samples"], it["batches"] = 0, 0
    raw["loaders"] = {}
    for epoch in raw["epochs"]:
        epoch["batches_per_epoch"] = None
    return raw


def test_a_loop_without_a_dataloader_takes_its_batch_from_the_traced_input_and_says_so():
    raw = _without_a_dataloader(raw_profile([0.1] * 30))
    raw["characterisation"] = None
    profile = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)
    assert profile.dataset.global_batch_size == 0  # nothing says it
    with pytest.raises(TrainwiseError, match="trains without a DataLoader and showed no epoch boundary"):
        predict_total(profile, epochs=2)
    raw = _without_a_dataloader(raw_profile([0.1] * 30))
    raw["characterisation"] = {"model": "Linear", "per_device_batch": 32, "precision": "fp32", "optimizer": "none",
                               "inputs": ["32x4:float32"], "records": [], "parameters": 5, "trainable_parameters": 5,
                               "parameter_tensors": 2, "parameter_bytes": 20, "gradient_bytes": 20,
                               "optimizer_state_bytes": 0, "activation_bytes": 0, "amp_weight_copy_bytes": 0,
                               "peak_temporary_bytes": 0}
    profile = profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)
    assert profile.dataset.global_batch_size == 32
    assert any("the batch dimension of the model's traced input" in note for note in profile.notes)


def test_optimizer_state_that_can_turn_subnormal_widens_the_band_upwards_only():
    from trainwise.profile.schema import OptimizerStateSubnormals

    base = make([0.001] * 30, batches_per_epoch=1000)
    plain = trainwise_estimate(base, 3)
    state = OptimizerStateSubnormals(optimizer="Adam", elements=40_000, subnormals=10_000, steps=30,
                                     step_normal_ns_per_element=2.5, step_subnormal_ns_per_element=9.5)
    assert state.worst_step_added_s == pytest.approx(30_000 * 7.0e-9)  # the values not yet subnormal only
    slowed = trainwise_estimate(base.model_copy(update={"optimizer_state_subnormals": state}), 3)
    assert slowed.total_s == pytest.approx(plain.total_s) and slowed.low_s == pytest.approx(plain.low_s)
    assert slowed.high_s == pytest.approx(plain.high_s + 3 * 1000 * 30_000 * 7.0e-9)
    assert "10,000 of them subnormal" in slowed.note and "7.0 ns more per such value" in slowed.note
    assert "21%" in slowed.note and "--flush-denormal" in slowed.note
    # profiled with denormals flushed: the job runs flushed too, nothing to add
    flushed = base.model_copy(update={"optimizer_state_subnormals": state,
                                      "environment": base.environment.model_copy(update={"flush_denormal": True})})
    assert trainwise_estimate(flushed, 3).high_s == pytest.approx(plain.high_s)
    # a worst case under 2 % of the step is inside its spread; a closure optimizer (not timed) adds nothing
    for quiet in (state.model_copy(update={"elements": 11_000}),
                  state.model_copy(update={"step_normal_ns_per_element": None, "step_subnormal_ns_per_element": None})):
        same = trainwise_estimate(base.model_copy(update={"optimizer_state_subnormals": quiet}), 3)
        assert same.high_s == pytest.approx(plain.high_s) and "subnormal" not in same.note
    assert OptimizerStateSubnormals.model_validate(state.model_dump()).worst_step_added_s == state.worst_step_added_s


def test_a_sample_whose_steps_kept_growing_says_so_first():
    """PyTorch's actor-critic example: its steps grow as the policy learns to balance longer (5 ms, then 73 ms a step
    within 20 s of sampling); the prediction, the sample's mean, says which way they went and how far."""
    from trainwise.plan.synthetic import synthetic_profile

    def unsettled(profile):  # as the stop rule records a sample that never became stable
        state = profile.steady_state.model_copy(update={"stabilised_after": None, "relative_drift": 1.8})
        return profile.model_copy(update={"steady_state": state})

    growing = unsettled(synthetic_profile(iterations=60, iteration_s=0.01, growth=4.0))
    note = predict_total(growing, 2).note
    assert note.startswith("the sampled steps never settled: they grew from ") and "takes longer" in note
    falling = unsettled(synthetic_profile(iterations=60, iteration_s=0.05, growth=-0.8))
    assert predict_total(falling, 2).note.startswith("the sampled steps never settled: they fell from ")
    steady = synthetic_profile(iterations=60, iteration_s=0.01, jitter=0.02)
    assert "never settled" not in predict_total(steady, 2).note
