"""Run a benchmark's independent measurements side by side, each in its own process pinned to one CPU.

On a dedicated many-core machine (no neighbours' jobs), a benchmark that needs an hour serially can
measure its configurations concurrently: every task is the benchmark script itself, started again with
`--worker-task JSON --worker-out FILE --cpu N`, so a task runs the same code as the serial benchmark
and its training runs inherit the pinning. Concurrent tasks share the memory system, so a phase keeps
every CPU it uses busy for about the same time (the serial benchmark's sizing aims each full run at the
same target); what each task measured is only compared with what ran under the same load.

Used by same_machine_prediction.py and integrations_prediction.py (`--parallel-cpus 0-7`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console()


def parse_cpus(text: str) -> list[int]:
    """'0-3,8,10-11' → [0, 1, 2, 3, 8, 10, 11]; refuses CPUs this process may not use."""
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise SystemExit(f"error: --parallel-cpus {text!r}: use CPU numbers and ranges such as 0-7 or 0,2,4") from None
        cpus.extend(range(first, last + 1))
    allowed = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - allowed)
    if missing or not cpus:
        raise SystemExit(f"error: --parallel-cpus {text!r}: CPUs {missing or 'none'} are not available here "
                         f"(this process may use {sorted(allowed)})")
    if len(set(cpus)) != len(cpus):
        raise SystemExit(f"error: --parallel-cpus {text!r} names a CPU twice")
    return cpus


def run_tasks(script: str, tasks: list[tuple[int, dict[str, Any]]], extra_argv: list[str] | None = None,
              label: str = "") -> list[dict[str, Any]]:
    """Run (cpu, task) pairs concurrently, at most one task per CPU at a time (queued per CPU, in order);
    return each task's result in the order given. A task that fails stops the benchmark with its log."""
    workdir = Path(tempfile.mkdtemp(prefix="trainwise-bench-"))
    queues: dict[int, list[int]] = {}
    for index, (cpu, _) in enumerate(tasks):
        queues.setdefault(cpu, []).append(index)
    running: dict[int, tuple[int, subprocess.Popen, Any]] = {}
    results: dict[int, dict[str, Any]] = {}
    started = time.time()

    def start(cpu: int) -> None:
        index = queues[cpu].pop(0)
        out = workdir / f"task{index}.json"
        log = open(workdir / f"task{index}.log", "w")
        argv = [sys.executable, script, "--cpu", str(cpu), "--worker-task", json.dumps(tasks[index][1]),
                "--worker-out", str(out), *(extra_argv or [])]
        running[cpu] = (index, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT), log)

    for cpu in queues:
        start(cpu)
    while running:
        time.sleep(0.5)
        for cpu, (index, process, log) in list(running.items()):
            if process.poll() is None:
                continue
            log.close()
            del running[cpu]
            if process.returncode != 0:
                for _, other_process, _ in running.values():
                    other_process.kill()
                tail = (workdir / f"task{index}.log").read_text()[-3000:]
                raise SystemExit(f"error: {label} task {tasks[index][1]} on CPU {cpu} failed "
                                 f"(exit {process.returncode}):\n{tail}")
            results[index] = json.loads((workdir / f"task{index}.json").read_text())
            console.print(f"  {label} {len(results)}/{len(tasks)} done on CPU {cpu} "
                          f"({time.time() - started:.0f} s)")
            if queues[cpu]:
                start(cpu)
    return [results[i] for i in range(len(tasks))]


def write_worker_result(path: str, result: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(result))
