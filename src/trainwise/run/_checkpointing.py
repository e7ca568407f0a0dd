"""Checkpoints at iteration boundaries: what the state is (every root module with optimized parameters,
optimizers, schedulers, scalers, RNG states, the DataLoader position), writing it, SIGTERM, and putting
it back on restart. A mixin of trainwise.run._child.RunAgent.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import weakref
from typing import Any

from trainwise.agent.events import IterationBoundary, SigtermReceived
from trainwise.run._stop_rule import CheckpointAndStop


class Checkpointing:
    """Methods of trainwise.run._child.RunAgent; they use its state."""

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

        # The checkpointer and SIGTERM handling: a subscriber of the agent's bus (trainwise.run._stop_rule),
        # strict: a checkpoint that cannot be written fails the job.
        self._stop = CheckpointAndStop(
            due=self._checkpoint_due, save=lambda reason: self.save_checkpoint(reason=reason), exit=self._exit,
            started=lambda: self.train_loader is not None,
            new_batches=lambda: self.global_batches > self.last_checkpoint_batches,
            writes=self.writes_checkpoints, coordinated=lambda: self.ddp_coordinated, ddp_boundary=self._ddp_boundary)
        self.bus.subscribe(self._stop, strict=True)

        def on_sigterm(signum, frame):
            self.bus.emit(SigtermReceived(self.patch.now()))

        self._sigterm_handler = on_sigterm
        signal.signal(signal.SIGTERM, on_sigterm)

    @property
    def sigterm_pending(self) -> bool:
        stop = getattr(self, "_stop", None)
        return stop is not None and stop.sigterm_pending

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

    def _boundary(self) -> None:
        self.bus.emit(IterationBoundary(self.patch.now(), self.global_batches))

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
        try:
            name, size, seconds = self.store.write(self.global_batches, state)
        except OSError as exc:
            # Raised here it would end in a traceback through the user's training loop; the launcher
            # turns this exit code into a one-line error (the checkpoints written before stay valid).
            from trainwise.run._agent_support import CHECKPOINT_WRITE_EXIT

            where = (self.checkpoint_config or {}).get("dir", "the checkpoint folder")
            print(f"trainwise: cannot write a checkpoint to {where}: {exc.strerror or exc}", file=sys.stderr, flush=True)
            self._exit(CHECKPOINT_WRITE_EXIT)
            return
        self.last_write_s = seconds
        self.last_checkpoint_time = time.monotonic()
        self.last_checkpoint_batches = self.global_batches
        self.checkpoint_events.append({"name": name, "reason": reason, "global_batches": self.global_batches,
                                       "epoch": self.epoch_index, "bytes": size, "write_s": seconds,
                                       "wall_s": time.time()})
