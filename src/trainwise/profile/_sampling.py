"""The sampled profile's course: when epoch 1 stops (trainwise.agent.stop_rule), what is still to be
timed after it, and the iteration boundary's bookkeeping. A mixin of the recorder.
"""

from __future__ import annotations

from trainwise.agent import cpu_steal, stop_rule


# A loop without a DataLoader that shows no epoch boundary within this share of its step budget is taken as one epoch
# (the share a profile waits for an epoch boundary it cannot cause)
STEP_BUDGET_WAIT_SHARE = stop_rule.EPOCH_WAIT_SHARE


class Sampling:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _check_stop(self, epoch: int) -> None:
        if self._waiting_for_epoch_end:
            if self._step_budget_wait_over():
                self._take_step_budget_as_epoch()
                return
            if self._loop_bound_ends_sampling():
                return
            waited_s = self.now() - self.marks["first_iteration_start"] - self.characterise_s - self.level_probes_s
            if waited_s >= max(self.max_seconds, self.max_epoch_wait_s):
                if self._loop_passes is not None:  # the epoch's length is known without its end
                    passes, source = self._loop_passes
                    self._take_as_epoch(passes, f"no epoch boundary within --max-epoch-wait {self.max_epoch_wait_s:g} s: "
                                                f"{passes:,} iterations an epoch, read from {source}; validation after "
                                                "it, if any, is not timed")
                    return
                if self.planned_steps is not None:  # the run's length is known without an epoch boundary
                    self._take_step_budget_as_epoch()
                    return
                if self.current_train_state is not None:  # a stream's pass went on past the wait: cut it here
                    self._stream_wait_over()
                    return
                self.notes.append(f"no end of epoch seen within --max-epoch-wait {self.max_epoch_wait_s:g} s "
                                  "(no DataLoader, no model.eval()/no_grad validation): iterations per epoch unknown, "
                                  "give predict --iterations-per-epoch N")
                self._finish("sampled_no_dataloader")
            return
        if self.epoch1_truncated:
            if epoch > self._truncated_epoch:
                self._later_epoch_iterations += 1
            if self._later_epoch_iterations >= self._epoch2_target() or not self.epochs:
                self._finish("sampled")
            return
        n = len(self.iterations)
        # Seconds of sampling: the trace done after the first iteration is not sampling time (the cost
        # budget below still counts it).
        elapsed = self.now() - self.marks["first_iteration_start"] - self.characterise_s - self.level_probes_s
        if n < stop_rule.first_check_iterations(self._stop_settings) and elapsed < self.max_seconds:
            return
        if not self._loop_passes_read and self.framework is None and not self.explicit_steps:
            if self.current_train_state is None:
                self._read_loop_passes()
            else:
                self._read_loader_loop()
        # The stability test costs O(n log n): run it on a geometric schedule (about every 5 % more
        # iterations) so that its cost per iteration stays negligible even for millisecond iterations.
        if n < self._next_check and n < self.max_iterations and elapsed < self.max_seconds:
            return
        self._next_check = n + max(1, n // 20)
        times = self.iterations.walls()
        decision = stop_rule.decide(times, elapsed, self._stop_settings, self._budget_inputs(epoch),
                                    closure_capped=self._closure_capped() or self._closure_leaving_cap(),
                                    iterations_to_check=self._next_check - n,
                                    converging_steps=self._converging_steps())
        if decision.reason is None:
            return
        self.stability = decision.as_record(n)
        self._probe_level("after")
        self._steal_end = cpu_steal.read_counters()
        self.epoch1_truncated = True
        self._truncated_epoch = epoch
        if self.current_train_state is None:
            if ((self._model_forward_hook is not None or self._model_hook_parked) and self.framework is None
                    and not self.explicit_steps):
                # No DataLoader to end early: sampling goes on, unrecorded by the stop rule, to the end of
                # this epoch (the model's next validation region), bounded by --max-epoch-wait, unless the
                # loop's length read from its source says that waiting would exceed the cost budget.
                if self._loop_passes is not None and self._loop_epoch_too_dear(epoch):
                    return
                self.epoch1_truncated = False
                self._waiting_for_epoch_end = True
                return
            # No DataLoader to end early and no epoch boundary to wait for: stop here.
            self._finish("sampled_no_dataloader")
            return
        self._loader_loop_length()
        if self._stream_pass_to_wait_out():
            return
        self._mark_train_truncation()

    def _closure_capped(self, last: int = 5) -> bool:
        """Most of the latest steps ran every closure evaluation allowed: still converging. One early
        short step (an LBFGS line search that happened to finish) does not end it; a converged optimizer's
        run of short steps does."""
        cap, recent = self._recent_closure_counts(last)
        return cap is not None and len(recent) == last and sorted(recent)[last // 2] >= cap

    def _closure_leaving_cap(self, last: int = 5) -> bool:
        """The latest steps mix ones that ran every closure evaluation allowed and shorter ones: leaving the
        converging phase, not yet settled (LBFGS over a small LSTM, max_iter 6: 43 steps of six, then 26 of
        6, 4, 5, 2, 3 mixed, then one a step for the rest of the run). Neither capped nor settled, so no reason to
        stop: a profile that stopped there read the mixed steps as the run's and predicted it 5x too long."""
        cap, recent = self._recent_closure_counts(last)
        return cap is not None and len(recent) == last and min(recent) < cap <= max(recent)

    def _recent_closure_counts(self, last: int) -> tuple[int | None, list[int]]:
        """(a closure optimizer's cap on evaluations a step, or None; the latest `last` steps' backward passes)."""
        cap = (self.model or {}).get("closure_evaluation_cap")
        if cap is None:
            return None, []
        return cap, [it.get("backward_passes") or 0 for it in self.iterations[-last:]]

    def _converging_steps(self) -> int:
        """A closure optimizer's converging steps so far (warm-up for the cost budget's count of steady steps)."""
        if (self.model or {}).get("closure_evaluation_cap") is None:
            return 0
        return stop_rule.closure_converging_steps(self.iterations.column("backward_passes"))

    def _budget_inputs(self, epoch: int = 0) -> stop_rule.BudgetInputs | None:
        if not self.epochs:
            return None
        # An iteration is one optimizer step: with gradient accumulation it consumes several batches.
        batches = self.iterations.column_sum("batches")
        return stop_rule.BudgetInputs(
            planned_epochs=self.planned_epochs, batches_per_epoch=self.epochs[0].get("batches_per_epoch") or (
                self._loop_passes[0] if self._loop_passes is not None and self.current_train_state is None else None),
            batches_per_iteration=max(1.0, batches / len(self.iterations)) if self.iterations else 1.0,
            init_s=self.marks["first_iteration_start"], now_s=self.now(),
            planned_iterations=self.planned_steps, epoch_start_s=self._epoch_start_s(),
            probe_after_s=self.level_probe_s if self.level_probe_socket and self.level_probes else 0.0, epoch=epoch)

    def _epoch_start_s(self) -> float:
        """The first epoch's start to its first batch (workers starting, the first fetch): what the next epoch's start
        costs again. Not the first step's compute: a GPU job's first step (autotuning, compilation) is not repeated."""
        if not self.iterations or not self.epochs or self.epochs[0].get("start_s") is None:
            return 0.0
        first = self.iterations[0]
        return max(0.0, first["start_s"] - self.epochs[0]["start_s"]) + first["data_wait_s"]

    def epoch2_still_to_come(self) -> bool:
        """Sampling stopped in an epoch that may not be the last, and the first iterations of the next
        one (its start cost: workers restarting, a slow first iteration) are still to be timed."""
        budget = self._budget_inputs(self._truncated_epoch)
        planned = self.planned_epochs
        last_epoch = (not stop_rule.run_goes_past(budget, self._truncated_epoch) if budget is not None
                      else planned is not None and self._truncated_epoch >= planned - 1)
        return (self.epoch1_truncated and self.epoch2_iterations > 0 and not last_epoch
                and self._later_epoch_iterations < self._epoch2_target())

    def _epoch2_target(self) -> int:
        """Iterations of the next epoch to time (at most one whole epoch)."""
        return stop_rule.epoch2_iterations_to_time(self._budget_inputs(self._truncated_epoch), self._stop_settings)

    def _step_budget_wait_over(self) -> bool:
        """Waiting for a loop without a DataLoader to end its epoch (a validation region) has gone on past a tenth of
        the script's step budget: a loop that validates does so at least that often (nanoGPT: every 250 of 5,000
        steps), so the run is taken as known without an epoch boundary. Past, not at: a validation due right after
        the tenth step is still seen (nanoGPT's 2,500 steps validate every 250th; at 250 it was missed)."""
        steps = self.planned_steps
        return steps is not None and len(self.iterations) > STEP_BUDGET_WAIT_SHARE * steps

    def _mark_train_truncation(self) -> None:
        # The active training iterator ends its epoch at its next request.
        if self.current_train_state is not None:
            self.current_train_state.truncate = True

    # ---- a training DataLoader over a stream (an IterableDataset without a length) ----------------------
    def _stream_pass_to_wait_out(self) -> bool:
        """Sampling stopped inside a training pass whose length nothing gave (the loader has none, and no loop
        reading found one): cut short, the epoch's length would be lost and predict could not scale the sample to a
        run. The pass runs on to its end instead, bounded by --max-epoch-wait, and its batches count the epoch
        (_stream_pass_ended). True when sampling now waits."""
        state = self.current_train_state
        if (state is None or state.role != "train" or state.undecided or not self.epochs
                or state.info.get("batches_per_pass") is not None or self.epochs[-1]["batches_per_epoch"] is not None):
            return False
        bound = self._loop_bound
        if bound is not None and bound.steps is None and bound.other_exits:
            return False  # the loop leaves on a test of its own (a loss, a reward): no pass's end to wait for
        self.epoch1_truncated = False
        self._waiting_for_epoch_end = True
        self.notes.append("the training DataLoader has no length (an IterableDataset, a stream): sampling went on to the "
                          f"end of its pass (at most --max-epoch-wait {self.max_epoch_wait_s:g} s) to count its batches")
        return True

    def _stream_pass_ended(self, state) -> None:
        """The awaited training pass over a stream ended: its batches are the epoch's, sampling stops there, and what
        follows (validation, the next epoch's start) is timed as after any cut-short epoch."""
        if not self._waiting_for_epoch_end or state.info.get("batches_per_pass") is not None or not self.epochs:
            return
        epoch = self.epochs[-1]
        epoch["batches_per_epoch"] = state.batches
        state.info["batches_per_pass"] = state.batches
        # the loaders' "train" entry is the first pass's info (this one, most often): kept, not copied
        self.loaders.setdefault("train", state.info)["batches_per_pass"] = state.batches
        self._waiting_for_epoch_end = False
        self.epoch1_truncated = True
        self._truncated_epoch = epoch["index"]
        self.notes.append(f"epoch {epoch['index'] + 1}'s pass over the stream ended after {state.batches:,} batches "
                          f"({int(epoch['iterations']):,} iterations): its length, counted")

    def _stream_wait_over(self) -> None:
        """The stream's pass outlasted --max-epoch-wait: cut here, its length unknown (predict asks for it)."""
        self._waiting_for_epoch_end = False
        self.epoch1_truncated = True
        self._truncated_epoch = int(self.epochs[-1]["index"])
        self.notes.append(f"the training DataLoader's pass over a stream did not end within --max-epoch-wait "
                          f"{self.max_epoch_wait_s:g} s: iterations per epoch unknown, give predict "
                          "--iterations-per-epoch N")
        self._mark_train_truncation()
