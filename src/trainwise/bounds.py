"""Bounds on what one command may ask of this machine, checked before any work starts.

Read from the machine's own facts without importing torch (a refusal must take well under a second):
CPU cores this process may use, available memory, and visible GPUs. The rules:

- processes started on one node (DDP `--nproc`, local Hivemind `--peers`, pipeline DataLoader workers):
  at most max(visible GPUs, usable CPU cores), and at most available memory / PROCESS_MEMORY_FLOOR_BYTES
  (an idle PyTorch process takes ~200 MB resident before it loads any data). More cores' worth of
  processes only slows every one of them; more than memory holds brings the OOM killer onto unrelated
  processes. `TRAINWISE_MAX_PROCESSES=N` raises the cores/GPUs limit deliberately (oversubscribing a
  small CPU machine to test DDP); the memory limit still holds.
- counts a planner or a model multiplies by (machines in a group, epochs, devices): fixed ceilings far
  beyond any real job, named in the refusal (MAX_NODES, MAX_EPOCHS, ...).
- options that are numbers must be finite; those that are amounts, positive.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass

from trainwise.errors import TrainwiseError

PROCESS_MEMORY_FLOOR_BYTES = 256 * 2**20
MAX_PROCESSES_ENV = "TRAINWISE_MAX_PROCESSES"
# Machines in one N x machine group: the largest training clusters are a few thousand machines.
MAX_NODES = 10_000
# Epochs of one run: the planner's arrays and a prediction's per-epoch terms stay small below this.
MAX_EPOCHS = 1_000_000


@dataclass(frozen=True)
class MachineFacts:
    cores: int
    available_memory_bytes: int | None
    gpus: int

    def describe(self) -> str:
        memory = "unknown memory" if self.available_memory_bytes is None else \
            f"{self.available_memory_bytes / 2**30:.1f} GiB available"
        return f"{self.cores} CPU cores, {self.gpus} GPUs, {memory}"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def available_memory_bytes() -> int | None:
    """MemAvailable (Linux), capped by a cgroup v2 memory limit when one applies; None when unknown."""
    available = None
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max", encoding="ascii") as handle:
            limit = handle.read().strip()
        with open("/sys/fs/cgroup/memory.current", encoding="ascii") as handle:
            used = int(handle.read().strip())
        if limit != "max":
            room = max(0, int(limit) - used)
            available = room if available is None else min(available, room)
    except (OSError, ValueError):
        pass
    if available is None and hasattr(os, "sysconf"):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            pass
    return available


def visible_gpus() -> int:
    """NVIDIA/AMD GPUs this process may use, from the device nodes (no CUDA initialisation)."""
    found = 0
    try:
        found = sum(1 for name in os.listdir("/dev") if re.fullmatch(r"nvidia\d+", name))
    except OSError:
        pass
    if not found:
        try:
            found = sum(1 for name in os.listdir("/dev/dri") if name.startswith("renderD")) if os.path.exists("/dev/kfd") else 0
        except OSError:
            pass
    for variable in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        value = os.environ.get(variable)
        if value is not None:
            listed = [v for v in value.split(",") if v.strip() and v.strip() != "-1"]
            found = min(found, len(listed))
    return found


def machine_facts() -> MachineFacts:
    return MachineFacts(usable_cores(), available_memory_bytes(), visible_gpus())


def check_processes_per_node(count: int, option: str, facts: MachineFacts | None = None) -> None:
    """Refuse starting `count` processes on this machine beyond the module's rule."""
    facts = facts or machine_facts()
    override = os.environ.get(MAX_PROCESSES_ENV)
    if override is not None:
        try:
            limit, why = int(override), f"{MAX_PROCESSES_ENV}={override}"
        except ValueError:
            raise TrainwiseError(f"{MAX_PROCESSES_ENV} must be a whole number (got {override!r})") from None
    else:
        limit = max(facts.gpus, facts.cores)
        why = f"max(GPUs {facts.gpus}, CPU cores {facts.cores}) on this machine"
    if count > limit:
        raise TrainwiseError(f"{option} {count} is more processes than this machine runs well: the limit is {limit} "
                             f"({why}; set {MAX_PROCESSES_ENV} to oversubscribe deliberately)")
    if facts.available_memory_bytes is not None:
        by_memory = max(1, facts.available_memory_bytes // PROCESS_MEMORY_FLOOR_BYTES)
        if count > by_memory:
            raise TrainwiseError(f"{option} {count} processes do not fit in memory: {facts.available_memory_bytes / 2**30:.1f} "
                                 f"GiB available holds at most {by_memory} at {PROCESS_MEMORY_FLOOR_BYTES >> 20} MiB each; "
                                 "start fewer")


def check_count(value: int, option: str, maximum: int, what: str, minimum: int = 1) -> None:
    if value < minimum:
        raise TrainwiseError(f"{option} must be at least {minimum} (got {value})")
    if value > maximum:
        raise TrainwiseError(f"{option} {value:,} is beyond trainwise's limit of {maximum:,} {what}: give a smaller value")


def check_number(value: float | None, option: str, *, positive: bool = False, non_negative: bool = False,
                 maximum: float | None = None, unit: str = "") -> None:
    """A finite number (NaN, inf refused), optionally > 0 or >= 0 and at most `maximum`; None passes."""
    if value is None:
        return
    shown = f"{value:g}" if isinstance(value, float) else str(value)
    if not math.isfinite(value):
        raise TrainwiseError(f"{option} must be a finite number (got {shown}){': ' + unit if unit else ''}")
    if positive and not value > 0:
        raise TrainwiseError(f"{option} must be positive (got {shown})")
    if non_negative and not value >= 0:
        raise TrainwiseError(f"{option} must be 0 or more (got {shown})")
    if maximum is not None and value > maximum:
        raise TrainwiseError(f"{option} {shown} is beyond the limit of {maximum:g}{' ' + unit if unit else ''}")


def check_finite(options: dict[str, float | None]) -> None:
    """Each given number finite: NaN passes every `<= 0` test (`--timeout nan` never timed out) and inf
    means "never" where the option is a limit."""
    for option, value in options.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise TrainwiseError(f"{option} must be a finite number (got {value:g})")
