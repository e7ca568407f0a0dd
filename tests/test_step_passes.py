"""A step of several model passes (gradient accumulation without a DataLoader, a policy called per action, a
closure optimizer's evaluations): the profile counts them, the characterisation repeats them, the device model
and the planner's re-batching see them all."""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import pytest
import torch

from trainwise.agent.trace.characterisation import characterise_model
from trainwise.catalog import load_catalog
from trainwise.plan.scaling import rebatch
from trainwise.predict.device_model import predict_iteration
from trainwise.profile.schema import profile_from_raw
from trainwise.profile.step_passes import step_passes

sys.path.insert(0, str(Path(__file__).parent))
from test_same_machine import raw_profile  # noqa: E402


def mlp_step(batch: int = 8):
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    return characterise_model(model, torch.randn(batch, 32), optimizer_name="adam")


def no_loader_raw(backward_passes: int, tally: dict[str, int] | None, char) -> dict:
    raw = raw_profile([0.01] * 12)
    for it in raw["iterations"]:
        it.update(samples=0, batches=0, backward_passes=backward_passes)
    raw["loaders"] = {}
    raw["characterisation"] = char.model_dump()
    if tally is not None:
        raw["forward_passes"] = tally
    return raw


def read(raw):
    return profile_from_raw(raw, command=["python", "t.py"], process_wall_s=10.0, exit_code=0)


def test_with_passes_repeats_the_passes_but_not_the_optimizer_step():
    one = mlp_step()
    four = one.with_passes(4)
    assert four.passes_per_step == 4 and four.per_device_batch == 32 and four.traced_batch == 8
    for a, b in zip(one.records, four.records):
        assert b.count == (a.count if a.phase == "optimizer" else 4 * a.count)
    assert four.total_flops("optimizer") == one.total_flops("optimizer")
    assert four.total_flops("forward") == pytest.approx(4 * one.total_flops("forward"))
    assert four.activation_bytes == one.activation_bytes  # a backward after each pass frees its graph
    assert one.with_passes(3, forwards_per_backward=3).activation_bytes == 3 * one.activation_bytes
    assert four.with_passes(2) is four and one.with_passes(1) is one  # applied once


def test_the_device_model_runs_every_pass_and_one_optimizer_step():
    catalog = load_catalog()
    one = mlp_step(batch=256)
    for name in ("H100", "T4"):
        acc = catalog.accelerator(name)
        single, four = predict_iteration(one, acc), predict_iteration(one.with_passes(4), acc)
        optimizer_s = single.breakdown_s.get("optimizer", 0.0)
        assert optimizer_s > 0
        assert four.device_s == pytest.approx(4 * (single.device_s - optimizer_s) + optimizer_s, rel=0.02)
        assert four.samples_per_s == pytest.approx(4 * 256 / four.iteration_s)


def test_rebatching_a_step_of_several_passes_keeps_them():
    four = mlp_step(batch=8).with_passes(4)
    half = rebatch(four, 16)
    assert half.passes_per_step == 4 and half.per_device_batch == 16 and half.traced_batch == 4
    assert half.inputs == ["4x32:float32"]
    relu = next(r for r in half.records if r.op == "aten.relu.default")
    assert relu.shapes == [[4, 64]]  # each pass at its share of the new batch
    assert half.total_flops("forward") == pytest.approx(four.total_flops("forward") / 2)


def test_gradient_accumulation_without_a_dataloader_is_several_passes_and_their_samples():
    char = mlp_step()
    profile = read(no_loader_raw(4, {"4": 11}, char))
    assert profile.characterisation.passes_per_step == 4 and profile.characterisation.per_device_batch == 32
    assert profile.dataset.global_batch_size == 32
    assert any("4 passes of the traced batch 8" in note for note in profile.notes)
    assert any("samples per iteration: 32" in note and "4 training calls" in note for note in profile.notes)


def test_a_policy_called_per_action_keeps_every_calls_activations_until_its_backward():
    char = mlp_step(batch=1)
    profile = read(no_loader_raw(1, {"37": 6, "40": 5}, char))
    got = profile.characterisation
    assert got.passes_per_step == 37 and got.activation_bytes == 37 * char.activation_bytes
    assert profile.dataset.global_batch_size == 37


