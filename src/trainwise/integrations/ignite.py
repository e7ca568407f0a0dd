"""PyTorch-Ignite integration: a handler that records the trainwise Profile of a trainer `Engine.run`.

    from ignite.engine import create_supervised_trainer, create_supervised_evaluator
    from trainwise.integrations.ignite import ProfilingHandler

    trainer = create_supervised_trainer(model, optimizer, loss)
    profiler = ProfilingHandler(output="profile.json").attach(trainer)   # sampled: stops once stable
    trainer.run(train_loader, max_epochs=10)

Under `trainwise profile -- python ignite_script.py` nothing has to change: the first engine that runs on its
own and whose process function calls `backward` gets this handler (the core hooks stand down so nothing is
counted twice).

What it records, from the trainer's events: an iteration is one optimizer step (torch's global step hook),
from the end of the previous one to the `ITERATION_COMPLETED` of the batch whose step ran (the handler's runs first,
before an evaluation the script starts there), so gradient
accumulation in the process function gives iterations of several batches; the data wait runs from the end of
one iteration to the next `ITERATION_STARTED` (the engine fetches the batch in between). An engine run while
the trainer runs (an evaluator started from an `EPOCH_COMPLETED` handler, over the validation set and often
over the training set too) is a validation pass, timed per batch; passes over different data are estimated
apart. Sampled mode ends epoch 1 early with `terminate_epoch()` (Ignite then fires `EPOCH_COMPLETED`, so the
evaluations run), cuts each evaluation after a few batches with the evaluator's `terminate_epoch()` and stops after
a few epoch-2 iterations (the evaluator's metrics are then those of the batches it ran). The epoch count is the
run's `max_epochs` (a `max_iters` is a step budget).
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import types
import weakref
from pathlib import Path
from typing import Any

from trainwise.optional import require
require("ignite", "trainwise.integrations.ignite")
import torch
# the submodules, not ignite.engine: under `trainwise profile` this is imported while that package is still loading
from ignite.engine.engine import Engine
from ignite.engine.events import Events
from torch.optim.optimizer import register_optimizer_step_post_hook

from trainwise.agent.sink import IntegrationSink, batch_length
from trainwise.integrations._common import dtype_name
from trainwise.profile.framework_sink import Mode, open_sink
from trainwise.profile.runner import ProfileOptions

__all__ = ["ProfilingHandler"]

# the handler attached to each trainer engine, and the engines whose run is in progress (outermost first)
_handlers: "weakref.WeakKeyDictionary[Engine, ProfilingHandler]" = weakref.WeakKeyDictionary()
_running: list[Engine] = []


def _length(value: Any) -> int | None:
    try:
        return int(len(value))
    except Exception:  # noqa: BLE001 - iterables without a length
        return None


def _function_of(process: Any) -> Any:
    """The plain function behind a process function (a partial, a bound method, a callable object)."""
    for _ in range(4):
        if isinstance(process, functools.partial):
            process = process.func
        elif isinstance(process, types.MethodType):
            process = process.__func__
        elif not isinstance(process, types.FunctionType) and callable(process):
            process = type(process).__call__
        else:
            break
    return process


def _code_names(function: Any) -> set[str]:
    code = getattr(function, "__code__", None)
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack.extend(const for const in code.co_consts if isinstance(const, types.CodeType))
    return names


def _referenced_objects(function: Any) -> list[Any]:
    """What the process function uses from outside: its closure's cells, then the module globals it names."""
    found = []
    for cell in getattr(function, "__closure__", None) or ():
        try:
            found.append(cell.cell_contents)
        except ValueError:  # an empty cell
            continue
    module_globals = getattr(function, "__globals__", {})
    found.extend(module_globals[name] for name in sorted(_code_names(function)) if name in module_globals)
    return found


def trains(engine: Engine) -> bool:
    """The engine's process function runs a backward pass (ignite's `create_supervised_trainer` and the usual
    hand-written `train_step`): it trains. An evaluator's does not."""
    return "backward" in _code_names(_function_of(getattr(engine, "_process_function", None)))


def _handlers_of(engine: Engine) -> list[Any]:
    handlers = getattr(engine, "_event_handlers", None) or {}  # ignite keeps no public list of them
    return [entry[0] for entries in handlers.values() for entry in entries]


