"""The run agent inside each training process (local, each DDP rank, each Hivemind peer).

Armed by `trainwise/run/_bootstrap/sitecustomize.py`. It first arms the profiler's recorder in full
mode (iteration times, data wait, epochs, sizes: the same instrumentation as `trainwise profile`),
then, once the script has imported torch, adds from outside, with no change to the script:

- checkpointing at iteration boundaries. The boundary is the training DataLoader's next batch
  request: by then the previous iteration is complete (optimizer step, per-iteration scheduler
  step, zero_grad). The state is every root module that owns optimized parameters (in creation
  order), every optimizer, LR scheduler and GradScaler, the RNG states (Python, NumPy, torch), the
  DataLoader position (epoch, batches consumed, its shuffling generators' state at the start of the
  epoch) and the global batch count. On restart, epochs before the checkpointed one end at once
  (their training iterators raise StopIteration; when the script reads after its loop a name only
  the loop's body binds, such as the last batch's loss, one batch goes through the body first:
  trainwise.run._loopscan), and at the checkpointed epoch the RNG states of the epoch start are put
  back before the iterator is built (so the same shuffle is drawn), the consumed batches are skipped
  (sampler indices only, no data loaded, for a single-process loader), then the model, optimizer,
  scheduler, scaler and current RNG states are loaded (gradients cleared). SIGTERM sets a flag: the
  next boundary writes a checkpoint and exits with code 143;
- DDP communication timing: every DistributedDataParallel gets a comm hook that runs torch's
  default all-reduce hook and timestamps each gradient bucket (ready → reduced);
- Hivemind: the script's first torch.optim optimizer is built inside a `hivemind.Optimizer`
  (fp16 gradient and state compression, delayed parameter updates, the target batch size, parameter
  averaging every `average_state_every` epochs), over a
  DHT joined through the first peer's multiaddrs; averaging rounds are timed.

Its record (`run-rank<R>.json`) is written at exit next to the recorder's (`raw-rank<R>.json`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
import weakref
from typing import Any

from trainwise.agent.comm_timing import HivemindTiming
from trainwise.agent.events import (Event, ModuleBuilt, OptimizerBuilt, OptimizerStateLoad, OptimizerStep, ProcessExit,
                                    ScalerBuilt, SchedulerBuilt, SigtermReceived)
from trainwise.agent.torch_patch import process_patch
from trainwise.profile import _child as recorder_module
# Importable from here as before (trainwise.run.result, the tests)
from trainwise.run._agent_support import (_DROPPED_MESSAGE, CHECKPOINT_WRITE_EXIT, RESUME_MISMATCH_EXIT, RESUME_SKIP_FAILED_EXIT,  # noqa: F401
                                          _SenderTolerantPipe, start_with_retries)
from trainwise.run._agent_support import _placing_on_device
from trainwise.run._checkpointing import Checkpointing
from trainwise.run._distributed_hooks import DistributedHooks
from trainwise.run._loader_hooks import LoaderHooks
from trainwise.run._resume import Resume

_agent: "RunAgent | None" = None


def current() -> "RunAgent | None":
    return _agent


def _rank(config: dict[str, Any]) -> int:
    if config.get("engine") == "hivemind":
        return int(config["hivemind"]["peer_index"])
    return int(os.environ.get("RANK", "0"))


def arm(config: dict[str, Any]) -> None:
    global _agent
    if _agent is not None:
        return
    rank = _rank(config)
    workdir = config["workdir"]
    profile_config = {"mode": "full", "sync_cuda": True, "launch_wall_s": config["launch_wall_s"],
                      "out_path": os.path.join(workdir, f"raw-rank{rank}.json")}
    os.environ[recorder_module.CONFIG_ENV] = json.dumps(profile_config)
    recorder_module.arm()  # pops the env variable again; subscribes the recorder to the process's torch patch first
    _agent = RunAgent(config, rank)
    process_patch().when_torch_imported(_agent.install)
    atexit.register(_agent.write)


class RunAgent(Checkpointing, Resume, LoaderHooks, DistributedHooks):
    def __init__(self, config: dict[str, Any], rank: int) -> None:
        self.config = config
        self.rank = rank
        self.pid = os.getpid()  # processes forked from the training process (Hivemind's averagers) must not write
        self.engine = config.get("engine", "local")
        # The process's one torch patch (trainwise.agent.torch_patch), shared with the profile recorder: this
        # agent subscribes to its events and intercepts batch requests and pass iterators.
        self.patch = process_patch()
        self.bus = self.patch.bus
        self.out_path = os.path.join(config["workdir"], f"run-rank{rank}.json")
        self.notes: list[str] = []
        self.written = False
        self._torch = None
        # Objects the script creates, in creation order (weak: the agent must not keep them alive).
        self.modules: list[weakref.ref] = []
        self.optimizers: list[weakref.ref] = []
        self.schedulers: list[weakref.ref] = []
        self.scalers: list[weakref.ref] = []
        # DDP communication, one record per optimizer step (trainwise.agent.comm_timing.DdpCommTiming, under DDP).
        self.comm_steps: list[dict[str, Any]] = []
        # Hivemind: its rounds, timed by a subscriber of the events the optimizer wrapper emits.
        self.hivemind_info: dict[str, Any] = {}
        self._hivemind_timing = HivemindTiming(self.hivemind_info)
        self.hivemind_rounds = self._hivemind_timing.rounds
        self._hm_guard = False
        self._hm_optimizer = None
        self._dht = None
        # Checkpointing.
        self.checkpoint_config = config.get("checkpoint")
        self.store = None
        self.policy = None
        self.checkpoint_events: list[dict[str, Any]] = []
        self.resumed_from: str | None = None
        self.resume_state: dict[str, Any] | None = None
        self.epoch_index = -1
        self.batches_in_epoch = 0
        self.global_batches = 0
        self.last_checkpoint_batches = 0
        self.last_checkpoint_time = time.monotonic()
        self.last_write_s: float | None = None
        self.epoch_start: dict[str, Any] | None = None
        self.train_loader = None
        self._training_loaders: "weakref.WeakSet[Any]" = weakref.WeakSet()
        # Under DDP the ranks must stop at the same step: a rank that stopped at its own next boundary left
        # the others waiting in an all-reduce it never joined ("Connection closed by peer", a traceback on
        # rank 0). Each rank's SIGTERM flag rides on the last gradient bucket's all-reduce instead, and
        # every rank stops at the boundary of the step whose all-reduce carried one (_allreduce_with_stop).
        self.ddp_coordinated = False
        self.stop_agreed = False
        # Interval checkpoints are agreed the same way (rank 0's "due" rides on the all-reduce too): every
        # rank takes part in writing one, since each rank's own RNG states go into it (_gather_rank_states).
        self.checkpoint_agreed = False
        # The explicit API (trainwise.run.checkpoint.maybe_save, custom loops) agrees the same way: its SIGTERM
        # flag and its time interval ride on the all-reduce too, and maybe_save reads them (and counts the
        # all-reduces, to know whether one has happened since its previous call).
        self.explicit_stop_agreed = False
        self.explicit_due_agreed = False
        self.explicit_reductions = 0
        self._ddp_group = None
        self._ddp_device = None
        # A resumed run: a batch of a pass it does not train is going through the script's loop body.
        self._replaying = False
        # A resumed run: which pass (an epoch before the checkpoint's) the resume ended at once, until the
        # next training batch; a script that fails in between is told why (_report_resume_failure).
        self._emptied_by_resume: str | None = None
        self.writes_checkpoints = self.rank == 0
        # The optimizer class whose state the script loaded itself before training (a resume of its own).
        self.script_resumed_itself: str | None = None
        if self.checkpoint_config:
            self._setup_checkpointing()
        else:
            # Stopped from outside (preemption, a benchmark's time limit, a peer leaving): keep the
            # record of what ran, then end as SIGTERM would.
            self.bus.subscribe(lambda event: self._exit(143) if isinstance(event, SigtermReceived) else None,
                               strict=True)
            self._sigterm_handler = lambda signum, frame: self.bus.emit(SigtermReceived(self.patch.now()))
            signal.signal(signal.SIGTERM, self._sigterm_handler)

    def install(self) -> None:
        """Once torch is imported and patched: subscribe to the patch's events and register the interceptors."""
        import torch

        self._torch = torch
        self.bus.subscribe(self._on_event)
        if self.checkpoint_config:
            self._install_loader_hooks()
        if self.engine == "ddp":
            self._install_ddp_timing()
        if self.engine == "hivemind":
            self._install_hivemind()

    def _on_event(self, event: Event) -> None:
        """The objects the script creates, in creation order (weakly: the agent must not keep them alive), and
        its optimizer steps."""
        kind = type(event)
        if kind is OptimizerStep:
            if not event.in_scaler_step:  # GradScaler.step's own event follows
                self._on_optimizer_step(event.optimizer)
        elif kind is ModuleBuilt:
            self.modules.append(weakref.ref(event.module))
        elif kind is OptimizerBuilt:
            self.optimizers.append(weakref.ref(event.optimizer))
        elif kind is SchedulerBuilt:
            self.schedulers.append(weakref.ref(event.scheduler))
        elif kind is ScalerBuilt:
            self.scalers.append(weakref.ref(event.scaler))
        elif kind is OptimizerStateLoad:
            if (self.resume_state is not None and self.epoch_index < 0
                    and not _placing_on_device(event.caller)):
                # Before the first training pass, only the script itself loads an optimizer's state:
                # it resumes from a checkpoint of its own (trainwise loads its one at the pass).
                self.script_resumed_itself = type(event.optimizer).__name__

    # ---- optimizer steps (DDP communication records) ----------------------------------------
    def mark_started(self) -> None:
        """A marker file once this rank has trained a step (a launcher's time limit counts from here)."""
        # Hivemind: past the first steps, where a late joiner downloads the state from its peers.
        self._steps_seen = getattr(self, "_steps_seen", 0) + 1
        if getattr(self, "_started", False) or self._steps_seen < (5 if self.engine == "hivemind" else 3):
            return
        self._started = True
        try:
            open(os.path.join(self.config["workdir"], f"started-rank{self.rank}"), "w").close()
        except OSError:
            pass

    def _on_optimizer_step(self, optimizer) -> None:
        if self._replaying:  # a resumed run's replayed batch: not a step of this run
            return
        if self._hm_optimizer is None:
            self.mark_started()

    # ---- output -----------------------------------------------------------------------------
    def record(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "engine": self.engine, "pid": os.getpid(),
            "world_size": int(os.environ.get("WORLD_SIZE", "1")),
            "comm_steps": self.comm_steps, "hivemind_rounds": self.hivemind_rounds,
            "hivemind": self.hivemind_info,
            "checkpoint": None if not self.checkpoint_config else {
                "dir": self.checkpoint_config["dir"], "events": self.checkpoint_events,
                "resumed_from": self.resumed_from, "skipped_corrupt": getattr(self, "skipped_checkpoints", []),
                "writer": self.writes_checkpoints,
            },
            "notes": self.notes + [note for note in self.bus.notes if note not in self.notes],
        }

    def write(self) -> None:
        if self.written or os.getpid() != self.pid:
            return
        self.written = True
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".run-", suffix=".json", dir=os.path.dirname(self.out_path))
            with os.fdopen(fd, "w") as handle:
                handle.write(json.dumps(self.record(), default=str))  # the C encoder (json.dump is pure Python)
            os.replace(tmp, self.out_path)
        except OSError as exc:  # a full disk: the launcher says the run was not recorded, in one line
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            print(f"trainwise: cannot write the run record: {exc.strerror or exc}", file=sys.stderr, flush=True)

    def _exit(self, code: int) -> None:
        if os.getpid() != self.pid:
            os._exit(code)  # a forked helper (Hivemind averager) inherited the handler: just end
        if self._hm_optimizer is not None:
            self.notes.append("stopped by SIGTERM: left the Hivemind run")
        # The profile recorder, a subscriber of the same bus, writes its record of what ran
        self.bus.emit(ProcessExit(self.patch.now(), status="sigterm"))
        self.write()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
