"""Resuming a job inside the script's own loop: epochs before the checkpointed one end at once, the
checkpointed epoch's consumed batches are skipped, frameworks' step counters put back. A mixin of
trainwise.run._child.RunAgent.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from trainwise.profile import _child as recorder_module
from trainwise.run._agent_support import RESUME_MISMATCH_EXIT, RESUME_SKIP_FAILED_EXIT


class Resume:
    """Methods of trainwise.run._child.RunAgent; they use its state."""

    @staticmethod
    def _framework_loop() -> tuple[str, Any] | None:
        """("lightning", Trainer) or ("transformers", Trainer) when a framework's loop asked for the
        DataLoader being iterated (it is on the stack), else None."""
        frame = sys._getframe(2)
        while frame is not None:
            owner = frame.f_locals.get("self")
            module = type(owner).__module__ if owner is not None else ""
            if module.startswith(("lightning.pytorch", "pytorch_lightning")) and hasattr(getattr(owner, "trainer", None), "fit_loop"):
                return "lightning", owner.trainer
            if module.startswith("transformers.trainer") and hasattr(owner, "state") and hasattr(owner, "args"):
                return "transformers", owner
            frame = frame.f_back
        return None

    def _restore_framework_steps(self, batches: int, loop: tuple[str, Any] | None) -> None:
        """Lightning and the Hugging Face Trainer count optimizer steps themselves (max_steps, schedules
        keyed on global_step): after a resume their count starts again at 0, so a step-limited run would
        train its whole budget again on top. Set their counter to the optimizer steps done before the
        interruption."""
        if loop is None:
            return
        kind, trainer = loop
        try:
            if kind == "lightning":
                self._restore_lightning_steps(trainer, batches)
            else:
                steps = batches // max(1, int(getattr(trainer.args, "gradient_accumulation_steps", 1) or 1))
                trainer.state.global_step = steps
                self.notes.append(f"Hugging Face Trainer's global_step set to {steps} (the optimizer steps before the interruption)")
        except Exception as exc:  # noqa: BLE001 - a framework's internals moved: say so, keep training
            self.notes.append(f"could not restore {kind}'s step counter ({exc}): a step-limited run (max_steps) "
                              "trains its steps again after this resume")

    def _restore_lightning_steps(self, trainer: Any, batches: int) -> None:
        steps = batches // max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        loop = trainer.fit_loop.epoch_loop
        module = trainer.lightning_module
        if module is None or module.automatic_optimization:
            total = loop.automatic_optimization.optim_progress.optimizer.step.total
        else:
            total = loop.manual_optimization.optim_step_progress.total
        total.ready = total.completed = steps
        loop._batches_that_stepped = steps
        self.notes.append(f"Lightning's global_step set to {steps} (the optimizer steps before the interruption)")

    def _report_resume_failure(self, exc_type, exc, tb) -> None:
        """An uncaught error right after a pass the resume ended at once (an epoch finished before the
        checkpoint) is most likely the resume's doing: a script that takes something from that pass
        the loop scan could not see (next() on its iterator, a name bound in a `while` loop). Say so
        in one line; any other error is the script's, with its traceback."""
        if self._emptied_by_resume is None or os.getpid() != self.pid or issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            self._script_excepthook(exc_type, exc, tb)
            return
        import traceback

        from trainwise.run._loopscan import _is_trainwise_file

        frames = [f for f in traceback.extract_tb(tb) if not _is_trainwise_file(f.filename)]
        where = f" at {frames[-1].filename}, line {frames[-1].lineno}" if frames else ""
        directory = (self.checkpoint_config or {}).get("dir", "the checkpoint folder")
        error = exc_type.__name__ + (f": {exc}" if str(exc) else "")
        if issubclass(exc_type, NameError) and getattr(exc, "name", None):
            hint = f"it reads {exc.name!r}, which that pass's loop binds: give it a value before the loop"
        elif issubclass(exc_type, StopIteration):
            hint = "it takes batches from that pass with next(), and the pass has none: iterate it with a for loop"
        else:
            hint = "if the script uses something that pass makes, give it a value before the loop"
        print(f"trainwise: cannot resume from {self.resumed_from} in {directory}: the script failed with {error}{where} "
              f"right after trainwise ended its training pass {self._emptied_by_resume} at once (an epoch finished before "
              f"the checkpoint is not run again); {hint}, or start afresh with another --checkpoint-dir (or delete "
              f"{directory})", file=sys.stderr, flush=True)
        self._exit(RESUME_SKIP_FAILED_EXIT)

    def _cannot_resume(self, why: str) -> None:
        # Raised inside the user's training loop this would end in a traceback through their code;
        # the launcher turns this exit code into a one-line error.
        where = (self.checkpoint_config or {}).get("dir", "the checkpoint folder")
        print(f"trainwise: cannot resume from {self.resumed_from} in {where}: {why}, or start afresh with another "
              f"--checkpoint-dir (or delete {where})", file=sys.stderr, flush=True)
        os._exit(RESUME_MISMATCH_EXIT)

    # ---- data loader boundaries -------------------------------------------------------------
    def _is_training_pass(self, loader: Any = None) -> bool:
        """A pass begun with gradients on and the model in train mode; or a pass of a DataLoader that
        already served as training: scripts that call model.train() inside their step begin the next
        epoch's pass while the last validation left the model in eval mode."""
        if not self._torch.is_grad_enabled():
            return False
        if loader is not None and loader in self._training_loaders:
            return True
        recorder = recorder_module.current()
        return not bool(getattr(recorder, "eval_mode", False))

    def _fast_forward(self, iterator, batches: int) -> None:
        """Skip the batches consumed before the checkpoint: indices only when loading is in-process."""
        single_process = type(iterator).__name__ == "_SingleProcessDataLoaderIter"
        for _ in range(batches):
            if single_process and not getattr(iterator, "_dataset_kind", 0):  # map-style data set
                iterator._next_index()
            else:
                iterator._next_data()
            iterator._num_yielded += 1
        self.batches_in_epoch = batches

    def _resume_from(self, resume: dict[str, Any], loader: Any, loop: tuple[str, Any] | None) -> None:
        """Load the checkpoint's state at its batch of its epoch: the objects, then the RNG and the
        loader's generators as they were when it was written, and trainwise's counters."""
        from trainwise.run import _state

        self._restore_objects(resume)
        _state.apply_rng(resume["rng"])
        _state.apply_generator_states(loader, resume["generators"])
        self.global_batches = int(resume["global_batches"])
        self.batches_in_epoch = int(resume["batches_in_epoch"])
        self.last_checkpoint_batches = self.global_batches
        self._restore_framework_steps(self.global_batches, loop)
        self.resume_state = None
        self.notes.append(f"resumed from {self.resumed_from} at epoch {self.epoch_index}, batch {self.batches_in_epoch}")

    def _pass_must_bind_names(self, loop: tuple[str, Any] | None) -> bool:
        """Whether a pass the resume does not train must still run its loop body once (see _loopscan)."""
        if loop is not None:
            # A framework's loop calls the script's step as a function (nothing leaks out of it), and
            # would count the batch as one of its steps.
            return False
        from trainwise.run._loopscan import loop_leaves_unbound

        try:
            return loop_leaves_unbound(sys._getframe(1))
        except Exception:  # noqa: BLE001 - an unforeseen source layout: one batch more, never a NameError
            return True

    def _begin_replay(self, iterator: Any) -> None:
        iterator._trainwise_replaying = True
        self._replaying = True
        self._emptied_by_resume = None
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.paused = True  # not a training iteration of this run: not in its measurements

    def _end_replay(self, iterator: Any) -> None:
        if iterator is not None:
            iterator._trainwise_replaying = False
        if not self._replaying:
            return
        self._replaying = False
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.paused = False
