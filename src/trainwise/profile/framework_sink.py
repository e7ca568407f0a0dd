"""The profile's IntegrationSink (trainwise.agent.sink): a session that feeds trainwise's recorder from a
framework's loop hooks, through the sink's calls only.

The recorder (`trainwise.profile._child.Recorder`) is the one `trainwise profile` arms in the training
process, so a callback produces exactly the raw record, and through `profile_from_raw` exactly the
Profile, that the zero-code-change hooks produce. The framework's hooks take the place of those hooks:

- an iteration is one optimizer step: it starts where the previous one ended (after trainwise's own
  bookkeeping) or where the epoch started, and ends at the hook that follows the optimizer step;
- its data wait is the time between the end of one batch and the hook that announces the next one
  (the framework fetched the batch in between); with gradient accumulation an iteration has several
  batches and the samples of all of them;
- a validation pass is timed per batch from the hook before the pass and the hooks after each batch;
- sampled mode stops exactly like the core profiler: the stability rule of `Recorder._check_stop`
  ends epoch 1 early, a few validation batches are timed, then a few epoch-2 iterations.

When `trainwise profile` armed a recorder, the session attaches to it: the core's DataLoader,
optimizer and first-forward hooks stand down (`Recorder.framework`) so nothing is counted twice, and
the profile ends the process the way the core one does. Otherwise the session makes its own recorder,
measures from the process start time, asks the framework to stop training when the profile is
complete, and builds the Profile in-process. Standard library, psutil and trainwise only: no
framework (and no torch) is imported here. Integrations get one from `open_sink`.
"""

from __future__ import annotations

import os
import sys
import weakref
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

from trainwise.agent.events import CheckpointSave
from trainwise.errors import TrainwiseError
from trainwise.profile import _child
from trainwise.profile.runner import ProfileOptions, attach_host_noise
from trainwise.profile.schema import Profile, profile_from_raw

Mode = Literal["sampled", "full"]


def process_start_wall_s() -> float:
    """When this process was started (the launch instant init time is measured from)."""
    import psutil

    return float(psutil.Process(os.getpid()).create_time())


