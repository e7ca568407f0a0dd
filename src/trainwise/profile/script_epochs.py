"""The epoch count (or the iteration budget) a training script sets for itself, read without changing the script.

A profile is usually taken of the very command the user will run (`trainwise profile -- python train.py
--epochs 30`): the 30 is the N_ep of the full run. Read from the script's own argparse namespace when
it parses its arguments (profile child), from the framework's loop settings (Keras `fit(epochs=)`,
Lightning `Trainer(max_epochs=)`, Hugging Face `TrainingArguments.num_train_epochs`), or from a command
line's `--epochs N` (a saved plan's training command). A script configured by module-level settings
(`EPOCHS = 10`; nanoGPT's `max_iters`, set by its configurator from `--max_iters=2000`) is read from its
`__main__` globals once it trains. A loop bound by optimizer steps (`--max_steps`, `max_iters`) gives an
iteration budget instead. Standard library only: the profile child imports this before the script runs.
"""

from __future__ import annotations

import argparse
import os
import sys
import sysconfig
import types
from typing import Any, Sequence

# Argument names (argparse dests) that mean "train for this many epochs" in common scripts, the
# unambiguous ones first: `--niter` (the DCGAN example's epoch count) and `--nEpochs` (the
# super-resolution example's) come from the PyTorch examples repository.
EPOCH_ARGUMENT_NAMES = ("epochs", "num_epochs", "n_epochs", "max_epochs", "num_train_epochs", "train_epochs", "nb_epoch",
                        "nEpochs", "nepochs", "n_epoch", "num_epoch", "niter")
# ... and "train for this many optimizer steps" (iterations). Not `max_iter` (LBFGS's closure evaluations a
# step), `steps` or `n_steps` (a rollout's length in reinforcement learning), `iterations` (too general).
ITERATION_ARGUMENT_NAMES = ("max_iters", "max_steps", "max_iterations", "num_iterations", "num_iters", "n_iters",
                            "total_steps", "total_iters", "total_iterations", "num_steps", "train_steps",
                            "num_train_steps", "num_training_steps", "training_steps", "train_iters",
                            "max_train_steps")  # Hugging Face's accelerate and diffusers example scripts
_FLAGS = {f"--{name}": name for name in EPOCH_ARGUMENT_NAMES} | {
    f"--{name.replace('_', '-')}": name for name in EPOCH_ARGUMENT_NAMES}
_STEP_FLAGS = {f"--{name}": name for name in ITERATION_ARGUMENT_NAMES} | {
    f"--{name.replace('_', '-')}": name for name in ITERATION_ARGUMENT_NAMES}


