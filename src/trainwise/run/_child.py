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
import importlib.abc
import importlib.util
import json
import os
import signal
import sys
import tempfile
import threading
import time
import weakref
from typing import Any

from trainwise.profile import _child as recorder_module

_agent: "RunAgent | None" = None
# Exit code of a job whose checkpoint does not match it (trainwise.run.result reads it).
RESUME_MISMATCH_EXIT = 75
# Exit code of a resumed job that failed right after an epoch its resume ended at once.
RESUME_SKIP_FAILED_EXIT = 76


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
    recorder_module.arm()  # pops the env variable again
    _agent = RunAgent(config, rank)
    if "torch" in sys.modules:
        _agent.install()
    else:
        sys.meta_path.insert(0, _TorchWatcher(_agent))
    atexit.register(_agent.write)


class _TorchWatcher(importlib.abc.MetaPathFinder):
    """Installs the agent's hooks right after the script's `import torch` (after the recorder's)."""

    def __init__(self, agent: "RunAgent") -> None:
        self.agent = agent

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("torch")  # the recorder's watcher wraps the loader first
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        original_exec = loader.exec_module
        agent = self.agent

        def exec_module(module):
            original_exec(module)
            agent.install()

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class RunAgent:
    def __init__(self, config: dict[str, Any], rank: int) -> None:
        self.config = config
        self.rank = rank
        self.pid = os.getpid()  # processes forked from the training process (Hivemind's averagers) must not write
        self.engine = config.get("engine", "local")
        self.out_path = os.path.join(config["workdir"], f"run-rank{rank}.json")
        self.notes: list[str] = []
        self.written = False
        self._torch = None
        # Objects the script creates, in creation order (weak: the agent must not keep them alive).
        self.modules: list[weakref.ref] = []
        self.optimizers: list[weakref.ref] = []
        self.schedulers: list[weakref.ref] = []
        self.scalers: list[weakref.ref] = []
        # DDP communication, one record per optimizer step.
        self.comm_steps: list[dict[str, Any]] = []
        self._comm: dict[str, Any] | None = None
        self._comm_lock = threading.Lock()
        self._primary_optimizer: int | None = None
        # Hivemind.
        self.hivemind_rounds: list[dict[str, Any]] = []
        self.hivemind_info: dict[str, Any] = {}
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
        self.sigterm_pending = False
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
            self._sigterm_handler = lambda signum, frame: self._exit(143)
            signal.signal(signal.SIGTERM, self._sigterm_handler)

    # ---- set-up -----------------------------------------------------------------------------
    def _setup_checkpointing(self) -> None:
        from trainwise.run.checkpoint import CheckpointStore, IntervalPolicy

        cfg = self.checkpoint_config
        self.store = CheckpointStore(cfg["dir"], keep=int(cfg.get("keep", 3)))
        self.policy = IntervalPolicy(every_s=cfg.get("every_s"), every_batches=cfg.get("every_batches"),
                                     interruptions_per_hour=cfg.get("interruptions_per_hour"))
        # The explicit API (trainwise.run.checkpoint) in custom loops reads the same settings.
        os.environ["TRAINWISE_RUN_CHECKPOINT"] = json.dumps(cfg)
        if self.writes_checkpoints:
            self.store.remove_stale_temporaries()
        found = self.store.load_newest()
        if found is not None:
            self.resumed_from, state = found
            if state.get("kind") == "auto":
                self.resume_state = self._own_rank_state(state)
                self._script_excepthook = sys.excepthook
                sys.excepthook = self._report_resume_failure
        self.skipped_checkpoints = list(self.store.skipped)

        def on_sigterm(signum, frame):
            if self.train_loader is None:
                # Nothing trained yet: nothing to save; end as SIGTERM would.
                self._exit(143)
            self.sigterm_pending = True

        self._sigterm_handler = on_sigterm
        signal.signal(signal.SIGTERM, on_sigterm)

    def _own_rank_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """A DDP checkpoint holds every rank's RNG states, its loader generators' and those of its epoch's
        start (rank 0 writes it): this rank resumes with its own, not rank 0's (ranks seeded seed + rank
        draw different dropout masks and noise, and would not continue as an uninterrupted run)."""
        per_rank = state.get("rank_states")
        if per_rank is None:
            if self.rank > 0 and state.get("engine") == "ddp":
                self.notes.append("the checkpoint holds rank 0's RNG states only (written by an older trainwise): "
                                  "this rank resumed with them")
            return state
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if len(per_rank) != world:
            how = "--nproc/--nnodes" if self.engine == "ddp" else "--engine ddp and --nproc/--nnodes"
            self._cannot_resume(f"it was written by {len(per_rank)} DDP processes, this job runs {world} (each "
                                f"process resumes its own data shard and RNG states); resume with {how} "
                                f"giving {len(per_rank)} processes")
        return {**state, **per_rank[self.rank]}

    def _reassert_sigterm_handler(self) -> None:
        """Frameworks install their own SIGTERM handler when training starts: Lightning's makes its loop
        raise SystemExit (exit 0) before the next step, so no checkpoint is written and a spot
        orchestrator reads "finished". trainwise's handler takes SIGTERM back from Lightning at each
        training pass: the job checkpoints at the next boundary and exits 143."""
        handler = getattr(self, "_sigterm_handler", None)
        current = signal.getsignal(signal.SIGTERM)
        if handler is None or current is handler:
            return
        # Only a framework's: a script's own handler, or the explicit API's (trainwise.run.checkpoint),
        # is the script's choice.
        if not type(current).__module__.startswith(("lightning.", "pytorch_lightning.")) and \
                not (getattr(current, "__module__", None) or "").startswith(("lightning.", "pytorch_lightning.")):
            return
        try:
            signal.signal(signal.SIGTERM, handler)
        except ValueError:  # not the main thread: leave it
            pass

    def install(self) -> None:
        import torch

        self._torch = torch
        agent = self
        module_class = torch.nn.Module
        original_module_init = module_class.__init__

        def module_init(module, *args, **kwargs):
            agent.modules.append(weakref.ref(module))
            return original_module_init(module, *args, **kwargs)

        module_class.__init__ = module_init

        optimizer_class = torch.optim.Optimizer
        original_optimizer_init = optimizer_class.__init__

        def optimizer_init(optimizer, *args, **kwargs):
            result = original_optimizer_init(optimizer, *args, **kwargs)
            agent.optimizers.append(weakref.ref(optimizer))
            return result

        optimizer_class.__init__ = optimizer_init

        if self.resume_state is not None:
            original_optimizer_load = optimizer_class.load_state_dict

            def optimizer_load_state_dict(optimizer, *args, **kwargs):
                if agent.epoch_index < 0 and not _placing_on_device(sys._getframe(1)):
                    # Before the first training pass, only the script itself loads an optimizer's state:
                    # it resumes from a checkpoint of its own (trainwise loads its one at the pass).
                    agent.script_resumed_itself = type(optimizer).__name__
                return original_optimizer_load(optimizer, *args, **kwargs)

            optimizer_class.load_state_dict = optimizer_load_state_dict

        scheduler_class = torch.optim.lr_scheduler.LRScheduler
        original_scheduler_init = scheduler_class.__init__

        def scheduler_init(scheduler, *args, **kwargs):
            agent.schedulers.append(weakref.ref(scheduler))
            return original_scheduler_init(scheduler, *args, **kwargs)

        scheduler_class.__init__ = scheduler_init
        plateau = getattr(torch.optim.lr_scheduler, "ReduceLROnPlateau", None)
        if plateau is not None and not issubclass(plateau, scheduler_class):
            original_plateau_init = plateau.__init__

            def plateau_init(scheduler, *args, **kwargs):
                agent.schedulers.append(weakref.ref(scheduler))
                return original_plateau_init(scheduler, *args, **kwargs)

            plateau.__init__ = plateau_init

        scaler_class = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler_class is not None:
            original_scaler_init = scaler_class.__init__

            def scaler_init(scaler, *args, **kwargs):
                agent.scalers.append(weakref.ref(scaler))
                return original_scaler_init(scaler, *args, **kwargs)

            scaler_class.__init__ = scaler_init

        from torch.optim import optimizer as optimizer_module

        optimizer_module.register_optimizer_step_post_hook(self._on_optimizer_step)

        if self.checkpoint_config:
            self._install_loader_hooks()
        if self.engine == "ddp":
            self._install_ddp_hook()
        if self.engine == "hivemind":
            self._install_hivemind()

    # ---- objects to checkpoint --------------------------------------------------------------
    @staticmethod
    def _alive(refs: list[weakref.ref]) -> list[Any]:
        return [obj for obj in (r() for r in refs) if obj is not None]

    def model_roots(self) -> list[Any]:
        """Root modules (not inside another tracked module) that own optimized parameters."""
        optimized = {id(p) for opt in self._alive(self.optimizers) for group in opt.param_groups for p in group["params"]}
        modules = self._alive(self.modules)
        children: set[int] = set()
        for module in modules:
            for child in module.modules():
                if child is not module:
                    children.add(id(child))
        return [m for m in modules if id(m) not in children and any(id(p) in optimized for p in m.parameters())]

    def _rank_state(self) -> dict[str, Any]:
        """What differs between DDP ranks: the RNG states (now and at the epoch's start) and the loader's
        generators."""
        from trainwise.run import _state

        return {"rng": _state.capture_rng(), "generators": _state.generator_states(self.train_loader),
                "epoch_start": self.epoch_start}

    def _gather_rank_states(self) -> list[dict[str, Any]] | None:
        """Every rank's _rank_state(), in rank order, on rank 0 (None elsewhere): all ranks call this at
        the same boundary (agreed on the all-reduce). torch's all_gather_object pickles and pads them (and
        puts them on the current GPU under NCCL)."""
        gathered: list[Any] = [None] * self._torch.distributed.get_world_size(self._ddp_group)
        self._torch.distributed.all_gather_object(gathered, self._rank_state(), group=self._ddp_group)
        return gathered if self.writes_checkpoints else None

    def _collect_state(self, rank_states: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        from trainwise.run import _state

        roots = self.model_roots()
        return {
            "format": 1, "kind": "auto", "engine": self.engine,
            "global_batches": self.global_batches, "epoch": self.epoch_index,
            "batches_in_epoch": self.batches_in_epoch,
            "epoch_start": self.epoch_start,
            "rng": _state.capture_rng(),
            "generators": _state.generator_states(self.train_loader),
            "model_classes": [type(m).__name__ for m in roots],
            "models": [m.state_dict() for m in roots],
            "optimizers": [o.state_dict() for o in self._alive(self.optimizers)],
            "schedulers": [s.state_dict() for s in self._alive(self.schedulers)],
            "scalers": [s.state_dict() for s in self._alive(self.scalers)],
            "saved_wall_s": time.time(),
            # DDP: every rank's RNG and generator states, by rank (rank 0's are also the ones above).
            **({"rank_states": rank_states} if rank_states is not None else {}),
        }

    def _restore_objects(self, state: dict[str, Any]) -> None:
        roots = self.model_roots()
        classes = [type(m).__name__ for m in roots]
        if classes != state["model_classes"]:
            ddp = "DistributedDataParallel"
            hint = ("it was written by a DDP run: resume with --engine ddp and its --nproc" if ddp in state["model_classes"]
                    else "it was written without DDP: resume with --engine local" if ddp in classes
                    else "resume with the script that wrote it")
            self._cannot_resume(f"the script built models {classes}, the checkpoint holds {state['model_classes']}; {hint}")
        for module, weights in zip(roots, state["models"]):
            self._load_or_refuse(module, weights, f"model {type(module).__name__}")
            # As in a process that starts here: no gradient left by a batch let through a finished epoch.
            for parameter in module.parameters():
                parameter.grad = None
        for kind, saved in (("optimizers", state["optimizers"]), ("schedulers", state["schedulers"]),
                            ("scalers", state["scalers"])):
            objects = self._alive(getattr(self, kind))
            if len(objects) != len(saved):
                self._cannot_resume(f"the script built {len(objects)} {kind}, the checkpoint holds {len(saved)}; "
                                    "resume with the script that wrote it")
            for obj, sd in zip(objects, saved):
                self._load_or_refuse(obj, sd, f"{kind[:-1]} {type(obj).__name__}")

    def _load_or_refuse(self, obj: Any, state_dict: Any, what: str) -> None:
        """load_state_dict, with a state of another model (a changed layer size, a renamed layer, another
        optimizer's parameter groups) a one-line refusal like a changed model class: torch's error,
        raised in the script's loop, would read as the script's own bug."""
        try:
            obj.load_state_dict(state_dict)
        except Exception as exc:  # noqa: BLE001 - whatever the object's loader raises on a foreign state
            from trainwise.run.checkpoint import load_error_detail

            self._cannot_resume(f"the script's {what} does not match the checkpoint ({type(exc).__name__}: "
                                f"{load_error_detail(exc)}); resume with the script and settings that wrote it")

    @staticmethod
    def _framework_loop() -> tuple[str, Any] | None:
        """("lightning", Trainer) or ("transformers", Trainer) when a framework's loop asked for the
        DataLoader being iterated (it is on the stack), else None."""
        frame = sys._getframe(2)
        while frame is not None:
            owner = frame.f_locals.get("self")
            module = type(owner).__module__ if owner is not None else ""
            if module.startswith(("lightning.pytorch", "pytorch_lightning")) and hasattr(getattr(owner, "trainer", None), "fit_loop"):
                return "lightning", owner.trainer
            if module.startswith("transformers.trainer") and hasattr(owner, "state") and hasattr(owner, "args"):
                return "transformers", owner
            frame = frame.f_back
        return None

    def _restore_framework_steps(self, batches: int, loop: tuple[str, Any] | None) -> None:
        """Lightning and the Hugging Face Trainer count optimizer steps themselves (max_steps, schedules
        keyed on global_step): after a resume their count starts again at 0, so a step-limited run would
        train its whole budget again on top. Set their counter to the optimizer steps done before the
        interruption."""
        if loop is None:
            return
        kind, trainer = loop
        try:
            if kind == "lightning":
                self._restore_lightning_steps(trainer, batches)
            else:
                steps = batches // max(1, int(getattr(trainer.args, "gradient_accumulation_steps", 1) or 1))
                trainer.state.global_step = steps
                self.notes.append(f"Hugging Face Trainer's global_step set to {steps} (the optimizer steps before the interruption)")
        except Exception as exc:  # noqa: BLE001 - a framework's internals moved: say so, keep training
            self.notes.append(f"could not restore {kind}'s step counter ({exc}): a step-limited run (max_steps) "
                              "trains its steps again after this resume")

    def _restore_lightning_steps(self, trainer: Any, batches: int) -> None:
        steps = batches // max(1, int(getattr(trainer, "accumulate_grad_batches", 1) or 1))
        loop = trainer.fit_loop.epoch_loop
        module = trainer.lightning_module
        if module is None or module.automatic_optimization:
            total = loop.automatic_optimization.optim_progress.optimizer.step.total
        else:
            total = loop.manual_optimization.optim_step_progress.total
        total.ready = total.completed = steps
        loop._batches_that_stepped = steps
        self.notes.append(f"Lightning's global_step set to {steps} (the optimizer steps before the interruption)")

    def _report_resume_failure(self, exc_type, exc, tb) -> None:
        """An uncaught error right after a pass the resume ended at once (an epoch finished before the
        checkpoint) is most likely the resume's doing: a script that takes something from that pass
        the loop scan could not see (next() on its iterator, a name bound in a `while` loop). Say so
        in one line; any other error is the script's, with its traceback."""
        if self._emptied_by_resume is None or os.getpid() != self.pid or issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            self._script_excepthook(exc_type, exc, tb)
            return
        import traceback

        from trainwise.run._loopscan import _HOOK_FILES

        frames = [f for f in traceback.extract_tb(tb) if not f.filename.endswith(_HOOK_FILES)]
        where = f" at {frames[-1].filename}, line {frames[-1].lineno}" if frames else ""
        directory = (self.checkpoint_config or {}).get("dir", "the checkpoint folder")
        error = exc_type.__name__ + (f": {exc}" if str(exc) else "")
        if issubclass(exc_type, NameError) and getattr(exc, "name", None):
            hint = f"it reads {exc.name!r}, which that pass's loop binds: give it a value before the loop"
        elif issubclass(exc_type, StopIteration):
            hint = "it takes batches from that pass with next(), and the pass has none: iterate it with a for loop"
        else:
            hint = "if the script uses something that pass makes, give it a value before the loop"
        print(f"trainwise: cannot resume from {self.resumed_from} in {directory}: the script failed with {error}{where} "
              f"right after trainwise ended its training pass {self._emptied_by_resume} at once (an epoch finished before "
              f"the checkpoint is not run again); {hint}, or start afresh with another --checkpoint-dir (or delete "
              f"{directory})", file=sys.stderr, flush=True)
        self._exit(RESUME_SKIP_FAILED_EXIT)

    def _cannot_resume(self, why: str) -> None:
        # Raised inside the user's training loop this would end in a traceback through their code;
        # the launcher turns this exit code into a one-line error.
        where = (self.checkpoint_config or {}).get("dir", "the checkpoint folder")
        print(f"trainwise: cannot resume from {self.resumed_from} in {where}: {why}, or start afresh with another "
              f"--checkpoint-dir (or delete {where})", file=sys.stderr, flush=True)
        os._exit(RESUME_MISMATCH_EXIT)

    # ---- data loader boundaries -------------------------------------------------------------
    def _is_training_pass(self, loader: Any = None) -> bool:
        """A pass begun with gradients on and the model in train mode; or a pass of a DataLoader that
        already served as training: scripts that call model.train() inside their step begin the next
        epoch's pass while the last validation left the model in eval mode."""
        if not self._torch.is_grad_enabled():
            return False
        if loader is not None and loader in self._training_loaders:
            return True
        recorder = recorder_module.current()
        return not bool(getattr(recorder, "eval_mode", False))

    def _install_loader_hooks(self) -> None:
        import torch.utils.data.dataloader as dataloader_module

        from trainwise.run import _state

        agent = self
        loader_class = dataloader_module.DataLoader
        original_iter = loader_class.__iter__

        def loader_iter(loader):
            if not agent._is_training_pass(loader):
                return original_iter(loader)
            try:
                agent._training_loaders.add(loader)
            except TypeError:  # pragma: no cover - a loader class that cannot be weakly referenced
                pass
            agent._reassert_sigterm_handler()
            agent._end_replay(None)  # a replayed pass the script left early (break)
            agent.epoch_index += 1
            agent.train_loader = loader
            resume = agent.resume_state
            if resume is not None and agent.script_resumed_itself and agent.epoch_index == 0:
                # The script continues from its own checkpoint (its first pass is a later epoch), while
                # trainwise counts epochs from the script's start: ending "finished" epochs at once would
                # skip the script's remaining epochs, and the run would end without training them.
                agent._cannot_resume(f"the script resumed itself (it loaded its {agent.script_resumed_itself}'s state "
                                     "before training, from a checkpoint of its own), and trainwise's resume would "
                                     "skip its remaining epochs as already done; use one of the two resumes: run "
                                     "without --checkpoint-dir, or remove the script's own resume")
            loop = agent._framework_loop() if resume is not None else None
            if resume is not None and agent.epoch_index > resume["epoch"]:
                # The script left the checkpoint's epoch, ended after the batch let through it, without
                # asking for the next batch (where the checkpoint is loaded): load it now, before training.
                agent._resume_from(resume, loader, loop)
                resume = None
            if resume is not None and agent.epoch_index < resume["epoch"] and loop is not None and loop[0] == "transformers":
                # The HF Trainer ends training after an epoch without a step: go straight to the epoch
                # that was interrupted; its restored global_step then ends the run where it would have.
                agent.epoch_index = int(resume["epoch"])
            if agent.epoch_index > 0 and (loop or agent._framework_loop() or ("",))[0] == "transformers":
                # The HF Trainer numbers its epochs itself (set_epoch seeds the shuffle), from 0 again
                # after a resume: keep the sampler on trainwise's count, which the resume continued.
                for sampler in (getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)):
                    if hasattr(sampler, "set_epoch"):
                        sampler.set_epoch(agent.epoch_index)  # epoch_index counts from 0, as the Trainer does
            if resume is not None and agent.epoch_index < resume["epoch"]:
                iterator = original_iter(loader)
                iterator._trainwise_skip = True  # an epoch already done before the interruption
                # Its pass ends at once, unless the script reads afterwards a name only the loop's body
                # binds (`loss` of the last batch): then one batch goes through the body first. What it
                # changes in the model and optimizers is replaced when the checkpoint is loaded.
                iterator._trainwise_replay = 1 if agent._pass_must_bind_names(loop) else 0
                iterator._trainwise_restore = None
                agent._emptied_by_resume = None if iterator._trainwise_replay else str(agent.epoch_index + 1)
                return iterator
            resuming = resume is not None and agent.epoch_index == resume["epoch"]
            if resuming:
                _state.apply_rng(resume["epoch_start"]["rng"])
                _state.apply_generator_states(loader, resume["epoch_start"]["generators"])
            agent.epoch_start = {"rng": _state.capture_rng(), "generators": _state.generator_states(loader)}
            iterator = original_iter(loader)
            iterator._trainwise_skip = False
            iterator._trainwise_train = True
            iterator._trainwise_replay = 0
            iterator._trainwise_restore = None
            # A wrapper that fetches a batch ahead (accelerate's DataLoaderShard, under the HF Trainer)
            # asks for batch j+1 before it trains batch j: its first request trains nothing, and a
            # batch counts as done one request later (see iterator_next).
            iterator._trainwise_ahead = _fetches_ahead()
            iterator._trainwise_primed = False
            agent.batches_in_epoch = 0
            if resuming:
                done = int(resume["batches_in_epoch"])
                finished = done > 0 and _consumed_all(iterator, done)
                if finished and agent._pass_must_bind_names(loop):
                    # Checkpointed at the end of this epoch: the pass would end at once. Its last batch
                    # goes through the loop body; the checkpoint is loaded at the next batch request,
                    # the moment it was written.
                    agent._fast_forward(iterator, done - 1)
                    iterator._trainwise_replay = 1
                    iterator._trainwise_restore = (loader, loop)
                else:
                    agent._fast_forward(iterator, done)
                    agent._resume_from(resume, loader, loop)
                    if finished:
                        agent._emptied_by_resume = str(agent.epoch_index + 1)
            return iterator

        loader_class.__iter__ = loader_iter

        iter_class = dataloader_module._BaseDataLoaderIter
        original_next = iter_class.__next__

        def iterator_next(iterator):
            if getattr(iterator, "_trainwise_replay", 0) > 0:
                # A batch of a pass the resume does not train (above): no checkpoint boundary, not
                # counted, not measured.
                iterator._trainwise_replay -= 1
                agent._begin_replay(iterator)
                return original_next(iterator)
            if getattr(iterator, "_trainwise_replaying", False):
                agent._end_replay(iterator)
            restore = getattr(iterator, "_trainwise_restore", None)
            if restore is not None:
                iterator._trainwise_restore = None
                agent._resume_from(agent.resume_state, *restore)
            if getattr(iterator, "_trainwise_skip", False):
                raise StopIteration
            if not getattr(iterator, "_trainwise_train", False):
                return original_next(iterator)
            ahead = getattr(iterator, "_trainwise_ahead", False)
            if ahead and not iterator._trainwise_primed:
                # The wrapper's first request of the pass: nothing trained since the last boundary.
                iterator._trainwise_primed = True
                return original_next(iterator)
            agent._boundary()
            try:
                batch = original_next(iterator)
            except StopIteration:
                if ahead:
                    # the wrapper still trains the batch it fetched ahead: it is done before the next request
                    agent.batches_in_epoch += 1
                    agent.global_batches += 1
                raise
            agent._emptied_by_resume = None
            agent.batches_in_epoch += 1
            agent.global_batches += 1
            return batch

        iter_class.__next__ = iterator_next

    def _fast_forward(self, iterator, batches: int) -> None:
        """Skip the batches consumed before the checkpoint: indices only when loading is in-process."""
        single_process = type(iterator).__name__ == "_SingleProcessDataLoaderIter"
        for _ in range(batches):
            if single_process and not getattr(iterator, "_dataset_kind", 0):  # map-style data set
                iterator._next_index()
            else:
                iterator._next_data()
            iterator._num_yielded += 1
        self.batches_in_epoch = batches

    def _resume_from(self, resume: dict[str, Any], loader: Any, loop: tuple[str, Any] | None) -> None:
        """Load the checkpoint's state at its batch of its epoch: the objects, then the RNG and the
        loader's generators as they were when it was written, and trainwise's counters."""
        from trainwise.run import _state

        self._restore_objects(resume)
        _state.apply_rng(resume["rng"])
        _state.apply_generator_states(loader, resume["generators"])
        self.global_batches = int(resume["global_batches"])
        self.batches_in_epoch = int(resume["batches_in_epoch"])
        self.last_checkpoint_batches = self.global_batches
        self._restore_framework_steps(self.global_batches, loop)
        self.resume_state = None
        self.notes.append(f"resumed from {self.resumed_from} at epoch {self.epoch_index}, batch {self.batches_in_epoch}")

    def _pass_must_bind_names(self, loop: tuple[str, Any] | None) -> bool:
        """Whether a pass the resume does not train must still run its loop body once (see _loopscan)."""
        if loop is not None:
            # A framework's loop calls the script's step as a function (nothing leaks out of it), and
            # would count the batch as one of its steps.
            return False
        from trainwise.run._loopscan import loop_leaves_unbound

        try:
            return loop_leaves_unbound(sys._getframe(1))
        except Exception:  # noqa: BLE001 - an unforeseen source layout: one batch more, never a NameError
            return True

    def _begin_replay(self, iterator: Any) -> None:
        iterator._trainwise_replaying = True
        self._replaying = True
        self._emptied_by_resume = None
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.paused = True  # not a training iteration of this run: not in its measurements

    def _end_replay(self, iterator: Any) -> None:
        if iterator is not None:
            iterator._trainwise_replaying = False
        if not self._replaying:
            return
        self._replaying = False
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.paused = False

    def _boundary(self) -> None:
        if self.ddp_coordinated:
            self._ddp_boundary()
            return
        if self.sigterm_pending:
            if self.writes_checkpoints and self.global_batches > self.last_checkpoint_batches:
                self.save_checkpoint(reason="sigterm")
            self._exit(143)
        if self.writes_checkpoints and self._checkpoint_due():
            self.save_checkpoint(reason="interval")

    def _checkpoint_due(self) -> bool:
        if self.policy is None or self.global_batches <= self.last_checkpoint_batches:
            return False
        if self.policy.every_batches is not None:
            return self.global_batches - self.last_checkpoint_batches >= self.policy.every_batches
        write_s = self.last_write_s if self.last_write_s is not None else self._estimated_write_s()
        return time.monotonic() - self.last_checkpoint_time >= self.policy.interval_s(write_s)

    def _ddp_boundary(self) -> None:
        """The ranks stop, and checkpoint, at the boundary of the step whose all-reduce carried a rank's
        SIGTERM flag or rank 0's "checkpoint due": all of them, since each gives its own RNG states to
        the checkpoint rank 0 writes."""
        stop, save = self.stop_agreed, self.checkpoint_agreed
        self.checkpoint_agreed = False
        if (stop or save) and self.checkpoint_config and self.global_batches > self.last_checkpoint_batches:
            rank_states = self._gather_rank_states()
            if self.writes_checkpoints:
                self.save_checkpoint(reason="sigterm" if stop else "interval", rank_states=rank_states)
            else:
                self.last_checkpoint_batches = self.global_batches
            if stop:
                # No rank leaves before the checkpoint is written: torchrun ends the others when one exits.
                self._torch.distributed.barrier(group=self._ddp_group)
        if stop:
            self._exit(143)

    def _estimated_write_s(self) -> float:
        from trainwise.core.costs import training_state_bytes
        from trainwise.run.checkpoint import estimated_write_s

        optimizers = self._alive(self.optimizers)
        gradient_bytes = sum(p.numel() * p.element_size() for o in optimizers for g in o.param_groups for p in g["params"])
        name = type(optimizers[0]).__name__ if optimizers else None
        return estimated_write_s(training_state_bytes(gradient_bytes, name))

    def save_checkpoint(self, reason: str, rank_states: list[dict[str, Any]] | None = None) -> None:
        state = self._collect_state(rank_states)
        name, size, seconds = self.store.write(self.global_batches, state)
        self.last_write_s = seconds
        self.last_checkpoint_time = time.monotonic()
        self.last_checkpoint_batches = self.global_batches
        self.checkpoint_events.append({"name": name, "reason": reason, "global_batches": self.global_batches,
                                       "epoch": self.epoch_index, "bytes": size, "write_s": seconds,
                                       "wall_s": time.time()})

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

    def _on_optimizer_step(self, optimizer, args, kwargs) -> None:
        if self._replaying:  # a resumed run's replayed batch (above): not a step of this run
            with self._comm_lock:
                self._comm = None
            return
        if self._hm_optimizer is None:
            self.mark_started()
        if self._primary_optimizer is None:
            self._primary_optimizer = id(optimizer)
        elif id(optimizer) != self._primary_optimizer:
            return
        with self._comm_lock:
            record, self._comm = self._comm, None
        if record is not None:
            recorder = recorder_module.current()
            record["step_end_wall_s"] = time.time()
            record["iteration"] = len(recorder.iterations) - 1 if recorder is not None else None
            self.comm_steps.append(record)

    def _install_ddp_hook(self) -> None:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        from torch.nn.parallel import DistributedDataParallel

        agent = self
        original_init = DistributedDataParallel.__init__

        def timed_allreduce(process_group, bucket):
            ready = time.time()
            index = bucket.index()
            nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
            with agent._comm_lock:
                record = agent._comm
                if record is None:
                    record = {"first_ready_wall_s": ready, "last_ready_wall_s": ready, "done_wall_s": ready,
                              "buckets": {}, "bytes": 0}
                    agent._comm = record
                record["last_ready_wall_s"] = ready
                record["bytes"] += nbytes
                span = [ready, None, nbytes]
                record["buckets"][str(index)] = span
            if bucket.is_last():
                future = agent._allreduce_with_stop(process_group, bucket)
            else:
                future = default_hooks.allreduce_hook(process_group, bucket)

            def done(fut):
                finished = time.time()
                with agent._comm_lock:
                    record["done_wall_s"] = max(record["done_wall_s"], finished)
                    span[1] = finished
                return fut.value()

            return future.then(done)

        def ddp_init(module, *args, **kwargs):
            original_init(module, *args, **kwargs)
            try:
                module.register_comm_hook(None, timed_allreduce)
                agent.notes.append("DDP all-reduce timed by a comm hook wrapping torch's default allreduce_hook")
                agent.ddp_coordinated = agent._torch.distributed.get_world_size() > 1
                agent._ddp_group = getattr(module, "process_group", None)
                agent._ddp_device = next((p.device for p in module.parameters()), "cpu")
            except RuntimeError as exc:  # the script registered its own hook first
                agent.notes.append(f"DDP comm hook not registered ({exc}); communication not timed")

        DistributedDataParallel.__init__ = ddp_init

    def _allreduce_with_stop(self, process_group: Any, bucket: Any) -> Any:
        """torch's default all-reduce of a gradient bucket (the mean over ranks), with four elements more,
        summed: this rank's SIGTERM flag (any rank's stops every rank at this step's boundary), rank 0's
        "checkpoint due", and the same two of the explicit API (trainwise.run.checkpoint._ddp_flags), which
        maybe_save() reads after the step."""
        torch = self._torch
        dist = torch.distributed
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        size = buffer.numel()
        due = self.writes_checkpoints and self._checkpoint_due()
        explicit = sys.modules.get("trainwise.run.checkpoint")
        explicit_stop, explicit_due = explicit._ddp_flags() if explicit is not None else (False, False)
        flags = buffer.new_tensor([1.0 if self.sigterm_pending else 0.0, 1.0 if due else 0.0,
                                   1.0 if explicit_stop else 0.0, 1.0 if explicit_due else 0.0])
        combined = torch.cat([buffer.div(dist.get_world_size(group)), flags])
        future = dist.all_reduce(combined, group=group, async_op=True).get_future()
        agent = self

        def split(fut):
            reduced = fut.value()[0]
            stop, save, explicit_stop, explicit_save = (value > 0 for value in reduced[size:].tolist())
            agent.stop_agreed |= stop
            agent.checkpoint_agreed |= save
            agent.explicit_stop_agreed |= explicit_stop
            agent.explicit_due_agreed |= explicit_save
            agent.explicit_reductions += 1
            return reduced.narrow(0, 0, size)

        return future.then(split)

    # ---- Hivemind ---------------------------------------------------------------------------
    def _install_hivemind(self) -> None:
        torch = self._torch
        agent = self
        optimizer_class = torch.optim.Optimizer

        def optimizer_new(cls, *args, **kwargs):
            if agent._hm_guard or agent._hm_optimizer is not None or cls.__module__.split(".")[0] == "hivemind":
                return object.__new__(cls)
            # Returning an object that is not an instance of `cls` makes Python skip cls.__init__.
            return agent._make_hivemind_optimizer(cls, args, kwargs)

        optimizer_class.__new__ = staticmethod(optimizer_new)

        import torch.utils.data.dataloader as dataloader_module

        loader_class = dataloader_module.DataLoader
        original_iter = loader_class.__iter__
        peer = int(self.config["hivemind"]["peer_index"])

        def loader_iter(loader):
            # Each peer must see its own sample order: offset the script's shuffling seed per peer.
            if peer and not getattr(loader, "_trainwise_peer_seeded", False) and agent._is_training_pass(loader):
                from trainwise.run._state import _generators

                for generator in _generators(loader):
                    generator.manual_seed(generator.initial_seed() + 1_000_003 * peer)
                loader._trainwise_peer_seeded = True
            return original_iter(loader)

        loader_class.__iter__ = loader_iter

    def _start_dht(self):
        cfg = self.config["hivemind"]
        host = cfg.get("host") or "127.0.0.1"
        port = int(cfg.get("port") or 0)
        identity = {"identity_path": cfg["identity_path"]} if cfg.get("identity_path") else {}
        dht_class = _quiet_shutdown_dht_class()
        dht = start_with_retries(lambda: dht_class(start=True, host_maddrs=[f"/ip4/{host}/tcp/{port}"],
                                                   initial_peers=list(cfg.get("initial_peers") or []), **identity))
        maddrs = [str(a) for a in dht.get_visible_maddrs()]
        path = os.path.join(self.config["workdir"], f"peer-{self.rank}.maddrs")
        fd, tmp = tempfile.mkstemp(dir=self.config["workdir"], prefix=".maddrs-")
        with os.fdopen(fd, "w") as handle:
            json.dump(maddrs, handle)
        os.replace(tmp, path)
        self.hivemind_info["maddrs"] = maddrs
        # Other hosts join with `--initial-peers` one of these (the /p2p/ part is required).
        print(f"trainwise: hivemind peer {self.rank} reachable at {' '.join(maddrs)}", file=sys.stderr, flush=True)
        return dht

    def _make_hivemind_optimizer(self, cls, args, kwargs):
        import hivemind
        from hivemind.compression import Float16Compression

        cfg = self.config["hivemind"]
        args = list(args)
        params = args.pop(0) if args else kwargs.pop("params")
        params = list(params)
        agent = self

        def factory(inner_params):
            agent._hm_guard = True
            try:
                return cls(inner_params, *args, **kwargs)
            finally:
                agent._hm_guard = False

        self._dht = self._start_dht()
        self._hm_guard = True
        try:
            optimizer = hivemind.Optimizer(
                dht=self._dht, run_id=cfg["run_id"], target_batch_size=int(cfg["target_batch_size"]),
                optimizer=factory, params=params,
                grad_compression=Float16Compression(), state_averaging_compression=Float16Compression(),
                offload_optimizer=True, delay_optimizer_step=True, delay_grad_averaging=True,  # DPU
                matchmaking_time=float(cfg.get("matchmaking_time_s", 5.0)),
                averaging_timeout=float(cfg.get("averaging_timeout_s", 60.0)),
                average_state_every=int(cfg.get("average_state_every", 1)),
                verbose=bool(cfg.get("verbose", False)),
            )
        finally:
            self._hm_guard = False
        self._hm_optimizer = optimizer
        self.hivemind_info.update({"inner_optimizer": cls.__name__, "target_batch_size": int(cfg["target_batch_size"]),
                                   "grad_compression": "fp16", "delayed_parameter_updates": True,
                                   "average_state_every": int(optimizer.average_state_every)})
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.explicit_steps = True  # hivemind's inner optimizer steps are not iterations
            recorder._describe_model(optimizer.state_averager.optimizer)
        original_step = optimizer.step
        original_update = optimizer._update_global_epoch
        original_average = optimizer._average_gradients_and_load_into_optimizer

        def step(closure=None, batch_size=None, grad_scaler=None):
            samples = batch_size or (recorder.iter_samples if recorder is not None else None) or 1
            result = original_step(closure=closure, batch_size=samples, grad_scaler=grad_scaler)
            if recorder is not None:
                recorder.explicit_step(samples=samples)
            agent.mark_started()
            return result

        def update_global_epoch(grad_scaler):
            start = time.time()
            peers = optimizer.tracker.global_progress.num_peers
            epoch = optimizer.local_epoch
            original_update(grad_scaler)
            agent.hivemind_rounds.append({"epoch": epoch, "start_wall_s": start, "end_wall_s": time.time(),
                                          "blocking_s": time.time() - start, "peers": peers})

        original_local = optimizer._load_local_gradients_into_optimizer
        fallback = threading.local()  # averaging runs in hivemind's background thread with delayed updates

        def load_local_gradients():
            # hivemind calls this exactly when a round did not average (no group, a timeout, a failed
            # all-reduce): the peer steps on its own gradients
            fallback.used = True
            return original_local()

        def average(control):
            start = time.time()
            fallback.used = False
            original_average(control)
            agent.hivemind_info.setdefault("averaging", []).append(
                {"start_wall_s": start, "end_wall_s": time.time(), "seconds": time.time() - start,
                 "group": control is not None, "averaged": not fallback.used})

        optimizer.step = step
        optimizer._update_global_epoch = update_global_epoch
        optimizer._average_gradients_and_load_into_optimizer = average
        optimizer._load_local_gradients_into_optimizer = load_local_gradients

        def shutdown():
            try:
                optimizer.shutdown()
            finally:
                agent._dht.shutdown()
                _silence_pending_task_warnings()

        # Hivemind's threads must stop before the interpreter joins non-daemon threads at exit, which
        # happens before atexit handlers run.
        threading._register_atexit(shutdown)
        return optimizer

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
            "notes": self.notes,
        }

    def write(self) -> None:
        if self.written or os.getpid() != self.pid:
            return
        self.written = True
        fd, tmp = tempfile.mkstemp(prefix=".run-", suffix=".json", dir=os.path.dirname(self.out_path))
        with os.fdopen(fd, "w") as handle:
            json.dump(self.record(), handle, default=str)
        os.replace(tmp, self.out_path)

    def _exit(self, code: int) -> None:
        if os.getpid() != self.pid:
            os._exit(code)  # a forked helper (Hivemind averager) inherited the handler: just end
        if self._hm_optimizer is not None:
            self.notes.append("stopped by SIGTERM: left the Hivemind run")
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.stop_reason = "sigterm"
            recorder.write()
        self.write()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _placing_on_device(frame: Any) -> bool:
    """True when `frame` is accelerate wrapping a fresh optimizer (AcceleratedOptimizer.__init__ reloads
    the optimizer's own state to move it to the device, as the HF Trainer's setup does): not a resume."""
    return (frame is not None and frame.f_code.co_name == "__init__"
            and str(frame.f_globals.get("__name__", "")).startswith("accelerate."))


