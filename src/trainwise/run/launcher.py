"""Start an unmodified training command under one of the engines, with the run agent armed in
every training process, and gather the per-rank records into a RunResult.

- local: the command itself;
- ddp: `python -m trainwise.run._torchrun --no-python … COMMAND` (torchrun, quiet on a forwarded SIGTERM; it sets RANK, WORLD_SIZE,
  MASTER_ADDR…; the script does its own `init_process_group` and DistributedDataParallel wrap);
- hivemind: N copies of the command, peer 0 first; the others join the DHT through peer 0's
  multiaddrs (or all through `--initial-peers` on real hosts).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from trainwise import denormals
from trainwise.allocator import launch_environment
from trainwise._proc import ProcessJob
from trainwise.errors import TrainwiseError
from trainwise.profile._iteration_log import with_iteration_rows
from trainwise.profile.runner import agent_package_parent, resolve_command
from trainwise.run.options import INTERRUPTED_EXIT, RunOptions

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"
RUN_CONFIG_ENV = "TRAINWISE_RUN_CONFIG"
PEER_ADDRESS_TIMEOUT_S = 180.0


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _environment(config: dict[str, Any]) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")] if p)
    # another interpreter (the user's environment) reaches trainwise alone, not the packages of trainwise's
    # own environment beside it, which would change what the job imports (as `trainwise profile` does)
    env["TRAINWISE_PACKAGE_PARENT"] = agent_package_parent(config["workdir"])
    env[RUN_CONFIG_ENV] = json.dumps(config)
    return env


def _stop(process: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM (the preemption notice: the job checkpoints and exits), then SIGKILL."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace_s)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


class _Launch:
    def __init__(self, options: RunOptions, command: list[str], workdir: str) -> None:
        self.options = options
        self.argv = resolve_command(command)
        self.workdir = workdir
        self.launch_wall_s = time.time()
        self.processes: list[subprocess.Popen] = []
        # Every process of the job (torchrun's workers, DataLoader workers, helpers the script starts, in
        # its session or one of their own): ended with the job on every exit path.
        self.job = ProcessJob()

    def base_config(self) -> dict[str, Any]:
        o = self.options
        return {"engine": o.engine, "workdir": self.workdir, "launch_wall_s": self.launch_wall_s,
                "distributed": o.engine == "ddp",
                "checkpoint": o.checkpoint.as_config() if o.checkpoint else None}

    def popen(self, argv: list[str], config: dict[str, Any], log_name: str | None = None,
              extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        env = denormals.launch_environment(launch_environment(_environment(config), tune=self.options.tune_allocator),
                                           flush=self.options.flush_denormal)
        env.update(self.options.extra_env)
        env.update(extra_env or {})
        env = self.job.environment(env)
        output = None
        if self.options.quiet:
            output = subprocess.DEVNULL
        elif log_name is not None:
            output = open(os.path.join(self.workdir, log_name), "wb")
        try:
            process = subprocess.Popen(argv, env=env, stdout=output,
                                       stderr=subprocess.STDOUT if output not in (None, subprocess.DEVNULL) else output,
                                       **self.job.popen_options())
        except OSError as exc:
            raise TrainwiseError(f"cannot start {argv[0]!r}: {exc.strerror}; check the command") from None
        finally:
            if output not in (None, subprocess.DEVNULL):
                output.close()  # the child holds its own copy
        self.processes.append(process)
        self.job.started(process.pid)
        return process

    def wait_all(self, deadline: float | None) -> list[int]:
        if self.options.stop_after_started_s is not None:
            self._stop_when_measured(deadline)
        codes = []
        for process in self.processes:
            remaining = None if deadline is None else max(0.1, deadline - time.time())
            try:
                codes.append(process.wait(timeout=remaining))
            except subprocess.TimeoutExpired:
                for p in self.processes:
                    _stop(p, grace_s=10)
                raise TrainwiseError(f"the job did not finish within --timeout {self.options.timeout_s:g} s and was stopped") from None
        return codes

    def _stop_when_measured(self, deadline: float | None) -> None:
        expected = self.options.expected_ranks or self.options.world_size
        started_at = None
        while any(p.poll() is None for p in self.processes):
            now = time.time()
            if deadline is not None and now > deadline:
                return
            if started_at is None and len(list(Path(self.workdir).glob("started-rank*"))) >= expected:
                started_at = now
            if started_at is not None and now - started_at >= self.options.stop_after_started_s:
                for process in self.processes:
                    if process.poll() is None:
                        try:
                            os.killpg(process.pid, signal.SIGTERM)
                        except ProcessLookupError:
                            pass
                return
            time.sleep(0.2)

    def stop_all(self) -> None:
        for process in self.processes:
            _stop(process)
        self.end_leftovers()

    def end_leftovers(self, grace_s: float = 30.0) -> None:
        """Whatever of the job still runs once its started processes exited: workers orphaned by a torchrun
        that died, helpers the script started (they would keep a caller's pipe of trainwise's output open)."""
        left = self.job.end(grace_s=grace_s)
        if left and not self.options.quiet:
            print(f"trainwise: ended {len(left)} process{'es' if len(left) > 1 else ''} the job left running "
                  f"(pid {', '.join(map(str, left[:8]))}{', ...' if len(left) > 8 else ''})", file=sys.stderr, flush=True)


def launch(options: RunOptions, command: list[str], workdir: str) -> tuple[list[int], float, float]:
    """Run the job; return (exit codes, launch wall time, wall seconds)."""
    job = _Launch(options, command, workdir)
    deadline = None if options.timeout_s is None else time.time() + options.timeout_s

    forwarded: list[int] = []

    def forward_sigterm(signum, frame):
        # A preemption notice to `trainwise run` is passed to every training process: each one
        # checkpoints at its next iteration boundary and exits; then this launcher returns.
        forwarded.append(signum)
        for process in job.processes:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    interrupted: list[int] = []

    def stop_on_ctrl_c(signum, frame):
        # Ctrl-C stops the job as a preemption would (each process checkpoints at its next boundary and
        # exits), so the run's result and summary are still written; a second Ctrl-C aborts at once.
        interrupted.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        forward_sigterm(signum, frame)

    previous = previous_sigint = None
    try:
        previous = signal.signal(signal.SIGTERM, forward_sigterm)
        previous_sigint = signal.signal(signal.SIGINT, stop_on_ctrl_c)
    except ValueError:  # not the main thread (a benchmark running nodes in threads)
        pass
    try:
        if options.engine == "local":
            job.popen([*options.prefix, *job.argv], job.base_config())
        elif options.engine == "ddp":
            _launch_ddp(job)
        else:
            _launch_hivemind(job, deadline)
        codes = job.wait_all(deadline)
        job.end_leftovers()
    except BaseException:
        job.stop_all()
        raise
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_sigint is not None:
            signal.signal(signal.SIGINT, previous_sigint)
    if forwarded and options.engine == "ddp":
        # torchrun ends after its workers checkpointed and exited 143 (trainwise.run._torchrun turns its
        # SignalException into 143; other torch versions' agents exit 1): the job's outcome is "stopped by
        # SIGTERM", as for one process.
        codes = [128 + signal.SIGTERM if code != 0 else code for code in codes]
    if interrupted:
        # Stopped by the user, not preempted: the shell's code for Ctrl-C (a script must not read success).
        codes = [INTERRUPTED_EXIT if code in (128 + signal.SIGTERM, -signal.SIGTERM) else code for code in codes]
    return codes, job.launch_wall_s, time.time() - job.launch_wall_s


def _launch_ddp(job: _Launch) -> None:
    o = job.options
    port = o.master_port if o.master_port is not None else free_port()
    # trainwise.run._torchrun is torchrun, quiet when the SIGTERM trainwise forwards reaches it
    torchrun = [*o.prefix, sys.executable, "-m", "trainwise.run._torchrun", f"--nproc-per-node={o.nproc}",
                f"--nnodes={o.nnodes}", f"--node-rank={o.node_rank}", f"--master-addr={o.master_addr}",
                f"--master-port={port}", "--no-python", *job.argv]
    job.popen(torchrun, job.base_config())


def _launch_hivemind(job: _Launch, deadline: float | None) -> None:
    o = job.options
    first_addresses: list[str] = list(o.initial_peers)
    timers: list[tuple[float, int]] = []
    start_wall = time.time()
    for index in range(o.peers):
        delay = o.peer_start_delay_s[index] if index < len(o.peer_start_delay_s) else 0.0
        if index > 0 and not o.initial_peers and not first_addresses:
            first_addresses = _wait_for_addresses(job, 0, deadline)
        while time.time() - start_wall < delay:
            time.sleep(0.05)
        config = job.base_config()
        config["hivemind"] = {"peer_index": index, "run_id": o.run_id, "target_batch_size": o.target_batch_size,
                              "initial_peers": first_addresses if index > 0 or o.initial_peers else [],
                              "host": o.peer_hosts[index] if index < len(o.peer_hosts) else
                                      (o.host or ("0.0.0.0" if o.initial_peers else "127.0.0.1")),
                              "port": o.port if index == 0 else 0,
                              # One identity, one peer: only the first local peer takes it.
                              "identity_path": o.identity_path if index == 0 else None,
                              "matchmaking_time_s": o.matchmaking_time_s, "averaging_timeout_s": o.averaging_timeout_s,
                              "average_state_every": o.average_state_every}
        prefix = o.peer_prefix[index] if index < len(o.peer_prefix) else []
        job.popen([*prefix, *job.argv], config, log_name=f"peer-{index}.log" if index > 0 else None,
                  extra_env={"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
        stop_after = o.peer_stop_after_s[index] if index < len(o.peer_stop_after_s) else None
        if stop_after is not None:
            timers.append((start_wall + stop_after, index))
    if timers:
        _stop_peers_later(job, timers)


def _stop_peers_later(job: _Launch, timers: list[tuple[float, int]]) -> None:
    import threading

    def stopper():
        for when, index in sorted(timers):
            while time.time() < when:
                if job.processes[index].poll() is not None:
                    break
                time.sleep(0.1)
            _stop(job.processes[index], grace_s=20)

    threading.Thread(target=stopper, daemon=True).start()


def _wait_for_addresses(job: _Launch, index: int, deadline: float | None) -> list[str]:
    path = Path(job.workdir) / f"peer-{index}.maddrs"
    limit = time.time() + PEER_ADDRESS_TIMEOUT_S
    if deadline is not None:
        limit = min(limit, deadline)
    while time.time() < limit:
        if path.exists():
            return json.loads(path.read_text())
        if job.processes[index].poll() is not None:
            raise TrainwiseError(f"the first peer exited (code {job.processes[index].returncode}) before joining the DHT: "
                                 "run the script alone to see its error; it must build a torch.optim optimizer")
        time.sleep(0.1)
    job.stop_all()
    raise TrainwiseError(f"the first peer did not start its DHT within {PEER_ADDRESS_TIMEOUT_S:g} s: "
                         "it must build a torch.optim optimizer (that is where hivemind is attached)")


def read_records(workdir: str) -> tuple[dict[int, dict], dict[int, dict]]:
    """The recorder's raw records and the agent's run records, by rank."""
    raws: dict[int, dict] = {}
    runs: dict[int, dict] = {}
    for path in Path(workdir).glob("raw-rank*.json"):
        raws[int(path.stem.removeprefix("raw-rank"))] = with_iteration_rows(json.loads(path.read_text()))
    for path in Path(workdir).glob("run-rank*.json"):
        runs[int(path.stem.removeprefix("run-rank"))] = json.loads(path.read_text())
    return raws, runs


def _require_hivemind() -> None:
    """Before any peer starts: without hivemind each peer died on trainwise's own ModuleNotFoundError and
    the run blamed the script ("run the script alone to see its error")."""
    import importlib

    try:
        importlib.import_module("hivemind")  # the peers import it too
    except ImportError as exc:
        raise TrainwiseError(f"--engine hivemind needs the hivemind package, which cannot be imported ({exc}): "
                             "pip install 'trainwise[hivemind]'") from None


def run_job(options: RunOptions, command: list[str], *, workdir: str | None = None):
    """Run `command` under `options.engine` and return its RunResult (see trainwise.run.result)."""
    from trainwise.run.result import build_result

    options.validate()
    resolve_command(command)
    if options.engine == "hivemind":
        _require_hivemind()
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
        codes, launch_wall, wall = launch(options, command, workdir)
        raws, runs = read_records(workdir)
        return build_result(options, command, codes, launch_wall, wall, raws, runs, failed_peer_logs(workdir, codes))
    with tempfile.TemporaryDirectory(prefix="trainwise-run-") as tmp:
        codes, launch_wall, wall = launch(options, command, tmp)
        raws, runs = read_records(tmp)
        return build_result(options, command, codes, launch_wall, wall, raws, runs, failed_peer_logs(tmp, codes))


def failed_peer_logs(workdir: str, codes: list[int], lines: int = 4) -> dict[int, str]:
    """{peer: the last lines of its log, joined by " | "} for each peer (past the first, whose output is
    the terminal's) that exited with an error; a stop on SIGTERM (143, -15) is not one."""
    out = {}
    for rank, code in enumerate(codes):
        path = Path(workdir) / f"peer-{rank}.log"
        if rank == 0 or code in (0, 143, -15) or not path.exists():
            continue
        text = path.read_text(encoding="utf-8", errors="replace").splitlines()
        kept = [line.strip() for line in text if line.strip()][-lines:]
        out[rank] = " | ".join(kept)[-1000:] if kept else "(nothing)"
    return out
