"""The per-step entry points of the agent's torch patch (a batch request, a backward pass) and the --full
snapshot schedule: synthetic owners and numbers, no torch patched in the test process."""

from __future__ import annotations

import types
from types import SimpleNamespace

import pytest
from hypothesis import given, strategies as st

from trainwise.agent.torch_patch import TorchPatch
from trainwise.profile._no_loader import MIN_SNAPSHOT_INTERVAL_S, SNAPSHOT_COST_RATIO, next_snapshot_due_s


def patch_with_fake_torch(calls: list) -> tuple[TorchPatch, SimpleNamespace]:
    def backward(tensors, *args, **kwargs):
        calls.append(("torch", tensors))
        return tensors

    autograd = SimpleNamespace(backward=backward)
    fake = SimpleNamespace(autograd=autograd, utils=SimpleNamespace(data=SimpleNamespace(
        dataloader=SimpleNamespace(_BaseDataLoaderIter=type("Iter", (), {})))))
    patch = TorchPatch()
    patch.torch = fake
    return patch, fake


def wrapper(name: str, calls: list):
    def make(proceed):
        def entry(tensors, *args, **kwargs):
            calls.append(name)
            return proceed(tensors, *args, **kwargs)
        return entry
    return make


def test_a_wrapper_is_itself_what_torch_calls():
    calls: list = []
    patch, fake = patch_with_fake_torch(calls)
    patch.wrap("backward", wrapper("recorder", calls))
    original = fake.autograd.backward
    patch._set_original("backward", original)
    patch._install_entry("backward")
    entry = fake.autograd.backward
    assert isinstance(entry, types.FunctionType) and entry.__name__ == "entry"  # no lambda, no partial before it
    assert entry("loss") == "loss" and calls == ["recorder", ("torch", "loss")]


def test_no_interceptor_leaves_the_original_and_a_plain_one_goes_through_a_function():
    calls: list = []
    patch, fake = patch_with_fake_torch(calls)
    original = fake.autograd.backward
    patch._set_original("backward", original)
    patch._install_entry("backward")
    assert fake.autograd.backward is original
    patch.intercept("backward", lambda proceed, tensors: calls.append("run") or proceed(tensors))
    assert fake.autograd.backward is not original  # added after the patch: the entry follows while it is ours
    assert fake.autograd.backward("loss") == "loss" and calls == ["run", ("torch", "loss")]


def test_the_last_registered_runs_outermost_and_a_script_wrapper_keeps_its_place():
    calls: list = []
    patch, fake = patch_with_fake_torch(calls)
    patch.wrap("backward", wrapper("recorder", calls))
    patch._set_original("backward", fake.autograd.backward)
    patch._install_entry("backward")
    patch.wrap("backward", wrapper("run", calls))
    fake.autograd.backward("loss")
    assert calls == ["run", "recorder", ("torch", "loss")]
    ours = fake.autograd.backward
    fake.autograd.backward = lambda *args: ours(*args)  # the script wraps torch's backward over ours
    theirs = fake.autograd.backward
    patch.wrap("backward", wrapper("late", calls))
    assert fake.autograd.backward is theirs


def test_only_the_per_step_points_take_wrappers():
    with pytest.raises(ValueError, match="no wrapping point 'save'"):
        TorchPatch().wrap("save", lambda proceed: proceed)


def test_a_cheap_snapshot_waits_for_its_share_and_never_less_than_the_minimum():
    # 10 ms after 100 s recorded: the next (~1.06 times as large) must wait R * 0.01 / (1 - 0.05) s
    due = next_snapshot_due_s(at_s=100.0, cost_s=0.01, recorded_s=100.0)
    assert due == pytest.approx(100.0 + SNAPSHOT_COST_RATIO * 0.01 / (1 - SNAPSHOT_COST_RATIO * 0.01 / 100.0))
    assert next_snapshot_due_s(at_s=7.0, cost_s=0.0, recorded_s=6.0) == 7.0 + MIN_SNAPSHOT_INTERVAL_S


def test_a_dear_snapshot_is_due_when_the_recorded_time_has_doubled():
    # 75 ms after 30 s of 0.47-ms steps: 500 times it is more than the time recorded
    assert next_snapshot_due_s(at_s=32.0, cost_s=0.075, recorded_s=30.0) == 32.0 + 30.0


@given(cost_s=st.floats(0.0, 10.0), recorded_s=st.floats(0.1, 1e6), at_s=st.floats(0.0, 1e6))
def test_the_next_snapshot_costs_its_share_or_halves_what_a_kill_loses(cost_s, recorded_s, at_s):
    interval = next_snapshot_due_s(at_s, cost_s, recorded_s) - at_s
    assert interval >= MIN_SNAPSHOT_INTERVAL_S - 1e-9
    next_cost_s = cost_s * (recorded_s + interval) / recorded_s  # a steady step rate: cost grows with the record
    within_share = next_cost_s <= interval / SNAPSHOT_COST_RATIO * (1 + 1e-9)
    assert within_share or interval <= max(MIN_SNAPSHOT_INTERVAL_S, recorded_s) * (1 + 1e-9)