def _fetches_ahead() -> bool:
    """True when the DataLoader being iterated is driven by accelerate's DataLoaderShard (the HF
    Trainer's loader), which requests each next batch before it yields the current one to training."""
    frame = sys._getframe(2)
    for _ in range(4):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if owner is not None and type(owner).__module__.startswith("accelerate.") and frame.f_code.co_name == "__iter__":
            return hasattr(owner, "end_of_dataloader")
        frame = frame.f_back
    return False


def _consumed_all(iterator: Any, batches: int) -> bool:
    """Whether `batches` is the whole pass (a checkpoint at the epoch's end); False when unknown."""
    try:
        return batches >= len(iterator)
    except Exception:  # noqa: BLE001 - an iterable-style data set without a length
        return False


# A message dropped by the DHT process: its sender had exited before the message could be read.
_DROPPED_MESSAGE = ("_trainwise_dropped_message", [], {})


def _sender_gone(exc: BaseException) -> bool:
    """True for the error of unpickling a message whose reply pipe was shared by a process that has
    exited: multiprocessing's resource sharer of that process is gone (its socket file removed, or
    closed mid-handshake)."""
    import traceback

    if not isinstance(exc, (EOFError, OSError)):
        return False
    return any(frame.f_code.co_filename.endswith(os.path.join("multiprocessing", "resource_sharer.py"))
               for frame, _ in traceback.walk_tb(exc.__traceback__))