class _InProcessRecorder(_child.Recorder):
    """The core recorder without its process-level side effects: it neither writes a raw file nor
    ends the process; finishing asks the framework to stop training instead."""

    def __init__(self, config: dict[str, Any], session: "FrameworkSession") -> None:
        super().__init__(config)
        self._session = session

    def _finish(self, reason: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.stop_reason = reason

    def write(self) -> None:  # the session builds the Profile itself
        return

    def on_process_exit(self) -> None:
        return


def _options_for(mode: Mode | None, options: ProfileOptions | None) -> ProfileOptions:
    if options is not None and mode is not None and options.mode != mode:
        raise TrainwiseError(f"mode={mode!r} contradicts options.mode={options.mode!r}: give one of them")
    if options is None:
        options = ProfileOptions(mode=mode or "sampled")
    if options.mode not in ("sampled", "full"):
        raise TrainwiseError(f"mode must be 'sampled' or 'full' (got {options.mode!r})")
    options.validate()
    return options


class FrameworkSession:
    """One profiled training run, fed by a framework's callback hooks."""

    def __init__(self, framework: str, *, mode: Mode | None = None, output: str | Path | None = None,
                 options: ProfileOptions | None = None, workload: str | None = None) -> None:
        self.framework = framework
        self.workload = workload
        self.output = Path(output) if output is not None else None
        core = _child.current()
        self.attached = core is not None
        self.host_noise = True  # attached: the launcher attaches it with its own options
        if core is not None:
            if mode is not None or options is not None:
                core.notes.append(f"{framework} callback: mode/options given to the callback are ignored under "
                                  "`trainwise profile` (its own options apply)")
            self.recorder: _child.Recorder = core
        else:
            resolved = _options_for(mode, options)
            self.host_noise = resolved.host_noise
            config = asdict(resolved)
            config.pop("timeout_s", None)
            config.update(out_path="", launch_wall_s=process_start_wall_s(), workload=workload,
                          characterise=False)  # the meta-device trace is torch-only: not for every backend
            self.recorder = _InProcessRecorder(config, self)
            # There is no bootstrap in this process: init is measured from the process start time.
            self.recorder.marks = {}
            self.recorder._torch = sys.modules.get("torch")  # only read when the script imported it
            self.recorder.notes.append(
                f"recorded in-process by the trainwise {framework} callback; init measured from the process "
                "start time (interpreter start-up is not separated)")
        recorder = self.recorder
        recorder.framework = framework
        recorder.explicit_steps = True  # the optimizer-step hooks no longer end iterations
        recorder.mark(f"{framework}_callback_created")
        self.profile: Profile | None = None
        self._gap_from_s: float | None = None  # end of the previous batch (data wait runs from here)
        self._last_iteration_end_s: float | None = None
        self._ended_epoch_early = False
        self._validation: dict[str, Any] | None = None
        self._validation_cut = False
        self._validation_can_end_early = True
        self._training = False

    # ---- state the callbacks read ---------------------------------------------------------------
    @property
    def sampled(self) -> bool:
        return self.recorder.sampled

    @property
    def finished(self) -> bool:
        """The profile is complete: the framework should stop training now (stand-alone sessions)."""
        return self.recorder.finished

    @property
    def script_epochs(self) -> dict[str, Any] | None:
        return self.recorder.script_epochs

    def note(self, text: str) -> None:
        self.recorder.notes.append(text)

    def epochs(self, epochs: Any, source: str) -> None:
        self.recorder.note_script_epochs(epochs, source, framework=True)

    def stops_early(self, where: str, tests: list[str]) -> None:
        """The framework's loop may end before its epochs: an early-stopping callback (`tests` describe each)."""
        if tests:
            self.recorder.epoch_loop_exits = {"where": where, "tests": tests[:3]}

    def not_epoch_bound(self, reason: str, *, steps: int | None = None) -> None:
        self.recorder.note_not_epoch_bound(reason, steps=steps)
        if steps is not None:
            self.recorder.note_script_iterations(steps, reason, framework=True)

    def checkpoint_save(self, path: str | None) -> None:
        self.recorder.bus.emit(CheckpointSave(self.recorder.now(), path))

    def fill_dataset_size(self, role: str, samples_per_batch: float) -> None:
        info = self.recorder.loaders.get(role)
        if info is None or info.get("dataset_size") or not samples_per_batch or not info.get("batches_per_pass"):
            return
        info["dataset_size"] = int(info["batches_per_pass"] * samples_per_batch)

    @property
    def ended_epoch_early(self) -> bool:
        """This epoch was cut short by the sampling rule (the framework must not stop for good)."""
        return self._ended_epoch_early

    # ---- training -------------------------------------------------------------------------------
    def train_begin(self, *, batches_per_epoch: int | None, dataset_size: int | None,
                    num_workers: int = 0, drop_last: bool = False) -> None:
        recorder = self.recorder
        recorder.mark("train_begin")
        self._training = True
        if not recorder.iterations:
            # Anything the core hooks saw before the framework took over (a batch peeked at, a
            # sanity pass) is not training.
            recorder.epochs.clear()
            recorder.validations.clear()
            recorder.loaders.clear()
        recorder.loaders["train"] = {"batches_per_pass": batches_per_epoch, "dataset_size": dataset_size,
                                     "drop_last": bool(drop_last), "num_workers": int(num_workers)}

    def set_validation_shape(self, *, batches_per_pass: int | None, dataset_size: int | None) -> None:
        info = self.recorder.loaders.setdefault("val", {"drop_last": False, "num_workers": 0})
        if batches_per_pass is not None:
            info["batches_per_pass"] = batches_per_pass
        else:
            info.setdefault("batches_per_pass", None)
        if dataset_size is not None:
            info["dataset_size"] = dataset_size
        else:
            info.setdefault("dataset_size", None)
        if self._validation is not None and self._validation["batches_total"] is None:
            self._validation["batches_total"] = info["batches_per_pass"]

    def describe_model(self, *, parameters: int, trainable_parameters: int, gradient_bytes: int, device: str,
                       parameter_dtypes: list[str], optimizer: str | None) -> None:
        self.recorder.model = {"parameters": int(parameters), "trainable_parameters": int(trainable_parameters),
                               "gradient_bytes": int(gradient_bytes), "device": device,
                               "parameter_dtypes": sorted(set(parameter_dtypes)), "optimizer": optimizer}

    def watch_optimizer(self, optimizer: Any) -> None:
        """The framework's torch optimizer (unwrapped), whose square-rooted state the recorder counts zeros
        in (OptimizerStateZeros); anything else (a Keras optimizer) is not inspected."""
        inner = getattr(optimizer, "optimizer", optimizer)  # HF/accelerate and Lightning wrappers keep it here
        try:
            import torch
        except ImportError:
            return
        if isinstance(inner, torch.optim.Optimizer):
            self.recorder._optimizer_ref = weakref.ref(inner)

    def epoch_begin(self) -> None:
        recorder = self.recorder
        if recorder.finished:
            return
        now = recorder.now()
        if recorder.epochs and recorder.epochs[-1]["end_s"] is None:
            recorder.epochs[-1]["end_s"] = self._last_iteration_end_s or now
        recorder._training_resumed()  # the evaluations after a truncated epoch are over
        recorder.epochs.append({"index": len(recorder.epochs), "start_s": now, "end_s": None, "iterations": 0, "truncated": False,
                                "batches_per_epoch": recorder.loaders.get("train", {}).get("batches_per_pass")})
        # The stopping rule ends an epoch by flagging its training "loader": here, this epoch.
        recorder.current_train_state = _child._LoaderState("train", len(recorder.epochs))
        recorder._reset_iteration()
        recorder.iter_start = now  # an epoch's first iteration starts with its first batch request
        self._gap_from_s = now
        self._ended_epoch_early = False

    def batch_begin(self, batches: int = 1) -> None:
        recorder = self.recorder
        if recorder.finished:
            return
        now = recorder.now()
        if recorder.iter_start is None:
            recorder.iter_start = now
        if self._gap_from_s is None:
            self._gap_from_s = recorder.iter_start
        if not recorder.iterations and recorder.iter_batches == 0:
            recorder.marks["first_iteration_start"] = recorder.iter_start
        if recorder._first_batch_shapes is None:  # the last batch fetched: this one (or one prefetched alike)
            recorder._first_batch_shapes = getattr(recorder, "_fetched_batch_shapes", None)
        recorder.iter_data_wait += max(0.0, now - self._gap_from_s)
        recorder.iter_batches += batches

    def batch_end(self, samples: int | None, *, ends_iteration: bool = True, batches: int | None = None) -> bool:
        """A training batch is done; True when the framework should end this epoch now."""
        recorder = self.recorder
        if recorder.finished:
            return True
        if batches is not None and recorder.iter_batches < batches:
            recorder.iter_batches = batches  # a loop that runs several batches per call (Keras steps_per_execution)
        recorder.iter_samples += int(samples or 0)
        if not ends_iteration:
            self._gap_from_s = recorder.now()
            return False
        stop_capturing = getattr(recorder, "_stop_capturing", None)
        if stop_capturing is not None:
            stop_capturing()  # the core's model-input capture ends with the first iteration
        recorder.end_iteration()  # may end the profile (and, attached, the process)
        self._last_iteration_end_s = recorder.iterations[-1]["end_s"]
        self._gap_from_s = recorder.iter_start
        state = recorder.current_train_state
        if state is not None and state.truncate and not self._ended_epoch_early:
            self._ended_epoch_early = True
            recorder.epochs[-1]["truncated"] = True
        return self._ended_epoch_early or recorder.finished

    def epoch_end(self) -> None:
        recorder = self.recorder
        if recorder.epochs and recorder.epochs[-1]["end_s"] is None:
            recorder.epochs[-1]["end_s"] = self._last_iteration_end_s or recorder.now()
        recorder.iter_start = None

    # ---- validation -----------------------------------------------------------------------------
    def validation_begin(self, batches_total: int | None = None, *, can_end_early: bool = True,
                         data: Any = None) -> None:
        """A validation pass starts; `can_end_early=False` for loops a callback cannot cut short (timed in full).
        `data`: what it iterates, when an epoch may evaluate several (each estimated apart; they end with training)."""
        recorder = self.recorder
        self._validation_can_end_early = can_end_early
        if recorder.finished:
            return  # the profile is complete: what the framework does while stopping is not recorded
        if batches_total is not None:
            self.set_validation_shape(batches_per_pass=batches_total, dataset_size=None)
        if recorder.sampled and recorder.epoch1_truncated and not recorder.validation_done \
                and recorder.validation_batches <= 0:
            recorder._finish("sampled_without_validation")
        now = recorder.now()
        self._validation = {"epoch": max(0, len(recorder.epochs) - 1), "start_s": now, "end_s": None,
                            "batch_starts_s": [], "data_wait_s": [], "samples": 0, "truncated": False,
                            "batches_total": batches_total if batches_total is not None
                            else recorder.loaders.get("val", {}).get("batches_per_pass"),
                            "_gap_from_s": now}
        if data is not None:
            self._validation["loader"] = _loader_number(recorder, data)
        self._validation_cut = False

    def validation_batch_begin(self) -> None:
        record = self._validation
        if record is None:
            return
        now = self.recorder.now()
        # A batch's time runs from the end of the previous one (request → next request, as the core).
        record["batch_starts_s"].append(record["_gap_from_s"])
        record["data_wait_s"].append(max(0.0, now - record["_gap_from_s"]))

    def validation_batch_end(self, samples: int | None) -> bool:
        """A validation batch is done; True when the framework should end this validation pass now."""
        record = self._validation
        recorder = self.recorder
        if record is None:
            return recorder.finished  # a pass after the profile ended: end it at once
        if len(record["batch_starts_s"]) == 0:  # a framework without a per-batch begin hook
            record["batch_starts_s"].append(record["_gap_from_s"])
            record["data_wait_s"].append(0.0)
        record["samples"] += int(samples or 0)
        record["_gap_from_s"] = recorder.now()
        if self._validation_can_end_early and recorder.sampled and recorder.epoch1_truncated \
                and not recorder.validation_done and len(record["batch_starts_s"]) >= recorder.validation_batches:
            self._validation_cut = True
        return self._validation_cut

    def validation_batch_end_without_begin(self, samples: int | None) -> bool:
        """For frameworks that only report the end of each batch: it also begins the next one."""
        record = self._validation
        if record is None:
            return False
        record["batch_starts_s"].append(record["_gap_from_s"])
        record["data_wait_s"].append(0.0)  # not visible: the fetch is inside the framework's loop
        return self.validation_batch_end(samples)

    def validation_end(self) -> None:
        record = self._validation
        recorder = self.recorder
        if record is None:
            return
        self._validation = None
        now = recorder.now()
        record.pop("_gap_from_s")
        record["end_s"] = now
        record["truncated"] = self._validation_cut
        if record["batch_starts_s"]:
            recorder.validations.append(record)
        if recorder.iter_batches == 0 and recorder.iter_start is not None:
            # Validation inside an epoch (Lightning's val_check_interval, HF eval steps): the next
            # iteration starts after it, not at the end of the previous one.
            recorder.iter_start = now
            self._gap_from_s = now
        if record["batch_starts_s"]:
            recorder._after_validation(another_may_follow="loader" in record)  # may end the profile

    # ---- end ------------------------------------------------------------------------------------
    def train_end(self) -> Profile | None:
        """Training is over: build the Profile (stand-alone) or end the profiled process (attached,
        sampled, when the model was trained for a few iterations only)."""
        recorder = self.recorder
        self._training = False
        self.epoch_end()
        if self.attached:
            if recorder.sampled and recorder.epoch1_truncated:
                recorder._finish("fit_ended")
            return None
        if self.profile is not None:
            return self.profile
        if not recorder.iterations:
            raise TrainwiseError(f"the {self.framework} run recorded no training iteration: nothing to profile "
                                 "(was the callback passed to the training call?)")
        if not recorder.finished:
            recorder.stop_reason = "training_ended"  # the framework's loop ended before the profile did
        recorder._count_state_zeros()
        raw = recorder.raw_record()
        command = list(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])
        self.profile = profile_from_raw(raw, command=command, process_wall_s=recorder.now(), exit_code=0,
                                        workload=self.workload)
        if self.host_noise:
            self.profile = attach_host_noise(self.profile)
        if self.output is not None:
            self.profile.save(self.output)
        return self.profile


def _loader_number(recorder: _child.Recorder, data: Any) -> int | None:
    """The recorder's number for the data a validation pass iterates; None for data it cannot number."""
    try:
        return recorder._loader_index(data)
    except TypeError:  # not weakly referenced, not hashable
        return None


def open_sink(framework: str, *, mode: Mode | None = None, output: str | Path | None = None,
              options: ProfileOptions | None = None, workload: str | None = None) -> FrameworkSession:
    """The sink (trainwise.agent.sink.IntegrationSink) a `framework` callback reports to: attached to the
    recorder `trainwise profile` armed in this process, or a stand-alone one that builds the Profile itself."""
    return FrameworkSession(framework, mode=mode, output=output, options=options, workload=workload)
