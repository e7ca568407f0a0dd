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
import importlib.abc
import importlib.util
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
import warnings
from collections.abc import Callable
from typing import Any

from trainwise import denormals
from trainwise.allocator import recorded_settings as recorded_allocator_settings
from trainwise.profile import script_epochs as script_epochs_source
from trainwise.agent import stop_rule
from trainwise.agent.autograd_steps import BackwardIterations, reaches_parameters
from trainwise.agent.events import BackwardEnd, EventBus, IterationEnd, ModelForward, OptimizerBuilt, OptimizerStep
from trainwise.agent.regions import EvalRegions, ValidationRegion
from trainwise.agent.watchdog import DEFAULT_NO_ITERATION_LIMIT_S, NoIterationWatchdog

CONFIG_ENV = "TRAINWISE_PROFILE_CONFIG"
RAW_FORMAT_VERSION = 1

_recorder: "Recorder | None" = None


# Optimizer state entries a step takes the square root of (Adam/AdamW, RMSprop, Adagrad)
SQRT_STATE_KEYS = ("exp_avg_sq", "square_avg", "sum")
# Fewer zeros than this cannot cost a step anything measurable: not timed
MIN_ZEROS_TO_TIME = 65_536
# Square roots timed on at most this many state elements (the zeroiest tensors first), ~0.1 s here
TIMED_STATE_ELEMENTS = 16_000_000
# A fused optimizer's whole step is timed instead, on at most this many elements (~2 ms a step here)
FUSED_TIMED_ELEMENTS = 1 << 21
# Zeros in that state are also counted after these optimizer steps (about 1.5x apart: a few dozen counts
# over a whole run, ~1 ms each per 2.5 M elements here, in observer time, never in an iteration): how fast
# training fills the state in, for the prediction (trainwise.predict.state_zeros)
ZERO_COUNT_STEPS = frozenset(sorted({int(round(1.5 ** k)) for k in range(60)} | {2 ** k for k in range(40)}))


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


def _watch_sys_exit(recorder: "Recorder") -> None:
    """A script that ends itself with sys.exit() (or the exit()/quit() builtins) in the middle of training
    looks, at exit, like one that ran to its end: the call is noted so that the profile can say where it
    stopped (on_process_exit). A bare `raise SystemExit` cannot be seen without tracing every call."""
    import builtins

    original_exit = sys.exit

    def exit_noted(status=None):
        recorder.on_sys_exit(status)
        original_exit(status)

    sys.exit = exit_noted
    for name in ("exit", "quit"):
        original = getattr(builtins, name, None)
        if original is not None:
            setattr(builtins, name, _NotedQuitter(original, recorder, name))


def _best_of_five_s(run: Callable[[], Any], before: Callable[[], Any] | None = None) -> float:
    """The shortest of five timed calls of `run` (each after an untimed `before`): the cost without the
    host's interruptions."""
    best = float("inf")
    for _ in range(5):
        if before is not None:
            before()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _fused_step_seconds_per_element(torch: Any, optimizer: Any, group: dict, timed: list,
                                    count: int) -> tuple[float, float, float]:
    """Seconds per element of one step of a copy of a fused optimizer (its class, the settings of its fused
    param `group`) over `count` elements whose square-rooted state is (a) the job's, (b) ones, (c) zeros: what a
    zero in the state costs the fused kernel. A state element that is zero had a zero gradient (an embedding
    row no batch touched), so the copy's gradient is zero where its state is."""
    import inspect

    accepted = inspect.signature(type(optimizer).__init__).parameters
    settings = {key: value for key, value in group.items() if key != "params" and key in accepted}
    dtype = timed[0].dtype
    count = min(count, FUSED_TIMED_ELEMENTS)
    param = torch.nn.Parameter(torch.zeros(count, dtype=dtype))
    probe = type(optimizer)([param], **settings)
    param.grad = torch.zeros(count, dtype=dtype)
    probe.step()  # creates the state
    state = probe.state[param]
    keys = [key for key in SQRT_STATE_KEYS if isinstance(state.get(key), torch.Tensor)]
    job_state = torch.cat([t.detach().reshape(-1)[:count].to(dtype) for t in timed])[:count]
    noise = torch.randn(count, dtype=dtype).abs_().add_(0.1)

    def seconds(values: Any, grad: Any) -> float:
        def reset() -> None:
            for key in keys:
                state[key].copy_(values)
            param.grad = grad

        return _best_of_five_s(probe.step, reset) / count

    return (seconds(job_state, noise * (job_state != 0)), seconds(torch.ones(count, dtype=dtype), noise),
            seconds(torch.zeros(count, dtype=dtype), torch.zeros(count, dtype=dtype)))


