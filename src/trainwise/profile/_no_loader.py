"""Loops a DataLoader and an optimizer step do not show (trainwise.agent): iterations from autograd,
epochs and validation from the model's eval/no_grad calls, a script that never trains stopped within
seconds, and the --full record written every few seconds for a run that is killed. A mixin of the recorder.
"""

from __future__ import annotations

import contextlib
import math
import time
import weakref

from trainwise.agent.compiled_code import compiled_in_process, register_module_pre_hook
from trainwise.agent.events import ModelForward
from trainwise.agent.regions import ValidationRegion

# A --full run's snapshots of its record cost at most 1/SNAPSHOT_COST_RATIO of its time (0.2 %) where they can
SNAPSHOT_COST_RATIO = 500
MIN_SNAPSHOT_INTERVAL_S = 5.0


def _tensor_pass(batches: int) -> dict:
    """A pass over tensors described as a DataLoader's pass is (`loaders` entries): its length alone is known."""
    return {"batches_per_pass": batches, "dataset_size": None, "drop_last": False, "num_workers": 0}


class LoopsWithoutLoader:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    # ---- loops without a DataLoader or an optimizer (trainwise.agent) -------------------------------
    def _init_loops_without_loader(self) -> None:
        self._model_forward_hook = None
        self._model_hook_parked = False  # taken off inside a training DataLoader pass (_park_model_hook)
        self._model_hook_stays = False  # torch.compile ran: the hook is never taken off
        self._model_called = None
        self._dataloader_validation = False
        self._autograd_noted = False
        # Sampled, stable, no DataLoader to end epoch 1 early: waiting for the epoch's end (a validation region)
        self._waiting_for_epoch_end = False
        self._init_loop_reading()

    def _iterations_seen_or_coming(self) -> bool:
        return (bool(self.iterations) or self.finished or self.framework is not None or self.explicit_steps
                or self._backward_iterations.backwards_without_step > 0 or self._another_process_owns())

    def _on_no_iteration(self) -> None:
        with self._lock:
            if self._iterations_seen_or_coming():
                return
            self._characterise_tried = True  # nothing trained: no step to trace
            compiling_s = self._watchdog.compiling_s
            self.notes.append(f"no training iteration within {self.no_iteration_limit_s:g} s of the first forward pass"
                              + (f" ({compiling_s:.0f} s more of torch.compile compiling not counted)" if compiling_s >= 1 else ""))
            self._finish("no_iterations")

    def _on_autograd_iteration(self, t_s: float) -> None:
        if self.finished:
            return
        if not self._autograd_noted:
            self._autograd_noted = True
            self._stop_capturing()
            model = self._model_ref() if self._model_ref is not None else None
            if model is not None:
                self._describe_parameters(list(model.parameters()), None)
            self.notes.append("no optimizer step seen: iterations delimited by backward passes that reach the model's "
                              "parameters (a loop that updates its parameters by hand)")
        self.end_iteration()

    def _close_whole_run(self) -> bool:
        """The script ended by itself and its training showed no epoch boundary: no DataLoader pass ended (none
        was iterated, or the script stopped iterating its loader by itself: `next(iter(loader))` once, a `break`
        at a step count) and no validation region came. What ran is then the whole training, measured, so its
        iterations make the run's epochs (one, or the script's own count when it divides them) and predict gives
        back the run instead of multiplying a loader's length or asking for an epoch length the script does not
        have (a loop that trains until a loss is small, a loop that breaks at a step count). True when it did."""
        if self.finished or self.framework is not None or self.explicit_steps:
            return False
        self._settle_undecided()  # a pass begun after training (`next(iter(test_loader))`) is no epoch
        # Backward passes after the last iteration: training went on outside it (an optimizer that stepped once
        # after the last iteration), so what the iterations hold may not be the whole training.
        if (len(self.epochs) != 1 or self.epochs[0]["end_s"] is not None or self.epochs[0]["truncated"]
                or not self.iterations or self.iter_backwards):
            return False
        epoch, iterations = self.epochs[0], int(self.epochs[0]["iterations"])
        planned = self.planned_epochs or 1
        if iterations <= 0 or iterations % planned:
            return False  # the script's count does not divide what ran: the epoch length stays unknown
        per_epoch = iterations // planned
        loader = self.loaders.get("train")
        batches_per_iteration = max(1, self._most_batches_per_iteration)
        epoch["end_s"] = self.iterations[-1]["end_s"]
        epoch["batches_per_epoch"] = per_epoch * batches_per_iteration
        self.loaders["train"] = {**(loader or _tensor_pass(0)), "batches_per_pass": per_epoch * batches_per_iteration}
        if self.script_epochs is None:
            self.script_epochs = {"epochs": 1, "source": f"the script ran to its end during the profile: "
                                                         f"{iterations} iterations, no epoch boundary"}
        how = ("its training DataLoader pass never ended (the script stopped iterating it by itself)" if loader
               else "no training DataLoader and no validation region")
        self.notes.append(f"{how}: the script ran to its end during the profile, so its {iterations} iterations are "
                          f"the whole training ({planned} epoch(s) of {per_epoch}), measured here")
        return True

    def _watch_model_calls(self, first_start_s: float) -> None:
        """After the first iteration: the model's calls show validation regions (and, without a training
        DataLoader, epoch boundaries), one forward pre-hook on the model alone."""
        model = self._model_ref() if self._model_ref is not None else None
        if (model is None or self.framework is not None or self.explicit_steps or self._model_forward_hook is not None
                or self._model_hook_parked):
            return
        torch = self._torch
        recorder = self
        target = weakref.ref(model)

        def model_called(module, args):
            # a copy of the model (copy.deepcopy keeps hooks) is not the model
            if (module is not target() or recorder.finished or recorder.paused or recorder._dataloader_validation
                    or recorder.framework is not None):
                return None
            grad, training = torch.is_grad_enabled(), module.training
            if grad and training:
                recorder.iter_forwards += 1  # a training pass of the model: several make one step of several passes
            recorder.bus.emit(ModelForward(recorder.now(), grad, training))
            if recorder._regions.current is not None:
                recorder._after_region_call(recorder._regions.current)
            return None

        self._model_called = model_called
        self._model_forward_hook = register_module_pre_hook(torch, model, model_called)
        if self.current_train_state is None and not self.epochs:
            self.epochs.append({"index": 0, "start_s": first_start_s, "end_s": None, "iterations": len(self.iterations),
                                "truncated": False, "batches_per_epoch": None})

    def _park_model_hook(self) -> None:
        """Inside a training DataLoader pass the model's calls decide nothing (a region there is a metric on the
        training batch: _on_region_start), so after the pass's first iteration the hook comes off, and it goes back
        on when a pass ends or begins (_unpark_model_hook): a hooked call costs ~2 µs, 0.5 % of a 0.46-ms step."""
        state, epochs = self.current_train_state, self.epochs
        if (self._model_hook_stays or state.role != "train" or state.undecided or not epochs
                or epochs[-1]["end_s"] is not None or self._regions.current is not None):
            return
        if compiled_in_process():
            self._model_hook_stays = True
            return
        self._model_forward_hook.remove()
        self._model_forward_hook = None
        self._model_hook_parked = True

    def _unpark_model_hook(self) -> None:
        if not self._model_hook_parked:
            return
        self._model_hook_parked = False
        model = self._model_ref() if self._model_ref is not None else None
        if model is not None and not self.finished:
            self._model_forward_hook = register_module_pre_hook(self._torch, model, self._model_called)

    @contextlib.contextmanager
    def model_hook_detached(self):
        """The model without the recorder's hook while the script saves: `torch.save(model)` pickles a module's
        hooks, and a checkpoint must neither fail on the recorder's closure nor carry it."""
        model = self._model_ref() if self._model_ref is not None else None
        handle = self._model_forward_hook
        if model is None or handle is None:
            yield
            return
        handle.detach()  # off for real, even after a compile: a pickled hook would carry the recorder
        try:
            yield
        finally:
            self._model_forward_hook = register_module_pre_hook(self._torch, model, self._model_called)

    def _on_region_start(self, region: ValidationRegion) -> None:
        if self._dataloader_validation or self.finished:
            return
        no_loader = self.current_train_state is None
        if not no_loader and self.epochs and self.epochs[-1]["end_s"] is None:
            # Inside a training DataLoader pass: a metric on the training batch under no_grad, not validation.
            return
        if no_loader and self.epochs and self.epochs[-1]["end_s"] is None:
            epoch = self.epochs[-1]
            epoch["end_s"] = region.start_s
            epoch["batches_per_epoch"] = epoch["iterations"]
            if "train" not in self.loaders:
                self.loaders["train"] = _tensor_pass(epoch["iterations"])
                self.notes.append(f"no training DataLoader: an epoch is the training between two validation regions "
                                  f"(model.eval() or torch.no_grad() calls of the model); epoch 1 had "
                                  f"{epoch['iterations']} iterations")
            if self._waiting_for_epoch_end:
                self._waiting_for_epoch_end = False
                self.epoch1_truncated = True
                self._truncated_epoch = epoch["index"]
        record = {"epoch": max(0, len(self.epochs) - 1), "start_s": region.start_s, "end_s": None,
                  "batch_starts_s": region.batch_starts_s, "data_wait_s": [], "samples": 0, "truncated": False,
                  "batches_total": None, "loader": None}
        region.record = record
        self.validations.append(record)

    def _after_region_call(self, region: ValidationRegion) -> None:
        """Sampling over in what is the last epoch (or with no epoch 2 to time): once `validation_batches`
        calls of a validation region are timed and an earlier whole region gave its length, the profile
        is complete; the script's end-of-training code must not run."""
        record = region.record
        if (record is None or not self.sampled or not self.epoch1_truncated or self.validation_done
                or len(region.batch_starts_s) < max(1, self.validation_batches)):
            return
        planned = self.planned_epochs
        if not (self.epoch2_iterations <= 0 or (planned is not None and self._truncated_epoch >= planned - 1)):
            return
        whole = [r.record for r in self._regions.regions if r.end_s is not None and r.record is not None]
        if not whole:
            return
        record["end_s"] = self.now()
        record["truncated"] = True
        record["batches_total"] = whole[-1]["batches_total"]
        self.validation_done = True
        self._finish("validation_timed")

    def _close_open_region(self) -> None:
        """A validation region still open when the record is written ended with the script."""
        region = self._regions.current
        if region is None or region.record is None or region.record["end_s"] is not None:
            return
        region.record["end_s"] = self.now()
        region.record["batches_total"] = len(region.batch_starts_s)

    def _on_region_end(self, region: ValidationRegion) -> None:
        record = region.record
        if record is None or self.finished:
            return
        record["end_s"] = region.end_s
        record["batches_total"] = len(region.batch_starts_s)
        if "val" not in self.loaders:
            self.loaders["val"] = _tensor_pass(len(region.batch_starts_s))
        if self.current_train_state is None:
            self.epochs.append({"index": len(self.epochs), "start_s": region.end_s, "end_s": None, "iterations": 0,
                                "truncated": False, "batches_per_epoch": None})
            self.iter_start = region.end_s
        else:
            self._exclude_from_iteration(record)
        if self.sampled and self.epoch1_truncated and not self.validation_done:
            self.validation_done = True
            planned = self.planned_epochs
            if self.epoch2_iterations <= 0 or (planned is not None and self._truncated_epoch >= planned - 1):
                self._finish("validation_timed")

    def _write_snapshot(self, now_s: float) -> None:
        """--full: the record so far, as if the process ended now (replaced by the final one)."""
        started = time.perf_counter()
        try:
            record = self.raw_record()
            record["stop_reason"] = "interrupted"
            record["notes"] = self.notes + ["the job ended before trainwise could finish its record (killed, or "
                                            "it crashed hard): the profile holds what was recorded until "
                                            f"{now_s:.1f} s after launch"]
            self._write_record(record)
        except Exception:  # noqa: BLE001 - a snapshot must never break the job
            pass
        now_s = self.now()
        self._snapshot_due_s = next_snapshot_due_s(now_s, time.perf_counter() - started,
                                                   now_s - self.marks.get("first_iteration_start", 0.0))


def next_snapshot_due_s(at_s: float, cost_s: float, recorded_s: float) -> float:
    """When a --full run's next snapshot is due, one that took `cost_s` written at `at_s` after `recorded_s` of
    recording. The next costs more (it holds the iterations since, at a steady rate ~(recorded_s + interval) /
    recorded_s times as many), so it waits until it is at most 1/SNAPSHOT_COST_RATIO of the time: interval >=
    R * cost * (recorded + interval) / recorded. Where writing is slower than that allows (a record of
    sub-millisecond steps), it is due when the recorded time has doubled: a killed run keeps at least half of
    what it recorded. Never sooner than MIN_SNAPSHOT_INTERVAL_S. On the 2-core VM the old fixed rule (500 times
    the last cost, 5 s at least) spent 0.3 % of a 40-s --full run of 0.47-ms steps on four snapshots (5-75 ms each)."""
    share = SNAPSHOT_COST_RATIO * cost_s / recorded_s if recorded_s > 0 else math.inf
    interval = SNAPSHOT_COST_RATIO * cost_s / (1.0 - share) if share < 1.0 else math.inf
    return at_s + max(MIN_SNAPSHOT_INTERVAL_S, min(interval, recorded_s))
