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
import threading
import weakref
import time
from typing import Any

from trainwise.agent import cpu_steal, stop_rule
from trainwise.agent.autograd_steps import BackwardIterations
from trainwise.agent.events import EventBus, IterationEnd, ModelForward
from trainwise.agent.torch_patch import process_patch
from trainwise.agent.regions import EvalRegions
from trainwise.agent.watchdog import NoIterationWatchdog
from trainwise.profile import _torch_hooks
from trainwise.profile._capture import WorkloadCapture
from trainwise.profile._epochs_read import ScriptEpochs
from trainwise.profile._loop_reading import LoopReading
from trainwise.profile._no_loader import MIN_SNAPSHOT_INTERVAL_S, LoopsWithoutLoader
from trainwise.profile._optimizer_steps import OptimizerSteps
from trainwise.profile._other_models import OtherModels
from trainwise.profile._ownership import CONFIG_ENV, ProfileOwnership
from trainwise.profile._passes import LoaderPasses, _LoaderState
from trainwise.profile._record import RecordOutput
from trainwise.profile._sampling import Sampling
from trainwise.profile._state_subnormals import StateSubnormalsRecording
from trainwise.profile._state_zeros import ZERO_COUNT_STEPS, StateZerosRecording
from trainwise.profile._watchers import _watch_argparse, _watch_sys_exit
# Other modules import these from here (host_noise, the Lightning integration)
from trainwise.profile._iteration_log import IterationLog
from trainwise.profile._record import RAW_FORMAT_VERSION  # noqa: F401
from trainwise.profile._watchers import _batch_length  # noqa: F401


_recorder: "Recorder | None" = None


def current() -> "Recorder | None":
    return _recorder


def arm() -> None:
    """Create the process-wide recorder from the environment and wait for torch."""
    global _recorder
    if _recorder is not None:
        return
    config = json.loads(os.environ[CONFIG_ENV])
    # The process's one torch patch (trainwise.agent.torch_patch): the recorder subscribes first, so that
    # `trainwise run`'s subscribers see an iteration the recorder has already closed.
    patch = process_patch()
    _recorder = Recorder(config, bus=patch.bus)
    # New interpreters this process starts (spawned workers, subprocesses) arm under `trainwise profile`, where the
    # first process to train owns the profile (trainwise.profile._ownership); otherwise they must not record.
    child_config = _recorder.child_environment_config()
    if child_config is None:
        os.environ.pop(CONFIG_ENV, None)
    else:
        os.environ[CONFIG_ENV] = child_config
    patch.set_clock(_recorder.now, _recorder.offset_s - _recorder.perf0)
    _torch_hooks.subscribe(_recorder, patch)
    patch.when_torch_imported(_recorder.install_torch_hooks)
    # Keras / Lightning / Hugging Face Trainer loops get trainwise's callback from the bootstrap, which installs
    # trainwise.integrations._autodetect's import watcher after arming (profile sits under integrations).
    _watch_sys_exit(_recorder)
    _watch_argparse(_recorder)
    atexit.register(_recorder.on_process_exit)


class _FinishNow(Exception):
    """Internal: the profile is complete."""


