"""Keras 3 integration, with the real Keras on the torch backend (KERAS_BACKEND=torch)."""

from __future__ import annotations

import os

import pytest

from integration_checks import assert_sampled_predicts_full

if "keras" not in __import__("sys").modules:
    os.environ["KERAS_BACKEND"] = "torch"
keras = pytest.importorskip("keras")

from trainwise.errors import TrainwiseError  # noqa: E402
from trainwise.integrations.keras import ProfilingCallback  # noqa: E402
from trainwise.predict.same_machine import predict_total  # noqa: E402
from trainwise.profile.runner import ProfileOptions  # noqa: E402
from trainwise.profile.schema import load_profile  # noqa: E402
from trainwise.workloads import keras_nn_twins  # noqa: E402

pytestmark = pytest.mark.skipif(keras.config.backend() != "torch", reason="these tests run Keras on the torch backend")

# budget_fraction=1: these tests pin the integration's counting, not the cost budget (test_profile.py).
QUICK = ProfileOptions(min_iterations=5, max_iterations=12, validation_batches=3, epoch2_iterations=4, budget_fraction=1.0)


def _fit(callback, *, epochs=3, train=1024, val=256, batch=32):
    keras_nn_twins.main(["--epochs", str(epochs), "--train-samples", str(train), "--val-samples", str(val),
                         "--batch-size", str(batch), "--threads", "1", "--verbose", "0"], callbacks=[callback])


def test_sampled_profile_stops_training_like_the_core_profiler(tmp_path):
    out = tmp_path / "keras.json"
    callback = ProfilingCallback(out, options=QUICK, workload="keras_nn_twins")
    _fit(callback)
    profile = callback.profile
    assert profile is not None and profile.mode == "sampled"
    assert profile.stop_reason == "sampled"
    assert load_profile(out) == profile  # written atomically, and reads back as the same Profile
    # epoch 1 was cut by the stopping rule, a few validation batches were timed, then epoch 2 began
    assert profile.epochs[0].truncated and profile.epochs[0].iterations == 12
    assert profile.epochs[1].iterations == QUICK.epoch2_iterations
    assert profile.validations[0].truncated and profile.validations[0].batches_timed == QUICK.validation_batches
    assert profile.validations[0].batches_total == 8
    assert profile.dataset.train_batches_per_epoch == 32 and profile.dataset.iterations_per_epoch == 32
    assert profile.dataset.global_batch_size == 32 and profile.dataset.n_train == 1024
    assert profile.dataset.val_batch_size == 32 and profile.dataset.n_val == 256
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 3  # fit(epochs=3)
    assert "Keras Model.fit(epochs=3)" in profile.script_epochs.source
    assert profile.model.parameters == 5 * 5 + 5 + 5 * 5 + 5 + 5 * 3 + 3 and profile.model.optimizer == "RMSprop"
    assert all(it.samples == 32 and it.batches == 1 for it in profile.iterations)
    # init runs from the process start to the first iteration, which starts at the first epoch
    assert profile.init.total_s == pytest.approx(profile.iterations[0].start_s)
    assert profile.init.total_s >= profile.epochs[0].start_s - 1e-9
    assert 0 < profile.steady_state.iteration.mean_s < 1.0
    prediction = predict_total(profile, 10)
    assert prediction.total_s > prediction.breakdown_s["init_s"] and prediction.breakdown_s["validation_s"] > 0


def test_full_mode_records_every_iteration_and_validation():
    callback = ProfilingCallback(mode="full")
    _fit(callback, epochs=2, train=640, val=96)
    profile = callback.profile
    assert profile.mode == "full" and profile.full_run is not None and profile.full_run.epochs_completed == 2
    assert len(profile.iterations) == 2 * 20 and [e.iterations for e in profile.epochs] == [20, 20]
    assert [v.batches_timed for v in profile.validations] == [3, 3] and not any(v.truncated for v in profile.validations)
    assert profile.iterations[-1].samples == 640 - 19 * 32 == 32
    assert profile.full_run.training_end_s >= profile.validations[-1].start_s + profile.validations[-1].wall_s - 1e-6


def test_sampled_profile_predicts_a_short_full_run():
    """Loose tolerance on purpose: the test shares a noisy 2-core machine with other jobs and runs for
    a few seconds only; benchmarks/integrations_prediction.py is the real accuracy check (median ≤ 5 %).
    Both runs are in this process, so init (pytest's own start-up) is left out of the comparison."""
    sampled = ProfilingCallback(options=ProfileOptions(min_iterations=20, max_iterations=60, validation_batches=4,
                                                       epoch2_iterations=5))
    _fit(sampled, epochs=3, train=4096, val=512)
    full = ProfilingCallback(mode="full")
    _fit(full, epochs=3, train=4096, val=512)
    assert_sampled_predicts_full(sampled.profile, full.profile, 3)


def test_bad_mode_is_a_clear_error():
    with pytest.raises(TrainwiseError, match="mode"):
        ProfilingCallback(mode="sampled", options=ProfileOptions(mode="full"))


def test_fit_from_an_initial_epoch_trains_the_epochs_left():
    import numpy as np

    callback = ProfilingCallback(options=QUICK)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.zeros((256, 5), "float32"), np.zeros((256, 3), "float32"), batch_size=32, epochs=10, initial_epoch=6,
              verbose=0, callbacks=[callback])
    assert callback.profile.script_epochs.epochs == 4
    assert callback.profile.script_epochs.source == "Keras Model.fit(epochs=10) from epoch 6"


def test_an_early_stopping_callback_fit_was_given_is_named_as_the_runs_other_end():
    import numpy as np

    callback = ProfilingCallback(options=QUICK)
    callback.early_stopping = [keras.callbacks.EarlyStopping(monitor="loss", patience=2)]  # what the patched fit tells it
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss="mse")
    model.fit(np.zeros((256, 5), "float32"), np.zeros((256, 3), "float32"), batch_size=32, epochs=3, verbose=0,
              callbacks=[callback, *callback.early_stopping])
    exits = callback.profile.epoch_loop_exits
    assert exits.where == "Keras Model.fit's callbacks" and exits.tests == ["EarlyStopping(monitor='loss', patience=2)"]
