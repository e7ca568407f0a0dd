"""DataLoader passes: training or validation, decided once the evidence is in; epochs from training
passes; validation timed per loader. A mixin of the recorder.
"""

from __future__ import annotations

from typing import Any

from trainwise.agent.trace.live import model_input_of_batch
from trainwise.profile._companion_passes import CompanionPasses
from trainwise.profile._validation_passes import MAX_VALIDATION_SEGMENTS, ValidationPasses
from trainwise.profile._watchers import _batch_length


class _LoaderState:
    """One pass over a DataLoader (one iterator, or one reset of a persistent-workers iterator)."""

    __slots__ = ("role", "key", "batches", "truncate", "record", "info", "grad_at_last_batch", "loader",
                 "loader_index", "undecided", "exhausted_s", "epoch", "reopen_epoch", "before", "segments", "settled")

    def __init__(self, role: str, key: int, info: dict[str, Any] | None = None) -> None:
        self.role = role
        self.key = key
        self.batches = 0
        self.truncate = False
        self.record: dict[str, Any] | None = None
        self.info: dict[str, Any] = info or {}
        self.grad_at_last_batch = False
        # The DataLoader iterated (weakly: the recorder must not keep it alive), None if unknown
        self.loader: Any = None
        # Which DataLoader, numbered in the order the script first iterated each (None if unknown)
        self.loader_index: int | None = None
        # A pass begun with gradients on and the model in train mode: training if an optimizer step
        # comes during it, validation (or a look at a batch) if it ends without one
        # (Recorder._settle_undecided); over the training loader too (a training-set evaluation loop
        # without eval() or no_grad)
        self.undecided = False
        self.exhausted_s: float | None = None
        # What the pass changed when it began as training, undone if it turns out not to be:
        # the epoch entry it opened, the open epoch it closed, and the recorder's iteration state before it
        self.epoch: dict[str, Any] | None = None
        self.reopen_epoch: dict[str, Any] | None = None
        self.before: dict[str, Any] | None = None
        # Validation segments this pass has given: the batches drawn before training resumed, each a validation
        # (an endless `cycle(val_loader)` drawn one batch every N steps is one pass the script never ends)
        self.segments = 0
        # What settling it as a look or a validation changed, while it may still be a companion (_companion_passes)
        self.settled: dict[str, Any] | None = None


