"""Which optimizer steps end an iteration: the primary's (the first to step), a secondary's once it steps alone
(training one part of a model after another), never a GAN's second optimizer between the primary's steps. A
mixin of the recorder.
"""

from __future__ import annotations

import time
import weakref

from trainwise.agent.events import OptimizerStep


class OptimizerSteps:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _boundary(self, optimizer) -> None:
        """`optimizer` stepped (as its event would say)."""
        self.on_optimizer_step(OptimizerStep(self.now(), id(optimizer), optimizer))

    def on_optimizer_step(self, event: OptimizerStep) -> None:
        """An optimizer stepped: the iteration ends (the primary's step; a secondary's that took over)."""
        if event.in_scaler_step or self.explicit_steps or self.paused:  # GradScaler.step's own event follows
            return
        optimizer = event.optimizer
        if self.primary_optimizer_id is None:
            self.primary_optimizer_id = id(optimizer)
            self._optimizer_ref = weakref.ref(optimizer)
            self._stop_capturing()
            self._describe_model(optimizer)
            self._count_other_models()
        elif id(optimizer) != self.primary_optimizer_id:
            # A secondary optimizer's step is part of the primary's iteration; its parameters (a GAN's
            # generator) are still the model's: gradients to all-reduce, state to checkpoint.
            if id(optimizer) not in self._described_optimizers:
                self._describe_model(optimizer)
            if not self._secondary_stepped_alone(optimizer):
                return
        elif self._alone_id is not None:
            self._alone_id, self._alone_steps = None, 0
        last = self._last_batch_state
        # Only a pass still running, whose last batch was fetched with gradients enabled: a finished
        # (or abandoned, no_grad) validation pass before a DataLoader-less training step stays validation.
        if (last is not None and last.role == "val" and self.framework is None and last.grad_at_last_batch
                and last.record is not None and last.record["end_s"] is None):
            self._reclassify_as_training(last)
        self.end_iteration()

    def _secondary_stepped_alone(self, optimizer) -> bool:
        """A secondary optimizer that steps twice with no step of the primary between takes over: its steps end
        the iterations from now on (a layer-by-layer fit such as Hinton's Forward-Forward trains layer 0 with
        one optimizer, then layer 1 with another). A GAN's optimizers alternate and never hand over."""
        if self._alone_id != id(optimizer):
            self._alone_id, self._alone_steps = id(optimizer), 0
            self._alone_first_end_s = time.perf_counter() - self.perf0 + self.offset_s
        self._alone_steps += 1
        if self._alone_steps < 2:
            return False
        self._alone_id, self._alone_steps = None, 0
        self.primary_optimizer_id = id(optimizer)
        self.notes.append(f"a second optimizer ({type(optimizer).__name__}) stepped alone from iteration "
                          f"{len(self.iterations) + 1}: its steps end the iterations from there (training "
                          f"one part of the model after another)")
        self.end_iteration(at_s=self._alone_first_end_s)  # its first step alone ended an iteration too
        return True
