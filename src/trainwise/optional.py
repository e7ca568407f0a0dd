"""Optional dependencies: the core install (profile, predict, plan, report) leaves out what only some
commands use; `require` imports such a module or stops with one line naming the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from trainwise.errors import TrainwiseError

# top-level import name -> (the pip package, the trainwise extra that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "webdataset": ("webdataset", "pipeline"),
    "zstandard": ("zstandard", "pipeline"),
    "lz4": ("lz4", "pipeline"),
    "h5py": ("h5py", "pipeline"),
    "soundfile": ("soundfile", "pipeline"),
    "tokenizers": ("tokenizers", "pipeline"),
    "safetensors": ("safetensors", "workloads"),
    "torchvision": ("torchvision", "workloads"),
    "sklearn": ("scikit-learn", "workloads"),
    "hivemind": ("hivemind", "hivemind"),
    "keras": ("keras", "keras"),
    "lightning": ("lightning", "lightning"),
    "ignite": ("pytorch-ignite", "ignite"),
    "transformers": ("transformers", "hf"),
    "accelerate": ("accelerate", "hf"),
    "sky": ("skypilot", "sky"),
}


class MissingExtraError(TrainwiseError, ImportError):
    """An optional dependency is not installed (an ImportError too, for code that probes for it)."""


def _package_and_extra(module: str) -> tuple[str, str]:
    """The pip package and the trainwise extra behind an import name such as "sklearn.datasets"."""
    top = module.split(".", 1)[0]
    return EXTRAS.get(top, (top, "all"))


def missing_extra(module: str, what: str | None = None) -> MissingExtraError:
    """The one-line error for `module` (an import name such as "sklearn.datasets") not being installed."""
    package, extra = _package_and_extra(module)
    needs = f"{what} needs {package}" if what else f"{package} is not installed"
    return MissingExtraError(f"{needs}: pip install 'trainwise[{extra}]'")


class BrokenExtraError(TrainwiseError, ImportError):
    """An optional dependency is installed but fails to import (e.g. a torchvision built for another torch)."""


def require(module: str, what: str | None = None) -> ModuleType:
    """Import `module`; when it (or its top-level package) is missing, raise `missing_extra`; when it is
    installed but its import fails (a build for another torch, a missing shared library), raise
    `BrokenExtraError` naming the package and the first line of its error."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            raise missing_extra(module, what) from None
        raise _broken(module, exc) from exc
    except Exception as exc:  # noqa: BLE001 - any failure inside an installed package is a broken install
        raise _broken(module, exc) from exc


def _broken(module: str, exc: BaseException) -> BrokenExtraError:
    package = _package_and_extra(module)[0]
    first_line = (str(exc).strip().splitlines() or [""])[0][:200]
    return BrokenExtraError(f"{package} is installed but cannot be imported ({type(exc).__name__}: {first_line}): "
                            f"reinstall a {package} built for this Python and torch (pip install --force-reinstall "
                            f"'{package}')")
