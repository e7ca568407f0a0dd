"""The epoch count (or step budget) the script sets for itself, as the recorder keeps it (argparse readings
ranked, a framework's loop settings final, the script's module-level settings last). A mixin of the recorder.
"""

from __future__ import annotations

import sys
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

    def note_script_iterations(self, iterations: Any, source: str, *, framework: bool = False, rank: tuple = ()) -> None:
        """Keep the script's step budget (optimizer steps), ranked as epoch readings are; a framework's is final."""
        if self._script_iterations_from_framework:
            return
        value = script_epochs_source.argument_epochs(iterations)
        if framework:
            self._script_iterations_from_framework = True
        elif value is None or (self.script_iterations is not None and tuple(rank) < self._script_iterations_rank):
            return
        self.script_iterations = None if value is None else {"iterations": value, "source": source}
        self._script_iterations_rank = tuple(rank)

    def read_module_settings(self) -> None:
        """Once the script trains (its configuration is applied by then: nanoGPT's configurator sets `max_iters`
        from `--max_iters=2000`): epochs and a step budget from the `__main__` module's globals, below any
        argparse or framework reading. Reading a dict: nothing of the script runs."""
        main = sys.modules.get("__main__")
        try:
            epochs, iterations = script_epochs_source.globals_reading(dict(vars(main))) if main else (None, None)
        except Exception:  # noqa: BLE001 - reading the script's globals must never break it
            return
        if epochs is not None and self.script_epochs is None and not self._script_epochs_from_framework:
            self.note_script_epochs(epochs[0], epochs[1], rank=())
        if iterations is not None and self.script_iterations is None:
            self.note_script_iterations(iterations[0], iterations[1], rank=())

    def note_not_epoch_bound(self, limit: str, *, steps: int | None = None) -> None:
        """The framework's loop ends on something else than an epoch count (a step or time limit, none at
        all): an argparse `--epochs` of the script is not what it runs, and the profile keeps no count."""
        if self._script_epochs_from_framework:
            return
        dropped = self.script_epochs
        self.note_script_epochs(None, limit, framework=True)
        note = (f"no epoch count read: the training loop is not bound by one ({limit})"
                + (f"; {dropped['source']} is not what it runs" if dropped else "")
                + (f"; predict and plan take its {steps:,} optimizer steps as epochs when they make whole ones"
                   if steps else "; give predict and plan --epochs N"))
        if note not in self.notes:
            self.notes.append(note)

    @property
    def planned_steps(self) -> int | None:
        """The full run's optimizer steps when the script's step budget bounds it (not when --epochs is given)."""
        if self.epochs_hint or not self.script_iterations:
            return None
        return int(self.script_iterations["iterations"])

    @property
    def planned_epochs(self) -> int | None:
        """The full run's epochs: --epochs when given, else the script's own count."""
        if self.epochs_hint:
            return int(self.epochs_hint)
        return self.script_epochs["epochs"] if self.script_epochs else None
