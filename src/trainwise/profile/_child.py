"""The recorder that runs *inside* the profiled training process.

It is armed by the `sitecustomize` that `trainwise profile` puts on PYTHONPATH, waits for the script
to import torch (so that environment variables the script sets before `import torch`, such as
OMP_NUM_THREADS, keep their effect), and then instruments torch from outside, with no change to the
user's code:

- iteration boundaries: the global optimizer step post-hook (and GradScaler.step, which may skip
  the optimizer step on inf/NaN gradients); with several optimizers the first one to step is the
  "primary" whose steps delimit iterations;
- data wait: time spent inside DataLoader iterators' ``__next__``;
- validation: DataLoader iterators consumed while autograd is disabled or the model is in eval mode,
  and passes with neither during which no optimizer step happens, over a loader training never
  stepped on (a validation loop that just computes the loss);
- epochs: a training DataLoader iterator that is exhausted;
- init: process launch → first iteration start, with marks for torch import, first module,
  first DataLoader and first optimizer construction.

In sampled mode it ends epoch 1 early once the iteration time has stabilised (by raising
StopIteration from the training iterator, exactly what the end of an epoch looks like to the
script), times a few validation batches, times the first iterations of epoch 2, writes the raw
record and ends the process. Only torch and the standard library are used here.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import resource
import socket
import sys
import tempfile
import threading
import weakref
import time
from typing import Any

from trainwise.agent import stop_rule
from trainwise.agent.autograd_steps import BackwardIterations
from trainwise.agent.events import EventBus, IterationEnd, OptimizerStep
from trainwise.agent.regions import EvalRegions
from trainwise.agent.watchdog import DEFAULT_NO_ITERATION_LIMIT_S, NoIterationWatchdog
from trainwise.allocator import recorded_settings as recorded_allocator_settings
from trainwise.profile import _torch_hooks
from trainwise.profile import script_epochs as script_epochs_source
from trainwise.profile._capture import WorkloadCapture
from trainwise.profile._no_loader import LoopsWithoutLoader
from trainwise.profile._passes import LoaderPasses, _LoaderState
from trainwise.profile._state_zeros import ZERO_COUNT_STEPS, StateZerosRecording
from trainwise.profile._watchers import (_cpu_model, _FrameworkImportWatcher, _TorchImportWatcher, _watch_argparse,
                                         _watch_sys_exit)
from trainwise.profile._watchers import _batch_length  # noqa: F401 - other modules import it from here

CONFIG_ENV = "TRAINWISE_PROFILE_CONFIG"
RAW_FORMAT_VERSION = 1

_recorder: "Recorder | None" = None




def current() -> "Recorder | None":
    return _recorder


def arm() -> None:
    """Create the process-wide recorder from the environment and wait for torch."""
    global _recorder
    if _recorder is not None:
        return
    config = json.loads(os.environ[CONFIG_ENV])
    # Children of this process (DataLoader workers, subprocesses the script starts) must not record.
    os.environ.pop(CONFIG_ENV, None)
    _recorder = Recorder(config)
    if "torch" in sys.modules:
        _recorder.install_torch_hooks()
    else:
        sys.meta_path.insert(0, _TorchImportWatcher(_recorder))
    # Keras / Lightning / Hugging Face Trainer loops: their fit entry point gets trainwise's callback
    # when the script imports it (trainwise.integrations); the callback then delimits iterations.
    sys.meta_path.insert(0, _FrameworkImportWatcher())
    _watch_sys_exit(_recorder)
    _watch_argparse(_recorder)
    atexit.register(_recorder.on_process_exit)


class _FinishNow(Exception):
    """Internal: the profile is complete."""


class Recorder(LoaderPasses, LoopsWithoutLoader, WorkloadCapture, StateZerosRecording):
    """The profile's record of one training process: iterations, epochs, validation, the stop rule's
    verdict, and writing it. Its parts live in the mixins' modules (_passes, _no_loader, _capture,
    _state_zeros) and the torch patches in _torch_hooks."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.perf0 = time.perf_counter()
        self.wall0 = time.time()
        launch_wall = float(config.get("launch_wall_s") or self.wall0)
        self.offset_s = self.wall0 - launch_wall  # seconds from launch to perf0
        self.sampled = config.get("mode", "sampled") == "sampled"
        self.min_iterations = int(config.get("min_iterations", 20))
        self.max_iterations = int(config.get("max_iterations", 500))
        self.max_seconds = float(config.get("max_profile_seconds", 120.0))
        self.min_seconds = float(config.get("min_profile_seconds", 0.0))
        self.min_budget_seconds = float(config.get("min_budget_seconds", 0.0))
        self.target_relative_ci = float(config.get("target_relative_ci", 0.02))
        self.max_relative_drift = float(config.get("max_relative_drift", 0.05))
        self.validation_batches = int(config.get("validation_batches", 10))
        self.epoch2_iterations = int(config.get("epoch2_iterations", 5))
        self.sync_cuda = bool(config.get("sync_cuda", True))
        # With the planned epoch count known, sampling also stops when the profile would cost more
        # than this fraction of the predicted full run.
        self.epochs_hint = config.get("epochs_hint")
        # The epoch count the script sets for itself ({"epochs", "source"}), when it can be read: argparse,
        # or a framework's loop settings (which replace an argparse reading: they are what the loop runs)
        self.script_epochs: dict[str, Any] | None = None
        self._script_epochs_from_framework = False
        self._script_epochs_rank: tuple = ()
        self.budget_fraction = float(config.get("budget_fraction", 0.02))
        self._stop_settings = stop_rule.StopSettings(
            min_iterations=self.min_iterations, max_iterations=self.max_iterations, max_seconds=self.max_seconds,
            min_seconds=self.min_seconds, min_budget_seconds=self.min_budget_seconds,
            target_relative_ci=self.target_relative_ci, max_relative_drift=self.max_relative_drift,
            budget_fraction=self.budget_fraction, validation_batches=self.validation_batches,
            epoch2_iterations=self.epoch2_iterations)
        self.out_path = config["out_path"]

        self.marks: dict[str, float] = {"bootstrap": self.now()}
        self.flush_denormal: bool | None = None  # set once torch is imported
        self.iterations: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []
        self.loaders: dict[str, dict[str, Any]] = {}
        self.model: dict[str, Any] = {}
        # Optimizers and parameters already in self.model (ids: the recorder must not keep them alive).
        self._described_optimizers: set[int] = set()
        self._described_parameters: set[int] = set()
        self.stop_reason = "script_exited"
        # Set when the script calls sys.exit() with a training pass unfinished or before sampling stopped
        self.exit_mid_training: str | None = None
        self.stability: dict[str, Any] = {}
        self.notes: list[str] = []

        self.iter_start: float | None = None
        self.current_train_state: _LoaderState | None = None
        self._last_batch_state: _LoaderState | None = None
        self._truncated_epoch = 0
        self._later_epoch_iterations = 0
        self._next_check = 0
        self.observer_s = 0.0
        self.iter_data_wait = 0.0
        self.iter_samples = 0
        self.iter_batches = 0
        self.primary_optimizer_id: int | None = None
        self.explicit_steps = False
        # Set by a trainwise.integrations callback (Keras, Lightning, HF Trainer): the framework's own
        # hooks then delimit iterations, epochs and validation, and the DataLoader, optimizer and
        # first-forward hooks record nothing, so that nothing is counted twice.
        self.framework: str | None = None
        # Set by `trainwise run` while a resumed job lets a batch of an epoch finished before its
        # checkpoint through the script's loop body (trainwise.run._child): not an iteration of this run.
        self.paused = False
        self.in_scaler_step = False
        self.eval_depth = 0
        self.eval_mode = False
        self.epoch1_truncated = False
        self.validation_done = False
        self.finished = False
        self.written = False
        self._torch = None
        self._forward_hook = None
        self._loader_counter = 0
        # The pass whose role waits on whether an optimizer step comes during it (at most one: the next
        # pass to begin settles it), and the DataLoaders optimizer steps were taken on
        self._undecided: _LoaderState | None = None
        self._training_loaders: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Each DataLoader iterated, numbered in the order the script first iterated it: the passes over
        # one loader are alike, so validation is modelled per loader (a script that evaluates the
        # training and the validation set after each epoch has two passes of different sizes per epoch)
        self._loader_indices: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        # The most batches one iteration has consumed (gradient accumulation: several)
        self._most_batches_per_iteration = 0
        self._lock = threading.Lock()
        # Workload characterisation (device model): the module that owns the most parameters among
        # those called in the first training iteration is the model; its first call's input shapes,
        # autocast precision and memory format are kept, and one training step is traced on the
        # meta device after sampling (never during the measured iterations).
        self.characterise = bool(config.get("characterise", True))
        self._model_ref: Any = None
        self._model_parameters = 0
        self._model_inputs: Any = None
        self._model_precision = "fp32"
        self._model_memory_format = "nchw"
        self._seen_modules: set[int] = set()
        self._shape_hook = None
        self._optimizer_ref: Any = None
        self.characterisation: dict[str, Any] | None = None
        self.optimizer_state_zeros: dict[str, Any] | None = None
        self.state_zeros_trajectory: list[list[int]] = []
        self._sparse_state_elements: int | None = None
        self._zero_tracking_failed = False
        self._zeros_seen: dict[str, Any] | None = None
        self._characterise_tried = False
        self.characterise_s = 0.0
        # The host's speed level beside the sampled steps (host_noise.probe_level_s), before and after
        # them; its time, like the trace's, is in no iteration and not sampling time
        self.level_probe_s = float(config.get("level_probe_s", 0.0))
        self.level_probes: list[dict[str, Any]] = []
        self.level_probes_s = 0.0
        # A sampled profile's torch.save to a path writes a scratch file beside it instead (same
        # folder, so the same filesystem and the same cost): the few sampled iterations must not
        # replace the user's checkpoint. {the path's absolute form: scratch path}
        self.scratch_saves: dict[str, str] = {}
        # The agent's events (trainwise.agent.events) and the subscribers that turn them into iterations,
        # epochs and validation where no optimizer step or DataLoader shows them.
        self.bus = EventBus()
        self._backward_iterations = self.bus.subscribe(BackwardIterations(self._on_autograd_iteration))
        self._regions = self.bus.subscribe(EvalRegions(self._on_region_start, self._on_region_end))
        self._model_forward_hook = None
        self._dataloader_validation = False
        self._autograd_noted = False
        # Sampled, stable, no DataLoader to end epoch 1 early: waiting for the epoch's end (a validation region)
        self._waiting_for_epoch_end = False
        self.no_iteration_limit_s = float(config.get("no_iteration_limit_s", DEFAULT_NO_ITERATION_LIMIT_S))
        self._watchdog = NoIterationWatchdog(self.no_iteration_limit_s, self._iterations_seen_or_coming,
                                             self._on_no_iteration)
        # --full: the record is also written every so often, so that a killed run still reports what it recorded
        self._snapshot_at_s = 0.0
        self._snapshot_cost_s = 0.0

    def note_script_epochs(self, epochs: Any, source: str, *, framework: bool = False, rank: tuple = ()) -> None:
        """Keep the script's own epoch count. Of argparse readings, the best ranked
        (script_epochs.argparse_reading), the later of equals; a framework's loop settings replace them
        all, and the first framework statement is final (not_epoch_bound included)."""
        if self._script_epochs_from_framework:
            return
        if framework:
            value = script_epochs_source.whole_epochs(epochs)
            self._script_epochs_from_framework = True
            self.script_epochs = None if value is None else {"epochs": value, "source": source}
            return
        value = script_epochs_source.argument_epochs(epochs)
        if value is None or (self.script_epochs is not None and tuple(rank) < self._script_epochs_rank):
            return
        self.script_epochs = {"epochs": value, "source": source}
        self._script_epochs_rank = tuple(rank)

    def note_not_epoch_bound(self, limit: str) -> None:
        """The framework's loop ends on something else than an epoch count (a step or time limit, none at
        all): an argparse `--epochs` of the script is not what it runs, and the profile keeps no count."""
        if self._script_epochs_from_framework:
            return
        dropped = self.script_epochs
        self.note_script_epochs(None, limit, framework=True)
        note = (f"no epoch count read: the training loop is not bound by one ({limit})"
                + (f"; {dropped['source']} is not what it runs" if dropped else "") + "; give predict and plan --epochs N")
        if note not in self.notes:
            self.notes.append(note)

    @property
    def planned_epochs(self) -> int | None:
        """The full run's epochs: --epochs when given, else the script's own count."""
        if self.epochs_hint:
            return int(self.epochs_hint)
        return self.script_epochs["epochs"] if self.script_epochs else None

    # ---- time -------------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the launcher started the process."""
        return time.perf_counter() - self.perf0 + self.offset_s

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, self.now())

    def install_torch_hooks(self) -> None:
        _torch_hooks.install(self)


    def _on_first_forward(self, module, args):
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if self.framework is None:
            self._watchdog.start()
        if self.iter_start is None and not self.iterations and self.framework is None and self._torch.is_grad_enabled():
            self.iter_start = time.perf_counter() - self.perf0 + self.offset_s
            self.mark("first_iteration_start")


    # ---- iterations -------------------------------------------------------------------------
    def _reset_iteration(self) -> None:
        self.iter_data_wait = 0.0
        self.iter_samples = 0
        self.iter_batches = 0

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self.in_scaler_step or self.explicit_steps or self.paused:
            return
        self._boundary(optimizer)

    def _boundary(self, optimizer) -> None:
        if self.explicit_steps or self.paused:
            return
        self.bus.emit(OptimizerStep(self.now(), id(optimizer)))
        if self.primary_optimizer_id is None:
            self.primary_optimizer_id = id(optimizer)
            self._optimizer_ref = weakref.ref(optimizer)
            self._stop_capturing()
            self._describe_model(optimizer)
        elif id(optimizer) != self.primary_optimizer_id:
            # A secondary optimizer's step is part of the primary's iteration; its parameters (a GAN's
            # generator) are still the model's: gradients to all-reduce, state to checkpoint.
            if id(optimizer) not in self._described_optimizers:
                self._describe_model(optimizer)
            return
        last = self._last_batch_state
        # Only a pass still running, whose last batch was fetched with gradients enabled: a finished
        # (or abandoned, no_grad) validation pass before a DataLoader-less training step stays validation.
        if (last is not None and last.role == "val" and self.framework is None and last.grad_at_last_batch
                and last.record is not None and last.record["end_s"] is None):
            self._reclassify_as_training(last)
        self.end_iteration()

    def end_iteration(self, samples: int | None = None) -> None:
        """Close the current iteration at this instant (used by hooks and the explicit API)."""
        torch = self._torch
        if self.sync_cuda and torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()  # CUDA is asynchronous: the boundary is when the GPU is done
        end_s = self.now()
        start_s = self.iter_start
        if start_s is None:
            # No batch was requested and no forward seen: start at the previous boundary.
            start_s = self.iterations[-1]["end_s"] if self.iterations else self.marks.get("torch_imported", 0.0)
            self.mark("first_iteration_start")
        if self._undecided is not None:
            # The pass still running (or collected before the first step) is training.
            self._confirm_training(self._undecided)
        epoch = max(0, len(self.epochs) - 1)
        self._most_batches_per_iteration = max(self._most_batches_per_iteration, self.iter_batches)
        self.iterations.append({
            "index": len(self.iterations), "epoch": epoch, "start_s": start_s, "end_s": end_s,
            "data_wait_s": self.iter_data_wait,
            "samples": samples if samples is not None else self.iter_samples,
            "batches": self.iter_batches,
        })
        if self.epochs:
            self.epochs[-1]["iterations"] += 1
        self._reset_iteration()
        self.bus.emit(IterationEnd(end_s, len(self.iterations) - 1, "explicit" if self.explicit_steps else "hooks"))
        if len(self.iterations) == 1:
            self._watch_model_calls(start_s)
        if not self.sampled and end_s - self._snapshot_at_s >= max(5.0, 50 * self._snapshot_cost_s):
            self._write_snapshot(end_s)
        if self._optimizer_ref is not None and len(self.iterations) in ZERO_COUNT_STEPS and not self._zero_tracking_failed:
            self._track_state_zeros(len(self.iterations))
        if self.sampled and len(self.iterations) == 1:
            # Trace the workload now rather than at the end: its cost (up to seconds for a large or
            # recurrent model) is then part of the elapsed time the cost budget sees, so the profile
            # samples fewer iterations instead of overrunning the budget. Its time is observer time
            # (below): it is in no iteration. A --full run keeps it for the end, outside the
            # training time it measures.
            self._characterise()
            self._probe_level("before")
        if self.sampled:
            self._check_stop(epoch)
        # The next iteration starts after trainwise's own bookkeeping, which an uninstrumented run
        # does not have; its time is kept apart as observer time.
        resumed_s = self.now()
        self.observer_s += resumed_s - end_s
        self.iter_start = resumed_s

    def _check_stop(self, epoch: int) -> None:
        if self._waiting_for_epoch_end:
            waited_s = self.now() - self.marks["first_iteration_start"] - self.characterise_s - self.level_probes_s
            if waited_s >= self.max_seconds:
                self.notes.append(f"no end of epoch seen within --max-seconds {self.max_seconds:g} s of sampling "
                                  "(no DataLoader, no model.eval()/no_grad validation): iterations per epoch unknown, "
                                  "give predict --iterations-per-epoch N")
                self._finish("sampled_no_dataloader")
            return
        if self.epoch1_truncated:
            if epoch > self._truncated_epoch:
                self._later_epoch_iterations += 1
            if self._later_epoch_iterations >= self.epoch2_iterations or not self.epochs:
                self._finish("sampled")
            return
        n = len(self.iterations)
        # Seconds of sampling: the trace done after the first iteration is not sampling time (the cost
        # budget below still counts it).
        elapsed = self.now() - self.marks["first_iteration_start"] - self.characterise_s - self.level_probes_s
        if n < self.min_iterations and elapsed < self.max_seconds:
            return
        # The stability test costs O(n log n): run it on a geometric schedule (about every 5 % more
        # iterations) so that its cost per iteration stays negligible even for millisecond iterations.
        if n < self._next_check and n < self.max_iterations and elapsed < self.max_seconds:
            return
        self._next_check = n + max(1, n // 20)
        times = [it["end_s"] - it["start_s"] for it in self.iterations]
        decision = stop_rule.decide(times, elapsed, self._stop_settings, self._budget_inputs())
        if decision.reason is None:
            return
        self.stability = decision.as_record(n)
        self._probe_level("after")
        self.epoch1_truncated = True
        self._truncated_epoch = epoch
        if self.current_train_state is None:
            if self._model_forward_hook is not None and self.framework is None and not self.explicit_steps:
                # No DataLoader to end early: sampling goes on, unrecorded by the stop rule, to the end of
                # this epoch (the model's next validation region), bounded by --max-seconds.
                self.epoch1_truncated = False
                self._waiting_for_epoch_end = True
                return
            # No DataLoader to end early and no epoch boundary to wait for: stop here.
            self._finish("sampled_no_dataloader")
            return
        self._mark_train_truncation()

    def _budget_inputs(self) -> stop_rule.BudgetInputs | None:
        if not self.epochs:
            return None
        # An iteration is one optimizer step: with gradient accumulation it consumes several batches.
        batches = sum(it["batches"] for it in self.iterations)
        return stop_rule.BudgetInputs(
            planned_epochs=self.planned_epochs, batches_per_epoch=self.epochs[0].get("batches_per_epoch"),
            batches_per_iteration=max(1.0, batches / len(self.iterations)) if self.iterations else 1.0,
            init_s=self.marks["first_iteration_start"], now_s=self.now())


    def epoch2_still_to_come(self) -> bool:
        """Sampling stopped in an epoch that may not be the last, and the first iterations of the next
        one (its start cost: workers restarting, a slow first iteration) are still to be timed."""
        planned = self.planned_epochs
        last_epoch = planned is not None and self._truncated_epoch >= planned - 1
        return (self.epoch1_truncated and self.epoch2_iterations > 0 and not last_epoch
                and self._later_epoch_iterations < self.epoch2_iterations)

    def _mark_train_truncation(self) -> None:
        # The active training iterator ends its epoch at its next request.
        if self.current_train_state is not None:
            self.current_train_state.truncate = True

    def scratch_path(self, path: str | os.PathLike) -> str:
        """Where a sampled profile writes the script's save to `path`: a hidden file beside it."""
        target = os.path.abspath(os.fspath(path))
        scratch = self.scratch_saves.get(target)
        if scratch is None:
            directory, name = os.path.split(target)
            scratch = os.path.join(directory, f".{name}.trainwise-profile-{os.getpid()}")
            self.scratch_saves[target] = scratch
            # Listed for the runner too, which removes them if this process is killed first.
            with open(self.out_path + ".scratch", "a") as listing:
                listing.write(scratch + "\n")
            self.notes.append(f"the script saved {os.fspath(path)} during sampling: written to a scratch file beside "
                              "it instead and removed at the end, so the file itself is untouched (the save's time "
                              "counts in its iteration as usual)")
        return scratch

    def _remove_scratch_saves(self) -> None:
        for scratch in self.scratch_saves.values():
            try:
                os.unlink(scratch)
            except OSError:
                pass  # never written (the save failed) or already gone

    # ---- explicit API -----------------------------------------------------------------------
    def explicit_step(self, samples: int | None = None) -> None:
        self.explicit_steps = True
        self._stop_capturing()
        self.end_iteration(samples)

    def explicit_iteration_start(self) -> None:
        self.explicit_steps = True
        self.iter_start = self.now()
        self.mark("first_iteration_start")

    # ---- model / environment ----------------------------------------------------------------
    def _describe_model(self, optimizer) -> None:
        """Add the parameters `optimizer` steps to the model's description (every optimizer that steps,
        each parameter once; the optimizer named is the primary's, the first to step)."""
        self._described_optimizers.add(id(optimizer))
        params = [p for group in getattr(optimizer, "param_groups", []) for p in group.get("params", [])]
        self._describe_parameters(params, type(optimizer).__name__)

    def _describe_parameters(self, params: list, optimizer_name: str | None) -> None:
        model = self.model or {"parameters": 0, "trainable_parameters": 0, "gradient_bytes": 0, "device": "cpu",
                               "parameter_dtypes": [], "optimizer": optimizer_name}
        dtypes = set(model["parameter_dtypes"])
        for p in params:
            if id(p) in self._described_parameters:
                continue
            self._described_parameters.add(id(p))
            count = p.numel()
            model["parameters"] += count
            if p.requires_grad:
                model["trainable_parameters"] += count
                model["gradient_bytes"] += count * p.element_size()
            model["device"] = str(p.device)
            dtypes.add(str(p.dtype).replace("torch.", ""))
        model["parameter_dtypes"] = sorted(dtypes)
        self.model = model

    def _environment(self) -> dict[str, Any]:
        torch = self._torch
        env: dict[str, Any] = {
            "python_version": platform.python_version(), "platform": platform.platform(),
            "hostname": socket.gethostname(), "cpu_model": _cpu_model(), "logical_cores": os.cpu_count(),
            "torch_version": getattr(torch, "__version__", None),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "device": self.model.get("device", "cpu"), "device_name": None,
            "allocator_env": recorded_allocator_settings(),
            "flush_denormal": self.flush_denormal,
        }
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            env["device_name"] = torch.cuda.get_device_name()
        return env

    def _memory(self) -> dict[str, Any]:
        peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        memory: dict[str, Any] = {"peak_rss_bytes": int(peak_rss_kib) * 1024, "peak_device_bytes": None}
        torch = self._torch
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            memory["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
        return memory

    # ---- output -----------------------------------------------------------------------------
    def raw_record(self) -> dict[str, Any]:
        last_events = [it["end_s"] for it in self.iterations] + [v["end_s"] for v in self.validations if v["end_s"]]
        return {
            "raw_format_version": RAW_FORMAT_VERSION,
            "mode": "sampled" if self.sampled else "full",
            "config": {k: v for k, v in self.config.items() if k != "out_path"},
            "stop_reason": self.stop_reason,
            "stability": self.stability,
            "level_probes": self.level_probes,
            "marks": self.marks,
            "iterations": self.iterations,
            "validations": self.validations,
            "epochs": self.epochs,
            "loaders": self.loaders,
            "model": self.model,
            "environment": self._environment(),
            "memory": self._memory(),
            "training_end_s": max(last_events) if last_events else None,
            "recorded_until_s": self.now(),
            "explicit_steps": self.explicit_steps,
            "observer_s": self.observer_s,
            "characterisation": self.characterisation,
            "optimizer_state_zeros": self.optimizer_state_zeros,
            "script_epochs": self.script_epochs,
            "notes": self.notes,
        }


    def write(self) -> None:
        if self.written:
            return
        self.written = True
        # A pass still undecided when the record is written ended with the process, without a step.
        self._settle_undecided()
        self._close_open_region()
        self._write_record(self.raw_record())

    def _write_record(self, record: dict[str, Any]) -> None:
        directory = os.path.dirname(os.path.abspath(self.out_path))
        fd, tmp = tempfile.mkstemp(prefix=".raw-", suffix=".json", dir=directory)
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle)
        os.replace(tmp, self.out_path)

    def _finish(self, reason: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.stop_reason = reason
        self._characterise()
        self._count_state_zeros()
        self.write()
        self._remove_scratch_saves()
        sys.stdout.flush()
        sys.stderr.flush()
        # End now, skipping the rest of the script: its end-of-training code (saving a model,
        # writing results) must not run on a model that was trained for a few iterations only.
        os._exit(0)

    def on_sys_exit(self, status: Any, call: str = "sys.exit") -> None:
        if self.finished or not self.iterations or threading.current_thread() is not threading.main_thread():
            return
        train = self.current_train_state
        in_epoch = train is not None and train.role == "train" and bool(self.epochs) and self.epochs[-1]["end_s"] is None
        sampling = self.sampled and not self.epoch1_truncated
        if not (in_epoch or sampling):
            return  # after its training (`sys.exit(main())`): an ordinary end
        call = f"{call}()" if status is None else f"{call}({status!r})"
        where = [f"in the middle of epoch {len(self.epochs)} (its training DataLoader pass unfinished)"] if in_epoch else []
        if sampling:
            where.append("before sampling had stopped (the steady state rests on these iterations, not on a stable sample)")
        self.exit_mid_training = f"the script called {call} after {len(self.iterations)} iterations, {' and '.join(where)}"

    def on_process_exit(self) -> None:
        if not self.finished and self.exit_mid_training is not None:
            self.stop_reason = "script_exited_mid_training"
            self.notes.append(f"{self.exit_mid_training}: the profile holds what ran until then")
        elif not self.finished and self.sampled and self.epoch1_truncated:
            # The script went on past its sampled epoch to its end (a one-epoch job, or sampling stopped
            # in the last epoch): whatever it does after training ran on a barely trained model.
            self.stop_reason = "script_ended_after_sampling"
            self.notes.append("the script ran to its end after sampling stopped (its last epoch was the sampled one): "
                              "its end-of-training code ran on a model trained for a few iterations; pass --epochs so "
                              "that trainwise stops after timing validation, or profile a run with more epochs")
        if not self.finished:
            self._characterise()
            self._count_state_zeros()
            self.write()
        self._remove_scratch_saves()


