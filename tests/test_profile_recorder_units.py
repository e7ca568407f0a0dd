"""The profile recorder's handling of agent events, fed synthetic streams in-process (milliseconds each):
epochs and validation of a loop without a DataLoader, a metric under no_grad inside a training pass, the
sampled profile waiting for the end of epoch 1."""

from __future__ import annotations

import pytest

from trainwise.agent.events import IterationEnd, ModelForward
from trainwise.profile import _child


@pytest.fixture
def recorder(tmp_path):
    return _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full"})


def train_steps(recorder, start_s: float, count: int) -> float:
    """`count` training iterations, one time unit each (a forward of the model, then its end)."""
    t = start_s
    for _ in range(count):
        recorder.bus.emit(ModelForward(t, grad_enabled=True, training=True))
        t += 1
        recorder.iterations.append({"index": len(recorder.iterations), "epoch": len(recorder.epochs) - 1,
                                    "start_s": t - 1, "end_s": t, "data_wait_s": 0.0, "samples": 0, "batches": 0})
        recorder.epochs[-1]["iterations"] += 1
        recorder.bus.emit(IterationEnd(t, len(recorder.iterations) - 1, "autograd"))
    return t


def evaluate(recorder, start_s: float, calls: int) -> float:
    for k in range(calls):
        recorder.bus.emit(ModelForward(start_s + k, grad_enabled=False, training=False))
    return start_s + calls


def test_without_a_dataloader_validation_regions_delimit_epochs(recorder):
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    t = train_steps(recorder, 0.0, 3)
    t = evaluate(recorder, t, 2)
    assert recorder.epochs[0]["end_s"] == 3.0 and recorder.epochs[0]["batches_per_epoch"] == 3
    assert recorder.loaders["train"]["batches_per_pass"] == 3
    t = train_steps(recorder, t, 3)
    assert [e["start_s"] for e in recorder.epochs] == [0.0, 5.0]
    validation = recorder.validations[0]
    assert (validation["start_s"], validation["end_s"], validation["batches_total"]) == (3.0, 5.0, 2)
    assert recorder.loaders["val"]["batches_per_pass"] == 2
    evaluate(recorder, t, 2)
    assert len(recorder.validations) == 2 and recorder.epochs[1]["end_s"] == t


def test_a_metric_under_no_grad_inside_a_training_dataloader_pass_is_not_validation(recorder):
    recorder.current_train_state = object()  # a training DataLoader pass is running
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": 40}]
    t = train_steps(recorder, 0.0, 2)
    t = evaluate(recorder, t, 1)  # accuracy of the training batch, under no_grad
    t = train_steps(recorder, t, 2)
    assert recorder.validations == [] and recorder.epochs[0]["end_s"] is None
    recorder.epochs[0]["end_s"] = t  # the pass is exhausted: what follows is validation over tensors
    t = evaluate(recorder, t, 4)
    train_steps(recorder, t, 1)
    assert [v["batches_total"] for v in recorder.validations] == [4]


def test_once_a_dataloader_validation_was_seen_model_calls_add_nothing(recorder):
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    recorder._dataloader_validation = True
    t = train_steps(recorder, 0.0, 2)
    evaluate(recorder, t, 3)
    assert recorder.validations == [] and recorder.epochs[0]["end_s"] is None


def test_a_sampled_profile_without_a_dataloader_waits_for_the_end_of_epoch_1(tmp_path, monkeypatch):
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "epoch2_iterations": 2})
    finished = []
    monkeypatch.setattr(recorder, "_finish", lambda reason: finished.append(reason))
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    recorder._waiting_for_epoch_end = True  # the stop rule found the steady state mid-epoch
    t = train_steps(recorder, 0.0, 4)
    t = evaluate(recorder, t, 3)
    assert recorder.epoch1_truncated and not recorder._waiting_for_epoch_end and recorder._truncated_epoch == 0
    train_steps(recorder, t, 1)
    assert recorder.validation_done and finished == []  # epoch 2's start still to be timed
    recorder.epochs_hint = 1  # had the run been one epoch long, validation would end the profile
    recorder.validation_done = False
    evaluate(recorder, t + 1, 1)
    train_steps(recorder, t + 2, 1)
    assert finished == ["validation_timed"]
