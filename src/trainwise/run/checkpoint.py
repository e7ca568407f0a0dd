"""Checkpoint files: atomic, authenticated, the newest K kept, on a local path or any fsspec URL.

A checkpoint is one file `ckpt-<global batch, 12 digits>.twckpt`:

    TRAINWISE-CKPT 2 <key id> <HMAC-SHA256> <payload bytes>\\n<payload: torch.save of the state dict>

The HMAC (trainwise.run.checkpoint_key: a per-user secret never stored beside the checkpoints) covers
the file name, the length and the payload: a planted or altered file, one written under another key, or
an older one renamed to look newer, fails it and is never deserialised. A file that passes is still read
with `torch.load(weights_only=True)` (tensors, numbers, strings and containers only: no code runs even
for a file made with a stolen key); the RNG states are kept in that form (trainwise.run._state).

It is written to a temporary name in the same folder, flushed and fsync'ed, then renamed (local
filesystems: `os.replace`, and the folder is fsync'ed so the rename survives a power cut; object
stores: the upload is atomic, then moved). A file cut short by a kill -9 during the write (which can only
be a temporary file locally, but anything on a remote store) or damaged later is skipped with a warning
naming it, set aside as NAME.corrupt, and the next older valid one is used; a file that fails
authentication is set aside as NAME.untrusted the same way.

For custom loops (no DataLoader to find the iteration boundary from), the explicit API:

    from trainwise.run import checkpoint as twc
    state = twc.restore(model=model, optimizer=opt)      # None on a fresh start, else your extras
    for step in range(state["step"] if state else 0, steps):
        ...
        twc.maybe_save(step + 1, model=model, optimizer=opt)   # honours the interval and SIGTERM

works inside and outside `trainwise run` (the directory comes from `--checkpoint-dir`, or
`directory=`). Under data parallelism (torch.distributed initialised, several ranks) every rank calls
maybe_save() at the same step, as the loop above does: the ranks agree there whether to checkpoint
and whether to stop (a SIGTERM that reached one rank only stops all of them, at the same step), and each
rank's RNG states go into the checkpoint rank 0 writes, so that restore() gives every rank its own.
save() (a checkpoint now) is no collective: it holds rank 0's RNG states only. `extra=` holds numbers,
strings, lists, dicts and tensors (what a weights-only load reads back).
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

from trainwise._io import _umask
from trainwise.errors import TrainwiseError

from trainwise.run.checkpoint_format import (DEFAULT_KEEP, FORMAT_VERSION, MAGIC,  # noqa: F401 - re-exported
                                             MAX_HEADER_BYTES, NAME_PATTERN, CorruptCheckpoint,
                                             UntrustedCheckpoint, _mac, checkpoint_name, decode, encode)


class CheckpointStore:
    """The checkpoints of one run in one folder (local path or fsspec URL)."""

    def __init__(self, uri: str, keep: int = DEFAULT_KEEP) -> None:
        import fsspec

        if keep < 1:
            raise TrainwiseError(f"--keep must be at least 1 (got {keep})")
        self.uri = uri
        self.keep = keep
        try:
            self.fs, self.root = fsspec.core.url_to_fs(uri)
        except (ValueError, ImportError) as exc:
            raise TrainwiseError(f"cannot open checkpoint location {uri!r} ({exc}); use a local path or an fsspec URL such as s3://bucket/run") from None
        self.local = "file" in (self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,))
        try:
            self.fs.makedirs(self.root, exist_ok=True)
        except OSError as exc:
            raise TrainwiseError(f"cannot create checkpoint folder {uri!r} ({exc.strerror or exc}): give a writable "
                                 "--checkpoint-dir (a local folder or a bucket URL)") from None
        self.skipped: list[str] = []
        if self.local:
            from trainwise.run.checkpoint_key import check_key_not_inside

            check_key_not_inside(self.root)

    def check_writable(self) -> None:
        """Write and remove a small file: a location that cannot take a checkpoint must fail before
        training starts, not at the first checkpoint (or silently, losing the run to a preemption)."""
        probe = self._path(f".trainwise-probe-{os.getpid()}.tmp")
        try:
            with self.fs.open(probe, "wb") as handle:
                handle.write(b"ok")
            self.fs.rm(probe)
        except Exception as exc:  # noqa: BLE001 - fsspec back ends raise their own error types
            raise TrainwiseError(f"cannot write to checkpoint location {self.uri!r} ({exc.__class__.__name__}: {exc}): "
                                 "check the path, the credentials and the permissions") from None

    def check_resumable(self) -> None:
        """Before a job starts: when checkpoints exist but none was written under this user's key (a resume
        on another machine without the key: the run would set them all aside and start over), refuse in one
        line naming them. Reads only the headers."""
        from trainwise.run.checkpoint_key import KEY_ENV, KEY_FILE_ENV, load_key

        names = self.names()
        if not names:
            return
        ours = load_key().key_id
        foreign: dict[str, str] = {}
        for name in names:
            try:
                with self.fs.open(self._path(name), "rb") as handle:
                    parts = handle.read(MAX_HEADER_BYTES).split(b"\n", 1)[0].split()
            except OSError:
                continue
            if len(parts) == 5 and parts[1] == str(FORMAT_VERSION).encode():
                if parts[2].decode("ascii", "replace") == ours:
                    return  # at least one may verify: the job skips the others by name
                foreign[name] = f"signed with key {parts[2].decode('ascii', 'replace')[:16]}"
            elif len(parts) >= 2 and parts[0] == MAGIC and parts[1] == b"1":
                foreign[name] = "format 1, unkeyed (an older trainwise, or forged)"
        if foreign:
            first, why = next(iter(foreign.items()))
            more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
            raise TrainwiseError(f"no checkpoint in {self.uri} was written under this user's key {ours} ({first}: {why}{more}), "
                                 f"so none is loaded: resume with the key that wrote them ({KEY_FILE_ENV} or {KEY_ENV}), "
                                 "or start afresh with another --checkpoint-dir")

    def _path(self, name: str) -> str:
        return f"{self.root.rstrip('/')}/{name}"

    def names(self) -> list[str]:
        """Checkpoint file names, newest first."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return []
        names = [os.path.basename(str(e).rstrip("/")) for e in entries]
        return sorted((n for n in names if NAME_PATTERN.match(n)), reverse=True)

    def write(self, global_batch: int, state: dict[str, Any]) -> tuple[str, int, float]:
        """Write atomically; return (name, bytes, seconds)."""
        start = time.perf_counter()
        name = checkpoint_name(global_batch)
        blob = encode(state, name)
        if self.local:
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=self.root)
            try:
                # mkstemp makes the file private (0600); a checkpoint gets what any new file would (the
                # umask), so whoever shares the folder (a rerun under another account) can read it
                os.fchmod(fd, 0o666 & ~_umask())
                with os.fdopen(fd, "wb") as handle:
                    handle.write(blob)
                    handle.flush()
                    os.fsync(handle.fileno())
                os.replace(tmp, self._path(name))
            except BaseException:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            directory = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(directory)  # the rename itself must reach the disk
            finally:
                os.close(directory)
        else:
            tmp = self._path(f".{name}.{os.getpid()}.tmp")
            with self.fs.open(tmp, "wb") as handle:
                handle.write(blob)
            self.fs.mv(tmp, self._path(name))
        self.prune()
        return name, len(blob), time.perf_counter() - start

    def remove_stale_temporaries(self) -> None:
        """Temporary files left by a writer killed mid-write (the single writer calls this at start)."""
        try:
            entries = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return
        for entry in entries:
            if os.path.basename(str(entry)).endswith(".tmp"):
                try:
                    self.fs.rm(entry)
                except FileNotFoundError:
                    pass

    def prune(self) -> None:
        for old in self.names()[self.keep:]:
            try:
                self.fs.rm(self._path(old))
            except FileNotFoundError:
                pass

    def load_newest(self) -> tuple[str, dict[str, Any]] | None:
        """The newest checkpoint that verifies. A damaged one (NAME.corrupt) or one that fails
        authentication (NAME.untrusted: never deserialised) is set aside with a warning naming it."""
        for name in self.names():
            try:
                with self.fs.open(self._path(name), "rb") as handle:
                    blob = handle.read()
                return name, decode(blob, name)
            except UntrustedCheckpoint as exc:
                self._set_aside(name, f"refusing checkpoint {self._path(name)}: {exc}", "untrusted", exc)
            except (CorruptCheckpoint, OSError) as exc:
                self._set_aside(name, f"skipping corrupt checkpoint {name} ({exc})", "corrupt", exc)
        return None

    def _set_aside(self, name: str, message: str, suffix: str, exc: Exception) -> None:
        print(f"trainwise: {message}; kept as {name}.{suffix}", file=sys.stderr, flush=True)
        self.skipped.append(f"{name}: {exc}")
        # Out of the way: it must not count towards --keep and push valid checkpoints out.
        try:
            self.fs.mv(self._path(name), self._path(f"{name}.{suffix}"))
        except OSError:
            pass


