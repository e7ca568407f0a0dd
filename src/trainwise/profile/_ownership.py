"""Which process records the profile when the script trains in processes it starts (torch.multiprocessing's
`spawn` or `Process`, torchrun's workers, a subprocess): the first process of the job to end a training
iteration owns it (a file created exclusively beside the record); every other armed process records nothing.
A mixin of the recorder, plus the few file operations the launcher (trainwise.profile.runner) shares.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

CONFIG_ENV = "TRAINWISE_PROFILE_CONFIG"
# A process the script started that wrote its profile waits this long at most for the launcher to end the job
LAUNCHER_ENDS_JOB_S = 30.0


def owner_path(out_path: str | os.PathLike) -> str:
    return os.fspath(out_path) + ".owner"


def claim(out_path: str | os.PathLike) -> bool:
    """True when this process owns the profile (it created the owner file, or created it before)."""
    try:
        fd = os.open(owner_path(out_path), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return owner_pid(out_path) == os.getpid()
    except OSError:
        return True  # no file can be made there: the record's own write will say why
    with os.fdopen(fd, "w") as handle:
        handle.write(str(os.getpid()))
    return True


def owner_pid(out_path: str | os.PathLike) -> int | None:
    """The owner's pid; None before any process trained (or in the instant its file is still empty)."""
    try:
        with open(owner_path(out_path)) as handle:
            return int(handle.read().strip() or 0) or None
    except (OSError, ValueError):
        return None


class ProfileOwnership:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _init_ownership(self, config: dict[str, Any]) -> None:
        # Set by `trainwise profile` (not by `trainwise run`, whose recorders are one per rank): processes this
        # one starts as new interpreters arm too, and the first to train owns the profile.
        self.delegate = bool(config.get("delegate"))
        # This process was started by the job's launched process (or one of its own), not launched by trainwise
        self.spawned = bool(config.get("spawned"))
        self.owner = False
        self._armed_pid = os.getpid()  # a process forked from this one (Hogwild over fork) has another
        self._child_config = {**config, "spawned": True}
        inherited = config.get("script_epochs") if self.spawned else None
        if inherited:  # read from the starting process's argparse (a spawned child does not parse again)
            self.script_epochs = {"epochs": inherited["epochs"],
                                  "source": f"{inherited['source']}, read in the process that started this one"}

    def child_environment_config(self) -> str | None:
        """The recorder configuration the job's new processes inherit (None: they must not record)."""
        return json.dumps(self._child_config) if self.delegate else None

    def _pass_script_epochs_on(self) -> None:
        """Processes started from now on learn the epoch count this one read (argparse runs in the parent only)."""
        if self.delegate and self.script_epochs and os.environ.get(CONFIG_ENV):
            self._child_config["script_epochs"] = self.script_epochs
            os.environ[CONFIG_ENV] = json.dumps(self._child_config)

    def _claim_profile(self) -> bool:
        """At the first iteration: own the profile, or stand by when another process of the job owns it."""
        if not self.delegate or claim(self.out_path):
            self.owner = True
            if os.getpid() != self._armed_pid:
                self._write_at_forked_exit()
            if self.spawned or os.getpid() != self._armed_pid:
                self.notes.append("training ran in a process the script started (torch.multiprocessing, torchrun's "
                                  "workers or a subprocess): this profile is the first of them to train; processes "
                                  "training beside it (data-parallel ranks, Hogwild workers) shared the host with it")
            return True
        # Another process trains too and owns the profile: nothing more is recorded or written here.
        self.paused = self.finished = True
        return False

    def _write_at_forked_exit(self) -> None:
        """A forked process (multiprocessing's `fork` start) ends with os._exit, which runs no atexit handler:
        the record is written when multiprocessing finishes the process instead (its exit function, called
        once the target returned), as the launched process writes at exit."""
        import multiprocessing.util as mp_util

        original = mp_util._exit_function
        recorder = self

        def exit_function(*args, **kwargs):
            try:
                recorder.on_process_exit()
            except Exception:  # noqa: BLE001 - the job's own exit must go on
                pass
            return original(*args, **kwargs)

        mp_util._exit_function = exit_function

    def _release_if_brief(self) -> bool:
        """A process the script started that owns the profile but ends having trained less than sampling needs (a
        smoke test of a few steps before the real training) gives it up, writing nothing: the next process to
        train owns it. True when it did."""
        if not (self.delegate and self.owner and self.sampled and not self.finished
                and (self.spawned or os.getpid() != self._armed_pid) and len(self.iterations) < self.min_iterations):
            return False
        try:
            os.remove(owner_path(self.out_path))
        except OSError:
            pass
        self.owner = False
        return True

    def _another_process_owns(self) -> bool:
        return self.delegate and not self.owner and owner_pid(self.out_path) not in (None, os.getpid())

    def _writes_a_record(self) -> bool:
        """At exit: the owner writes; with no owner yet, the launched process reports what it saw."""
        if not self.delegate or self.owner:
            return True
        return not self.spawned and not self._another_process_owns() and not os.path.exists(owner_path(self.out_path))

    def _wait_for_the_launcher(self) -> None:
        """A process the script started, its record written: its peers (data-parallel ranks) would fail at their
        next collective and print their errors if it exited now; the launcher, which sees the record, ends the
        whole job within a fraction of a second instead."""
        if self.delegate and self.owner and (self.spawned or os.getpid() != self._armed_pid):
            deadline = time.monotonic() + LAUNCHER_ENDS_JOB_S
            while time.monotonic() < deadline:
                time.sleep(0.05)
