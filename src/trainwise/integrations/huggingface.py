"""Hugging Face Trainer integration: a `TrainerCallback` that records the trainwise Profile of
`Trainer.train`.

    from transformers import Trainer, TrainingArguments
    from trainwise.integrations.huggingface import ProfilingCallback

    profiler = ProfilingCallback(output="profile.json")            # sampled: stops once stable
    Trainer(model=model, args=args, train_dataset=train, eval_dataset=val, callbacks=[profiler]).train()

Under `trainwise profile -- python train.py` nothing has to change: the profiler adds this callback to
every `Trainer` the script builds (and the core hooks stand down so nothing is counted twice).

What it records, from the Trainer's events: an iteration is one optimizer step (`on_step_begin` →
`on_step_end`); with `gradient_accumulation_steps=k` it holds k micro-batches (`on_substep_end` marks
each one but the last) and k × `train_batch_size` samples; its data wait is the time before
`on_step_begin`, where the Trainer fetches the step's batches. An evaluation pass runs from the event
that asked for it (`on_step_end` / `on_epoch_end` with `control.should_evaluate`) to `on_evaluate`,
batch by batch through `on_prediction_step`. The Trainer's evaluation loop cannot be cut short from a
callback, so in sampled mode the validation pass after epoch 1 is timed in full. Sampled mode ends epoch
1 early with `control.should_epoch_stop` and stops with `control.should_training_stop` after a few
epoch-2 iterations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainwise.optional import require
require("transformers", "trainwise.integrations.huggingface")
import transformers
from transformers import TrainerCallback

from trainwise.agent.sink import IntegrationSink
from trainwise.integrations._common import dtype_name
from trainwise.profile.framework_sink import Mode, open_sink
from trainwise.profile.runner import ProfileOptions
from trainwise.profile.script_epochs import whole_epochs

__all__ = ["ProfilingCallback"]


def _length(value: Any) -> int | None:
    try:
        return int(len(value))
    except Exception:  # noqa: BLE001 - iterable datasets have no length
        return None


class ProfilingCallback(TrainerCallback):
    """Record a trainwise Profile from a Hugging Face `Trainer.train` run.

    Args:
        output: where to write the Profile JSON when training ends (stand-alone use).
        mode: "sampled" (default) or "full".
        options: the profiler's options (`trainwise.profile.runner.ProfileOptions`).
        workload: a name kept in the profile.
    """

    def __init__(self, output: str | Path | None = None, *, mode: Mode | None = None,
                 options: ProfileOptions | None = None, workload: str | None = None) -> None:
        self.session: IntegrationSink = open_sink("huggingface", mode=mode, output=output, options=options,
                                                  workload=workload)
        self._train_batch = 0
        self._eval_batch = 0
        self._eval_batches_seen = 0
        self._validating = False
        self._training = False

    @property
    def profile(self):
        """The Profile, once training ended (stand-alone use); None before or under `trainwise profile`."""
        return self.session.profile

    # ---- training -------------------------------------------------------------------------------
    def on_train_begin(self, args, state, control, **kwargs):
        self._training = True
        loader = kwargs.get("train_dataloader")
        self._train_batch = int(args.train_batch_size)
        self._eval_batch = int(args.eval_batch_size)
        self.session.train_begin(batches_per_epoch=_length(loader),
                                 dataset_size=_length(getattr(loader, "dataset", None)),
                                 num_workers=int(args.dataloader_num_workers),
                                 drop_last=bool(args.dataloader_drop_last))
        model = kwargs.get("model")
        optimizer = kwargs.get("optimizer")
        parameters = list(model.parameters()) if model is not None else []
        trainable = [p for p in parameters if p.requires_grad]
        self.session.describe_model(
            parameters=sum(p.numel() for p in parameters), trainable_parameters=sum(p.numel() for p in trainable),
            gradient_bytes=sum(p.numel() * p.element_size() for p in trainable),
            device=str(parameters[0].device) if parameters else "cpu",
            parameter_dtypes=[dtype_name(p.dtype) for p in parameters],
            optimizer=type(getattr(optimizer, "optimizer", optimizer)).__name__ if optimizer is not None else None)
        if optimizer is not None:
            self.session.watch_optimizer(optimizer)
        self.session.note(
            f"transformers {transformers.__version__}, gradient_accumulation_steps={args.gradient_accumulation_steps}")
        sink = self.session
        # the Trainer lists its exportable callbacks in its state (EarlyStoppingCallback among them)
        stopping = (getattr(state, "stateful_callbacks", None) or {}).get("EarlyStoppingCallback")
        saved = stopping if isinstance(stopping, list) else [stopping] if stopping else []
        sink.stops_early("Hugging Face Trainer's callbacks", [
            f"EarlyStoppingCallback(early_stopping_patience={(one.get('args') or {}).get('early_stopping_patience')}, "
            f"metric_for_best_model={args.metric_for_best_model!r})" for one in saved])
        if args.max_steps and args.max_steps > 0:  # max_steps replaces num_train_epochs: not an epoch count
            sink.not_epoch_bound(f"Hugging Face TrainingArguments(max_steps={args.max_steps})", steps=args.max_steps)
        elif whole_epochs(args.num_train_epochs) is None:
            sink.not_epoch_bound(f"Hugging Face TrainingArguments(num_train_epochs={args.num_train_epochs:g}), "
                                 "a fraction of an epoch")
        else:
            sink.epochs(args.num_train_epochs,
                        f"Hugging Face TrainingArguments(num_train_epochs={args.num_train_epochs:g})")

    def on_epoch_begin(self, args, state, control, **kwargs):
        self.session.epoch_begin()

    def on_step_begin(self, args, state, control, **kwargs):
        self.session.batch_begin()

    def on_substep_end(self, args, state, control, **kwargs):
        # A micro-batch of a gradient-accumulation step is done; the next one starts at once.
        self.session.batch_end(self._train_batch, ends_iteration=False)
        self.session.batch_begin()

    def on_step_end(self, args, state, control, **kwargs):
        session = self.session
        if session.batch_end(self._train_batch):
            if session.finished:
                control.should_training_stop = True
            else:
                control.should_epoch_stop = True  # the sampling rule ends this epoch, not training
        if control.should_evaluate:
            self._begin_evaluation()

    def on_epoch_end(self, args, state, control, **kwargs):
        self.session.epoch_end()
        if control.should_evaluate:
            self._begin_evaluation()

    def on_train_end(self, args, state, control, **kwargs):
        self._training = False
        self.session.train_end()

    # ---- evaluation inside train ----------------------------------------------------------------
    def _begin_evaluation(self) -> None:
        if self._validating:
            return
        self._validating = True
        self._eval_batches_seen = 0
        self.session.validation_begin(can_end_early=False)

    def on_prediction_step(self, args, state, control, **kwargs):
        if not self._validating:
            return
        loader = kwargs.get("eval_dataloader")
        batches = _length(loader)
        size = _length(getattr(loader, "dataset", None))
        if self._eval_batches_seen == 0:
            self.session.set_validation_shape(batches_per_pass=batches, dataset_size=size)
        samples = self._eval_batch
        if batches is not None and size is not None and self._eval_batches_seen == batches - 1:
            samples = size - self._eval_batch * (batches - 1)  # the last, partial batch
        self._eval_batches_seen += 1
        self.session.validation_batch_end_without_begin(samples)

    def on_save(self, args, state, control, **kwargs):
        # The Trainer writes its checkpoint to output_dir/checkpoint-<global step>.
        self.session.checkpoint_save(f"{args.output_dir}/checkpoint-{state.global_step}")

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        if not self._validating:
            return
        self._validating = False
        self.session.validation_end()
        if self.session.finished:
            control.should_training_stop = True
