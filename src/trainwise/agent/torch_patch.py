"""The one place that patches torch in the user's training process; both `trainwise profile` (the recorder)
and `trainwise run` (checkpointing, SIGTERM, DDP, Hivemind) subscribe to what it emits.

Patched once, after the script's own `import torch` (so that what the script sets before it, such as
OMP_NUM_THREADS, keeps its effect): Module.__init__/train, DataLoader.__init__, its iterators' __init__
and __next__, DataLoader.__iter__, Optimizer.__init__/load_state_dict, the global optimizer step
post-hook, GradScaler.__init__/step, LR schedulers' __init__, DistributedDataParallel.__init__,
torch.save/load, torch.autograd.backward and the accelerator availability queries (until the job's first);
torch's global module forward hooks are registered here too. Each patch emits a typed event (trainwise.agent.events)
on the process's bus.

Four points change what the script sees, not just observe it: a batch request (a sampled profile ends
an epoch early; a resumed run skips finished epochs), a pass's iterator (resume), a save or load path
(a sampled profile writes scratch files) and a backward pass (whether to look at its graph). There,
subscribers register an *interceptor*: `fn(proceed, *args, **kwargs)`, which calls `proceed(...)` to go
on; the last one registered runs outermost, as stacked monkey-patches did. On the two points every step
passes (a batch request, a backward pass) a subscriber may instead register a *wrapper*, `make(proceed)`
returning the function to call: when the chain's head is such a function, it is itself what torch calls, with
no frame between (in a running loop each frame costs microseconds: its code and data are out of cache
after torch's kernels). Standard library and torch only.
"""

from __future__ import annotations

import functools
import os
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from trainwise.agent import warning_origin
from trainwise.agent.accelerator_queries import AcceleratorQueries
from trainwise.agent.import_watch import watch_import
from trainwise.agent.compiled_code import (CompiledCodeSafeHook, agent_caused_warning, register_hook,
                                           run_eagerly_under_compile, trainwise_code_objects, when_dynamo_imported,
                                           with_agent_hooks_eager)
from trainwise.agent.events import (AcceleratorQueried, CheckpointLoad, CheckpointSave, DdpBuilt, EventBus, LoaderBuilt,
                                    LoaderIteratorBuilt, ModuleBuilt, OptimizerBuilding, OptimizerBuilt,
                                    OptimizerStateLoad, OptimizerStep, ScalerBuilt, SchedulerBuilt,
                                    TorchImported, TorchImportStarted, TrainModeSet)

# The points where subscribers may change what the script sees (see the module's docstring).
INTERCEPTION_POINTS = ("next", "loader_iter", "save", "load", "backward", "optimizer_new")
# The points every training step passes: their patched attribute is the chain's head itself when it can be
DIRECT_POINTS = ("next", "backward")


def entry_owner(torch: Any, point: str) -> tuple[Any, str]:
    """Where torch looks up a DIRECT_POINTS point: (object, attribute name)."""
    if point == "next":
        return torch.utils.data.dataloader._BaseDataLoaderIter, "__next__"
    return torch.autograd, "backward"