def whole_epochs(value: Any) -> int | None:
    """A positive whole number of epochs, or None (a fraction, a flag, a string, zero or less)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, float) and value.is_integer() and value >= 1:
        return int(value)
    return None


def argument_epochs(value: Any) -> int | None:
    """whole_epochs, also of a number written as text: an argparse argument without `type=` (`default=10`,
    `--epochs 30` parses to the string "30")."""
    if isinstance(value, str):
        try:
            value = float(value.strip()) if "." in value else int(value.strip())
        except ValueError:
            return None
    return whole_epochs(value)


SETTINGS_DEPTH = 2  # minGPT's `config.trainer.max_iters`: the script's globals, their attributes, and theirs
_MAX_SETTINGS_HOLDERS = 500  # objects looked into, at most: reading must stay instant
_MAX_SETTINGS_NAMES = 1000  # a dict larger than this is data (a vocabulary), not settings


def _settings_of(value: Any) -> dict | None:
    """The names a settings holder keeps (a dict, an argparse or simple namespace, an object of a class of the
    user's own code: a config node), read from its `__dict__` (no property runs); None for anything else
    (modules, classes, functions, tensors, models and every other object of an installed package)."""
    if isinstance(value, dict):
        return value if len(value) <= _MAX_SETTINGS_NAMES else None
    if isinstance(value, (type, types.ModuleType, types.FunctionType, types.MethodType)):
        return None
    if isinstance(value, (argparse.Namespace, types.SimpleNamespace)):
        return vars(value)
    owner = sys.modules.get(getattr(type(value), "__module__", "") or "")
    filename = getattr(owner, "__file__", None) or ""
    if owner is None or (filename and is_library_file(filename)) or (not filename and owner.__name__ != "__main__"):
        return None
    attributes = getattr(value, "__dict__", None)
    return attributes if isinstance(attributes, dict) and len(attributes) <= _MAX_SETTINGS_NAMES else None


def _settings_levels(module_globals: dict):
    """[(path, names)] per depth, shallowest first: the globals, then the holders they keep (`config.`), ..."""
    level, seen, looked = [("", module_globals)], {id(module_globals)}, 0
    for _ in range(SETTINGS_DEPTH + 1):
        yield level
        deeper = []
        for path, names in level:
            for name, value in list(names.items()):
                if not isinstance(name, str) or name.startswith("_") or id(value) in seen:
                    continue
                inner = _settings_of(value)
                if inner is None:
                    continue
                seen.add(id(value))
                looked += 1
                if looked > _MAX_SETTINGS_HOLDERS:
                    return
                deeper.append((f"{path}{name}.", inner))
        level = deeper


def _setting(level: list, candidates: Sequence[str]) -> tuple[int, str] | None | bool:
    """The first of `candidates` (any case) set to a plain whole number in this level's holders: (value, source);
    False when holders disagree (two configs, two budgets: not one to trust); None when none is set."""
    wanted = {name.lower(): rank for rank, name in enumerate(candidates)}
    found = []
    for path, names in level:
        for name, value in list(names.items()):
            if not isinstance(name, str) or name.lower() not in wanted or type(value) not in (int, float):
                continue
            if (count := whole_epochs(value)) is not None:
                where = "module-level " if not path else ""
                found.append((wanted[name.lower()], count, f"the script's {where}{path}{name} = {count}"))
    if not found:
        return None
    if len({count for _, count, _ in found}) > 1:
        return False
    _, count, source = min(found)
    return count, source


def globals_reading(module_globals: dict) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    """((epochs, source), (iterations, source)) from a script's settings, each None when absent: module-level
    (`EPOCHS = 10`, nanoGPT's `max_iters` after its configurator applied `--max_iters=2000`), or kept by a
    settings object it holds (minGPT's `config.trainer.max_iters`, an argparse `args.epochs`), the shallowest
    first. Only plain whole numbers count (not a bool, a list, a tensor); holders that disagree at one depth
    give nothing."""
    readings: list = [None, None]
    for level in _settings_levels(module_globals):
        for kind, candidates in enumerate((EPOCH_ARGUMENT_NAMES, ITERATION_ARGUMENT_NAMES)):
            if readings[kind] is None:
                readings[kind] = _setting(level, candidates)
    return tuple(reading or None for reading in readings)  # type: ignore[return-value]


def epochs_in_namespace(namespace: Any, parser: Any = None) -> tuple[int, str] | None:
    """(epochs, source) from a parsed argparse namespace, or None when it names no epoch count."""
    found = _epoch_argument(namespace, parser)
    return None if found is None else (found[1], f"the script's argparse argument {found[0]}={found[1]}")


def _epoch_argument(namespace: Any, parser: Any = None,
                    names: Sequence[str] = EPOCH_ARGUMENT_NAMES) -> tuple[str, int] | None:
    """The first epoch argument (in EPOCH_ARGUMENT_NAMES order, or `names`') whose value the user gave, when
    the parser shows which were given (a value other than its default); else the first one set."""
    values = vars(namespace) if hasattr(namespace, "__dict__") else {}
    found = [(name, epochs) for name in names
             if (epochs := argument_epochs(values.get(name))) is not None]
    if parser is not None:
        for name, epochs in found:
            try:
                default = argument_epochs(parser.get_default(name))
            except Exception:  # noqa: BLE001 - a parser-like object without argparse's API
                break
            if default != epochs:
                return name, epochs
    return found[0] if found else None


def _library_folders() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(os.path.join(os.path.realpath(paths[key]), "") for key in ("stdlib", "platstdlib") if paths.get(key))


def is_library_file(filename: str) -> bool:
    """Code of an installed package or of the standard library, not the user's own (the script and
    the modules beside it, an editable install of the user's project)."""
    if not filename or filename.startswith("<"):
        return filename.startswith("<frozen")
    parts = os.path.normpath(filename).split(os.sep)
    if "site-packages" in parts or "dist-packages" in parts:
        return True
    return os.path.realpath(filename).startswith(_library_folders())


def argparse_reading(parser: Any, namespace: Any, args: Sequence[str] | None, *, caller_file: str,
                     argv: Sequence[str], iterations: bool = False) -> tuple[int, str, tuple[bool, bool, bool]] | None:
    """(epochs, source, rank) of one parse, or None when its namespace names no epoch count.

    A script may see several parsers parsed: a library's (at import, with its own `epochs` default), a
    helper's parse of a list of its own, the script's. The rank orders their readings: one that parsed
    the command line (not a list of the caller's), one parsed by the user's own code rather than an
    installed package (whose `--epochs` is the library's), one whose value was given rather than
    defaulted, in that order. With `iterations`, the step budget (`--max_steps`) instead of the epochs."""
    found = _epoch_argument(namespace, parser, ITERATION_ARGUMENT_NAMES if iterations else EPOCH_ARGUMENT_NAMES)
    if found is None:
        return None
    name, epochs = found
    words = None if args is None else [str(word) for word in args]
    argv = [str(word) for word in argv]
    command_line = words is None or words == argv or (bool(words) and all(word in argv for word in words))
    actions = [action for action in getattr(parser, "_actions", ()) if getattr(action, "dest", None) == name]
    given = bool(actions) and argument_epochs(parser.get_default(name)) != epochs
    library = is_library_file(caller_file)
    source = f"the script's argparse argument {name}={epochs}"
    if library:
        source = f"the argparse argument {name}={epochs} parsed by {os.path.basename(caller_file)} (an installed package)"
    return epochs, source, (command_line, not library, given)


def epochs_in_command(command: Sequence[str], *, steps: bool = False) -> tuple[int, str] | None:
    """(epochs, flag) from a command line's `--epochs N` / `--epochs=N` (and the other names above); the
    last one given, as argparse takes it. With `steps`, the step budget's flags (`--max_iters=2000`)."""
    words = list(command)
    flags = _STEP_FLAGS if steps else _FLAGS
    found = None
    for i, word in enumerate(words):
        flag, sep, inline = word.partition("=")
        if flag not in flags:
            continue
        text = inline if sep else (words[i + 1] if i + 1 < len(words) else "")
        epochs = argument_epochs(text)
        found = None if epochs is None else (epochs, flag)
    return found
