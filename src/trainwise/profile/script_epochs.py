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

import os
import sysconfig
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
                            "num_train_steps", "num_training_steps", "training_steps", "train_iters")
_FLAGS = {f"--{name}": name for name in EPOCH_ARGUMENT_NAMES} | {
    f"--{name.replace('_', '-')}": name for name in EPOCH_ARGUMENT_NAMES}


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


def _lowercase_names(values: dict) -> dict[str, Any]:
    """`values` keyed by lower-case name; of names equal but for case (`EPOCHS`, `epochs`), the first."""
    found: dict[str, Any] = {}
    for name, value in values.items():
        if isinstance(name, str):
            found.setdefault(name.lower(), (name, value))
    return found


def globals_reading(module_globals: dict) -> tuple[tuple[int, str] | None, tuple[int, str] | None]:
    """((epochs, source), (iterations, source)) from a script's module-level settings, each None when
    absent: `EPOCHS = 10`, `num_epochs = 5`, nanoGPT's `max_iters` (after its configurator applied the
    command line's `--max_iters=2000`). Only plain whole numbers count (not a bool, a list, a tensor)."""
    names = _lowercase_names(module_globals)

    def first(candidates: Sequence[str]) -> tuple[int, str] | None:
        for candidate in candidates:
            entry = names.get(candidate.lower())
            if entry is None or type(entry[1]) not in (int, float):
                continue
            value = whole_epochs(entry[1])
            if value is not None:
                return value, f"the script's module-level {entry[0]} = {value}"
        return None

    return first(EPOCH_ARGUMENT_NAMES), first(ITERATION_ARGUMENT_NAMES)


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


def epochs_in_command(command: Sequence[str]) -> tuple[int, str] | None:
    """(epochs, flag) from a command line's `--epochs N` / `--epochs=N` (and the other names above); the
    last one given, as argparse takes it."""
    words = list(command)
    found = None
    for i, word in enumerate(words):
        flag, sep, inline = word.partition("=")
        if flag not in _FLAGS:
            continue
        text = inline if sep else (words[i + 1] if i + 1 < len(words) else "")
        epochs = argument_epochs(text)
        found = None if epochs is None else (epochs, flag)
    return found