# --------------------------------------------------------------------------- interval


@dataclass(frozen=True)
class IntervalPolicy:
    """When to checkpoint: a fixed interval, every N batches, or the Young/Daly optimum.

    The optimum sqrt(2 · C · MTBF) (`trainwise.core.costs.young_daly_interval_s`, the interval the
    planner's spot model assumes) uses the measured write time C of the previous checkpoint; before
    the first write, C is the cost model's estimate from the state size.
    """

    every_s: float | None = None
    every_batches: int | None = None
    interruptions_per_hour: float | None = None

    def mtbf_s(self) -> float:
        from trainwise.core.costs import DEFAULT_INTERRUPTIONS_PER_HOUR

        rate = self.interruptions_per_hour if self.interruptions_per_hour is not None else DEFAULT_INTERRUPTIONS_PER_HOUR
        return math.inf if rate <= 0 else 3600.0 / rate

    def interval_s(self, checkpoint_write_s: float) -> float:
        if self.every_s is not None:
            return self.every_s
        from trainwise.core.costs import young_daly_interval_s

        return float(young_daly_interval_s(max(checkpoint_write_s, 1e-3), self.mtbf_s()))


def estimated_write_s(state_bytes: int) -> float:
    from trainwise.core.costs import checkpoint_write_s

    return float(checkpoint_write_s(state_bytes))