class Wrapper:
    """An interceptor given as `make(proceed) -> function`: the function runs in place of `proceed`."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[Callable], Callable]) -> None:
        self.make = make


class TorchPatch:
    """The process's patches and its event bus. `now` is the agent's clock (the recorder sets it to
    seconds since the launcher started the process)."""

    def __init__(self, bus: EventBus | None = None, now: Callable[[], float] = time.perf_counter) -> None:
        self.bus = bus or EventBus()
        self._now = now
        # perf_counter's shift to the agent's clock, when it is one: the hook on every optimizer step reads it
        # without a call
        self.perf_counter_shift_s: float | None = None
        self.installed = False
        self.torch: Any = None
        self.in_scaler_step = False
        self._train_depth = 0
        self._interceptors: dict[str, list[Callable]] = {point: [] for point in INTERCEPTION_POINTS}
        self._chains: dict[str, Callable] = {}
        self._originals: dict[str, Callable] = {}
        self._entries: dict[str, Callable] = {}  # what a DIRECT_POINTS attribute was set to
        self._on_import: list[Callable[[], None]] = []
        self._watching = False
        self.accelerator_queries: AcceleratorQueries | None = None

    @property
    def now(self) -> Callable[[], float]:
        return self._now

    @now.setter
    def now(self, now: Callable[[], float]) -> None:
        self._now, self.perf_counter_shift_s = now, None

    def set_clock(self, now: Callable[[], float], perf_counter_shift_s: float) -> None:
        """The agent's clock `now`, equal to `time.perf_counter() + perf_counter_shift_s`."""
        self._now, self.perf_counter_shift_s = now, perf_counter_shift_s

    # ---- interceptors -----------------------------------------------------------------------
    def intercept(self, point: str, interceptor: Callable) -> Callable:
        """Run `interceptor(proceed, *args, **kwargs)` around `point`, outside those registered before."""
        if point not in self._interceptors:
            raise ValueError(f"no interception point {point!r}; one of {', '.join(INTERCEPTION_POINTS)}")
        self._interceptors[point].append(interceptor)
        self._compose(point)
        if point == "optimizer_new" and self.installed:
            self._patch_optimizer_new()
        return interceptor

    def wrap(self, point: str, make: Callable[[Callable], Callable]) -> Wrapper:
        """Run `make(proceed)` (a function of the point's arguments) in place of `point`'s chain so far."""
        if point not in DIRECT_POINTS:
            raise ValueError(f"no wrapping point {point!r}; one of {', '.join(DIRECT_POINTS)}")
        return self.intercept(point, Wrapper(make))

    def _compose(self, point: str) -> None:
        original = self._originals.get(point)
        if original is None:
            return
        chain = original
        for interceptor in self._interceptors[point]:
            chain = interceptor.make(chain) if isinstance(interceptor, Wrapper) else functools.partial(interceptor, chain)
        self._chains[point] = chain
        installed = self._entries.get(point)
        if installed is not None:
            # Added after the patch: the new head replaces the entry while it is still the attribute (a wrapper the
            # script put over it since keeps calling the old one)
            if getattr(*entry_owner(self.torch, point), None) is installed:
                self._install_entry(point)

    def _install_entry(self, point: str) -> None:
        """Set the attribute torch calls at a DIRECT_POINTS point: the chain's head when it is a Python function
        (the original, with nobody intercepting; a wrapper's function), else a lambda calling the chain."""
        chain = self._chains[point]
        # a partial is no method (as __next__ it would get no iterator): a lambda around it is
        entry = chain if isinstance(chain, types.FunctionType) else lambda *args, **kwargs: chain(*args, **kwargs)
        owner, name = entry_owner(self.torch, point)
        setattr(owner, name, entry)
        self._entries[point] = entry

    def _set_original(self, point: str, original: Callable) -> None:
        self._originals[point] = original
        self._compose(point)

    # ---- torch import -----------------------------------------------------------------------
    def when_torch_imported(self, callback: Callable[[], None]) -> None:
        """Patch torch and call `callback` right after the script imports torch (now, if it has)."""
        if self.installed:
            callback()
            return
        self._on_import.append(callback)
        if "torch" in sys.modules:
            self._torch_ready()
        elif not self._watching:
            self._watching = True
            watch_import("torch", self._torch_ready, before=lambda: self.bus.emit(TorchImportStarted(self.now())))

    def _torch_ready(self) -> None:
        if not self.installed:
            self.install()
            self.bus.emit(TorchImported(self.now()))
        callbacks, self._on_import = self._on_import, []
        for callback in callbacks:
            callback()

    # ---- the patches ------------------------------------------------------------------------
    def install(self) -> None:
        """Patch torch (once per process)."""
        if self.installed:
            return
        self.installed = True
        import torch

        self.torch = torch
        warning_origin.install()  # library warnings keep naming the script's code, not these wrappers
        # torch.compile warns of global module hooks: while the only ones are the agent's, the plain run would not
        warning_origin.suppress(agent_caused_warning(torch))
        self._patch_constructors(torch)
        self._patch_steps(torch)
        self._patch_loaders(torch)
        self._patch_files_and_backward(torch)
        # whether the job would use an accelerator where there is one (a CPU-only command leaves a GPU idle)
        self.accelerator_queries = AcceleratorQueries(
            lambda query, caller: self.bus.emit(AcceleratorQueried(self.now(), query, caller)))
        self.accelerator_queries.install(torch)
        when_dynamo_imported(self.accelerator_queries.watch_compiles)
        if self._interceptors["optimizer_new"]:
            self._patch_optimizer_new()
        # Called from compiled code, trainwise's code runs as plain Python, never compiled by dynamo; the hooks
        # call nothing but trainwise's (the backward interceptor calls the job's backward: not recursive)
        hooks = [CompiledCodeSafeHook.__call__.__code__, self._step_post_hook.__code__]
        when_dynamo_imported(lambda: (run_eagerly_under_compile(trainwise_code_objects()),
                                      run_eagerly_under_compile(hooks, recursive=True)))

    def _patch_constructors(self, torch: Any) -> None:
        patch, bus = self, self.bus

        def before_init(cls: Any, make_event: Callable[[Any], Any]) -> None:
            original = cls.__init__

            def init(obj, *args, **kwargs):
                bus.emit(make_event(obj))
                return original(obj, *args, **kwargs)

            cls.__init__ = init

        before_init(torch.nn.Module, lambda module: ModuleBuilt(patch.now(), module))
        before_init(torch.utils.data.DataLoader, lambda loader: LoaderBuilt(patch.now()))
        scheduler_class = torch.optim.lr_scheduler.LRScheduler
        before_init(scheduler_class, lambda scheduler: SchedulerBuilt(patch.now(), scheduler))
        plateau = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
        if plateau is not None and not issubclass(plateau, scheduler_class):
            before_init(plateau, lambda scheduler: SchedulerBuilt(patch.now(), scheduler))
        scaler_class = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler_class is not None:
            before_init(scaler_class, lambda scaler: ScalerBuilt(patch.now(), scaler))

        optimizer_class = torch.optim.Optimizer
        original_optimizer_init = optimizer_class.__init__

        def optimizer_init(optimizer, *args, **kwargs):
            bus.emit(OptimizerBuilding(patch.now()))
            result = original_optimizer_init(optimizer, *args, **kwargs)
            bus.emit(OptimizerBuilt(patch.now(), id(optimizer), optimizer))
            return result

        optimizer_class.__init__ = optimizer_init
        original_load = optimizer_class.load_state_dict

        def optimizer_load_state_dict(optimizer, *args, **kwargs):
            bus.emit(OptimizerStateLoad(patch.now(), optimizer, sys._getframe(1)))
            return original_load(optimizer, *args, **kwargs)

        optimizer_class.load_state_dict = optimizer_load_state_dict

        module_class = torch.nn.Module
        original_compile = getattr(module_class, "compile", None)  # torch >= 2.2
        if original_compile is not None:
            def module_compile(module, *args, **kwargs):
                result = original_compile(module, *args, **kwargs)
                compiled_call = getattr(module, "_compiled_call_impl", None)
                if compiled_call is not None:  # the agent's hooks run around the compiled code, not in it
                    module._compiled_call_impl = with_agent_hooks_eager(torch, module, compiled_call)
                return result

            module_class.compile = module_compile
        original_train = module_class.train

        def module_train(module, mode: bool = True):
            # Module.train recurses into children; only the outermost call says what the user asked.
            patch._train_depth += 1
            try:
                return original_train(module, mode)
            finally:
                patch._train_depth -= 1
                if patch._train_depth == 0:
                    bus.emit(TrainModeSet(patch.now(), bool(mode)))

        module_class.train = module_train

        parallel = getattr(torch.nn, "parallel", None)
        ddp_class = getattr(parallel, "DistributedDataParallel", None)
        if ddp_class is not None:
            original_ddp_init = ddp_class.__init__

            def ddp_init(module, *args, **kwargs):
                original_ddp_init(module, *args, **kwargs)
                bus.emit(DdpBuilt(patch.now(), module))

            ddp_class.__init__ = ddp_init

    def _patch_steps(self, torch: Any) -> None:
        from torch.optim import optimizer as optimizer_module

        patch, bus, perf_counter = self, self.bus, time.perf_counter

        def step_post_hook(optimizer, args, kwargs):
            # every optimizer step of the job: the clock read without a call where it can be
            shift = patch.perf_counter_shift_s
            t_s = perf_counter() + shift if shift is not None else patch.now()
            bus.emit(OptimizerStep(t_s, id(optimizer), optimizer, in_scaler_step=patch.in_scaler_step))

        optimizer_module.register_optimizer_step_post_hook(step_post_hook)
        self._step_post_hook = step_post_hook
        scaler_class = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler_class is None:
            return
        original_scaler_step = scaler_class.step

        def scaler_step(scaler, optimizer, *args, **kwargs):
            # GradScaler skips optimizer.step() on inf/NaN gradients; the iteration still ends.
            patch.in_scaler_step = True
            try:
                return original_scaler_step(scaler, optimizer, *args, **kwargs)
            finally:
                patch.in_scaler_step = False
                bus.emit(OptimizerStep(patch.now(), id(optimizer), optimizer, via_scaler=True))

        scaler_class.step = scaler_step

    def _patch_loaders(self, torch: Any) -> None:
        import torch.utils.data.dataloader as dataloader_module

        patch, bus = self, self.bus
        iter_class = dataloader_module._BaseDataLoaderIter
        original_iter_init = iter_class.__init__

        def loader_iter_init(iterator, loader, *args, **kwargs):
            original_iter_init(iterator, loader, *args, **kwargs)
            bus.emit(LoaderIteratorBuilt(patch.now(), iterator, loader))

        iter_class.__init__ = loader_iter_init
        self._set_original("next", iter_class.__next__)
        self._install_entry("next")
        loader_class = dataloader_module.DataLoader
        self._set_original("loader_iter", loader_class.__iter__)
        loader_class.__iter__ = lambda loader: patch._chains["loader_iter"](loader)

    def _patch_files_and_backward(self, torch: Any) -> None:
        patch, bus = self, self.bus
        original_save, original_load = torch.save, torch.load
        self._set_original("save", original_save)
        self._set_original("load", original_load)

        def save(obj, f, *args, **kwargs):
            bus.emit(CheckpointSave(patch.now(), os.fspath(f) if isinstance(f, (str, os.PathLike)) else None))
            return patch._chains["save"](obj, f, *args, **kwargs)

        def load(f, *args, **kwargs):
            bus.emit(CheckpointLoad(patch.now(), os.fspath(f) if isinstance(f, (str, os.PathLike)) else None))
            return patch._chains["load"](f, *args, **kwargs)

        torch.save, torch.load = save, load
        # Tensor.backward calls torch.autograd.backward.
        self._set_original("backward", torch.autograd.backward)
        self._install_entry("backward")

    # ---- torch's global module hooks ---------------------------------------------------------
    def module_forward_hooks(self, pre: Callable | None = None, post: Callable | None = None) -> list[Any]:
        """Register torch's global module forward hooks for a subscriber, here with the other patches:
        `pre(module, args)` before every module's forward, `post(module, args, kwargs, output)` after it
        (only a post hook receives keyword inputs). The handles' remove() takes them out: the recorder
        keeps them for the first iteration only (every module call of every step pays for them). Code that
        torch.compile traces runs none of them (trainwise.agent.compiled_code)."""
        torch = self.torch
        hooks = torch.nn.modules.module
        handles = []
        if pre is not None:
            handles.append(register_hook(torch, hooks.register_module_forward_pre_hook, pre))
        if post is not None:
            handles.append(register_hook(torch, hooks.register_module_forward_hook, post, with_kwargs=True))
        return handles

    def _patch_optimizer_new(self) -> None:
        if "optimizer_new" in self._originals:
            return
        optimizer_class = self.torch.optim.Optimizer
        # Returning an object that is not an instance of `cls` makes Python skip cls.__init__.
        self._set_original("optimizer_new", lambda cls, *args, **kwargs: object.__new__(cls))
        patch = self
        optimizer_class.__new__ = staticmethod(lambda cls, *args, **kwargs: patch._chains["optimizer_new"](cls, *args, **kwargs))


_process_patch: TorchPatch | None = None


def process_patch() -> TorchPatch:
    """The process's one TorchPatch (created on first use)."""
    global _process_patch
    if _process_patch is None:
        _process_patch = TorchPatch()
    return _process_patch
