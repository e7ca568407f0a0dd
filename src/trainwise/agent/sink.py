"""The public sink a framework integration reports its training loop to.

A framework that runs the loop itself (Keras `Model.fit`, Lightning's `Trainer`, the Hugging Face `Trainer`)
hides the DataLoader and the optimizer step trainwise's torch patches read. Its callback reports the loop's
events to an `IntegrationSink` instead, and nothing else: trainwise's own integrations
(trainwise.integrations) use only these calls, and a new integration needs no more. The profile's sink
(`trainwise.profile.framework_sink.open_sink(framework)`) turns them into the same record the patches
produce; under `trainwise profile` it attaches to the process's recorder (whose torch patches then stand
down, so that nothing is counted twice).

The calls, in the order a loop makes them::

    sink.train_begin(batches_per_epoch=N, dataset_size=S)   # once, when fit starts
    sink.describe_model(...); sink.watch_optimizer(opt)       # optional
    sink.epochs(E, "Model.fit(epochs=E)")                     # the loop's own epoch count, when it has one
    for each epoch:
        sink.epoch_begin()
        for each batch:
            sink.batch_begin()
            if sink.batch_end(samples):                       # an iteration ended; True: end this epoch now
                stop the epoch (the profile sampled enough; sink.finished: stop training)
        sink.validation_begin(batches_total)                 # then per batch:
        sink.validation_batch_begin(); sink.validation_batch_end(samples)   # True: end validation now
        sink.validation_end()
        sink.epoch_end()
        sink.checkpoint_save(path)                           # the framework saved a checkpoint
    sink.train_end()

Standard library only: this module is imported inside the user's process.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class IntegrationSink(Protocol):
    """What a framework integration calls. Times are taken by the sink when it is called."""

    @property
    def sampled(self) -> bool:
        """A sampled profile (it ends epoch 1 early) rather than a record of the whole run."""

    @property
    def finished(self) -> bool:
        """The profile is complete: the framework should stop training now."""

    @property
    def profile(self) -> Any:
        """The Profile, once training ended (a stand-alone sink); None before, or under `trainwise profile`."""

    @property
    def script_epochs(self) -> dict[str, Any] | None:
        """The epoch count read so far ({"epochs", "source"}), e.g. from the script's argparse arguments."""

    def train_begin(self, *, batches_per_epoch: int | None, dataset_size: int | None, num_workers: int = 0,
                    drop_last: bool = False) -> None:
        """Training starts: its batches per epoch and data set size, when known."""

    def set_validation_shape(self, *, batches_per_pass: int | None, dataset_size: int | None) -> None:
        """The validation pass's size, when known."""

    def fill_dataset_size(self, role: str, samples_per_batch: float) -> None:
        """When the `role` ("train" or "val") data set's size is unknown: batches per pass x this."""

    def describe_model(self, *, parameters: int, trainable_parameters: int, gradient_bytes: int, device: str,
                       parameter_dtypes: list[str], optimizer: str | None) -> None:
        """The model the loop trains."""

    def watch_optimizer(self, optimizer: Any) -> None:
        """The loop's torch optimizer (wrappers are unwrapped), whose state the profile inspects."""

    def note(self, text: str) -> None:
        """A sentence kept in the profile (the framework's version, its settings)."""

    def epochs(self, epochs: Any, source: str) -> None:
        """The loop's own epoch count and where it was read (it wins over an argparse reading)."""

    def not_epoch_bound(self, reason: str, *, steps: int | None = None) -> None:
        """The loop ends on something other than an epoch count (a step or time limit); `steps`: its
        optimizer-step budget, when a step limit ends it."""

    def epoch_begin(self) -> None:
        """An epoch starts (its first batch is requested next)."""

    def batch_begin(self, batches: int = 1) -> None:
        """A training batch (or `batches` of them) starts; its data wait ends here."""

    def batch_end(self, samples: int | None, *, ends_iteration: bool = True, batches: int | None = None) -> bool:
        """A training batch is done: with `ends_iteration`, an iteration (an optimizer step) ended, having
        consumed at least `batches` batches. True when the framework should end this epoch now."""

    def epoch_end(self) -> None:
        """The epoch's training ended."""

    def validation_begin(self, batches_total: int | None = None, *, can_end_early: bool = True,
                         data: Any = None) -> None:
        """A validation pass starts (`can_end_early` False when the framework cannot cut it short; `data`: what it
        iterates, when an epoch may evaluate several loaders)."""

    def validation_batch_begin(self) -> None:
        """A validation batch starts."""

    def validation_batch_end(self, samples: int | None) -> bool:
        """A validation batch is done; True when the framework should end this validation pass now."""

    def validation_batch_end_without_begin(self, samples: int | None) -> bool:
        """For frameworks that report only the end of each validation batch: it begins the next one too."""

    def validation_end(self) -> None:
        """The validation pass ended."""

    def checkpoint_save(self, path: str | None) -> None:
        """The framework saved a checkpoint (to `path`, when it says)."""

    def train_end(self) -> Any:
        """Training ended: the stand-alone sink returns the Profile it built, an attached one None."""


def batch_length(batch: Any) -> int | None:
    """Samples in a batch: leading dimension of its first tensor (tuple, list, dict or tensor)."""
    if type(batch) in (tuple, list) and batch:  # the usual (inputs, targets): read on every batch request
        shape = getattr(batch[0], "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 1
    for _ in range(3):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 1
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return None
    return None
