"""The epoch count a training script sets for itself, read without changing the script.

A profile is usually taken of the very command the user will run (`trainwise profile -- python train.py
--epochs 30`): the 30 is the N_ep of the full run. Read from the script's own argparse namespace when
it parses its arguments (profile child), from the framework's loop settings (Keras `fit(epochs=)`,
Lightning `Trainer(max_epochs=)`, Hugging Face `TrainingArguments.num_train_epochs`), or from a command
line's `--epochs N` (a saved plan's training command). Standard library only: the profile child
imports this before the script runs.
"""

from __future__ import annotations

from typing import Any, Sequence

# Argument names (argparse dests) that mean "train for this many epochs" in common scripts.
EPOCH_ARGUMENT_NAMES = ("epochs", "num_epochs", "n_epochs", "max_epochs", "num_train_epochs", "train_epochs", "nb_epoch")
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


def epochs_in_namespace(namespace: Any) -> tuple[int, str] | None:
    """(epochs, source) from a parsed argparse namespace, or None when it names no epoch count."""
    values = vars(namespace) if hasattr(namespace, "__dict__") else {}
    for name in EPOCH_ARGUMENT_NAMES:
        epochs = whole_epochs(values.get(name))
        if epochs is not None:
            return epochs, f"the script's argparse argument {name}={epochs}"
    return None


def epochs_in_command(command: Sequence[str]) -> tuple[int, str] | None:
    """(epochs, flag) from a command line's `--epochs N` / `--epochs=N` (and the other names above)."""
    words = list(command)
    for i, word in enumerate(words):
        flag, sep, inline = word.partition("=")
        if flag not in _FLAGS:
            continue
        text = inline if sep else (words[i + 1] if i + 1 < len(words) else "")
        try:
            epochs = whole_epochs(float(text)) if "." in text else whole_epochs(int(text))
        except ValueError:
            continue
        if epochs is not None:
            return epochs, flag
    return None
