"""The profile recorder's subscription to the agent's torch patches (trainwise.agent.torch_patch): it reads
the events and intercepts the batch requests, saves/loads and backward passes it must change or look at."""

from __future__ import annotations

import functools
import os
import time
import weakref
from typing import Any

from trainwise import denormals
from trainwise.agent.autograd_steps import reaches_parameters
from trainwise.agent.trace.live import model_input_of_batch
from trainwise.agent.events import (AcceleratorQueried, BackwardEnd, Event, LoaderBuilt, LoaderIteratorBuilt, ModuleBuilt,
                                    OptimizerBuilding, OptimizerBuilt, OptimizerStep, ProcessExit, TorchImportStarted,
                                    TorchImported, TrainModeSet)


# The events on_event reads (the bus hands it no other: a model call or an iteration's end costs it nothing)
RECORDER_EVENTS = (TrainModeSet, ModuleBuilt, LoaderIteratorBuilt, LoaderBuilt, OptimizerBuilding,
                   OptimizerBuilt, TorchImportStarted, TorchImported, AcceleratorQueried, ProcessExit)


def on_event(recorder: Any, event: Event) -> None:
    """The recorder's handling of the torch patches' events (subscribed on the process's bus)."""
    kind = type(event)
    if kind is TrainModeSet:
        recorder.eval_mode = not event.training
    elif kind is ModuleBuilt:
        if "first_module_init" not in recorder.marks:
            recorder.mark_at("first_module_init", event.t_s)
        if recorder.iter_start is None:  # the job's modules (a compile during training builds its own)
            # references, not a set: the module is not built yet, and a torchmetrics Metric's hash reads its state
            recorder._built_modules.append(weakref.ref(event.module))
    elif kind is LoaderIteratorBuilt:
        try:
            # Which DataLoader a pass iterates: a pass with no optimizer step is validation only
            # over a loader training does not iterate.
            event.iterator._trainwise_loader = weakref.ref(event.loader)
        except (AttributeError, TypeError):  # pragma: no cover - __slots__ iterators or loaders
            pass
    elif kind is LoaderBuilt:
        recorder.mark_at("first_dataloader_init", event.t_s)
    elif kind is OptimizerBuilding:
        recorder.mark_at("first_optimizer_init", event.t_s)
    elif kind is OptimizerBuilt:
        recorder.mark_at("first_optimizer_ready", event.t_s)  # the first optimizer pays torch's lazy imports
    elif kind is TorchImportStarted:
        recorder.mark_at("torch_import_start", event.t_s)
    elif kind is TorchImported:
        recorder.mark_at("torch_imported", event.t_s)
    elif kind is AcceleratorQueried:
        recorder.accelerator_query = {"query": event.query, "caller": event.caller, "t_s": round(event.t_s, 6)}
    elif kind is ProcessExit and event.status == "sigterm":
        # `trainwise run` ending on SIGTERM (after its checkpoint): the record of what ran, written now
        recorder.stop_reason = "sigterm"
        recorder.write()


def subscribe(recorder: Any, patch: Any) -> None:
    """Subscribe `recorder` to `patch` (a trainwise.agent.torch_patch.TorchPatch) and register its interceptors;
    `install_after_import` runs once torch is imported."""
    recorder.patch = patch
    # partials, not lambdas: one Python frame fewer on each batch request and backward pass
    patch.bus.subscribe(functools.partial(on_event, recorder), events=RECORDER_EVENTS)
    # its own subscription, a bound method: the job's every optimizer step goes through one call fewer
    patch.bus.subscribe(recorder.on_optimizer_step, events=(OptimizerStep,))
    # wrappers: on every step of the job the batch request and the backward pass enter them straight from torch
    patch.wrap("next", functools.partial(next_batch_wrapper, recorder))
    patch.intercept("save", functools.partial(save, recorder))
    patch.intercept("load", functools.partial(load, recorder))
    patch.wrap("backward", functools.partial(backward_wrapper, recorder))