class _SenderTolerantPipe:
    """The DHT process's end of its request pipe. hivemind.Optimizer.shutdown() stops the averager
    processes while requests they sent to the DHT are still queued; each carries a reply pipe that
    only the exited averager could hand over, so reading it fails: a FileNotFoundError hivemind logs
    with its traceback, or an EOFError that ends the DHT's loop with one ("Process DHT-1: ...
    EOFError", then "Task was destroyed but it is pending!"), at the end of every run. Nobody waits
    for those replies; such a request is dropped, any other error is hivemind's to handle."""

    def __init__(self, pipe: Any) -> None:
        self._pipe = pipe

    def recv(self) -> Any:
        try:
            return self._pipe.recv()
        except (EOFError, OSError) as exc:
            if _sender_gone(exc):
                return _DROPPED_MESSAGE
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


# A joining peer's p2p daemon gives up when no bootstrap peer answers in time — on a busy 2-core
# host, peer 0 training flat out answered too late in 2 of 4 local 2-peer runs ("Daemon failed to
# start: failed to connect to bootstrap peers"). The peer is there: ask again, a little later.
DHT_START_ATTEMPTS = 3
DHT_RETRY_PAUSE_S = 2.0


def start_with_retries(start: Any, attempts: int = DHT_START_ATTEMPTS, pause_s: float = DHT_RETRY_PAUSE_S,
                       sleep: Any = time.sleep) -> Any:
    """`start()`, again after pause_s × attempt when it failed to reach its bootstrap peers."""
    for attempt in range(1, attempts + 1):
        try:
            return start()
        except Exception as exc:  # noqa: BLE001 - hivemind raises P2PDaemonError through the DHT process
            if "bootstrap" not in str(exc) or attempt == attempts:
                raise
            print(f"trainwise: hivemind could not reach its bootstrap peers ({exc}); retrying "
                  f"({attempt + 1}/{attempts})", file=sys.stderr, flush=True)
            sleep(pause_s * attempt)
    raise AssertionError("unreachable")


def _quiet_shutdown_dht_class():
    import hivemind

    class QuietShutdownDHT(hivemind.DHT):
        def run(self) -> None:
            # In the DHT process (a fork): only its reading end is wrapped.
            self._inner_pipe = _SenderTolerantPipe(self._inner_pipe)
            super().run()

        async def _trainwise_dropped_message(self) -> None:
            return None

    return QuietShutdownDHT


def _silence_pending_task_warnings() -> None:
    """After hivemind has shut down, at exit: its progress tracker's loop is closed with a DHT store
    still pending, and asyncio reports "Task was destroyed but it is pending!" when the interpreter
    collects it. Only that message, only from now on, is dropped."""
    import logging

    class PendingTaskAtExit(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return not str(record.msg).startswith("Task was destroyed but it is pending!")

    logging.getLogger("asyncio").addFilter(PendingTaskAtExit())
