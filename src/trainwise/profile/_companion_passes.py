"""Training DataLoaders drawn in lockstep: `for (xs, ys), (xt,) in zip(source_loader, target_loader)` (domain
adaptation, semi-supervised learning, a labelled and an unlabelled set) asks each loader for one batch a step. A mixin
of the recorder (trainwise.profile._passes decides the passes' roles).

The first step cannot tell such a pair from a look at a batch (`next(iter(loader))`) followed by the training loop:
when the second pass begins, the first, one batch in and no optimizer step since, is settled as a look (or, later in
the run, as validation). The second step can: the first pass draws its next batch with gradients on and the model in
train mode, one optimizer step after the second pass began. It then becomes the training pass's companion: what the
settling recorded is undone, its batches' data wait is counted in the iteration (not its batches: the epoch is counted
in the training pass's), and the epoch ends with the shorter pass, as zip does.
"""

from __future__ import annotations

from typing import Any

COMPANION_NOTE = ("a second training DataLoader drawn in lockstep with the first (`zip(loader_a, loader_b)`: a batch of "
                  "each per optimizer step): an epoch ends with the shorter pass, and its batches' data wait is in the "
                  "iteration")
RESTART_NOTE = ("the lockstep loader is begun again whenever it runs out (`except StopIteration: it = iter(loader)`): an "
                "epoch is the training pass's, or the loop's own count")


class CompanionPasses:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    _companion_end: dict[str, Any] | None = None  # the epoch a companion's exhaustion ended, until the next pass
    _primary_pass: tuple[dict, int | None] | None = None  # the training pass's loader info and its own length
    _restart_pending: dict[str, Any] | None = None  # a companion begun again, until the next training batch

    def _settling_began(self) -> dict[str, Any]:
        """What a settling may change, taken before it (_settle_undecided), so that it can be undone."""
        return {"val": self.loaders.get("val"),
                "dataloader_validation": self._dataloader_validation, "iterations": len(self.iterations)}

    def _became_companion(self, state: Any) -> bool:
        """`state`, settled when another training pass began, draws its second batch (counted) one optimizer step
        later, with gradients on and the model in train mode, while that pass's epoch is open: a companion (made so
        here)."""
        settled, train = state.settled, self.current_train_state
        if (settled is None or state.batches != 2 or train is None or train is state or train.role != "train"
                or train.undecided or len(self.iterations) != settled["iterations"] + 1 or not self.epochs
                or self.epochs[-1]["end_s"] is not None or self.eval_mode or not self._torch.is_grad_enabled()):
            return False
        loader, train_loader = state.loader, train.loader
        if loader is None or train_loader is None or loader() is train_loader():
            return False
        # undo the settling: its validation record, the validation loader it named, its note
        if state.record is not None:
            self.validations = [record for record in self.validations if record is not state.record]
        if settled["val"] is None and self.loaders.get("val") is state.info:
            del self.loaders["val"]
        self._dataloader_validation = settled["dataloader_validation"]
        if settled.get("note") in self.notes:
            self.notes.remove(settled["note"])
        state.role, state.record, state.settled = "companion", None, None
        self._training_loaders.add(loader())
        ours, theirs = state.info.get("batches_per_pass"), train.info.get("batches_per_pass")
        self._primary_pass = (train.info, theirs)
        if ours is not None and (theirs is None or ours < theirs):
            train.info["batches_per_pass"] = ours  # the loaders' "train" entry: the pass the loop runs
            self.epochs[-1]["batches_per_epoch"] = ours
        if COMPANION_NOTE not in self.notes:
            self.notes.append(COMPANION_NOTE)
        return True

    def _on_companion_batch(self, start_s: float, end_s: float) -> None:
        """A companion's batch: part of the iteration (its first request may come before the training pass's)."""
        if self.iter_start is None:
            self.iter_start = start_s
        self.iter_data_wait += end_s - start_s

    def _on_companion_exhausted(self, state: Any, end_s: float) -> None:
        """The companion's pass ran out first: zip stops, and the epoch ends here, unless the script begins the
        companion's loader again at once (_companion_restarted)."""
        if self.epochs and self.epochs[-1]["end_s"] is None:
            epoch = self.epochs[-1]
            known = epoch.get("batches_per_epoch")
            self._companion_end = {"epoch": epoch, "batches_per_epoch": known, "loader": state.loader,
                                   "passes": self._loader_counter, "iterations": len(self.iterations),
                                   "iteration": (self.iter_start, self.iter_data_wait, self.iter_samples,
                                                 self.iter_batches)}
            epoch["end_s"] = end_s
            epoch["batches_per_epoch"] = state.batches if known is None else min(known, state.batches)
        self.iter_start = None
        self._reset_iteration()
        self._unpark_model_hook()

    def _companion_restarted(self, state: Any) -> bool:
        """A new training pass over the companion's loader right after its pass ran out (no other pass, no optimizer
        step between) is the companion again: FixMatch's `except StopIteration: labelled_iter = iter(labelled_loader)`,
        or zip's next epoch. The next training batch says which (_restart_settled). True when it was."""
        end, self._companion_end = self._companion_end, None
        loader = state.loader() if state.loader is not None else None
        if (end is None or loader is None or end["loader"] is None or loader is not end["loader"]()
                or state.role != "train" or self._loader_counter != end["passes"] + 1
                or len(self.iterations) != end["iterations"] or not self.epochs or self.epochs[-1] is not end["epoch"]):
            return False
        self.iter_start, self.iter_data_wait, self.iter_samples, self.iter_batches = end["iteration"]
        state.role, state.undecided = "companion", False
        self._restart_pending = {"end": end, "primary": self.current_train_state}
        return True

    def _restart_settled(self, state: Any) -> None:
        """The training batch after a companion began again: from the training pass that was going on, the script
        restarted the companion and trains on, so the epoch its running out ended goes on, as long as the training
        pass's own length; from a new pass (zip's next epoch), that epoch ended there."""
        pending, self._restart_pending = self._restart_pending, None
        if state is not pending["primary"]:
            return
        end = pending["end"]
        info, own = self._primary_pass if self._primary_pass is not None else ({}, end["batches_per_epoch"])
        info["batches_per_pass"] = own
        end["epoch"].update(end_s=None, batches_per_epoch=own)
        if RESTART_NOTE not in self.notes:
            self.notes.append(RESTART_NOTE)
