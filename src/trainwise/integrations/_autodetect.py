"""Under `trainwise profile`: give a framework's training entry point trainwise's callback.

Called by the profiled process's import watcher (`trainwise.profile._child`) right after the module
that defines the framework's Trainer (or Keras' Model) is imported, and only in that process. A
script that already passes trainwise's callback keeps its own.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType


def patch_trainer(framework: str, module: ModuleType) -> None:
    if framework == "lightning":
        _patch_lightning(module)
    elif framework == "huggingface":
        _patch_huggingface(module)
    elif framework == "keras":
        _patch_keras(module)


def _add_after_init(trainer_class: type, callback_module: str, registered, add) -> None:
    """Wrap `trainer_class.__init__` so every new trainer gets the integration's ProfilingCallback
    (once: `registered(trainer)` lists the callbacks it already has, `add(trainer, cb)` adds one)."""
    if getattr(trainer_class.__init__, "_trainwise_patched", False):
        return
    original_init = trainer_class.__init__

    @functools.wraps(original_init)
    def init(trainer, *args, **kwargs):
        original_init(trainer, *args, **kwargs)
        callback_class = importlib.import_module(callback_module).ProfilingCallback
        if not any(isinstance(cb, callback_class) for cb in registered(trainer)):
            add(trainer, callback_class())

    init._trainwise_patched = True  # type: ignore[attr-defined]
    trainer_class.__init__ = init


def _patch_lightning(module: ModuleType) -> None:
    _add_after_init(module.Trainer, "trainwise.integrations.lightning", lambda trainer: trainer.callbacks,
                    lambda trainer, cb: trainer.callbacks.append(cb))


def _patch_huggingface(module: ModuleType) -> None:
    _add_after_init(module.Trainer, "trainwise.integrations.huggingface",
                    lambda trainer: trainer.callback_handler.callbacks, lambda trainer, cb: trainer.add_callback(cb))


def _patch_keras(module: ModuleType) -> None:
    model_class = module.Model
    if getattr(model_class.fit, "_trainwise_patched", False):
        return
    original_fit = model_class.fit
    signature = inspect.signature(original_fit)

    @functools.wraps(original_fit)
    def fit(model, *args, **kwargs):
        from trainwise.integrations.keras import ProfilingCallback

        bound = signature.bind(model, *args, **kwargs)
        callbacks = list(bound.arguments.get("callbacks") or [])
        if not any(isinstance(cb, ProfilingCallback) for cb in callbacks):
            callbacks.append(ProfilingCallback())
            bound.arguments["callbacks"] = callbacks
        return original_fit(*bound.args, **bound.kwargs)

    fit._trainwise_patched = True  # type: ignore[attr-defined]
    model_class.fit = fit
