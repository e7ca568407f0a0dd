"""Chaos testing of checkpoint/resume: kill -9 a training job at random moments, restart it each
time, and check that it ends with the same weights as an uninterrupted run.

To make 20+ restarts affordable (importing torch costs seconds here), each attempt is a process
forked from a parent that has already imported torch (a "zygote"); the child arms the same run
agent `trainwise run` arms through its bootstrap, runs the script with `runpy`, and is killed with
SIGKILL from outside — a real process death at an arbitrary instruction, including in the middle of
a checkpoint write (some kills are aimed at the moment a temporary checkpoint file appears).
"""

from __future__ import annotations

import json
import os
import random
import runpy
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwise._io import atomic_write_text
from trainwise.run.checkpoint import CorruptCheckpoint, NAME_PATTERN, decode


@dataclass
class Attempt:
    index: int
    kind: str  # "random", "during_write", "final"
    kill_after_s: float | None
    exit_code: int | None
    killed: bool
    temp_file_left: bool
    resumed_from: str | None
    skipped_corrupt: list[str]


@dataclass
class ChaosReport:
    attempts: list[Attempt] = field(default_factory=list)
    corrupt_final_files: list[str] = field(default_factory=list)  # must stay empty (besides injected ones)
    injected_corrupt: list[str] = field(default_factory=list)

    @property
    def kills(self) -> int:
        return sum(a.killed for a in self.attempts)

    @property
    def kills_during_write(self) -> int:
        return sum(a.killed and a.temp_file_left for a in self.attempts)


def _child_main(script: str, args: list[str], config: dict[str, Any], info_path: str) -> None:
    code = 1
    agent = None
    try:
        from trainwise.profile import _child as recorder_module
        from trainwise.run import _child

        _child.arm(config)
        agent = _child.current()
        # Atomic: a kill landing mid-write must leave no file rather than an empty one.
        atomic_write_text(info_path, json.dumps({"resumed_from": agent.resumed_from,
                                                 "skipped_corrupt": list(getattr(agent, "skipped_checkpoints", []))}))
        sys.argv = [script, *args]
        try:
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        recorder = recorder_module.current()
        if recorder is not None:
            recorder.write()
        agent.write()
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


_warm = False


def _warm_zygote() -> None:
    """Import torch and what its first optimizer imports lazily (torch._dynamo: seconds) once."""
    global _warm
    if _warm:
        return
    import torch

    import importlib

    torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    # What the recorder and the agent import lazily inside the job.
    for name in ("fsspec", "trainwise.agent.trace.step", "trainwise.core.costs"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _warm = True


def fork_run(script: str, args: list[str], config: dict[str, Any], info_path: str) -> int:
    """Start one attempt in a forked child; return its pid."""
    _warm_zygote()
    pid = os.fork()
    if pid == 0:
        _child_main(script, args, config, info_path)
    return pid


def run_uninterrupted(script: str, args: list[str]) -> int:
    """The reference: the same script without trainwise at all and without kills, in a forked child
    of this (warm) process, so it shares the attempts' start-up; returns its exit code."""
    _warm_zygote()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            sys.argv = [script, *args]
            runpy.run_path(script, run_name="__main__")
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _temp_files(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def verify_directory(directory: Path, ignore: set[str]) -> list[str]:
    """Names of final-named checkpoint files that do not verify (atomic writes must leave none)."""
    bad = []
    for path in directory.iterdir():
        if NAME_PATTERN.match(path.name) and path.name not in ignore:
            try:
                decode(path.read_bytes(), path.name)
            except (CorruptCheckpoint, Exception):
                bad.append(path.name)
    return bad


def run_chaos(script: str, args: list[str], checkpoint_dir: Path, workdir: Path, *, kills: int = 20,
              during_write: int = 6, max_kill_s: float = 1.0, every_batches: int = 3, seed: int = 0,
              corrupt_newest_at: int | None = 10, attempt_timeout_s: float = 120.0) -> ChaosReport:
    """Kill the job `kills` times (about `during_write` of them aimed at checkpoint writes), then let
    it finish; optionally truncate the newest checkpoint once (after attempt `corrupt_newest_at`)
    to check that a corrupt checkpoint is skipped."""
    rng = random.Random(seed)
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    workdir.mkdir(parents=True, exist_ok=True)
    report = ChaosReport()
    write_attempts = set(rng.sample(range(kills), min(during_write, kills)))
    config = {"engine": "local", "workdir": str(workdir), "launch_wall_s": time.time(), "distributed": False,
              "checkpoint": {"dir": str(checkpoint_dir), "every_s": None, "every_batches": every_batches,
                             "keep": 3, "interruptions_per_hour": None}}
    index = 0
    finished = False
    while True:
        final = report.kills >= kills or finished
        if finished:
            return report
        kind = "final" if final else ("during_write" if index in write_attempts else "random")
        info_path = str(workdir / f"attempt-{index}.json")
        config["launch_wall_s"] = time.time()
        stale = set(_temp_files(checkpoint_dir))
        pid = fork_run(script, args, config, info_path)
        start = time.monotonic()
        kill_after = None if final else rng.uniform(0.0, max_kill_s)
        killed = False
        temp_left = False
        status = None
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            elapsed = time.monotonic() - start
            if elapsed > attempt_timeout_s:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RuntimeError(f"chaos attempt {index} did not finish within {attempt_timeout_s} s")
            if kind == "random" and elapsed >= kill_after:
                os.kill(pid, signal.SIGKILL)
                killed = True
            elif kind == "during_write" and elapsed >= kill_after and set(_temp_files(checkpoint_dir)) - stale:
                os.kill(pid, signal.SIGKILL)
                killed = True
            if killed:
                os.waitpid(pid, 0)
                status = None
                temp_left = bool(set(_temp_files(checkpoint_dir)) - stale)
                break
            if kind != "during_write":
                time.sleep(0.002)
        exit_code = None if killed else os.waitstatus_to_exitcode(status)
        info = json.loads(Path(info_path).read_text()) if Path(info_path).exists() else {}
        report.attempts.append(Attempt(index, kind, kill_after, exit_code, killed, temp_left,
                                       info.get("resumed_from"), info.get("skipped_corrupt", [])))
        report.corrupt_final_files += verify_directory(checkpoint_dir, set(report.injected_corrupt))
        if corrupt_newest_at is not None and index == corrupt_newest_at:
            names = sorted((p.name for p in checkpoint_dir.iterdir() if NAME_PATTERN.match(p.name)), reverse=True)
            if names:
                victim = checkpoint_dir / names[0]
                data = victim.read_bytes()
                victim.write_bytes(data[: len(data) // 2])  # a torn file, as a broken remote upload would leave
                report.injected_corrupt.append(names[0])
        if not killed and exit_code != 0:
            raise RuntimeError(f"chaos attempt {index} ({kind}) exited with code {exit_code}")
        if final:
            return report
        # A job that finished before its kill landed is done: the report then shows fewer kills.
        finished = not killed
        index += 1