class _NotedQuitter:
    """site's exit()/quit() builtins, noting the call first; prints as the original does."""

    def __init__(self, original: Any, recorder: "Recorder", name: str) -> None:
        self._original, self._recorder, self._name = original, recorder, name

    def __repr__(self) -> str:
        return repr(self._original)

    def __call__(self, code=None):
        self._recorder.on_sys_exit(code, call=self._name)
        return self._original(code)


def _watch_argparse(recorder: "Recorder") -> None:
    """The script's own epoch count from its argparse arguments (`--epochs 30`): the N_ep of the run
    the user will launch, kept in the profile so that predict and plan need not be told it again."""
    import argparse

    original = argparse.ArgumentParser.parse_known_args
    skipped = {os.path.normcase(os.path.abspath(path)) for path in (argparse.__file__, __file__)}

    def parse_known_args(parser, *args, **kwargs):
        namespace, extras = original(parser, *args, **kwargs)
        try:
            # Whose parse this is: the first caller outside argparse (a subparser is parsed from inside its parent's parse)
            frame = sys._getframe(1)
            while frame is not None and os.path.normcase(os.path.abspath(frame.f_code.co_filename)) in skipped:
                frame = frame.f_back
            found = script_epochs_source.argparse_reading(
                parser, namespace, args[0] if args else kwargs.get("args"),
                caller_file=frame.f_code.co_filename if frame is not None else "", argv=sys.argv[1:])
            if found is not None:
                epochs, source, rank = found
                recorder.note_script_epochs(epochs, source, rank=rank)
        except Exception:  # noqa: BLE001 - reading the arguments must never break the script
            pass
        return namespace, extras

    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]


