"""Interrupt a `trainwise run` with SIGTERM (a spot preemption notice) and run it again: the shared
steps of the checkpoint-and-resume tests."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Sequence


def stop_with_sigterm(cli: Sequence[str], ready: Callable[[], bool], *, timeout_s: float = 240.0) -> str:
    """Start `cli`, send SIGTERM once `ready()` holds (e.g. a checkpoint exists), check that the job
    stopped as preempted (exit 143); return its combined output."""
    process = subprocess.Popen(list(cli), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + timeout_s
    while time.time() < deadline and process.poll() is None and not ready():
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=120)
    assert process.returncode == 143, out[-2000:]
    return out


def resume(cli: Sequence[str]) -> subprocess.CompletedProcess:
    """Run `cli` again; it must resume from a checkpoint and finish."""
    again = subprocess.run(list(cli), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, (again.stdout + again.stderr)[-2000:]
    assert "resumed from ckpt-" in again.stdout
    return again
