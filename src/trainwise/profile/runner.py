"""Launch an unmodified training command with the recorder armed, and turn its record into a Profile."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from trainwise import denormals
from trainwise.allocator import launch_environment
from trainwise._proc import ProcessJob, Stopped, signals_end_the_job
from trainwise.agent import stop_rule
from trainwise.errors import TrainwiseError
from trainwise.profile import host_noise
from trainwise.profile._ownership import CONFIG_ENV, owner_pid
from trainwise.profile.level_service import LevelProbeService
from trainwise.profile._iteration_log import iteration_count
from trainwise.profile.schema import Profile, profile_from_raw

BOOTSTRAP_DIR = Path(__file__).resolve().parent / "_bootstrap"
PACKAGE_PARENT = Path(__file__).resolve().parents[2]

# Default minimum of epoch-1 iterations sampled before the stability test may stop profiling.
# Chosen with benchmarks/profile_iterations.py: below ~20 the steady-state estimate of the small
# CPU workloads still moves by more than the noise floor; above it the profile costs more without
# getting closer to the full run's mean. The stopping rule adds iterations while the estimate drifts.
DEFAULT_MIN_ITERATIONS = 20
DEFAULT_MIN_PROFILE_SECONDS = 3.0
# A cap on iterations, not on time: high enough that --averaging-seconds of millisecond steps (30,000 of them)
# fit under it; 5,000 had ended a 30-s window after 22 s of 4-ms steps (2026-11-27 23:05).
DEFAULT_MAX_ITERATIONS = 50_000
DEFAULT_MIN_BUDGET_SECONDS = 1.0
DEFAULT_AVERAGING_SECONDS = 30.0


@dataclass(frozen=True)
class ProfileOptions:
    mode: Literal["sampled", "full"] = "sampled"
    min_iterations: int = DEFAULT_MIN_ITERATIONS
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    max_profile_seconds: float = 60.0
    # The stability verdict counts only after this much sampling: this host's step time switches
    # between levels over fractions of a second to seconds (a Keras MLP step measured 3.7 ms in one
    # 100-step window and 6.7 ms in the next), so 20 iterations of a few milliseconds see one
    # level. The cost budget (--epochs/--budget) still stops sampling sooner.
    min_profile_seconds: float = DEFAULT_MIN_PROFILE_SECONDS
    # The cost budget never stops sampling before this many seconds of iterations: 20 iterations of a
    # millisecond step last 0.02 s, one level of this host's wandering step time, and a Keras MLP's
    # first ~25 steps ran 1.4x slower than the rest (benchmarks/integrations_prediction.py). One second
    # costs at most 1/30 of the cost of profiling anything whose start-up (~3-10 s) already has to be paid.
    min_budget_seconds: float = DEFAULT_MIN_BUDGET_SECONDS
    # ... and the cost budget may stop sampling after this many steady iterations instead of `min_iterations`, once
    # they have lasted 10 s (steps of seconds; trainwise.agent.stop_rule.MIN_BUDGET_ITERATIONS).
    min_budget_iterations: int = stop_rule.MIN_BUDGET_ITERATIONS
    # With the planned run known (--epochs or the script's own count), sampling goes on to this many seconds of
    # steps before a steady verdict stops it; the cost budget stops it sooner on short runs. A host's level
    # wanders over tens of seconds: the 2-core VM's 90th-percentile stray was ±25 % over 3-s windows and ±10 %
    # over 30-s ones (`trainwise host-noise`), and on a lent 16-core GPU host one idle job's step moved 2.6-4.2 ms
    # over 70 s; a 3-s sample sees one level (tools/iteration_drift.py). 30 s costs under 1 % of runs over an hour.
    averaging_seconds: float = DEFAULT_AVERAGING_SECONDS
    target_relative_ci: float = 0.02
    max_relative_drift: float = 0.05
    validation_batches: int = 10
    epoch2_iterations: int = 5
    timeout_s: float | None = None
    sync_cuda: bool = True
    epochs_hint: int | None = None
    budget_fraction: float = 0.02
    # Trace one training step on the meta device after sampling (1-10 s, outside the measured
    # iterations) so the device model can predict other accelerators from this profile.
    characterise: bool = True
    # Opt in: launch with trainwise's glibc malloc settings (trainwise.allocator). Off by default: the
    # profiler measures the job as the user runs it (the setting made one job 24 % faster, an LBFGS
    # job 65 % slower); `trainwise run --tune-allocator` must then be used for the prediction to hold.
    tune_allocator: bool = False
    # Opt in: flush denormal floats to zero in the job (trainwise.denormals): much faster, steadier CPU steps
    # for models that produce them, but a change to the job's numerics; `trainwise run --flush-denormal` then too.
    flush_denormal: bool = False
    # Attach this host's speed wander (`trainwise host-noise`) when it was measured here: the
    # prediction's band then includes how far the host's level strays over a window this long.
    host_noise: bool = True
    # Seconds of the host-noise probe (fixed CPU work) run right before and right after the sampled
    # steps, outside them: the host's speed level beside the window, which the estimator compares with
    # the host's mean level from `trainwise host-noise` (benchmarks/level_probe.py: a 1-s window's level
    # follows the probe's with correlation 0.7-0.9). 0 turns it off.
    level_probe_s: float = 0.1
    # A script in which no training iteration shows (no optimizer step, no backward pass reaching a model's
    # parameters, no trainwise.profile.step()) this long after its first forward pass is stopped and told so.
    no_iteration_limit_s: float = 30.0
    # A loop without a DataLoader says how many iterations its epoch has only when the epoch ends (its
    # validation region): a sampled profile waits that long for it, at most this many seconds.
    max_epoch_wait_s: float = 600.0

    def validate(self) -> None:
        from trainwise.bounds import check_finite

        check_finite({"--timeout": self.timeout_s, "--min-seconds": self.min_profile_seconds, "--max-seconds": self.max_profile_seconds,
                      "--budget": self.budget_fraction, "--min-budget-seconds": self.min_budget_seconds,
                      "--averaging-seconds": self.averaging_seconds,
                      "--target-ci": self.target_relative_ci, "--level-probe-seconds": self.level_probe_s,
                      "--no-iteration-limit-s": self.no_iteration_limit_s, "--max-epoch-wait": self.max_epoch_wait_s})
        if self.min_iterations < 2:
            raise TrainwiseError(f"--iterations must be at least 2 (got {self.min_iterations}): the first iteration is always warm-up")
        if self.max_iterations < self.min_iterations:
            raise TrainwiseError(f"--max-iterations ({self.max_iterations}) is below --iterations ({self.min_iterations}): raise it")
        if self.validation_batches < 0 or self.epoch2_iterations < 0:
            raise TrainwiseError("--val-batches and --epoch2-iterations must be ≥ 0")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise TrainwiseError(f"--timeout must be positive (got {self.timeout_s})")
        if self.epochs_hint is not None and self.epochs_hint <= 0:
            raise TrainwiseError(f"--epochs must be a positive whole number (got {self.epochs_hint})")
        if not 0 < self.budget_fraction <= 1:
            raise TrainwiseError(f"--budget must be a fraction in (0, 1] (got {self.budget_fraction})")
        if not 0 <= self.level_probe_s <= 5:
            raise TrainwiseError(f"--level-probe-seconds must be between 0 and 5 (got {self.level_probe_s}); 0 turns it off")
        if self.min_budget_iterations < 1:
            raise TrainwiseError(f"--min-budget-iterations must be at least 1 (got {self.min_budget_iterations})")
        if self.min_budget_seconds < 0:
            raise TrainwiseError(f"--min-budget-seconds must be ≥ 0 (got {self.min_budget_seconds})")
        if self.averaging_seconds < 0:
            raise TrainwiseError(f"--averaging-seconds must be ≥ 0 (got {self.averaging_seconds:g}); 0 turns it off")
        if self.min_profile_seconds < 0:
            raise TrainwiseError(f"--min-seconds must be ≥ 0 (got {self.min_profile_seconds})")
        if self.no_iteration_limit_s <= 0:
            raise TrainwiseError(f"--no-iteration-limit-s must be positive seconds, e.g. 30 (got {self.no_iteration_limit_s})")
        if self.max_profile_seconds <= 0:
            raise TrainwiseError(f"--max-seconds must be positive (got {self.max_profile_seconds})")
        if self.max_epoch_wait_s <= 0:
            raise TrainwiseError(f"--max-epoch-wait must be positive seconds, e.g. 600 (got {self.max_epoch_wait_s})")
        # A zero or negative target could never be met: every profile would run to --max-seconds.
        if not 0 < self.target_relative_ci < 1:
            raise TrainwiseError(f"--target-ci must be a fraction in (0, 1), e.g. 0.02 (got {self.target_relative_ci})")


# The agent runs inside the job's interpreter: the oldest Python its code runs on (pyproject's requires-python)
MIN_JOB_PYTHON = (3, 10)
_INTERPRETER = re.compile(r"python(\d+(\.\d+)?)?$")


def _activated_interpreter(name: str) -> str | None:
    """`name` as the shell finds it, when that lies in an activated virtual or conda environment other than
    trainwise's own (trainwise installed on its own, pipx- or uv-tool-style, profiling the user's environment).
    Conda's base environment, which conda activates in every shell unasked, does not count."""
    found = shutil.which(name)
    if found is None:
        return None
    env_dir = Path(found).absolute().parent.parent.resolve()  # PREFIX/bin/python; the binary may be a link out
    prefixes = [os.environ.get("VIRTUAL_ENV")]
    if os.environ.get("CONDA_DEFAULT_ENV", "base") != "base":
        prefixes.append(os.environ.get("CONDA_PREFIX"))
    for prefix in prefixes:
        if prefix and env_dir == Path(prefix).resolve() != Path(sys.prefix).resolve():
            return found
    return None