# --------------------------------------------------------------------------- explicit API

_explicit: dict[str, Any] = {}


def _explicit_store(directory: str | None) -> CheckpointStore | None:
    import json

    config = json.loads(os.environ.get("TRAINWISE_RUN_CHECKPOINT", "null") or "null")
    uri = directory or (config or {}).get("dir")
    if uri is None:
        return None
    store = _explicit.get(uri)
    if store is None:
        store = CheckpointStore(uri, keep=int((config or {}).get("keep", DEFAULT_KEEP)))
        _explicit[uri] = store
        _explicit["policy"] = IntervalPolicy(every_s=(config or {}).get("every_s"),
                                             every_batches=(config or {}).get("every_batches"))
        _explicit["last"] = time.monotonic()
        _explicit["write_s"] = 1.0
        _install_sigterm_flag()
    return store


_sigterm = {"pending": False}


def _install_sigterm_flag() -> None:
    import signal

    def handler(signum, frame):
        _sigterm["pending"] = True

    try:
        signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        pass


def _collect(step: int, objects: dict[str, Any], extra: dict[str, Any] | None,
             rank_states: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    from trainwise.run import _state

    return {"format": FORMAT_VERSION, "kind": "explicit", "step": step,
            "objects": {k: v.state_dict() for k, v in objects.items()},
            "rng": _state.capture_rng(), "extra": extra or {},
            # DDP: every rank's RNG states, by rank (rank 0's are also the ones above)
            **({"rank_states": rank_states} if rank_states is not None else {})}


def _distributed():
    """torch.distributed when this process is one of several initialised ranks, else None."""
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized() \
                and distributed.get_world_size() > 1:
            return distributed
    except (RuntimeError, ValueError):
        pass
    return None


def _world_size() -> int:
    distributed = _distributed()
    if distributed is not None:
        return int(distributed.get_world_size())
    try:
        return int(os.environ.get("WORLD_SIZE", "1") or 1)
    except ValueError:
        return 1


def _comm_device(distributed: Any) -> Any:
    """Where a tensor for a collective of the default group must live (NCCL: the current GPU)."""
    import torch

    agent = _run_agent()
    if agent is not None and getattr(agent, "_ddp_device", None) is not None:
        return torch.device(agent._ddp_device)
    if "nccl" in str(distributed.get_backend()).lower() and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _gather_rank_states(distributed: Any) -> list[dict[str, Any]]:
    """Every rank's RNG states, in rank order (all ranks call this at the same step)."""
    from trainwise.run import _state

    gathered: list[Any] = [None] * distributed.get_world_size()
    distributed.all_gather_object(gathered, {"rng": _state.capture_rng()})
    return gathered


def _interval_passed() -> bool:
    policy: IntervalPolicy = _explicit["policy"]
    return time.monotonic() - _explicit["last"] >= policy.interval_s(_explicit["write_s"])


def _ddp_flags() -> tuple[bool, bool]:
    """(this rank's SIGTERM, its time interval passed) for the run agent's gradient all-reduce under
    `trainwise run --engine ddp`: they ride on the last bucket's all-reduce as the automatic path's do,
    and maybe_save() reads the summed flags instead of reducing its own (_agree)."""
    if "policy" not in _explicit:
        return False, False
    policy: IntervalPolicy = _explicit["policy"]
    return _sigterm["pending"], policy.every_batches is None and _interval_passed()


def _agree(stop: bool, due: bool, every_batches: int | None) -> tuple[bool, bool]:
    """Whether to stop and whether to checkpoint, the same on every rank: any rank's SIGTERM stops all of
    them at this step (a rank that stopped alone left the others waiting in an all-reduce it never joined:
    "Connection closed by peer", or a hang), and all take part in a checkpoint (their RNG states go into
    it). Under `trainwise run --engine ddp` the flags came summed with this step's gradients (the run
    agent's comm hook): nothing more is sent. Else (a plain torchrun; or no gradient all-reduce since the
    previous call, as under no_sync) a two-element all-reduce, which every rank makes here."""
    distributed = _distributed()
    if distributed is None:
        return stop, due
    agent = _run_agent()
    reductions = getattr(agent, "explicit_reductions", 0) if agent is not None and agent.ddp_coordinated else 0
    if reductions > _explicit.get("reductions_seen", 0):
        _explicit["reductions_seen"] = reductions
        stop_agreed, due_agreed = agent.explicit_stop_agreed, agent.explicit_due_agreed
        agent.explicit_due_agreed = False
        # every_batches: the step decides, the same on every rank (the flag is the time interval's)
        return stop_agreed, due if every_batches is not None else due_agreed
    import torch

    flags = torch.tensor([1.0 if stop else 0.0, 1.0 if due else 0.0], device=_comm_device(distributed))
    distributed.all_reduce(flags)
    summed = flags.tolist()
    return summed[0] > 0, summed[1] > 0


def _process_rank() -> int:
    """This process's data-parallel rank: the run agent's under `trainwise run`; else torch.distributed's
    when it is initialised, else torchrun's RANK (0 for a single process)."""
    agent = _run_agent()
    if agent is not None:
        return agent.rank
    distributed = sys.modules.get("torch.distributed")
    try:
        if distributed is not None and distributed.is_available() and distributed.is_initialized():
            return int(distributed.get_rank())
    except (RuntimeError, ValueError):
        pass
    try:
        return int(os.environ.get("RANK", "0") or 0)
    except ValueError:
        return 0


def save(step: int, *, directory: str | None = None, extra: dict[str, Any] | None = None, **objects: Any) -> str | None:
    """Write a checkpoint now (objects: anything with state_dict(), e.g. model=, optimizer=, scheduler=).
    Under data parallelism only rank 0 writes (the replicas hold the same state; several writers of the
    same file names would race): the other ranks return None. It is no collective — `if rank == 0:
    save(...)` must not hang — so it holds rank 0's RNG states only (restore() gives them to every rank,
    with a warning); maybe_save(), which every rank calls at the same step, holds each rank's own."""
    return _save(step, directory=directory, extra=extra, objects=objects, gather=False)


def _save(step: int, *, directory: str | None, extra: dict[str, Any] | None, objects: dict[str, Any],
          gather: bool) -> str | None:
    store = _explicit_store(directory)
    if store is None:
        return None
    distributed = _distributed() if gather else None
    # every rank's RNG states (a collective: only from maybe_save, which all ranks call at the same step)
    rank_states = _gather_rank_states(distributed) if distributed is not None else None
    if _process_rank() != 0:
        _explicit["last"] = time.monotonic()
        return None
    name, size, seconds = store.write(step, _collect(step, objects, extra, rank_states))
    _explicit["last"] = time.monotonic()
    _explicit["write_s"] = seconds
    agent = _run_agent()
    if agent is not None:
        # The run's result counts the checkpoints the script wrote through this API too.
        agent.checkpoint_events.append({"name": name, "reason": "explicit", "global_batches": step, "epoch": None,
                                        "bytes": size, "write_s": seconds, "wall_s": time.time()})
    return name


def _run_agent():
    """trainwise run's agent in this process, or None (a script run on its own)."""
    module = sys.modules.get("trainwise.run._child")
    return None if module is None else module.current()


def maybe_save(step: int, *, directory: str | None = None, extra: dict[str, Any] | None = None, **objects: Any) -> str | None:
    """Checkpoint if the interval has passed; on SIGTERM checkpoint and exit (code 143)."""
    store = _explicit_store(directory)
    if store is None:
        return None
    policy: IntervalPolicy = _explicit["policy"]
    due = step % policy.every_batches == 0 if policy.every_batches is not None else _interval_passed()
    # Under data parallelism the ranks agree (a SIGTERM that reached one rank stops all at the same step);
    # a rank whose own flag is not agreed yet goes on to the next step, where it is.
    stop, due = _agree(_sigterm["pending"], due, policy.every_batches)
    name = _save(step, directory=directory, extra=extra, objects=objects, gather=True) if due or stop else None
    if stop:
        distributed = _distributed()
        if distributed is not None:
            # No rank leaves before rank 0 has written the checkpoint: torchrun ends the others when one exits.
            distributed.barrier()
        agent = _run_agent()
        if agent is not None:
            # Under `trainwise run`: its records must be written before the process ends (os._exit skips
            # atexit), or the run reads as having failed before its first step instead of as preempted.
            agent._exit(143)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(143)
    return name


def restore(*, directory: str | None = None, **objects: Any) -> dict[str, Any] | None:
    """Load the newest valid checkpoint into the objects; return {"step", "extra"} or None."""
    from trainwise.run import _state

    store = _explicit_store(directory)
    if store is None:
        return None
    found = store.load_newest()
    if found is None:
        return None
    name, state = found
    saved = state.get("objects", {})
    missing = [key for key in objects if key not in saved]
    if missing:
        _refuse_restore(name, store, f"it holds no {', '.join(missing)} (it holds {', '.join(sorted(saved)) or 'nothing'}); "
                                     "pass restore() the names save() was given")
    for key, obj in objects.items():
        try:
            obj.load_state_dict(saved[key])
        except Exception as exc:  # noqa: BLE001 - whatever the object's loader raises on a foreign state
            _refuse_restore(name, store, f"its {key} does not fit the script's ({load_error_detail(exc)}); resume with "
                                         "the script and settings that wrote it")
    _state.apply_rng(_own_rng(name, state))
    return {"step": state["step"], "extra": state.get("extra", {})}


def _own_rng(name: str, state: dict[str, Any]) -> dict[str, Any]:
    """This rank's RNG states: a checkpoint written under data parallelism holds every rank's (ranks
    seeded seed + rank draw different dropout masks and noise; with rank 0's they would not continue as
    an uninterrupted run)."""
    per_rank = state.get("rank_states")
    rank, world = _process_rank(), _world_size()
    if per_rank is not None and len(per_rank) == world:
        return per_rank[rank]["rng"]
    if per_rank is not None or rank > 0:
        held = f"{len(per_rank)} processes' RNG states" if per_rank is not None else "one process's RNG states"
        message = (f"{name} holds {held}, this job runs {world} processes: rank {rank} resumed with rank 0's "
                   "(its random draws differ from an uninterrupted run's)")
        print(f"trainwise: {message}", file=sys.stderr, flush=True)
        agent = _run_agent()
        if agent is not None:
            agent.notes.append(message)
    return state["rng"]


def load_error_detail(exc: BaseException) -> str:
    """One line of a failed load_state_dict: torch's first line only says where ("Error(s) in loading
    state_dict for Sequential:"); each next one names a difference."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [repr(exc)]
    if len(lines) > 1 and lines[0].endswith(":"):
        lines = lines[1:]
    return lines[0].rstrip(".") + (f"; and {len(lines) - 1} more" if len(lines) > 1 else "")


def _refuse_restore(name: str, store: CheckpointStore, why: str) -> None:
    """A checkpoint that does not match the objects restore() was given: one line, not a traceback
    from inside torch. Under `trainwise run` the job stops as the automatic resume does on a mismatch."""
    agent = _run_agent()
    if agent is not None:
        agent.resumed_from = name
        agent._cannot_resume(why)  # says where, and how to start afresh; ends the job
    raise TrainwiseError(f"cannot restore from {name} in {store.root}: {why}, or start afresh with another "
                         "checkpoint folder")
