"""Under `trainwise profile`: give a framework's training entry point trainwise's callback.

Called by the import watcher below, which the bootstraps of `trainwise profile` and `trainwise run` install
after arming the recorder (`watch_framework_imports`), right after the module that defines the framework's
Trainer (or Keras' Model, or Ignite's Engine) is imported, and only in that process. A script that already passes trainwise's
callback keeps its own. Standard library only until a framework is imported.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import inspect
import sys
from types import ModuleType


def watch_framework_imports() -> None:
    """Give every framework Trainer the script imports from now on trainwise's callback."""
    if not any(isinstance(finder, _FrameworkImportWatcher) for finder in sys.meta_path):
        sys.meta_path.insert(0, _FrameworkImportWatcher())


def patch_trainer(framework: str, module: ModuleType) -> None:
    if framework == "lightning":
        _patch_lightning(module)
    elif framework == "huggingface":
        _patch_huggingface(module)
    elif framework == "keras":
        _patch_keras(module)
    elif framework == "ignite":
        from trainwise.integrations import ignite

        ignite.watch_runs(attach_to_trainers=True)  # a trainer engine gets its handler when it runs


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
        for cb in callbacks:  # fit's callbacks are not a callback's to see: told here
            if isinstance(cb, ProfilingCallback):
                cb.early_stopping = [other for other in callbacks if type(other).__name__ == "EarlyStopping"]
        return original_fit(*bound.args, **bound.kwargs)

    fit._trainwise_patched = True  # type: ignore[attr-defined]
    model_class.fit = fit


class _FrameworkImportWatcher(importlib.abc.MetaPathFinder):
    """After a framework's Trainer module is imported, patch its Trainer to add trainwise's callback."""

    # module that defines the Trainer class → integration that patches it
    MODULES = {
        "lightning.pytorch.trainer.trainer": "lightning",
        "pytorch_lightning.trainer.trainer": "lightning",
        "transformers.trainer": "huggingface",
        "keras.src.models.model": "keras",  # Model.fit gets the callback
        "ignite.engine.engine": "ignite",  # Engine.run: a trainer gets the handler
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
                patch_trainer(framework, module)
            except Exception as exc:  # noqa: BLE001 - never break the user's program
                print(f"trainwise: {framework} Trainer not instrumented ({exc})", file=sys.stderr)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