def job_python(name: str = "python", args: list[str] | tuple[str, ...] = ()) -> str:
    """The interpreter `python` means for a job: the activated environment's, else trainwise's own; always
    trainwise's own for `python -m trainwise.…` (a reference workload runs where trainwise is installed)."""
    if len(args) >= 2 and args[0] == "-m" and args[1].split(".")[0] == "trainwise":
        return sys.executable
    return _activated_interpreter(name) or sys.executable


def _check_job_python(interpreter: str) -> None:
    """An interpreter that is not trainwise's own must be one the agent runs in: refused before the launch."""
    try:
        probe = subprocess.run([interpreter, "-S", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                               capture_output=True, text=True, timeout=30)
        version = tuple(int(v) for v in probe.stdout.strip().split("."))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return  # not a Python that answers: the launch reports what it does
    if len(version) == 2 and version < MIN_JOB_PYTHON:
        need = ".".join(map(str, MIN_JOB_PYTHON))
        raise TrainwiseError(f"{interpreter} is Python {version[0]}.{version[1]}; trainwise's agent runs inside the job "
                             f"and needs Python {need} or newer: run the job with a Python {need}+ environment")


def resolve_command(command: list[str]) -> list[str]:
    """`python`/`python3` mean the activated environment's interpreter when one is activated (a venv or conda
    environment that is not trainwise's), else the interpreter trainwise itself runs in."""
    if not command:
        raise TrainwiseError("no training command given: use `trainwise profile -- python train.py ARGS`")
    first = command[0]
    if first in ("python", "python3", "python3.11"):
        argv = [job_python(first, command[1:]), *command[1:]]
    elif first.endswith(".py") and Path(first).is_file() and not os.access(first, os.X_OK):
        raise TrainwiseError(f"{first} is a Python script, not a command: start with python, e.g. `-- python {first}`")
    elif shutil.which(first) is None and not Path(first).exists():
        raise TrainwiseError(f"command not found: {first!r}; give the full path or start with `python`")
    else:
        argv = list(command)
    if argv[0] == sys.executable or _INTERPRETER.match(Path(argv[0]).name):
        script = argv[1] if len(argv) > 1 else ""
        if script.endswith(".py") and not Path(script).is_file():
            raise TrainwiseError(f"no such script: {script} (looked in {Path.cwd()}): give its path")
        if argv[0] != sys.executable:
            _check_job_python(argv[0])
    return argv


def expand_batch_sizes(command: list[str], batch_sizes: list[int]) -> list[tuple[int, list[str]]]:
    """One command per batch size, replacing the `{batch}` placeholder in any argument."""
    if not any("{batch}" in arg for arg in command):
        raise TrainwiseError("--batch-sizes needs a `{batch}` placeholder in the command, e.g. `-- python train.py --batch-size {batch}`")
    for size in batch_sizes:
        if size <= 0:
            raise TrainwiseError(f"batch size must be positive (got {size})")
    return [(size, [arg.replace("{batch}", str(size)) for arg in command]) for size in batch_sizes]


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait()


def agent_package_parent(workdir: str | os.PathLike) -> str:
    """A folder holding only the trainwise package (a link to it), for an interpreter that is not
    trainwise's own (the user's venv, with its own torch): appending it to that interpreter's sys.path
    reaches trainwise's in-process agent, which needs only the standard library and torch, and nothing
    else of the environment trainwise is installed in (its pydantic, numpy... stay out of the job)."""
    parent = Path(workdir) / "agent-path"
    parent.mkdir(exist_ok=True)
    link = parent / "trainwise"
    if not link.exists():
        try:
            link.symlink_to(PACKAGE_PARENT / "trainwise", target_is_directory=True)
        except OSError:  # a filesystem without symbolic links: the package's own parent, as before
            return str(PACKAGE_PARENT)
    return str(parent)


def _remove_scratch_saves(raw_path: Path) -> None:
    """The scratch files the job's checkpoint saves went to (trainwise.profile._child.Recorder.scratch_path),
    also when the job was killed before it could remove them."""
    listing = raw_path.with_name(raw_path.name + ".scratch")
    if not listing.exists():
        return
    for line in listing.read_text().splitlines():
        if line:
            Path(line).unlink(missing_ok=True)


def _wait(process: subprocess.Popen, raw_path: Path, options: ProfileOptions, job: ProcessJob,
          poll_s: float = 0.2) -> tuple[int, bool]:
    """The launched process's exit code, and whether the job was ended early because a process it started (the one
    that trained: trainwise.profile._ownership) wrote a sampled profile's record while the launched process still
    waited for it or for its peers (the owner then waits to be ended: its peers must not fail at a collective
    first). Raises subprocess.TimeoutExpired past --timeout."""
    deadline = None if options.timeout_s is None else time.monotonic() + options.timeout_s
    while True:
        wait_s = poll_s if deadline is None else max(0.0, min(poll_s, deadline - time.monotonic()))
        try:
            return process.wait(timeout=wait_s), False
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise
        owner = owner_pid(raw_path) if options.mode == "sampled" else None
        if owner not in (None, process.pid) and raw_path.exists():
            # SIGKILL, as the owner's own os._exit: nothing of the job is left to save, and a SIGTERM makes
            # torchrun or a rank whose peer is gone print tracebacks over the profile
            job.signal(signal.SIGKILL)
            process.wait()
            return 0, True


def run_profile(command: list[str], options: ProfileOptions = ProfileOptions(), *, workload: str | None = None,
                quiet: bool = False) -> Profile:
    """Run `command` with the recorder armed and return its Profile (nothing is written to disk)."""
    options.validate()
    argv = resolve_command(command)
    # SIGTERM or Ctrl-C to trainwise: the job's processes ended, the scratch saves and this folder removed
    with (signals_end_the_job(), tempfile.TemporaryDirectory(prefix="trainwise-profile-") as workdir,
          LevelProbeService(workdir) as level_service):
        raw_path = Path(workdir) / "raw.json"
        config = asdict(options)
        config["level_probe_socket"] = level_service.path
        config.pop("timeout_s")
        config["out_path"] = str(raw_path)
        config["workload"] = workload
        config["delegate"] = True  # a process the script starts may be the one that trains (trainwise.profile._ownership)
        env = denormals.launch_environment(launch_environment(os.environ, tune=options.tune_allocator),
                                           flush=options.flush_denormal)
        env["PYTHONPATH"] = os.pathsep.join(p for p in [str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")] if p)
        env["TRAINWISE_PACKAGE_PARENT"] = agent_package_parent(workdir)
        launch_wall = time.time()
        config["launch_wall_s"] = launch_wall
        env[CONFIG_ENV] = json.dumps(config)
        output = subprocess.DEVNULL if quiet else None
        job = ProcessJob()  # the job's every process, ended with it (trainwise._proc)
        try:
            process = subprocess.Popen(argv, env=job.environment(env), stdout=output, stderr=output, **job.popen_options())
        except OSError as exc:
            raise TrainwiseError(f"cannot start {argv[0]!r}: {exc.strerror}; check the command") from None
        job.started(process.pid)
        ended_with_owner = False
        try:
            exit_code, ended_with_owner = _wait(process, raw_path, options, job)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            raise TrainwiseError(
                f"the job did not finish profiling within --timeout {options.timeout_s:g} s and was stopped: "
                "raise --timeout, or lower --iterations/--max-seconds if it hangs") from None
        except (KeyboardInterrupt, Stopped):
            _kill_group(process)
            raise
        finally:
            job.end(grace_s=5.0)
            _remove_scratch_saves(raw_path)
        process_wall = time.time() - launch_wall
        raw = json.loads(raw_path.read_text()) if raw_path.exists() else None

    if raw is None:
        if exit_code != 0:
            raise TrainwiseError(f"the training command exited with code {exit_code} before its first iteration: "
                                 "run it without trainwise to see its error")
        raise TrainwiseError("the training command exited without starting a Python training process that imports torch: "
                             "check that the command runs your PyTorch script")
    recorded = iteration_count(raw["iterations"])
    if not recorded:
        if raw.get("stop_reason") == "no_iterations":
            limit_s = float(raw.get("config", {}).get("no_iteration_limit_s") or options.no_iteration_limit_s)
            raise TrainwiseError(
                f"no training iteration within {limit_s:g} s of the script's first forward pass (no optimizer step, no "
                "backward pass reaching a model's parameters): profiling stopped; in a loop trainwise cannot see, call "
                "trainwise.profile.step() after each iteration")
        if exit_code != 0:
            raise TrainwiseError(f"the training command exited with code {exit_code} before its first iteration: "
                                 "run it without trainwise to see its error")
        if "torch_imported" not in (raw.get("marks") or {}):
            raise TrainwiseError("the script finished without importing torch: trainwise profiles PyTorch training "
                                 "scripts; check that the command runs yours")
        raise TrainwiseError("the script finished without a single training iteration (no optimizer step, no backward "
                             "pass reaching a model's parameters): in a custom loop call trainwise.profile.step() after "
                             "each iteration")
    killed_note = None
    if exit_code != 0:
        if raw["mode"] != "full" or raw.get("stop_reason") != "interrupted":
            raise TrainwiseError(f"the training command crashed (exit code {exit_code}) after {recorded} "
                                 "iterations: fix the script, then profile again")
        # A --full run that was killed (or crashed hard) after it recorded iterations: what it recorded.
        how = f"was killed by signal {-exit_code}" if exit_code < 0 else f"exited with code {exit_code}"
        killed_note = (f"the job {how} after {recorded} iterations; this profile holds what was recorded "
                       f"until {raw.get('recorded_until_s', 0.0):.1f} s after launch (written every few seconds)")
    profile = profile_from_raw(raw, command=list(command), process_wall_s=process_wall, exit_code=exit_code, workload=workload)
    if ended_with_owner:
        killed_note = ("the process that trained finished its profile while the job's other processes still ran "
                       "(the launched process waiting for it, its peers): they were ended then")
    if killed_note is not None:
        profile = profile.model_copy(update={"notes": profile.notes + [killed_note]})
    return attach_host_noise(profile) if options.host_noise else profile


def attach_host_noise(profile: Profile) -> Profile:
    """The profiled host's speed wander, when `trainwise host-noise` measured it on this host."""
    noise, problem = host_noise.load_for_host(profile.environment.hostname)
    stale = None if noise is None else host_noise.staleness_note(noise, profile.created_at)
    notes = profile.notes + [note for note in (problem, stale) if note]
    return profile.model_copy(update={"host_noise": noise, "notes": notes})