class ProfilingHandler:
    """Record a trainwise Profile from an Ignite trainer's `run` (`attach(trainer)`), written to `output` when
    training ends outside `trainwise profile`. `mode`: "sampled" (the default: the run is stopped once the profile
    is complete) or "full"; `options`: `trainwise.profile.runner.ProfileOptions`; `workload`: a name for it."""

    def __init__(self, output: str | Path | None = None, *, mode: Mode | None = None,
                 options: ProfileOptions | None = None, workload: str | None = None) -> None:
        self.session: IntegrationSink = open_sink("ignite", mode=mode, output=output, options=options,
                                                  workload=workload)
        self._trainer: Engine | None = None
        self._steps = 0
        self._steps_at_batch = 0
        self._each_batch_steps = False
        self._step_hook: Any = None
        self._stops: list[str] = []

    @property
    def profile(self):
        """The Profile, once training ended (stand-alone use); None before or under `trainwise profile`."""
        return self.session.profile

    def attach(self, trainer: Engine) -> "ProfilingHandler":
        """Record `trainer`'s runs (and the evaluations run while it runs)."""
        self._trainer = trainer
        _handlers[trainer] = self
        watch_runs()
        for event, handler in ((Events.STARTED, self._started), (Events.EPOCH_STARTED, self._epoch_started),
                               (Events.ITERATION_STARTED, self._iteration_started), (Events.COMPLETED, self._completed)):
            trainer.add_event_handler(event, handler)
        # first among their events' handlers: the iteration and the epoch end before the script's evaluations run
        for event, handler in ((Events.ITERATION_COMPLETED, self._iteration_completed),
                               (Events.EPOCH_COMPLETED, self._epoch_completed)):
            trainer.add_event_handler(event, handler)
            entries = (getattr(trainer, "_event_handlers", None) or {}).get(event)
            if entries and entries[-1][0] == handler:
                entries.insert(0, entries.pop())
        return self

    # ---- training -------------------------------------------------------------------------------
    def _started(self, engine: Engine) -> None:
        state, sink = engine.state, self.session
        data = state.dataloader
        epoch_length = state.epoch_length
        sink.train_begin(batches_per_epoch=epoch_length,
                         dataset_size=_length(getattr(data, "dataset", None)) if epoch_length == _length(data) else None,
                         num_workers=int(getattr(data, "num_workers", 0) or 0),
                         drop_last=bool(getattr(data, "drop_last", False)))
        process = engine._process_function
        function = _function_of(process)
        owner = getattr(process, "__self__", None)  # a bound method's object
        if owner is None and not isinstance(process, (types.FunctionType, functools.partial)):
            owner = process  # a callable object
        # a process function's modules and optimizer: its closure, the globals it names, the object it is a method of
        used = _referenced_objects(function) + (list(vars(owner).values()) if hasattr(owner, "__dict__") else [])
        models = [m for m in used if isinstance(m, torch.nn.Module) and any(p.requires_grad for p in m.parameters())]
        optimizers = [o for o in used if isinstance(o, torch.optim.Optimizer)]
        parameters = list({id(p): p for m in models for p in m.parameters()}.values())
        trainable = [p for p in parameters if p.requires_grad]
        if parameters:
            sink.describe_model(
                parameters=sum(p.numel() for p in parameters), trainable_parameters=sum(p.numel() for p in trainable),
                gradient_bytes=sum(p.numel() * p.element_size() for p in trainable), device=str(parameters[0].device),
                parameter_dtypes=[dtype_name(p.dtype) for p in parameters],
                optimizer=type(optimizers[0]).__name__ if optimizers else None)
        if optimizers:
            sink.watch_optimizer(optimizers[0])
        # a process function that steps no torch optimizer (a hand-written update): each batch is an iteration
        self._each_batch_steps = not optimizers and "step" not in _code_names(function)
        self._step_hook = register_optimizer_step_post_hook(self._optimizer_stepped)
        try:
            version = importlib.metadata.version("pytorch-ignite")
        except importlib.metadata.PackageNotFoundError:  # a source checkout on the path
            version = "(version unknown)"
        sink.note(f"ignite {version}, process function {getattr(function, '__qualname__', function)!r}")
        self._note_stops(engine)
        if state.max_iters is not None:
            sink.not_epoch_bound(f"Ignite's Engine.run(max_iters={state.max_iters})", steps=state.max_iters)
        elif state.max_epochs is not None:
            remaining = state.max_epochs - state.epoch  # a run resumed from a checkpoint starts at its epoch
            sink.epochs(remaining, f"Ignite's Engine.run(max_epochs={state.max_epochs})"
                                   + (f", from epoch {state.epoch}" if state.epoch else ""))

    def _note_stops(self, engine: Engine) -> None:
        """An EarlyStopping handler (on the trainer or on an evaluator) may end the run before its epochs."""
        for handler in _handlers_of(engine):
            owner = getattr(handler, "__self__", handler)
            if type(owner).__name__ == "EarlyStopping":
                test = f"EarlyStopping(patience={getattr(owner, 'patience', '?')})"
                if test not in self._stops:
                    self._stops.append(test)
        self.session.stops_early("Ignite's handlers", self._stops)

    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._steps += 1

    def _epoch_started(self, engine: Engine) -> None:
        self.session.epoch_begin()
        self._steps_at_batch = self._steps

    def _iteration_started(self, engine: Engine) -> None:
        self.session.batch_begin()

    def _iteration_completed(self, engine: Engine) -> None:
        stepped = self._each_batch_steps or self._steps > self._steps_at_batch
        self._steps_at_batch = self._steps
        if self.session.batch_end(batch_length(engine.state.batch), ends_iteration=stepped):
            if self.session.finished:
                engine.terminate()
            else:
                engine.terminate_epoch()  # the sampling rule ends this epoch, not training

    def _epoch_completed(self, engine: Engine) -> None:
        self.session.epoch_end()

    def _completed(self, engine: Engine) -> None:
        if self._step_hook is not None:
            self._step_hook.remove()
            self._step_hook = None
        self.session.train_end()

    # ---- evaluation while the trainer runs ------------------------------------------------------
    def evaluate(self, evaluator: Engine, run: Any, data: Any, epoch_length: int | None) -> Any:
        """Run `evaluator` (its `run` is `run`) as a validation pass of the training run."""
        sink = self.session
        self._note_stops(evaluator)
        sink.validation_begin(epoch_length or _length(data), data=data)
        if epoch_length is None:
            sink.set_validation_shape(batches_per_pass=_length(data),
                                      dataset_size=_length(getattr(data, "dataset", None)))

        def batch_started(engine: Engine) -> None:
            sink.validation_batch_begin()

        def batch_completed(engine: Engine) -> None:
            if sink.validation_batch_end(batch_length(engine.state.batch)):
                # enough batches timed (or the profile is complete): the pass ends with its EPOCH_COMPLETED, where
                # Ignite's metrics are computed (terminate() would skip them and the script's handler would fail)
                engine.terminate_epoch()

        evaluator.add_event_handler(Events.ITERATION_STARTED, batch_started)
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, batch_completed)
        try:
            return run()
        finally:
            evaluator.remove_event_handler(batch_started, Events.ITERATION_STARTED)
            evaluator.remove_event_handler(batch_completed, Events.ITERATION_COMPLETED)
            sink.validation_end()
            if sink.finished and self._trainer is not None:
                self._trainer.terminate()