class Recorder(OptimizerSteps, Sampling, LoaderPasses, LoopsWithoutLoader, LoopReading, WorkloadCapture, OtherModels,
               StateZerosRecording, StateSubnormalsRecording, ScriptEpochs, RecordOutput, ProfileOwnership):
    """The profile's record of one training process: iterations, epochs, validation, the stop rule's verdict, and
    writing it. Its parts live in the mixins' modules (_optimizer_steps, _passes, _no_loader, _loop_reading, _capture, _state_zeros,
    _state_subnormals), _torch_hooks."""

    def __init__(self, config: dict[str, Any], bus: EventBus | None = None) -> None:
        """`bus`: the events it reads (the process's torch patch's in a profiled process; its own otherwise)."""
        self.config = config
        self.perf0 = time.perf_counter()
        self.wall0 = time.time()
        launch_wall = float(config.get("launch_wall_s") or self.wall0)
        self.offset_s = self.wall0 - launch_wall  # seconds from launch to perf0
        self.sampled = config.get("mode", "sampled") == "sampled"
        self.min_iterations = int(config.get("min_iterations", 20))
        self.max_iterations = int(config.get("max_iterations", 500))
        self.max_seconds = float(config.get("max_profile_seconds", 120.0))
        self.max_epoch_wait_s = float(config.get("max_epoch_wait_s", 600.0))
        self.min_seconds = float(config.get("min_profile_seconds", 0.0))
        self.min_budget_seconds = float(config.get("min_budget_seconds", 0.0))
        self.min_budget_iterations = int(config.get("min_budget_iterations", stop_rule.MIN_BUDGET_ITERATIONS))
        self.averaging_seconds = float(config.get("averaging_seconds", 0.0))
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
        # ... and the optimizer steps it trains for, when a step budget bounds its loop ({"iterations", "source"})
        self.script_iterations: dict[str, Any] | None = None
        self._script_iterations_from_framework = False
        self._script_iterations_rank: tuple = ()
        self._init_ownership(config)
        self.budget_fraction = float(config.get("budget_fraction", 0.02))
        self._stop_settings = stop_rule.StopSettings(
            min_iterations=self.min_iterations, max_iterations=self.max_iterations, max_seconds=self.max_seconds,
            min_seconds=self.min_seconds, min_budget_seconds=self.min_budget_seconds,
            min_budget_iterations=self.min_budget_iterations, averaging_seconds=self.averaging_seconds,
            target_relative_ci=self.target_relative_ci, max_relative_drift=self.max_relative_drift,
            budget_fraction=self.budget_fraction, validation_batches=self.validation_batches, epoch2_iterations=self.epoch2_iterations)
        self.out_path = config["out_path"]

        self.marks: dict[str, float] = {"bootstrap": self.now()}
        self.flush_denormal: bool | None = None  # set once torch is imported
        self.iterations = IterationLog()  # one float array of rows: a long --full or `trainwise run` job stays small
        self.validations: list[dict[str, Any]] = []
        self.epochs: list[dict[str, Any]] = []
        self.loaders: dict[str, dict[str, Any]] = {}
        self.model: dict[str, Any] = {}
        # Optimizers and parameters already in self.model (ids: the recorder must not keep them alive).
        self._described_optimizers: set[int] = set()
        self._described_parameters: set[int] = set()
        self.stop_reason = "script_exited"
        # The job's first accelerator availability query (trainwise.agent.accelerator_queries), if it made one
        self.accelerator_query: dict[str, Any] | None = None
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
        self.iter_backwards = 0
        # The model's training calls in this iteration and how many iterations had each count (its hook is on in
        # loops without a training DataLoader: _no_loader), from the second iteration on
        self.iter_forwards = 0
        self.forward_tally: dict[int, int] = {}
        self.primary_optimizer_id: int | None = None
        # A secondary optimizer stepping with no primary step between (`_secondary_stepped_alone`)
        self._alone_id: int | None = None
        self._alone_steps = 0
        self._alone_first_end_s = 0.0
        self.explicit_steps = False
        # Set by a trainwise.integrations callback (Keras, Lightning, HF Trainer): the framework's own
        # hooks then delimit iterations, epochs and validation, and the DataLoader, optimizer and
        # first-forward hooks record nothing, so that nothing is counted twice.
        self.framework: str | None = None
        # Set by `trainwise run` while a resumed job lets a batch of an epoch finished before its
        # checkpoint through the script's loop body (trainwise.run._child): not an iteration of this run.
        self.paused = False
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
        # A validation pass with a batch out and no end yet: training resuming ends its segment (_end_val_segment)
        self._open_val_state: _LoaderState | None = None
        self._val_segments_kept: dict[int | None, int] = {}  # later segments kept per loader (MAX_VALIDATION_SEGMENTS)
        self._training_loaders: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Each DataLoader iterated, numbered in the order the script first iterated it: the passes over
        # one loader are alike, so validation is modelled per loader (a script that evaluates the
        # training and the validation set after each epoch has two passes of different sizes per epoch)
        self._loader_indices: "weakref.WeakKeyDictionary[Any, int]" = weakref.WeakKeyDictionary()
        self._dataset_loader_indices: dict[tuple[int, Any], tuple[Any, int]] = {}  # (id(dataset), batch size)
        self._next_loader_index = 0
        # The most batches one iteration has consumed (gradient accumulation: several)
        self._most_batches_per_iteration = 0
        self._lock = threading.Lock()
        # Workload characterisation (device model): the module that owns the most parameters among those called in
        # the first training iteration is the model; its first call's input shapes, autocast precision and memory
        # format are kept, and one training step is traced on the meta device after sampling (never while timed).
        self.characterise = bool(config.get("characterise", True))
        self._model_ref: Any = None
        self._model_parameters = 0
        self._model_inputs: Any = None
        self._model_precision = "fp32"
        self._model_memory_format = "nchw"
        self._seen_modules: set[int] = set()
        # a model only compiled code calls (a step compiled whole): the modules built, the first batch's shapes
        self._built_modules, self._first_batch_shapes = [], None  # weakref.refs; the model's input specs
        self._shape_hook = None
        self._optimizer_ref: Any = None
        self.characterisation: dict[str, Any] | None = None
        self.other_models_traced: list[dict[str, Any]] = []
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
        self.level_probe_socket = config.get("level_probe_socket")  # the launcher probes (level_service)
        self.level_probes: list[dict[str, Any]] = []
        self._steal_start = self._steal_end = None  # /proc/stat's counters as the sampled steps begin and end
        self.level_probes_s = 0.0
        # A sampled profile's torch.save to a path writes a scratch file beside it instead (same
        # folder, so the same filesystem and the same cost): the few sampled iterations must not
        # replace the user's checkpoint. {the path's absolute form: scratch path}
        self.scratch_saves: dict[str, str] = {}
        # The agent's events (trainwise.agent.events) and the subscribers that turn them into iterations,
        # epochs and validation where no optimizer step or DataLoader shows them.
        self.bus = bus if bus is not None else EventBus()
        self._backward_iterations = self.bus.subscribe(BackwardIterations(self._on_autograd_iteration))
        self._regions = EvalRegions(self._on_region_start, self._on_region_end)
        self.bus.subscribe(self._regions, events=(ModelForward,))
        self.bus.subscribe(self._regions.on_first_iteration, events=(IterationEnd,))
        self._init_loops_without_loader()
        self._init_other_models()
        # Only `trainwise profile` sets it: inside `trainwise run` the recorder never stops the job.
        # Not in a process the job started: its launched process may still be setting up the one that trains.
        self.no_iteration_limit_s = 0.0 if self.spawned else float(config.get("no_iteration_limit_s") or 0.0)
        self._watchdog = NoIterationWatchdog(self.no_iteration_limit_s, self._iterations_seen_or_coming,
                                             self._on_no_iteration)
        # --full: the record is also written every so often (trainwise.profile._no_loader.next_snapshot_due_s), so
        # that a killed run still reports what it recorded
        self._snapshot_due_s = MIN_SNAPSHOT_INTERVAL_S

    # ---- time -------------------------------------------------------------------------------
    def now(self) -> float:
        """Seconds since the launcher started the process."""
        return time.perf_counter() - self.perf0 + self.offset_s

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, self.now())

    def mark_at(self, name: str, t_s: float) -> None:
        self.marks.setdefault(name, t_s)

    def install_torch_hooks(self) -> None:
        _torch_hooks.install_after_import(self)

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
        self.iter_backwards = 0
        self.iter_forwards = 0

    def end_iteration(self, samples: int | None = None, at_s: float | None = None) -> None:
        """Close the current iteration at this instant, or at `at_s` (an optimizer step seen to end one only
        later), the next one then starting there (used by hooks and the explicit API)."""
        torch = self._torch
        # is_initialized first: it is a flag, is_available asks the driver; its module's flag read first: no call on
        # every step of a CPU job
        if (self.sync_cuda and torch is not None and getattr(torch.cuda, "_initialized", True)
                and torch.cuda.is_initialized()):
            torch.cuda.synchronize()  # CUDA is asynchronous: the boundary is when the GPU is done
        # Every optimizer step of the job runs this: `now()` inlined, the iteration count read once.
        end_s = time.perf_counter() - self.perf0 + self.offset_s if at_s is None else at_s
        iterations, epochs = self.iterations, self.epochs
        start_s = self.iter_start
        if start_s is None:
            # No batch was requested and no forward seen: start at the previous boundary.
            start_s = iterations[-1]["end_s"] if iterations else self.marks.get("torch_imported", 0.0)
            self.mark("first_iteration_start")
        if self._undecided is not None:
            # The pass still running (or collected before the first step) is training.
            self._confirm_training(self._undecided)
        epoch = max(0, len(epochs) - 1)
        batches = self.iter_batches
        if batches > self._most_batches_per_iteration:
            self._most_batches_per_iteration = batches
        count = iterations.add(start_s, end_s, self.iter_data_wait, epoch,
                               samples if samples is not None else self.iter_samples, batches, self.iter_backwards)
        if epochs:
            epochs[-1]["iterations"] += 1
        forwards = self.iter_forwards
        if forwards:
            self.forward_tally[forwards] = self.forward_tally.get(forwards, 0) + 1
            self.iter_forwards = 0
        # _reset_iteration, inline: this runs on every optimizer step of the job
        self.iter_data_wait, self.iter_samples, self.iter_batches, self.iter_backwards = 0.0, 0, 0, 0
        listeners = self.bus.targets.get(IterationEnd)
        if listeners is None or listeners:  # none once the regions have seen the first (every step of the job)
            self.bus.emit(IterationEnd(end_s, count - 1, "explicit" if self.explicit_steps else "hooks"))
        if count == 1:
            if not self._claim_profile():
                return  # another process of the job trains and owns the profile
            self.read_module_settings()
            self._watch_model_calls(start_s)
        if self._model_forward_hook is not None and self.current_train_state is not None:
            self._park_model_hook()
        if not self.sampled and end_s >= self._snapshot_due_s:
            self._write_snapshot(end_s)
        if count in ZERO_COUNT_STEPS and self._optimizer_ref is not None and not self._zero_tracking_failed:
            self._track_state_zeros(count)
        if count == 2 and self._other_counters:
            self._stop_counting_other_models()  # the iteration after the first step: other models' calls counted
        if self.sampled and count == 2:
            # Trace the workload now rather than at the end: its cost (up to seconds for a large or
            # recurrent model) is then part of the elapsed time the cost budget sees, so the profile
            # samples fewer iterations instead of overrunning the budget. Its time is observer time
            # (below): it is in no iteration. A --full run keeps it for the end, outside the
            # training time it measures. After the second iteration: the first counted other models' calls.
            self._characterise()
        if self.sampled and count == 1:
            self._probe_level("before")
        if count == 1:
            self._steal_start = cpu_steal.read_counters()
        if self.sampled:
            self._check_stop(epoch)
        # The next iteration starts after trainwise's own bookkeeping, which an uninstrumented run
        # does not have; its time is kept apart as observer time.
        if at_s is not None:
            self.iter_start = at_s
            return
        resumed_s = time.perf_counter() - self.perf0 + self.offset_s
        self.observer_s += resumed_s - end_s
        self.iter_start = resumed_s

    # ---- explicit API -----------------------------------------------------------------------
    def explicit_step(self, samples: int | None = None) -> None:
        self.explicit_steps = True
        self._stop_capturing()
        self.end_iteration(samples)

    def explicit_iteration_start(self) -> None:
        self.explicit_steps = True
        self.iter_start = self.now()
        self.mark("first_iteration_start")

