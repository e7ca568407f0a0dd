"""The raw record the recorder writes (atomically) and the runner turns into a Profile: the model's and
the environment's description, memory, and the process's end (finish now, sys.exit, interpreter exit,
scratch saves). A mixin of the recorder.
"""

from __future__ import annotations

import os
import platform
import resource
import socket
import sys
import tempfile
import threading
import weakref
from typing import Any

from trainwise.agent import cpu_steal
from trainwise.agent.compiled_code import compile_summary
from trainwise.allocator import recorded_settings as recorded_allocator_settings
from trainwise.core.host import cpu_model  # standard library only
from trainwise.profile._iteration_log import record_json

RAW_FORMAT_VERSION = 2  # 2: iterations as columns (trainwise.profile._iteration_log)


class RecordOutput:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def scratch_path(self, path: str | os.PathLike) -> str:
        """Where a sampled profile writes the script's save to `path`: a hidden file beside it when `path`
        holds a file already (the user's checkpoint stays untouched), else `path` itself, removed at the end:
        a script that reads its save back by other means than torch.load (`shutil.copyfile(checkpoint,
        best)`, as pytorch/examples' ImageNet script does) finds it there."""
        target = os.path.abspath(os.fspath(path))
        scratch = self.scratch_saves.get(target)
        if scratch is None:
            directory, name = os.path.split(target)
            fresh = not os.path.lexists(target)
            scratch = target if fresh else os.path.join(directory, f".{name}.trainwise-profile-{os.getpid()}")
            self.scratch_saves[target] = scratch
            # Listed for the runner too, which removes them if this process is killed first.
            with open(self.out_path + ".scratch", "a") as listing:
                listing.write(scratch + "\n")
            if fresh:
                self.notes.append(f"the script saved {os.fspath(path)} during sampling: no such file existed, so it "
                                  "was written there and removed at the end (copies the script made of it stay)")
            else:
                self.notes.append(f"the script saved {os.fspath(path)} during sampling: written to a scratch file "
                                  "beside it instead and removed at the end, so the file itself is untouched (the "
                                  "save's time counts in its iteration as usual)")
        return scratch

    def _remove_scratch_saves(self) -> None:
        for scratch in self.scratch_saves.values():
            try:
                os.unlink(scratch)
            except OSError:
                pass  # never written (the save failed) or already gone

    # ---- model / environment ----------------------------------------------------------------
    def _describe_model(self, optimizer) -> None:
        """Add the parameters `optimizer` steps to the model's description (every optimizer that steps,
        each parameter once; the optimizer named is the primary's, the first to step)."""
        self._described_optimizers.add(id(optimizer))
        self._stepped_optimizers.append(weakref.ref(optimizer))
        params = [p for group in getattr(optimizer, "param_groups", []) for p in group.get("params", [])]
        self._describe_parameters(params, type(optimizer).__name__)
        cap = (getattr(optimizer, "defaults", None) or {}).get("max_iter")
        if id(optimizer) == self.primary_optimizer_id and isinstance(cap, int) and cap >= 1:
            self.model["closure_evaluation_cap"] = cap  # LBFGS: closure evaluations of one step at most

    def _describe_parameters(self, params: list, optimizer_name: str | None) -> None:
        model = self.model or {"parameters": 0, "trainable_parameters": 0, "gradient_bytes": 0, "device": "cpu",
                               "parameter_dtypes": [], "optimizer": optimizer_name}
        dtypes = set(model["parameter_dtypes"])
        for p in params:
            if id(p) in self._described_parameters:
                continue
            self._described_parameters.add(id(p))
            count = p.numel()
            model["parameters"] += count
            if p.requires_grad:
                model["trainable_parameters"] += count
                model["gradient_bytes"] += count * p.element_size()
            model["device"] = str(p.device)
            dtypes.add(str(p.dtype).replace("torch.", ""))
        model["parameter_dtypes"] = sorted(dtypes)
        self.model = model

    def _sample_cpu_steal(self) -> float | None:
        """The hypervisor's share of the CPUs from the first iteration's end to sampling's end (or to now)."""
        if self._steal_start is None:
            return None
        fraction = cpu_steal.steal_fraction(self._steal_start, self._steal_end or cpu_steal.read_counters())
        return round(fraction, 4) if fraction is not None else None

    def _environment(self) -> dict[str, Any]:
        torch = self._torch
        env: dict[str, Any] = {
            "python_version": platform.python_version(), "platform": platform.platform(),
            "hostname": socket.gethostname(), "cpu_model": cpu_model(), "logical_cores": os.cpu_count(),
            "torch_version": getattr(torch, "__version__", None),
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "device": self.model.get("device", "cpu"), "device_name": None,
            "allocator_env": recorded_allocator_settings(),
            "flush_denormal": self.flush_denormal,
        }
        if torch is not None and torch.cuda.is_initialized():  # not is_available: it inits CUDA in a CPU job
            env["device_name"] = torch.cuda.get_device_name()
        return env

    def _accelerator_query(self) -> dict[str, Any] | None:
        """Whether the job asked torch for an accelerator (None: torch was never imported, nothing to tell)."""
        patch = getattr(self, "patch", None)
        queries = getattr(patch, "accelerator_queries", None) if patch is not None else None
        if self._torch is None or queries is None:
            return None
        xla = "torch_xla" in sys.modules  # a TPU job asks torch_xla for its device, whatever it asked torch
        if self.accelerator_query is not None:
            return {"asked": True, **self.accelerator_query, "xla": xla}
        if xla:
            return {"asked": True, "query": "import torch_xla", "caller": None, "t_s": None, "xla": True}
        return None if queries.gave_up else {"asked": False}

    def _memory(self) -> dict[str, Any]:
        peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
        memory: dict[str, Any] = {"peak_rss_bytes": int(peak_rss_kib) * 1024, "peak_device_bytes": None}
        torch = self._torch
        if torch is not None and torch.cuda.is_initialized():  # not is_available: it inits CUDA in a CPU job
            memory["peak_device_bytes"] = int(torch.cuda.max_memory_allocated())
        return memory

    # ---- output -----------------------------------------------------------------------------
    def raw_record(self) -> dict[str, Any]:
        last_events = list(self.iterations.end_times()[-1:]) + [v["end_s"] for v in self.validations if v["end_s"]]
        return {
            "raw_format_version": RAW_FORMAT_VERSION,
            "mode": "sampled" if self.sampled else "full",
            "config": {k: v for k, v in self.config.items() if k != "out_path"},
            "stop_reason": self.stop_reason,
            "stability": self.stability,
            "level_probes": self.level_probes,
            "sample_cpu_steal": self._sample_cpu_steal(),
            "torch_compile": compile_summary(),
            "accelerator_query": self._accelerator_query(),
            "marks": self.marks,
            "iterations": self.iterations,
            "validations": self.validations,
            "epochs": self.epochs,
            "loaders": self.loaders,
            "model": self.model,
            "environment": self._environment(),
            "memory": self._memory(),
            "training_end_s": max(last_events) if last_events else None,
            "recorded_until_s": self.now(),
            "explicit_steps": self.explicit_steps,
            "observer_s": self.observer_s,
            "characterisation": self.characterisation,
            "other_models": self.other_models_traced,  # models that train beside it: step fields, calls per iteration
            # the model's training calls per iteration (loops without a DataLoader): {calls: iterations}
            "forward_passes": {str(calls): n for calls, n in sorted(self.forward_tally.items())},
            "optimizer_state_zeros": self.optimizer_state_zeros,
            "optimizer_state_subnormals": self.optimizer_state_subnormals,
            "epoch_loop_exits": self.epoch_loop_exits,
            "script_epochs": self.script_epochs,
            "script_iterations": self.script_iterations,
            # (a subscriber of the agent's bus that failed and was dropped says so here)
            "notes": self.notes + [note for note in self.bus.notes if note not in self.notes],
        }

    def write(self) -> None:
        if self.written:
            return
        self.written = True
        # A pass still undecided when the record is written ended with the process, without a step.
        self._settle_undecided()
        self._close_open_region()
        self._write_record(self.raw_record())

    def _write_record(self, record: dict[str, Any]) -> None:
        directory = os.path.dirname(os.path.abspath(self.out_path))
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(prefix=".raw-", suffix=".json", dir=directory)
            with os.fdopen(fd, "w") as handle:
                handle.write(record_json(record))
            os.replace(tmp, self.out_path)
        except OSError as exc:  # a full disk: in the job, at exit, a traceback would be all the user saw
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            print(f"trainwise: cannot write the profile record: {exc.strerror or exc}", file=sys.stderr, flush=True)

    def _finish(self, reason: str) -> None:
        if self.finished:
            return
        self.finished = True
        self.stop_reason = reason
        self._characterise()
        self._count_state_zeros()
        self.write()
        self._remove_scratch_saves()
        sys.stdout.flush()
        sys.stderr.flush()
        # End now, skipping the rest of the script: its end-of-training code (saving a model,
        # writing results) must not run on a model that was trained for a few iterations only.
        self._wait_for_the_launcher()
        os._exit(0)

    def on_sys_exit(self, status: Any, call: str = "sys.exit") -> None:
        if self.finished or not self.iterations or threading.current_thread() is not threading.main_thread():
            return
        train = self.current_train_state
        in_epoch = train is not None and train.role == "train" and bool(self.epochs) and self.epochs[-1]["end_s"] is None
        sampling = self.sampled and not self.epoch1_truncated
        if not (in_epoch or sampling):
            return  # after its training (`sys.exit(main())`): an ordinary end
        call = f"{call}()" if status is None else f"{call}({status!r})"
        where = [f"in the middle of epoch {len(self.epochs)} (its training DataLoader pass unfinished)"] if in_epoch else []
        if sampling:
            where.append("before sampling had stopped (the steady state rests on these iterations, not on a stable sample)")
        self.exit_mid_training = f"the script called {call} after {len(self.iterations)} iterations, {' and '.join(where)}"

    def on_process_exit(self) -> None:
        if self._release_if_brief() or not self._writes_a_record():  # another process of the job owns the profile
            self._remove_scratch_saves()
            return
        if not self.finished and self.exit_mid_training is None and self._close_whole_run():
            pass  # the whole training ran during the profile (stop_reason stays script_exited)
        elif not self.finished and self.exit_mid_training is not None:
            self.stop_reason = "script_exited_mid_training"
            self.notes.append(f"{self.exit_mid_training}: the profile holds what ran until then")
        elif not self.finished and self.sampled and self.epoch1_truncated:
            # The script went on past its sampled epoch to its end (a one-epoch job, or sampling stopped
            # in the last epoch): whatever it does after training ran on a barely trained model.
            self.stop_reason = "script_ended_after_sampling"
            self.notes.append("the script ran to its end after sampling stopped (its last epoch was the sampled one): "
                              "its end-of-training code ran on a model trained for a few iterations; pass --epochs so "
                              "that trainwise stops after timing validation, or profile a run with more epochs")
        if not self.finished:
            self._characterise()
            self._count_state_zeros()
            self.write()
        self._remove_scratch_saves()
