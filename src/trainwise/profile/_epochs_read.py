"""The epoch count the script sets for itself, as the recorder keeps it (argparse readings ranked, a
framework's loop settings final). A mixin of the recorder.
"""

from __future__ import annotations

from typing import Any

from trainwise.profile import script_epochs as script_epochs_source


class ScriptEpochs:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def note_script_epochs(self, epochs: Any, source: str, *, framework: bool = False, rank: tuple = ()) -> None:
        """Keep the script's own epoch count. Of argparse readings, the best ranked
        (script_epochs.argparse_reading), the later of equals; a framework's loop settings replace them
        all, and the first framework statement is final (not_epoch_bound included)."""
        if self._script_epochs_from_framework:
            return
        if framework:
            value = script_epochs_source.whole_epochs(epochs)
            self._script_epochs_from_framework = True
            self.script_epochs = None if value is None else {"epochs": value, "source": source}
            return
        value = script_epochs_source.argument_epochs(epochs)
        if value is None or (self.script_epochs is not None and tuple(rank) < self._script_epochs_rank):
            return
        self.script_epochs = {"epochs": value, "source": source}
        self._script_epochs_rank = tuple(rank)
        self._pass_script_epochs_on()

    def note_not_epoch_bound(self, limit: str) -> None:
        """The framework's loop ends on something else than an epoch count (a step or time limit, none at
        all): an argparse `--epochs` of the script is not what it runs, and the profile keeps no count."""
        if self._script_epochs_from_framework:
            return
        dropped = self.script_epochs
        self.note_script_epochs(None, limit, framework=True)
        note = (f"no epoch count read: the training loop is not bound by one ({limit})"
                + (f"; {dropped['source']} is not what it runs" if dropped else "") + "; give predict and plan --epochs N")
        if note not in self.notes:
            self.notes.append(note)

    @property
    def planned_epochs(self) -> int | None:
        """The full run's epochs: --epochs when given, else the script's own count."""
        if self.epochs_hint:
            return int(self.epochs_hint)
        return self.script_epochs["epochs"] if self.script_epochs else None
