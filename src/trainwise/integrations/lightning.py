"""PyTorch Lightning integration: a callback that records the trainwise Profile of `Trainer.fit`.

    import lightning.pytorch as pl
    from trainwise.integrations.lightning import ProfilingCallback

    profiler = ProfilingCallback(output="profile.json")            # sampled: stops fit once stable
    pl.Trainer(max_epochs=10, callbacks=[profiler]).fit(model, train_loader, val_loader)

Under `trainwise profile -- python lightning_script.py` nothing has to change: the profiler adds this
callback to every `Trainer` the script builds (and the core hooks stand down so nothing is counted twice).

What it records, from Lightning's hooks: an iteration is one optimizer step, from the end of the
previous one to the `on_train_batch_end` of the batch whose step ran (`on_before_optimizer_step`), so
with `accumulate_grad_batches=k` an iteration holds k batches and their samples; the data wait is the
time between batches (Lightning fetches the next batch there); validation passes (at epoch end or
mid-epoch with `val_check_interval`) are timed per batch, the sanity check is part of start-up. Sampled
mode ends epoch 1 early with `trainer.should_stop` (reset at the end of the epoch so epoch 2 starts),
ends the timed validation pass after a few batches and stops after a few epoch-2 iterations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainwise.optional import require
require("lightning.pytorch", "trainwise.integrations.lightning")
import lightning.pytorch as pl

from trainwise.agent.sink import IntegrationSink, batch_length
from trainwise.integrations._common import dtype_name
from trainwise.profile.framework_sink import Mode, open_sink
from trainwise.profile.runner import ProfileOptions

__all__ = ["ProfilingCallback"]


def _length(value: Any) -> int | None:
    try:
        return int(len(value))
    except Exception:  # noqa: BLE001 - iterable datasets have no length
        return None


def _finite(value: Any) -> int | None:
    if isinstance(value, (list, tuple)):
        values = [_finite(v) for v in value]
        return None if not values or any(v is None for v in values) else sum(values)  # type: ignore[misc]
    try:
        return int(value) if value != float("inf") else None
    except (TypeError, ValueError, OverflowError):
        return None


def _first_loader(loaders: Any) -> Any:
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    if isinstance(loaders, dict):
        return next(iter(loaders.values()), None)
    return loaders


class ProfilingCallback(pl.Callback):
    """Record a trainwise Profile from a Lightning `Trainer.fit` run.

    Args:
        output: where to write the Profile JSON when training ends (stand-alone use).
        mode: "sampled" (default: stop once the iteration time is stable, after timing a few
            validation batches and epoch-2 iterations) or "full" (record the whole run).
        options: the profiler's options (`trainwise.profile.runner.ProfileOptions`).
        workload: a name kept in the profile.
    """

    def __init__(self, output: str | Path | None = None, *, mode: Mode | None = None,
                 options: ProfileOptions | None = None, workload: str | None = None) -> None:
        super().__init__()
        self.session: IntegrationSink = open_sink("lightning", mode=mode, output=output, options=options,
                                                  workload=workload)
        self._stepped = False
        self._stopped_epoch = False
        self._validating = False

    @property
    def profile(self):
        """The Profile, once training ended (stand-alone use); None before or under `trainwise profile`."""
        return self.session.profile

    # ---- training -------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loader = _first_loader(trainer.train_dataloader)
        self.session.train_begin(
            batches_per_epoch=_finite(trainer.num_training_batches),
            dataset_size=_length(getattr(loader, "dataset", None)),
            num_workers=int(getattr(loader, "num_workers", 0) or 0),
            drop_last=bool(getattr(loader, "drop_last", False)))
        parameters = list(pl_module.parameters())
        trainable = [p for p in parameters if p.requires_grad]
        optimizers = trainer.optimizers
        self.session.describe_model(
            parameters=sum(p.numel() for p in parameters), trainable_parameters=sum(p.numel() for p in trainable),
            gradient_bytes=sum(p.numel() * p.element_size() for p in trainable),
            device=str(parameters[0].device) if parameters else "cpu",
            parameter_dtypes=[dtype_name(p.dtype) for p in parameters],
            optimizer=type(optimizers[0]).__name__ if optimizers else None)
        if optimizers:
            self.session.watch_optimizer(optimizers[0])
        self.session.note(f"lightning {pl.__version__}, accumulate_grad_batches={trainer.accumulate_grad_batches}")
        self._note_epochs(trainer)
        self.session.stops_early("Lightning Trainer's callbacks", [
            f"EarlyStopping(monitor={cb.monitor!r}, patience={cb.patience})"
            for cb in trainer.callbacks if type(cb).__name__ == "EarlyStopping"])

    def _note_epochs(self, trainer: pl.Trainer) -> None:
        """The run's epoch count when its loop is bound by max_epochs; else that it is not, which also drops
        an argparse `--epochs` the loop does not run (a step or time limit, or no limit at all: 1000 is what
        Lightning sets then, told from an explicit 1000 only by the script's own --epochs 1000)."""
        sink = self.session
        max_epochs, max_steps = trainer.max_epochs, trainer.max_steps
        durations = [getattr(callback, "_duration", None) for callback in trainer.callbacks
                     if type(callback).__name__ == "Timer"]
        if any(duration is not None for duration in durations):
            duration = next(duration for duration in durations if duration is not None)
            return sink.not_epoch_bound(f"Lightning's time limit (Trainer(max_time=...) or a Timer: {duration:g} s)")
        if max_epochs in (None, -1) or not isinstance(max_epochs, int) or max_epochs < 1:
            if max_steps not in (None, -1):
                return sink.not_epoch_bound(f"Lightning's Trainer(max_steps={max_steps})", steps=max_steps)
            return sink.not_epoch_bound("Lightning's Trainer(max_epochs=-1): no epoch limit")
        if max_steps not in (None, -1):
            batches = _finite(trainer.num_training_batches)
            accumulate = max(1, int(trainer.accumulate_grad_batches or 1))
            # optimizer steps per epoch (an epoch's last, partial accumulation steps too)
            if batches is None or max_steps < max_epochs * -(-batches // accumulate):
                return sink.not_epoch_bound(f"Lightning's Trainer(max_steps={max_steps}), before max_epochs={max_epochs}",
                                            steps=max_steps)
        script = sink.script_epochs
        if max_epochs == 1000 and not (script and script["epochs"] == 1000):
            return sink.not_epoch_bound("no limit given to Lightning's Trainer (its default max_epochs=1000)")
        sink.epochs(max_epochs, f"Lightning Trainer(max_epochs={max_epochs})")

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.session.epoch_begin()
        self._stepped = False

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        self.session.batch_begin()

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._stepped = True

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        stepped, self._stepped = self._stepped, False
        if self.session.batch_end(batch_length(batch), ends_iteration=stepped):
            self._stopped_epoch = True
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.session.epoch_end()
        if self._stopped_epoch and not self.session.finished:
            trainer.should_stop = False  # the sampling rule ended this epoch, not training
        self._stopped_epoch = False

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.session.train_end()

    # ---- validation -----------------------------------------------------------------------------
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.training and trainer.state.fn != "fit":
            return  # the sanity check is start-up; a stand-alone validate() is not training
        self._validating = True
        loader = _first_loader(trainer.val_dataloaders)
        batches = _finite(trainer.num_val_batches)
        self.session.set_validation_shape(batches_per_pass=batches,
                                          dataset_size=_length(getattr(loader, "dataset", None)))
        self.session.validation_begin(batches)

    def on_validation_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                                  batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._validating:
            self.session.validation_batch_begin()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                                batch_idx: int, dataloader_idx: int = 0) -> None:
        if self._validating and self.session.validation_batch_end(batch_length(batch)):
            # Lightning's evaluation loop ends a pass on StopIteration (what an exhausted loader
            # raises): enough validation batches are timed.
            raise StopIteration

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._validating:
            return
        self._validating = False
        self.session.validation_end()
        if self.session.finished:
            trainer.should_stop = True

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict) -> None:
        self.session.checkpoint_save(None)  # Lightning does not tell the callback where it writes