class LoaderPasses(ValidationPasses, CompanionPasses):
    """Methods of trainwise.profile._child.Recorder; they use its state.

    A pass's role is guessed when it begins (_new_loader_state) and corrected at the one moment that
    shows it: an optimizer step on batches of a pass taken for validation makes it training
    (_reclassify_as_training); an undecided pass is training at its first step (_confirm_training)
    and validation when it ends without one (_settle_undecided)."""

    # ---- data loaders -----------------------------------------------------------------------
    def _new_loader_state(self, iterator) -> _LoaderState:
        torch = self._torch
        # A first guess: a pass begun under no_grad or in eval mode is validation. Scripts that call
        # model.train() inside their step start the next epoch's pass while the model is still in
        # eval mode from the last validation; an optimizer step on its batches corrects the guess
        # (_reclassify_as_training). Any other pass is training until it ends without an optimizer step
        # (undecided): a validation loop without eval() or no_grad looks the same until then, over a
        # loader training never iterates and over the training loader alike (_settle_undecided).
        validation = (not torch.is_grad_enabled()) or self.eval_mode
        self._unpark_model_hook()  # a pass begins: the model's calls may be validation again
        self._loader_counter += 1
        state = _LoaderState("val" if validation else "train", self._loader_counter)
        state.loader = getattr(iterator, "_trainwise_loader", None)
        loader = state.loader() if state.loader is not None else None
        if loader is not None:
            state.loader_index = self._loader_index(loader)
        if self._open_val_state is not None:
            # another pass begins while a validation pass has batches out: the script left it (makemore's
            # evaluate() breaks after max_batches, then evaluates the test set)
            self._end_val_segment(self.now())
        state.undecided = not validation
        try:
            iterator._trainwise_state = state
        except AttributeError:  # pragma: no cover - exotic iterator subclasses with __slots__
            pass
        info: dict[str, Any] = {}
        try:
            info["batches_per_pass"] = len(iterator)
        except Exception:
            info["batches_per_pass"] = None
        try:
            info["dataset_size"] = len(iterator._dataset)
        except Exception:
            info["dataset_size"] = None
        info["drop_last"] = bool(getattr(iterator, "_drop_last", False))
        info["num_workers"] = int(getattr(iterator, "_num_workers", 0))
        state.info = info
        if self._companion_end is not None and self._companion_restarted(state):
            return state
        if state.role == "train" or not self._is_training_loader(state):
            # (an evaluation of the training set does not make the training loader the validation set)
            self.loaders.setdefault(state.role, info)
        if state.role == "train":
            if state.undecided:
                self._undecided = state
                state.before = {"iter_start": self.iter_start, "iter_data_wait": self.iter_data_wait,
                                "iter_samples": self.iter_samples, "iter_batches": self.iter_batches,
                                "current_train_state": self.current_train_state,
                                "first_iteration_marked": "first_iteration_start" in self.marks}
                if self.epochs and self.epochs[-1]["end_s"] is None:
                    state.reopen_epoch = self.epochs[-1]
            self.current_train_state = state
            self._start_epoch(info)
            state.epoch = self.epochs[-1]
        elif self.sampled and self.epoch1_truncated and not self.validation_done and self.validation_batches <= 0:
            self._finish("sampled_without_validation")
        return state

    def _is_training_loader(self, state: _LoaderState) -> bool:
        loader = state.loader() if state.loader is not None else None
        return loader is not None and loader in self._training_loaders

    def _start_epoch(self, info: dict[str, Any]) -> None:
        if self.epochs and self.epochs[-1]["end_s"] is None:
            # The previous epoch's iterator was abandoned (e.g. `break`): close it here.
            self.epochs[-1]["end_s"] = self.now()
        self.epochs.append({"index": len(self.epochs), "start_s": self.now(), "end_s": None,
                            "iterations": 0, "truncated": False,
                            "batches_per_epoch": info.get("batches_per_pass")})
        self.iter_start = None  # an epoch starts with its first batch request

    def _on_batch(self, iterator, state: _LoaderState, start: float, end: float, batch) -> None:
        start_s = start - self.perf0 + self.offset_s
        end_s = end - self.perf0 + self.offset_s
        state.batches += 1
        # _batch_length's usual case, (inputs, targets), inline: this runs on every batch the job requests
        first = batch[0] if type(batch) in (tuple, list) and batch else None
        shape = getattr(first, "shape", None) if first is not None else None
        samples = (int(shape[0]) if len(shape) else 1) if shape is not None else _batch_length(batch)
        if state.role == "train":
            if self._restart_pending is not None:
                self._restart_settled(state)
            if self._open_val_state is not None:
                self._end_val_segment(start_s)
            if self.iter_start is None:
                self.iter_start = start_s
                self.mark("first_iteration_start")
            if self._first_batch_shapes is None and self.characterise:
                self._first_batch_shapes = model_input_of_batch(batch)
            self.iter_data_wait += end_s - start_s
            self.iter_samples += samples or 0
            self.iter_batches += 1
            if not state.undecided:
                return
            # Also timed as a validation pass would be, in case no optimizer step comes during it.
            if state.record is None:
                state.record = self._validation_record(start_s, state)
            self._record_validation_batch(state.record, start_s, end_s, samples)
            if not (self.sampled and self.epoch1_truncated
                    and state.batches > 2 * max(1, self._most_batches_per_iteration)):
                return
            # Sampling has stopped and this pass has fetched more batches than two whole iterations
            # without an optimizer step: it is the validation pass, to be cut short like one (should a
            # step still come while it runs, _reclassify_as_training makes it training again).
            self._settle_undecided()
            record = state.record
            if not self.validation_done and self.validation_batches <= 0:
                self._finish("sampled_without_validation")
        else:
            if state.role == "companion" or (state.settled is not None and self._became_companion(state)):
                self._on_companion_batch(start_s, end_s)
                return
            record = state.record
            if record is None:
                record = state.record = self._validation_record(start_s, state)
                kept = self._val_segments_kept
                if not state.segments:
                    self.validations.append(record)
                elif kept.get(state.loader_index, 0) < MAX_VALIDATION_SEGMENTS:
                    record["continues"] = True  # a later segment of one iterator: its first batch starts nothing
                    self.validations.append(record)
                    kept[state.loader_index] = kept.get(state.loader_index, 0) + 1
                self._dataloader_validation = True
            self._record_validation_batch(record, start_s, end_s, samples)
            self._open_val_state = state
        if self.sampled and not self.validation_done and len(record["batch_starts_s"]) >= self.validation_batches \
                and self.epoch1_truncated and self._validation_length_known(record, start_s):
            # Enough validation batches timed: the next request ends this validation pass.
            state.truncate = True

    def _on_exhausted(self, iterator, state: _LoaderState, start: float) -> None:
        end_s = start - self.perf0 + self.offset_s
        if state.role == "companion":
            self._on_companion_exhausted(state, end_s)
            return
        if state.undecided and self.iterations:
            # Training has begun, and no optimizer step came during this pass: validation. (Before the
            # first step the pass may be one the script collects its batches with, to train on them
            # after it: settled below as a training pass is, then by the next step or the next pass.)
            state.exhausted_s = end_s
            self._settle_undecided()
            if state.record is not None:  # an empty pass is nothing: no validation was timed
                self._after_validation(another_may_follow=True)
            return
        if state.undecided:
            state.exhausted_s = end_s
        if state.role == "train":
            if self.epochs and self.epochs[-1]["end_s"] is None:
                self.epochs[-1]["end_s"] = end_s
            self._stream_pass_ended(state)
            self.iter_start = None
            self._reset_iteration()
            self._unpark_model_hook()
        elif state.record is not None:
            state.record["end_s"] = end_s
            if state.record["batches_total"] is None:  # a stream's pass: its length is what it gave
                state.record["batches_total"] = state.batches
            self._exclude_from_iteration(state.record)
            self._after_validation(another_may_follow=True)

    def _on_truncated(self, iterator, state: _LoaderState) -> None:
        now = self.now()
        if state.role == "train":
            if self.epochs and self.epochs[-1]["end_s"] is None:
                self.epochs[-1]["end_s"] = now
                self.epochs[-1]["truncated"] = True
            self.iter_start = None
            self._reset_iteration()
            self._unpark_model_hook()
        elif state.record is not None:
            state.record["end_s"] = now
            state.record["truncated"] = True
            self._exclude_from_iteration(state.record)
            self._after_validation(another_may_follow=True)

    def _confirm_training(self, state: _LoaderState) -> None:
        """An optimizer step came during `state`: it is the training pass it was taken for."""
        if state is self._undecided:
            self._undecided = None
        state.undecided = False
        self._training_resumed()
        state.record = None
        state.before = None
        state.reopen_epoch = None
        loader = state.loader() if state.loader is not None else None
        if loader is not None:
            self._training_loaders.add(loader)

    def _settle_undecided(self) -> None:
        """The undecided pass ended without an optimizer step (or, sampling over, has fetched more
        batches than two iterations take): it was validation, or, abandoned before training began, a look
        at a batch (`next(iter(loader))`) that is neither. What it recorded as training is undone: its
        epoch entry goes, the epoch it closed is open again (training goes on in it after a mid-epoch
        pass), and the interrupted iteration gets back its start, data wait and batches, less the pass."""
        state = self._undecided
        if state is None:
            return
        began = self._settling_began()
        self._undecided = None
        state.undecided = False
        self.epochs = [e for e in self.epochs if e is not state.epoch]
        if state.reopen_epoch is not None and self.epochs and self.epochs[-1] is state.reopen_epoch:
            state.reopen_epoch["end_s"] = None
        before = state.before or {}
        self.iter_start = before.get("iter_start")
        self.iter_data_wait = before.get("iter_data_wait", 0.0)
        self.iter_samples = before.get("iter_samples", 0)
        self.iter_batches = before.get("iter_batches", 0)
        self.current_train_state = before.get("current_train_state")
        if not before.get("first_iteration_marked", True):
            self.marks.pop("first_iteration_start", None)
        if self.loaders.get("train") is state.info:
            del self.loaders["train"]
        state.role = "val"
        state.epoch = state.reopen_epoch = state.before = None
        record, state.record = state.record, None
        if record is None or (state.exhausted_s is None and not self.iterations):
            note = ("a DataLoader pass abandoned before the first optimizer step (a look at a batch, "
                    "next(iter(loader))) is neither an epoch nor validation")
        else:
            state.record = record
            if not self._is_training_loader(state):
                self.loaders.setdefault("val", state.info)
            record["epoch"] = max(0, len(self.epochs) - 1)
            record["batches_total"] = state.info.get("batches_per_pass")
            self.validations.append(record)
            self._dataloader_validation = True
            if state.exhausted_s is not None:
                record["end_s"] = state.exhausted_s
                self._exclude_from_iteration(record)
            if self._is_training_loader(state):
                note = ("a pass over the training DataLoader with gradients on and the model in train mode ended "
                        "without an optimizer step: timed as validation, not counted as an epoch (an evaluation of "
                        "the training set without model.eval() or torch.no_grad())")
            else:
                note = ("a DataLoader pass with gradients on and the model in train mode ended without an optimizer "
                        "step, over a loader training does not iterate: timed as validation (a validation loop "
                        "without model.eval() or torch.no_grad())")
        if note not in self.notes:
            self.notes.append(note)
            began["note"] = note
        state.settled = began

    def _reclassify_as_training(self, state: _LoaderState) -> None:
        """An optimizer step consumed batches of a pass first taken for validation: it is the
        training pass of a new epoch, begun while the model was still in eval mode."""
        record = state.record
        state.role = "train"
        loader = state.loader() if state.loader is not None else None
        if loader is not None:
            self._training_loaders.add(loader)
        state.truncate = False
        state.record = None
        if record is not None:
            self.validations = [r for r in self.validations if r is not record]
        if self.loaders.get("val") is state.info:
            del self.loaders["val"]
        self.loaders.setdefault("train", state.info)
        self.current_train_state = state
        self._start_epoch(state.info)
        if record is not None and record["batch_starts_s"]:
            # The pass's first batch request started the epoch and its first iteration.
            self.epochs[-1]["start_s"] = record["start_s"]
            self.iter_start = record["start_s"]
            self.mark("first_iteration_start")
            self.iter_data_wait = sum(record["data_wait_s"])
            self.iter_samples = record["samples"]
            self.iter_batches = len(record["batch_starts_s"])
        self._training_resumed()
        note = ("a training DataLoader pass began with the model in eval mode (model.train() is called inside the "
                "step); it was recognised as training at its first optimizer step")
        if note not in self.notes:
            self.notes.append(note)
