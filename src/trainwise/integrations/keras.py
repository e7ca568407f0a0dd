"""Keras 3 integration: a callback that records the trainwise Profile of a `model.fit` run.

    import keras
    from trainwise.integrations.keras import ProfilingCallback

    profiler = ProfilingCallback(output="profile.json")          # sampled: stops fit once stable
    model.fit(x, y, batch_size=32, epochs=50, validation_data=(xv, yv), callbacks=[profiler])
    profiler.profile.steady_state.iteration.mean_s

Backend-neutral: only Keras' callback hooks and `keras.Model` attributes are used (no torch, JAX or
TensorFlow import), so the same profile comes out on every backend. Iterations are
`on_train_batch_begin` → `on_train_batch_end` (one `train_function` call: `steps_per_execution`
batches), with the data wait before each batch; validation is `on_test_begin` → `on_test_end` within
`fit`; the epoch count and steps come from `fit`'s parameters. The batch size is read from the batch
the train function receives (torch and JAX backends); the TensorFlow backend hands it an iterator,
so give `batch_size=` there. Sampled mode ends epoch 1 early with `model.stop_training` (reset at the
end of the epoch so epoch 2 starts), cuts the timed validation pass short with
`model.stop_evaluating`, and stops training after a few epoch-2 iterations.

Under `trainwise profile -- python train.py` the callback drives the profiler that command armed
(the options of the command apply), so Keras scripts on the torch backend get the same profile as
plain PyTorch scripts.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainwise.optional import require
require("keras", "trainwise.integrations.keras")
import keras

from trainwise.agent.sink import IntegrationSink
from trainwise.integrations._common import dtype_bytes, dtype_name
from trainwise.profile.framework_sink import Mode, open_sink
from trainwise.profile.runner import ProfileOptions

__all__ = ["ProfilingCallback"]


def _samples_in(data: Any, depth: int = 6) -> int | None:
    """Leading dimension of the first array in a (nested) batch; None for iterators (TF backend)."""
    for _ in range(depth):
        shape = getattr(data, "shape", None)
        if shape is not None:
            try:
                return int(shape[0]) if len(shape) else 1
            except (TypeError, ValueError):  # symbolic (unknown) leading dimension
                return None
        if isinstance(data, (list, tuple)) and data:
            data = data[0]
        elif isinstance(data, dict) and data:
            data = next(iter(data.values()))
        else:
            return None
    return None


def _device_of(variable: Any) -> str:
    value = getattr(variable, "value", variable)
    device = getattr(value, "device", None)
    if callable(device):  # JAX arrays: .device() / .devices()
        try:
            device = device()
        except TypeError:
            device = None
    if device is None:
        return "cpu"
    text = str(device)
    lowered = text.lower()
    if text.startswith(("cpu", "cuda", "mps", "xla")):
        return text  # torch backend: torch's own device names, as the core profiler records
    if "tpu" in lowered:
        return "tpu"
    if "gpu" in lowered or "cuda" in lowered:
        return "cuda"
    return "cpu"


class ProfilingCallback(keras.callbacks.Callback):
    """Record a trainwise Profile from `model.fit`'s callback hooks.

    Args:
        output: where to write the Profile JSON when training ends (stand-alone use).
        mode: "sampled" (default: stop training once the iteration time is stable, after timing a few
            validation batches and epoch-2 iterations) or "full" (record the whole run).
        options: the profiler's options (`trainwise.profile.runner.ProfileOptions`), as
            `trainwise profile` takes them.
        batch_size: samples per batch, when the backend does not show batches to Python (TensorFlow).
        workload: a name kept in the profile.
    """

    early_stopping: list = []  # fit's EarlyStopping callbacks, told by `trainwise profile`'s patch of fit

    def __init__(self, output: str | Path | None = None, *, mode: Mode | None = None,
                 options: ProfileOptions | None = None, batch_size: int | None = None,
                 workload: str | None = None) -> None:
        super().__init__()
        self.session: IntegrationSink = open_sink("keras", mode=mode, output=output, options=options, workload=workload)
        self.batch_size = batch_size
        self._batch_samples: int | None = None
        self._val_batch_samples: int | None = None
        self._begin_step = 0
        self._original_train_function: Any = None
        self._original_test_function: Any = None
        self._in_fit = False
        self._validating = False
        self._stopped_epoch = False

    @property
    def profile(self):
        """The Profile, once training ended (stand-alone use); None before or under `trainwise profile`."""
        return self.session.profile

    # ---- what a batch holds ---------------------------------------------------------------------
    def _wrap(self, name: str, store: str) -> Any:
        original = getattr(self.model, name, None)
        if original is None:
            return None
        callback = self

        def counted(data, *args, **kwargs):
            samples = _samples_in(data[0] if isinstance(data, list) and len(data) == 1 else data)
            if samples is not None and isinstance(data, list) and len(data) > 1:
                samples *= len(data)  # steps_per_execution batches in one call
            setattr(callback, store, samples)
            return original(data, *args, **kwargs)

        setattr(self.model, name, counted)
        return original

    def _samples(self, counted: int | None, batches: int) -> int:
        if counted is not None:
            return counted
        return (self.batch_size or 0) * batches

    # ---- training -------------------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._in_fit = True
        model = self.model
        steps = (self.params or {}).get("steps")
        self._original_train_function = self._wrap("train_function", "_batch_samples")
        session = self.session
        session.train_begin(batches_per_epoch=steps, dataset_size=None)
        session.stops_early("Keras Model.fit's callbacks", [f"EarlyStopping(monitor={cb.monitor!r}, patience={cb.patience})"
                                                            for cb in self.early_stopping])
        weights = list(model.weights)
        trainable = list(model.trainable_weights)
        trainable_count = sum(math.prod(w.shape) for w in trainable)
        optimizer = getattr(model, "optimizer", None)
        session.describe_model(
            parameters=sum(math.prod(w.shape) for w in weights), trainable_parameters=trainable_count,
            gradient_bytes=sum(math.prod(w.shape) * dtype_bytes(w.dtype) for w in trainable),
            device=_device_of(weights[0]) if weights else "cpu",
            parameter_dtypes=[dtype_name(w.dtype) for w in weights],
            optimizer=type(optimizer).__name__ if optimizer is not None else None)
        session.note(f"keras {keras.__version__}, backend {keras.config.backend()}")
        self._epochs_noted = False

    def on_epoch_begin(self, epoch, logs=None):
        if not getattr(self, "_epochs_noted", True):
            # At fit's first epoch, which is its initial_epoch (or where BackupAndRestore resumes): fit trains
            # epochs - initial_epoch epochs, which the callback's params do not tell.
            self._epochs_noted = True
            epochs = (self.params or {}).get("epochs")
            if isinstance(epochs, int) and epoch:
                self.session.epochs(epochs - int(epoch), f"Keras Model.fit(epochs={epochs}) from epoch {int(epoch)}")
            else:
                self.session.epochs(epochs, f"Keras Model.fit(epochs={epochs})")
        self.session.epoch_begin()

    def on_train_batch_begin(self, batch, logs=None):
        self._begin_step = int(batch)
        self.session.batch_begin()

    def on_train_batch_end(self, batch, logs=None):
        batches = max(1, int(batch) - self._begin_step + 1)
        samples = self._samples(self._batch_samples, batches)
        session = self.session
        if samples:
            session.fill_dataset_size("train", samples / batches)
        if session.batch_end(samples, batches=batches):
            self._stopped_epoch = True
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        session = self.session
        session.epoch_end()
        if self._stopped_epoch and not session.finished:
            # The sampling rule ended this epoch, not training: let the next epoch start.
            self.model.stop_training = False
        self._stopped_epoch = False

    def on_train_end(self, logs=None):
        self._in_fit = False
        if self._original_train_function is not None:
            self.model.train_function = self._original_train_function
            self._original_train_function = None
        self.session.train_end()

    # ---- validation inside fit ------------------------------------------------------------------
    def on_test_begin(self, logs=None):
        if not self._in_fit:
            return  # a stand-alone evaluate() is not part of the training run
        self._validating = True
        self._original_test_function = self._wrap("test_function", "_val_batch_samples")
        iterator = getattr(self.model, "_eval_epoch_iterator", None)
        batches = getattr(iterator, "num_batches", None)
        adapter = getattr(iterator, "data_adapter", None)
        size = getattr(adapter, "_num_samples", None)
        self.session.set_validation_shape(batches_per_pass=batches, dataset_size=size)
        self.session.validation_begin(batches)

    def on_test_batch_begin(self, batch, logs=None):
        if self._validating:
            self.session.validation_batch_begin()

    def on_test_batch_end(self, batch, logs=None):
        if not self._validating:
            return
        samples = self._samples(self._val_batch_samples, 1)
        session = self.session
        if samples:
            session.fill_dataset_size("val", samples)
        if session.validation_batch_end(samples):
            self.model.stop_evaluating = True

    def on_test_end(self, logs=None):
        if not self._validating:
            return
        self._validating = False
        if self._original_test_function is not None:
            self.model.test_function = self._original_test_function
            self._original_test_function = None
        self.session.validation_end()
        if self.session.finished:
            self.model.stop_training = True