def watch_runs(*, attach_to_trainers: bool = False) -> None:
    """Wrap `Engine.run` once: an engine run inside an attached trainer's run is its evaluation; with
    `attach_to_trainers` (under `trainwise profile`), an engine that runs on its own and trains gets a handler."""
    original = Engine.run
    if getattr(original, "_trainwise_patched", False):
        original._trainwise_attach |= attach_to_trainers  # type: ignore[attr-defined]
        return
    signature = inspect.signature(original)

    @functools.wraps(original)
    def run(engine, *args, **kwargs):
        outer = next((_handlers[e] for e in reversed(_running) if e in _handlers and e is not engine), None)
        if outer is None and not _running and run._trainwise_attach and engine not in _handlers and trains(engine):
            ProfilingHandler().attach(engine)
        _running.append(engine)
        try:
            if outer is None:
                return original(engine, *args, **kwargs)
            bound = signature.bind(engine, *args, **kwargs)
            return outer.evaluate(engine, lambda: original(engine, *args, **kwargs), bound.arguments.get("data"),
                                  bound.arguments.get("epoch_length"))
        finally:
            _running.pop()

    run._trainwise_patched = True  # type: ignore[attr-defined]
    run._trainwise_attach = attach_to_trainers  # type: ignore[attr-defined]
    Engine.run = run