class _TorchImportWatcher(importlib.abc.MetaPathFinder):
    """Runs the recorder's torch hooks right after the script's own `import torch` completes."""

    def __init__(self, recorder: "Recorder") -> None:
        self.recorder = recorder

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib protocol
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module
        recorder = self.recorder

        def exec_module(module):
            recorder.mark("torch_import_start")
            original_exec(module)
            recorder.mark("torch_imported")
            recorder.install_torch_hooks()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _FrameworkImportWatcher(importlib.abc.MetaPathFinder):
    """After a framework's Trainer module is imported, patch its Trainer to add trainwise's callback."""

    # module that defines the Trainer class → integration that patches it
    MODULES = {
        "lightning.pytorch.trainer.trainer": "lightning",
        "pytorch_lightning.trainer.trainer": "lightning",
        "transformers.trainer": "huggingface",
        "keras.src.models.model": "keras",  # Model.fit gets the callback
    }

    def __init__(self) -> None:
        self._busy = False

    def find_spec(self, fullname, path=None, target=None):  # noqa: D401 - importlib protocol
        framework = self.MODULES.get(fullname)
        if framework is None or self._busy:
            return None
        self._busy = True
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._busy = False
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module

        def exec_module(module):
            original_exec(module)
            try:
                from trainwise.integrations import _autodetect

                _autodetect.patch_trainer(framework, module)
            except Exception as exc:  # noqa: BLE001 - never break the user's program
                print(f"trainwise: {framework} Trainer not instrumented ({exc})", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _batch_length(batch: Any) -> int | None:
    """Samples in a batch: leading dimension of its first tensor (tuple, list, dict or tensor)."""
    for _ in range(3):
        shape = getattr(batch, "shape", None)
        if shape is not None:
            return int(shape[0]) if len(shape) else 1
        if isinstance(batch, (list, tuple)) and batch:
            batch = batch[0]
        elif isinstance(batch, dict) and batch:
            batch = next(iter(batch.values()))
        else:
            return None
    return None


class _LoaderState:
    """One pass over a DataLoader (one iterator, or one reset of a persistent-workers iterator)."""

    __slots__ = ("role", "key", "batches", "truncate", "record", "info", "grad_at_last_batch", "loader",
                 "loader_index", "undecided", "exhausted_s", "epoch", "reopen_epoch", "before")

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


class _FinishNow(Exception):
    """Internal: the profile is complete."""


class Recorder:
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

    # ---- installation -----------------------------------------------------------------------
    def install_torch_hooks(self) -> None:
        import torch
        import torch.utils.data.dataloader as dataloader_module
        from torch.optim import optimizer as optimizer_module

        self._torch = torch
        self.mark("torch_imported")
        # Before the script computes anything: denormal arithmetic makes CPU steps slow and drifting
        # (trainwise.denormals); `trainwise run` applies the same setting, so the prediction holds.
        self.flush_denormal = denormals.apply_in_process(torch, os.environ)
        recorder = self

        optimizer_module.register_optimizer_step_post_hook(self._on_optimizer_step)

        scaler_class = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler_class is not None:
            original_scaler_step = scaler_class.step

            def scaler_step(scaler, optimizer, *args, **kwargs):
                # GradScaler skips optimizer.step() on inf/NaN gradients; the iteration still ends.
                recorder.in_scaler_step = True
                try:
                    return original_scaler_step(scaler, optimizer, *args, **kwargs)
                finally:
                    recorder.in_scaler_step = False
                    recorder._boundary(optimizer)

            scaler_class.step = scaler_step

        iter_class = dataloader_module._BaseDataLoaderIter
        original_next = iter_class.__next__
        original_iter_init = iter_class.__init__

        def loader_iter_init(iterator, loader, *args, **kwargs):
            original_iter_init(iterator, loader, *args, **kwargs)
            try:
                # Which DataLoader a pass iterates: a pass with no optimizer step is validation only
                # over a loader training does not iterate.
                iterator._trainwise_loader = weakref.ref(loader)
            except (AttributeError, TypeError):  # pragma: no cover - __slots__ iterators or loaders
                pass

        iter_class.__init__ = loader_iter_init

        def loader_next(iterator):
            if recorder.framework is not None or recorder.paused:
                return original_next(iterator)
            state = getattr(iterator, "_trainwise_state", None)
            # A DataLoader with persistent workers hands out the same iterator every epoch, reset
            # (its yield count back to 0): that is a new pass too.
            new_pass = state is None or (state.batches and getattr(iterator, "_num_yielded", 1) == 0)
            undecided = recorder._undecided
            if undecided is not None and (new_pass or state is not undecided):
                # Another pass begins or goes on: the undecided one has ended without an optimizer step.
                recorder._settle_undecided()
            if new_pass:
                state = recorder._new_loader_state(iterator)
            if state.truncate:
                recorder._on_truncated(iterator, state)
                raise StopIteration
            start = time.perf_counter()
            try:
                batch = original_next(iterator)
            except StopIteration:
                recorder._on_exhausted(iterator, state, start)
                raise
            recorder._on_batch(iterator, state, start, time.perf_counter(), batch)
            recorder._last_batch_state = state
            state.grad_at_last_batch = torch.is_grad_enabled()
            return batch

        iter_class.__next__ = loader_next

        module_class = torch.nn.Module
        original_train = module_class.train

        def module_train(module, mode: bool = True):
            # Module.train recurses into children; only the outermost call says what the user asked.
            recorder.eval_depth += 1
            try:
                return original_train(module, mode)
            finally:
                recorder.eval_depth -= 1
                if recorder.eval_depth == 0:
                    recorder.eval_mode = not mode

        module_class.train = module_train

        original_module_init = module_class.__init__

        def module_init(module, *args, **kwargs):
            if "first_module_init" not in recorder.marks:
                recorder.mark("first_module_init")
            return original_module_init(module, *args, **kwargs)

        module_class.__init__ = module_init

        loader_class = torch.utils.data.DataLoader
        original_loader_init = loader_class.__init__

        def loader_init(loader, *args, **kwargs):
            recorder.mark("first_dataloader_init")
            return original_loader_init(loader, *args, **kwargs)

        loader_class.__init__ = loader_init

        optimizer_class = torch.optim.Optimizer
        original_optimizer_init = optimizer_class.__init__

        def optimizer_init(optimizer, *args, **kwargs):
            recorder.mark("first_optimizer_init")
            result = original_optimizer_init(optimizer, *args, **kwargs)
            recorder.mark("first_optimizer_ready")  # the first optimizer pays torch's lazy imports
            recorder.bus.emit(OptimizerBuilt(recorder.now(), id(optimizer)))
            return result

        optimizer_class.__init__ = optimizer_init

        original_save = torch.save
        original_load = torch.load

        def save(obj, f, *args, **kwargs):
            if recorder.sampled and isinstance(f, (str, os.PathLike)):
                if recorder.epoch1_truncated and recorder.framework is None and not recorder.epoch2_still_to_come():
                    # Sampling has stopped and no later epoch is to be timed: this is the script's
                    # end-of-training save of a model trained a few iterations. End the profile here.
                    recorder._finish("stopped_before_save")
                # During sampling, or an end-of-epoch save with epoch 2's start still to be timed: the
                # save goes to a scratch file and sampling goes on.
                f = recorder.scratch_path(f)
            return original_save(obj, f, *args, **kwargs)

        def load(f, *args, **kwargs):
            # A file the script saved during sampling is read back from where it went.
            if recorder.scratch_saves and isinstance(f, (str, os.PathLike)):
                f = recorder.scratch_saves.get(os.path.abspath(os.fspath(f)), f)
            return original_load(f, *args, **kwargs)

        torch.load = load
        torch.save = save

        # Loops without an optimizer object: a backward pass that reaches the model's parameters ends an
        # iteration (trainwise.agent.autograd_steps). Tensor.backward calls torch.autograd.backward.
        original_backward = torch.autograd.backward

        def autograd_backward(tensors, *args, **kwargs):
            if (recorder.primary_optimizer_id is not None or recorder.framework is not None or recorder.explicit_steps
                    or recorder.paused or recorder.finished):
                return original_backward(tensors, *args, **kwargs)
            try:
                reaches = reaches_parameters(tensors)
            except Exception:  # noqa: BLE001 - looking at the graph must never break the backward
                reaches = False
            result = original_backward(tensors, *args, **kwargs)
            recorder.bus.emit(BackwardEnd(recorder.now(), reaches))
            return result

        torch.autograd.backward = autograd_backward

        # Loops without a DataLoader: the first iteration starts at the first forward pass.
        self._forward_hook = torch.nn.modules.module.register_module_forward_pre_hook(self._on_first_forward)
        # A (post) forward hook: only those receive keyword inputs (HF models are called with them). It also
        # finds the model (the module owning the most parameters), whose calls show validation regions.
        self._shape_hook = torch.nn.modules.module.register_module_forward_hook(
            self._capture_model_inputs, with_kwargs=True)

    def _capture_model_inputs(self, module, args, kwargs, output):
        # Runs for every module call until the first optimizer step (iteration 1, warm-up anyway);
        # its cost is observer time.
        started = time.perf_counter()
        try:
            key = id(module)
            torch = self._torch
            if key in self._seen_modules or not torch.is_grad_enabled():
                return None
            self._seen_modules.add(key)
            count = sum(p.numel() for p in module.parameters())
            if count <= self._model_parameters:
                return None
            self._model_ref = weakref.ref(module)
            self._model_parameters = count
            if not self.characterise:
                return None
            from trainwise.predict.characterise import batch_shapes_of, detect_memory_format, detect_precision

            device_type = "cpu"
            for p in module.parameters():
                device_type = p.device.type
                break
            self._model_inputs = batch_shapes_of(args, kwargs)
            self._model_precision = detect_precision(device_type if device_type in ("cuda", "cpu") else "cuda")
            self._model_memory_format = detect_memory_format(args)
        except Exception as exc:  # noqa: BLE001 - never break the user's training
            self.notes.append(f"model input capture failed: {exc}")
        finally:
            self.observer_s += time.perf_counter() - started
        return None

    def _stop_capturing(self) -> None:
        if self._shape_hook is not None:
            self._shape_hook.remove()
            self._shape_hook = None
            self._seen_modules.clear()

    def _characterise(self) -> None:
        """Trace one training step of the captured model on the meta device: once, after the first
        iteration of a sampled profile, at the end of a --full run."""
        if not self.characterise or self._characterise_tried:
            return
        self._characterise_tried = True
        started = time.perf_counter()
        try:
            self._trace_workload()
        finally:
            self.characterise_s = time.perf_counter() - started

    def _probe_level(self, where: str) -> None:
        """Time the host-noise probe here, between two iterations (observer time): the host's level
        beside the sampled steps."""
        if not self.level_probe_s or self._model_on_gpu():
            return
        started = time.perf_counter()
        try:
            from trainwise.profile.host_noise import probe_level_s

            level_s = probe_level_s(self.level_probe_s)
            self.level_probes.append({"where": where, "after_iteration": len(self.iterations), "level_s": level_s})
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"host level probe failed: {exc}")
            self.level_probe_s = 0.0
        finally:
            self.level_probes_s += time.perf_counter() - started

    def _model_on_gpu(self) -> bool:
        """The model's parameters live on a GPU: a CPU level says nothing about its steps."""
        model = self._model_ref() if self._model_ref is not None else None
        try:
            return model is not None and next(model.parameters()).device.type != "cpu"
        except StopIteration:
            return False

    def _trace_workload(self) -> None:
        self._stop_capturing()
        model = self._model_ref() if self._model_ref is not None else None
        if model is None or self._model_inputs is None:
            self.notes.append("workload characterisation skipped: no model forward pass was seen")
            return
        try:
            from trainwise.predict.characterise import optimizer_name_of, trace_training_step

            optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
            name = self.config.get("workload") or type(model).__name__
            # The reason a trace fails is the profile's note, not a warning in the middle of the job's output.
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                char = trace_training_step(model, self._model_inputs, precision=self._model_precision,
                                           optimizer_name=optimizer_name_of(optimizer) if optimizer is not None else "sgd_momentum",
                                           model_name=name, memory_format=self._model_memory_format)
            if char is None:
                why = next((str(w.message).removeprefix("trainwise: workload characterisation skipped: ")
                            for w in caught if issubclass(w.category, RuntimeWarning)), "the model could not be traced")
                self.notes.append(f"workload characterisation skipped: {why}")
                return
            self.characterisation = json.loads(char.model_dump_json())
        except Exception as exc:  # noqa: BLE001 - a profile must survive a failed characterisation
            self.notes.append(f"workload characterisation skipped: {exc}")

    def _on_first_forward(self, module, args):
        if self._forward_hook is not None:
            self._forward_hook.remove()
            self._forward_hook = None
        if self.framework is None:
            self._watchdog.start()
        if self.iter_start is None and not self.iterations and self.framework is None and self._torch.is_grad_enabled():
            self.iter_start = time.perf_counter() - self.perf0 + self.offset_s
            self.mark("first_iteration_start")

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
        self._loader_counter += 1
        state = _LoaderState("val" if validation else "train", self._loader_counter)
        state.loader = getattr(iterator, "_trainwise_loader", None)
        loader = state.loader() if state.loader is not None else None
        if loader is not None:
            try:
                state.loader_index = self._loader_indices.setdefault(loader, len(self._loader_indices))
            except TypeError:  # pragma: no cover - a loader that cannot be weakly referenced
                state.loader_index = None
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
        samples = _batch_length(batch)
        if state.role == "train":
            if self.iter_start is None:
                self.iter_start = start_s
                self.mark("first_iteration_start")
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
            record = state.record
            if record is None:
                record = state.record = self._validation_record(start_s, state)
                self.validations.append(record)
                self._dataloader_validation = True
            self._record_validation_batch(record, start_s, end_s, samples)
        if self.sampled and not self.validation_done and len(record["batch_starts_s"]) >= self.validation_batches \
                and self.epoch1_truncated:
            # Enough validation batches timed: the next request ends this validation pass.
            state.truncate = True

    def _validation_record(self, start_s: float, state: _LoaderState) -> dict[str, Any]:
        return {"epoch": max(0, len(self.epochs) - 1), "start_s": start_s, "end_s": None,
                "batch_starts_s": [], "data_wait_s": [], "samples": 0, "truncated": False,
                "batches_total": state.info.get("batches_per_pass"), "loader": state.loader_index}

    @staticmethod
    def _record_validation_batch(record: dict[str, Any], start_s: float, end_s: float, samples: int | None) -> None:
        record["batch_starts_s"].append(start_s)
        record["data_wait_s"].append(end_s - start_s)
        record["samples"] += samples or 0

    def _on_exhausted(self, iterator, state: _LoaderState, start: float) -> None:
        end_s = start - self.perf0 + self.offset_s
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
            self.iter_start = None
            self._reset_iteration()
        elif state.record is not None:
            state.record["end_s"] = end_s
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
        elif state.record is not None:
            state.record["end_s"] = now
            state.record["truncated"] = True
            self._exclude_from_iteration(state.record)
            self._after_validation(another_may_follow=True)

    def _exclude_from_iteration(self, record: dict[str, Any]) -> None:
        """A validation pass run between two optimizer steps (validation every N steps) is timed as
        validation; the training iteration it interrupted must not count it as well."""
        if self.iter_start is not None and record["start_s"] >= self.iter_start and record["end_s"] is not None:
            self.iter_start += record["end_s"] - record["start_s"]

    # ---- what a pass was: decided once the evidence is in -------------------------------------
    # A pass's role is guessed when it begins (_new_loader_state) and corrected at the one moment that
    # shows it: an optimizer step on batches of a pass taken for validation makes it training
    # (_reclassify_as_training); an undecided pass is training at its first step (_confirm_training)
    # and validation when it ends without one (_settle_undecided).

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

    # ---- loops without a DataLoader or an optimizer (trainwise.agent) -------------------------------
    def _iterations_seen_or_coming(self) -> bool:
        return (bool(self.iterations) or self.finished or self.framework is not None or self.explicit_steps
                or self._backward_iterations.backwards_without_step > 0)

    def _on_no_iteration(self) -> None:
        with self._lock:
            if self._iterations_seen_or_coming():
                return
            self._characterise_tried = True  # nothing trained: no step to trace
            self.notes.append(f"no training iteration within {self.no_iteration_limit_s:g} s of the first forward pass")
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

    def _watch_model_calls(self, first_start_s: float) -> None:
        """After the first iteration: the model's calls show validation regions (and, without a training
        DataLoader, epoch boundaries), one forward pre-hook on the model alone."""
        model = self._model_ref() if self._model_ref is not None else None
        if model is None or self.framework is not None or self.explicit_steps or self._model_forward_hook is not None:
            return
        torch = self._torch
        recorder = self

        def model_called(module, args):
            if recorder.finished or recorder.paused or recorder._dataloader_validation or recorder.framework is not None:
                return None
            recorder.bus.emit(ModelForward(recorder.now(), torch.is_grad_enabled(), module.training))
            if recorder._regions.current is not None:
                recorder._after_region_call(recorder._regions.current)
            return None

        self._model_forward_hook = model.register_forward_pre_hook(model_called)
        if self.current_train_state is None and not self.epochs:
            self.epochs.append({"index": 0, "start_s": first_start_s, "end_s": None, "iterations": len(self.iterations),
                                "truncated": False, "batches_per_epoch": None})

    def _on_region_start(self, region: ValidationRegion) -> None:
        if self._dataloader_validation or self.finished:
            return
        no_loader = self.current_train_state is None
        if no_loader and self.epochs and self.epochs[-1]["end_s"] is None:
            epoch = self.epochs[-1]
            epoch["end_s"] = region.start_s
            epoch["batches_per_epoch"] = epoch["iterations"]
            if "train" not in self.loaders:
                self.loaders["train"] = {"batches_per_pass": epoch["iterations"], "dataset_size": None,
                                         "drop_last": False, "num_workers": 0}
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
            self.loaders["val"] = {"batches_per_pass": len(region.batch_starts_s), "dataset_size": None,
                                   "drop_last": False, "num_workers": 0}
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
        self._snapshot_cost_s = time.perf_counter() - started
        self._snapshot_at_s = self.now()

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

    def _sqrt_state_tensors(self) -> list[tuple[str, Any]]:
        """(state name, tensor) of every CPU floating-point entry the step takes a square root of."""
        torch = self._torch
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if torch is None or optimizer is None:
            return []
        out = []
        for state in list(getattr(optimizer, "state", {}).values()):
            for name in SQRT_STATE_KEYS:
                t = state.get(name) if isinstance(state, dict) else None
                if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_floating_point():
                    out.append((name, t))
        return out

    def _track_state_zeros(self, steps: int) -> None:
        """(steps, zeros) of the square-rooted state, counted in the tensors that had zeros at the
        first count (an embedding's; a dense layer's state fills in at its first step)."""
        try:
            named = self._sqrt_state_tensors()
            if not named:
                return
            counts = [t.numel() - int(self._torch.count_nonzero(t)) for _, t in named]
            if self._sparse_state_elements is None:
                self._sparse_state_elements = sum(t.numel() for (_, t), z in zip(named, counts) if z > 0)
            self.state_zeros_trajectory.append([steps, sum(counts)])
            self._zeros_seen = {"optimizer": type(self._optimizer_ref()).__name__, "elements": sum(t.numel() for _, t in named),
                                "state": "+".join(sorted({name for name, _ in named}))}
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"optimizer state zeros not tracked: {exc}")
            self._zero_tracking_failed = True

    def _count_state_zeros(self) -> None:
        """Zeros in the square-rooted optimizer state, and the cost of a square root of zero here
        (see OptimizerStateZeros); after the measured iterations, never during them."""
        torch = self._torch
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if self.optimizer_state_zeros is not None:
            return
        if (torch is None or optimizer is None) and self.state_zeros_trajectory and self._zeros_seen:
            # The script ended and its optimizer is gone (a --full run reaching its end): what was
            # counted during the run stands, without the timing of the final state.
            steps, zeros = self.state_zeros_trajectory[-1]
            self.optimizer_state_zeros = {**self._zeros_seen, "zeros": zeros, "steps": steps,
                                          "sparse_elements": self._sparse_state_elements,
                                          "trajectory": list(self.state_zeros_trajectory)}
            return
        if torch is None or optimizer is None:
            return
        try:
            elements = zeros = 0
            names: set[str] = set()
            tensors = []
            for name, t in self._sqrt_state_tensors():
                names.add(name)
                # count_nonzero: no temporary mask as large as the state
                tensor_zeros = t.numel() - int(torch.count_nonzero(t))
                tensors.append((tensor_zeros, t))
                elements += t.numel()
                zeros += tensor_zeros
            if not elements:
                return
            record: dict[str, Any] = {"optimizer": type(optimizer).__name__, "state": "+".join(sorted(names)),
                                      "elements": elements, "zeros": zeros, "steps": len(self.iterations),
                                      "sparse_elements": self._sparse_state_elements,
                                      "trajectory": list(self.state_zeros_trajectory)}
            if zeros >= MIN_ZEROS_TO_TIME:
                # Time the square root of the state as it is (a mix of zeros and normal values costs more
                # per zero than all zeros do: 50 % zeros took 16-17 ms per 2.56 M elements here, all
                # zeros 10 ms), of as many ones, and of as many zeros; at most TIMED_STATE_ELEMENTS of
                # the state, scaled to all of it.
                timed = []
                count = 0
                for _, t in sorted(tensors, key=lambda pair: -pair[0]):
                    if count >= TIMED_STATE_ELEMENTS:
                        break
                    timed.append(t)
                    count += t.numel()

                fused = next((group for group in optimizer.param_groups if group.get("fused")), None)
                if fused is not None:
                    # A fused optimizer takes its square roots inside one vectorised kernel, not with
                    # torch.sqrt, and there a zero costs no more than a normal value (the Hugging Face
                    # Trainer's default AdamW: 1.30 ms per 1.28 M zeros, 1.43 ms per 1.28 M ones here,
                    # where torch.sqrt took 5.4 and 0.4 ms): time the optimizer's own fused step instead.
                    state_s, normal_s, zero_s = _fused_step_seconds_per_element(torch, optimizer, fused, timed, count)
                    record["square_root_timed_in"] = "fused step"
                else:
                    def seconds(xs: list) -> float:
                        def roots() -> None:
                            for x in xs:
                                torch.sqrt(x)  # each result freed at once: up to 16 M elements in all

                        return _best_of_five_s(roots)

                    state_s = seconds(timed) / count
                    normal_s = seconds([torch.ones(count)]) / count
                    zero_s = seconds([torch.zeros(min(count, 1 << 20))]) / min(count, 1 << 20)
                    record["square_root_timed_in"] = "torch.sqrt"
                record.update(sqrt_state_ns_per_element=state_s * 1e9, sqrt_zero_ns_per_element=zero_s * 1e9,
                              sqrt_normal_ns_per_element=normal_s * 1e9,
                              step_time_at_stake_s=elements * max(0.0, state_s - normal_s))
            self.optimizer_state_zeros = record
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"optimizer state not inspected: {exc}")

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


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