def test_one_call_per_step_and_older_profiles_keep_the_single_pass():
    char = mlp_step()
    once = read(no_loader_raw(1, {"1": 11}, char))
    assert once.characterisation == char and once.dataset.global_batch_size == 8
    assert any("called once per optimizer step" in note for note in once.notes)
    older = read(no_loader_raw(4, None, char))  # recorded before the calls were counted
    lbfgs = no_loader_raw(6, {"6": 11}, char)
    lbfgs["model"]["closure_evaluation_cap"] = 20
    closure = read(lbfgs)  # a closure's evaluations without a DataLoader: one batch, six passes
    assert closure.characterisation.passes_per_step == 6 and closure.dataset.global_batch_size == 8
    assert closure.characterisation.per_device_batch == closure.characterisation.traced_batch == 8
    assert older.characterisation == char
    assert any("several inputs per step does more" in note for note in older.notes)


def test_gradient_accumulation_over_a_dataloader_is_a_pass_per_batch():
    from types import SimpleNamespace

    from trainwise.predict.offerings import device_iterations_per_epoch, measured_samples_per_iteration

    char = mlp_step(batch=32)
    raw = raw_profile([0.04] * 12, batches_per_epoch=400)
    for it in raw["iterations"]:
        it.update(samples=128, batches=4, backward_passes=4)
    raw["characterisation"] = char.model_dump()
    profile = read(raw)
    got = profile.characterisation
    assert got.passes_per_step == 4 and got.traced_batch == 32 and got.per_device_batch == 128
    assert profile.dataset.global_batch_size == 128 and profile.dataset.iterations_per_epoch == 100
    # the characterisation is the whole optimizer step: 100 of them an epoch on one device, not 400 micro-steps
    assert device_iterations_per_epoch(profile, got, 1) == 100
    assert measured_samples_per_iteration(profile, got) == 128
    no_count = SimpleNamespace(dataset=SimpleNamespace(n_train=None, iterations_per_epoch=100, batches_per_iteration=4.0,
                                                       global_batch_size=0))
    assert measured_samples_per_iteration(no_count, got) == 128 and device_iterations_per_epoch(no_count, got, 1) == 100
    assert device_iterations_per_epoch(no_count, char, 1) == 400  # a single-pass trace of an older profile


def test_with_a_dataloader_only_a_closures_evaluations_add_passes():
    char = mlp_step(batch=32)  # the DataLoader's batch (raw_profile's 32 samples)
    gan = copy.deepcopy(raw_profile([0.01] * 12))
    for it in gan["iterations"]:
        it["backward_passes"] = 3  # a GAN: three backward passes over one batch are not three batches' work
    gan["characterisation"] = char.model_dump()
    assert step_passes(gan, read(gan).iterations, loader_batches=True) is None
    assert read(gan).characterisation == char
    lbfgs = copy.deepcopy(gan)
    lbfgs["model"]["closure_evaluation_cap"] = 20
    for it in lbfgs["iterations"]:
        it["backward_passes"] = 6
    profile = read(lbfgs)
    assert profile.characterisation.passes_per_step == 6 and profile.characterisation.traced_batch == 32
    assert profile.characterisation.per_device_batch == 32  # six evaluations of one batch: its samples once
    assert profile.dataset.global_batch_size == 32  # the DataLoader's samples: one batch, evaluated six times


def test_another_model_that_trains_adds_its_calls_and_its_own_optimizer_step():
    generator = mlp_step(batch=32)
    discriminator = characterise_model(torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Linear(16, 1)),
                                       torch.randn(32, 4), optimizer_name="adam", model_name="D")
    both = generator.with_other_model(discriminator, 3)
    assert both.model == "model+D" and both.per_device_batch == 32
    assert both.parameters == generator.parameters + discriminator.parameters
    assert both.gradient_bytes == generator.gradient_bytes + discriminator.gradient_bytes
    assert both.total_flops("forward") == pytest.approx(generator.total_flops("forward")
                                                        + 3 * discriminator.total_flops("forward"))
    assert both.total_flops("optimizer") == pytest.approx(generator.total_flops("optimizer")
                                                          + discriminator.total_flops("optimizer"))
    assert both.activation_bytes == generator.activation_bytes + 3 * discriminator.activation_bytes
    assert any("also trains: D" in note and "3x per optimizer step" in note for note in both.notes)


def test_a_profile_joins_the_models_its_job_traced_beside_the_largest():
    generator, discriminator = mlp_step(batch=32), mlp_step(batch=32).model_copy(update={"model": "D"})
    raw = raw_profile([0.01] * 12)
    raw["characterisation"] = generator.model_dump()
    raw["other_models"] = [{"fields": discriminator.model_dump(), "calls": 3}]
    got = read(raw).characterisation
    assert got == generator.with_other_model(discriminator, 3)