def install_after_import(recorder: Any) -> None:
    """Once torch is imported: the launch setting (denormals), and the first iteration's forward hooks."""
    import torch

    recorder._torch = torch
    # Before the script computes anything: denormal arithmetic makes CPU steps slow and drifting
    # (trainwise.denormals); opt-in, and `trainwise run --flush-denormal` applies the same setting.
    recorder.flush_denormal = denormals.apply_in_process(torch, os.environ)
    # Loops without a DataLoader: the first iteration starts at the first forward pass. The post hook
    # receives keyword inputs (HF models are called with them) and finds the model (the module owning
    # the most parameters), whose calls show validation regions. The agent's patch registers both.
    recorder._forward_hook, recorder._shape_hook = recorder.patch.module_forward_hooks(
        pre=recorder._on_first_forward, post=recorder._capture_model_inputs)


def next_batch_wrapper(recorder: Any, proceed: Any) -> Any:
    """The DataLoader iterators' `__next__` while `recorder` records; `proceed` is the one it replaces."""

    def next_batch(iterator: Any) -> Any:
        """A batch request: a new pass, a batch of the current one, its end, or (sampling over) its early end."""
        if recorder._torch is None or recorder.framework is not None or recorder.paused:
            batch = proceed(iterator)
            if recorder.framework is not None and recorder._first_batch_shapes is None and recorder.characterise:
                # the batch a framework's next training batch_begin takes (its model may run only in compiled code)
                recorder._fetched_batch_shapes = model_input_of_batch(batch)
            return batch
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
            batch = proceed(iterator)
        except StopIteration:
            recorder._on_exhausted(iterator, state, start)
            raise
        recorder._on_batch(iterator, state, start, time.perf_counter(), batch)
        recorder._last_batch_state = state
        state.grad_at_last_batch = recorder._torch.is_grad_enabled()
        return batch

    return next_batch


def save(recorder: Any, proceed: Any, obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
    if recorder.sampled and not recorder.paused and isinstance(f, (str, os.PathLike)):
        if recorder.epoch1_truncated and recorder.framework is None and not recorder.epoch2_still_to_come():
            # Sampling has stopped and no later epoch is to be timed: this is the script's
            # end-of-training save of a model trained a few iterations. End the profile here.
            recorder._finish("stopped_before_save")
        # During sampling, or an end-of-epoch save with epoch 2's start still to be timed: the
        # save goes to a scratch file and sampling goes on.
        f = recorder.scratch_path(f)
    with recorder.model_hook_detached():
        return proceed(obj, f, *args, **kwargs)


def load(recorder: Any, proceed: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
    # A file the script saved during sampling is read back from where it went.
    if recorder.scratch_saves and isinstance(f, (str, os.PathLike)):
        f = recorder.scratch_saves.get(os.path.abspath(os.fspath(f)), f)
    return proceed(f, *args, **kwargs)


def backward_wrapper(recorder: Any, proceed: Any) -> Any:
    """torch.autograd.backward while `recorder` records; `proceed` is the one it replaces."""

    def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        # Loops without an optimizer object: a backward pass that reaches the model's parameters ends an
        # iteration (trainwise.agent.autograd_steps). Every backward is counted: a closure optimizer's step
        # runs several, fewer as it converges.
        if not (recorder.paused or recorder.finished):
            recorder.iter_backwards += 1
        if (recorder.primary_optimizer_id is not None or recorder.framework is not None or recorder.explicit_steps
                or recorder.paused or recorder.finished):
            return proceed(tensors, *args, **kwargs)
        try:
            reaches = reaches_parameters(tensors)
        except Exception:  # noqa: BLE001 - looking at the graph must never break the backward
            reaches = False
        result = proceed(tensors, *args, **kwargs)
        # every step of a loop that updates its parameters by hand: `now()` inline
        recorder.bus.emit(BackwardEnd(time.perf_counter() - recorder.perf0 + recorder.offset_s, reaches))
        return result

    return backward
