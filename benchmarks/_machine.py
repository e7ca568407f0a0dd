"""The machine a benchmark ran on: one description shared by every benchmark's results JSON.

Benchmarks are run as scripts (`python benchmarks/NAME.py`), so their own folder is on sys.path and
`from _machine import machine` finds this module.
"""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import psutil


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def machine(**extra: Any) -> dict[str, Any]:
    """CPU, cores (and the ones this process may use), memory, load, torch and its threads, GPU.

    `extra` adds benchmark-specific facts (e.g. threads per training run)."""
    try:
        import torch

        torch_version, torch_threads = torch.__version__, torch.get_num_threads()
        gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:  # a benchmark that does not need torch still describes the machine
        torch_version, torch_threads, gpu = None, None, None
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"cpu": cpu_model(), "logical_cores": os.cpu_count(), "physical_cores": psutil.cpu_count(logical=False),
            "cpu_affinity": affinity, "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "torch_version": torch_version, "torch_threads": torch_threads, "gpu": gpu,
            "python": platform.python_version(), "platform": platform.platform(),
            "load_average": [round(x, 2) for x in os.getloadavg()], **extra}


def git_commit(checkout: Path, short: bool = False, mark_changes: bool = False) -> str | None:
    """The checkout's commit (`mark_changes`: with "+changes" when tracked files differ from it), or None when it is
    not a git checkout (say which commit in the run's --note then)."""
    try:
        commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", *(["--short"] if short else []), "HEAD"],
                                capture_output=True, text=True, check=True).stdout.strip()
        changed = mark_changes and subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"], capture_output=True,
            text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    return (commit + ("+changes" if changed else "")) or None
