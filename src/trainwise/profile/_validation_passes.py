"""Validation over DataLoaders as the recorder times it: which data a pass reads, a pass's record, its batches, where
it ends (its loader exhausted or cut short, or training resuming or another pass beginning while it has batches out),
and what it takes out of the iteration it interrupted. A mixin of the recorder (trainwise.profile._passes decides which passes are validation).
"""

from __future__ import annotations

import weakref
from typing import Any

# Later segments of an iterator kept in the profile, per loader (the interval and the cost of one come from the first
# few; more are still taken out of the iterations they interrupt): a loop that draws a validation batch every step
# gives one an iteration
MAX_VALIDATION_SEGMENTS = 50


class ValidationPasses:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _loader_index(self, loader: Any) -> int | None:
        """The number of the data `loader` reads: DataLoaders over one dataset object with one batch size share it (a
        script that builds its evaluation loader anew each time, as makemore's evaluate() does, reads the same data
        each time); numbered in the order the script first iterated each, never reused."""
        try:
            index = self._loader_indices.get(loader)
        except TypeError:  # pragma: no cover - a loader that cannot be weakly referenced
            return None
        if index is not None:
            return index
        dataset, key, ref = vars(loader).get("dataset"), None, None
        if dataset is not None:
            try:
                ref = weakref.ref(dataset)  # weakly: the recorder must not keep a dataset alive
            except TypeError:
                ref = None
            if ref is not None:
                key = (id(dataset), vars(loader).get("batch_size"))
                known = self._dataset_loader_indices.get(key)
                if known is not None and known[0]() is dataset:
                    index = known[1]
        if index is None:
            index = self._next_loader_index
            self._next_loader_index += 1
            if key is not None:
                self._dataset_loader_indices[key] = (ref, index)
        self._loader_indices[loader] = index
        return index

    def _validation_record(self, start_s: float, state: Any) -> dict[str, Any]:
        return {"epoch": max(0, len(self.epochs) - 1), "start_s": start_s, "end_s": None,
                "batch_starts_s": [], "data_wait_s": [], "samples": 0, "truncated": False,
                "batches_total": state.info.get("batches_per_pass"), "loader": state.loader_index}

    def _validation_length_known(self, record: dict[str, Any], now_s: float) -> bool:
        """A validation pass may be cut short once its length is known: a stream's pass (an IterableDataset without a
        length) runs to its end to count it, unless it outlasts --max-epoch-wait (then the batches timed stand for it,
        said in a note)."""
        if record["batches_total"] is not None:
            return True
        if now_s - record["start_s"] < self.max_epoch_wait_s:
            return False
        self.notes.append(f"a validation pass over a stream (no length) did not end within --max-epoch-wait "
                          f"{self.max_epoch_wait_s:g} s: its {len(record['batch_starts_s']):,} batches timed are "
                          "taken as the whole pass")
        record["batches_total"] = len(record["batch_starts_s"])
        return True

    @staticmethod
    def _record_validation_batch(record: dict[str, Any], start_s: float, end_s: float, samples: int | None) -> None:
        record["batch_starts_s"].append(start_s)
        record["data_wait_s"].append(end_s - start_s)
        record["samples"] += samples or 0

    def _end_val_segment(self, at_s: float) -> None:
        """Training resumed (a training batch requested) or another pass began while a validation pass had batches
        out and no end: the script drew those batches and went on (one validation batch every N steps from an endless
        `cycle(val_loader)`, or a loop that breaks after a few). What it drew is one validation, ended here, its
        length the batches drawn; the next batch of the same iterator begins another."""
        state, self._open_val_state = self._open_val_state, None
        record = state.record
        if state.role != "val" or record is None or record["end_s"] is not None:
            return
        record["end_s"] = at_s
        record["batches_total"] = len(record["batch_starts_s"])
        self._exclude_from_iteration(record)
        state.record = None
        state.segments += 1

    def _exclude_from_iteration(self, record: dict[str, Any]) -> None:
        """A validation pass run between two optimizer steps (validation every N steps) is timed as
        validation; the training iteration it interrupted must not count it as well."""
        if self.iter_start is not None and record["start_s"] >= self.iter_start and record["end_s"] is not None:
            self.iter_start += record["end_s"] - record["start_s"]

    def _after_validation(self, *, another_may_follow: bool = False) -> None:
        """A validation pass ended. After the truncated epoch, each pass is timed for
        `validation_batches` batches until training resumes (_training_resumed): a script may evaluate
        several loaders (the training set, then the validation set). A framework's callback reports
        its one validation loop per epoch (`another_may_follow` False)."""
        if not self.sampled or not self.epoch1_truncated or self.validation_done:
            return
        planned = self.planned_epochs
        last_epoch = planned is not None and self._truncated_epoch >= planned - 1
        if self.epoch2_iterations <= 0 or last_epoch:
            # Nothing more to measure (or no epoch 2 to come): the script's end-of-training code must
            # not run. (A second loader's pass after this one is then not seen.)
            self.validation_done = True
            self._finish("validation_timed")
        elif not another_may_follow:
            self.validation_done = True

    def _training_resumed(self) -> None:
        """An optimizer step on a new pass: after the truncated epoch, its validation passes are over."""
        if self.sampled and self.epoch1_truncated:
            self.validation_done = True
