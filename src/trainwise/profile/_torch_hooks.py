"""The torch patches of the profile recorder, installed once torch is imported."""

from __future__ import annotations

import os
import time
import weakref
from typing import Any

from trainwise import denormals
from trainwise.agent.autograd_steps import reaches_parameters
from trainwise.agent.events import BackwardEnd, OptimizerBuilt


def install(self: Any) -> None:
    """Patch torch once, from outside the script: the optimizer step post-hook, GradScaler.step, DataLoader
    iterators, Module.train/__init__, DataLoader/Optimizer construction, torch.save/load, autograd's
    backward, and the global forward hooks. `self` is the recorder."""
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
