"""DDP communication timing and stop-aware all-reduce, and the Hivemind optimizer built around the
script's own. A mixin of trainwise.run._child.RunAgent.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

from trainwise.agent.comm_timing import DdpCommTiming
from trainwise.agent.events import BucketReady, BucketReduced, DdpBuilt, HivemindAveraging, HivemindRound
from trainwise.profile import _child as recorder_module
from trainwise.run._agent_support import _quiet_shutdown_dht_class, _silence_pending_task_warnings, start_with_retries


class DistributedHooks:
    """Methods of trainwise.run._child.RunAgent; they use its state."""

    def _install_ddp_timing(self) -> None:
        """Each DistributedDataParallel the script builds (the patch's DdpBuilt event) gets a comm hook that runs
        torch's default all-reduce and emits a bucket's ready and reduced times on the bus; the DDP timing
        subscriber (trainwise.agent.comm_timing) turns them into one record per optimizer step."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        agent, bus = self, self.bus
        self._ddp_timing = bus.subscribe(DdpCommTiming(self._iteration_index, skip_step=lambda: agent._replaying))
        self.comm_steps = self._ddp_timing.steps

        def timed_allreduce(process_group, bucket):
            index = bucket.index()
            bus.emit(BucketReady(time.time(), index, bucket.buffer().numel() * bucket.buffer().element_size(),
                                 bucket.is_last()))
            if bucket.is_last():
                future = agent._allreduce_with_stop(process_group, bucket)
            else:
                future = default_hooks.allreduce_hook(process_group, bucket)

            def done(fut):
                bus.emit(BucketReduced(time.time(), index))
                return fut.value()

            return future.then(done)

        def on_ddp_built(event) -> None:
            if not isinstance(event, DdpBuilt):
                return
            module = event.module
            try:
                module.register_comm_hook(None, timed_allreduce)
                agent.notes.append("DDP all-reduce timed by a comm hook wrapping torch's default allreduce_hook")
                agent.ddp_coordinated = agent._torch.distributed.get_world_size() > 1
                agent._ddp_group = getattr(module, "process_group", None)
                agent._ddp_device = next((p.device for p in module.parameters()), "cpu")
            except RuntimeError as exc:  # the script registered its own hook first
                agent.notes.append(f"DDP comm hook not registered ({exc}); communication not timed")

        bus.subscribe(on_ddp_built, strict=True)

    def _iteration_index(self) -> int | None:
        recorder = recorder_module.current()
        return len(recorder.iterations) - 1 if recorder is not None else None

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
        """The script's first optimizer is built inside a hivemind.Optimizer (an interceptor of Optimizer.__new__
        on the agent's torch patch); its rounds are timed by a subscriber (trainwise.agent.comm_timing)."""
        agent = self
        self.bus.subscribe(self._hivemind_timing)

        def optimizer_new(original_new, cls, *args, **kwargs):
            if agent._hm_guard or agent._hm_optimizer is not None or cls.__module__.split(".")[0] == "hivemind":
                return original_new(cls, *args, **kwargs)
            # Returning an object that is not an instance of `cls` makes Python skip cls.__init__.
            return agent._make_hivemind_optimizer(cls, args, kwargs)

        self.patch.intercept("optimizer_new", optimizer_new)
        peer = int(self.config["hivemind"]["peer_index"])

        def loader_iter(original_iter, loader):
            # Each peer must see its own sample order: offset the script's shuffling seed per peer.
            if peer and not getattr(loader, "_trainwise_peer_seeded", False) and agent._is_training_pass(loader):
                from trainwise.run._state import _generators

                for generator in _generators(loader):
                    generator.manual_seed(generator.initial_seed() + 1_000_003 * peer)
                loader._trainwise_peer_seeded = True
            return original_iter(loader)

        self.patch.intercept("loader_iter", loader_iter)

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
            agent.bus.emit(HivemindRound(epoch, start, time.time(), peers))

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
            agent.bus.emit(HivemindAveraging(start, time.time(), control is not None, not fallback.used))

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
