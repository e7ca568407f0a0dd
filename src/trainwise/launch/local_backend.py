"""`trainwise launch PLAN --backend local`: the plan executed on this machine, end to end.

1. stage the dataset from its URI into the run's working storage (fsspec, progress, SHA-256);
2. run the training command with the plan's engine under `trainwise run` (issue 6), as an argument
   list through `subprocess` — never a shell string. Until `trainwise run` exists in this install,
   a single-process plan runs under `trainwise profile --full` instead (same zero-code-change
   recorder, whole run), and the record says which was used;
3. the job finds its places in the environment: `TRAINWISE_DATA_DIR`, `TRAINWISE_CHECKPOINT_DIR`,
   `TRAINWISE_MODEL_DIR` (a script saves its final model there);
4. persist the final model and the run record (plan, measured vs predicted time and cost) to
   `MODEL_URI/<run id>/`, checkpoints to the checkpoint URI, and the record to the history.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console

from trainwise._progress import phase
from trainwise.errors import TrainwiseError
from trainwise.launch import staging
from trainwise.launch.history import RunRecord, save_record
from trainwise.launch.plan_document import PlanDocument
from trainwise.launch.run_command import run_argv
from trainwise.launch.safety import assert_no_secrets
from trainwise.profile.runner import job_python

# The CLI's console entry point, as `pip install` makes it (pyproject's `trainwise.cli:run`).
TRAINWISE_CLI = (sys.executable, "-c", "from trainwise.cli import run; run()")


def run_command_available() -> bool:
    """Whether this install has `trainwise run` (issue 6)."""
    import importlib.util

    return importlib.util.find_spec("trainwise.run.command") is not None


def local_command(command: list[str]) -> list[str]:
    """`python …` runs here with the interpreter `trainwise profile` would give it (the activated environment's,
    else this one; the plan records a portable `python`)."""
    if command and command[0] in ("python", "python3"):
        return [job_python(command[0], command[1:]), *command[1:]]
    return list(command)


def _run_id(plan: PlanDocument) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{plan.name}-{stamp}-{secrets.token_hex(2)}"


def _model_files(model_dir: Path) -> list[Path]:
    return sorted(p for p in model_dir.rglob("*") if p.is_file()) if model_dir.is_dir() else []


def _write_uri_text(uri: str, text: str) -> None:
    path = staging.local_path(uri)
    if path is not None:
        from trainwise._io import atomic_write_text

        atomic_write_text(path, text)
        return
    fs, inner = staging.filesystem(uri)
    parent = inner.rsplit("/", 1)[0]
    if parent:
        fs.makedirs(parent, exist_ok=True)
    with fs.open(inner, "w") as handle:
        handle.write(text)


def executor_argv(plan: PlanDocument, *, command: list[str], checkpoint_dir: str | None, run_dir: Path,
                  use_run: bool | None = None) -> tuple[list[str], str]:
    """(argument list, how it runs) for this machine."""
    if use_run is None:
        use_run = run_command_available()
    if use_run:
        if plan.nodes > 1:
            # Here every node of the plan becomes local processes (DDP) or peers (Hivemind).
            plan = plan.model_copy(update={"processes_per_node": plan.nodes * plan.processes_per_node, "nodes": 1})
        argv = run_argv(plan, command=command, checkpoint_dir=checkpoint_dir, output=str(run_dir / "run.json"),
                        program=TRAINWISE_CLI)
        return [str(a) for a in argv], f"trainwise run --engine {plan.engine}"
    if plan.engine != "local":
        raise TrainwiseError(f"engine {plan.engine} needs `trainwise run` (issue 6), which this install lacks: re-plan "
                             "with --engine local, or update trainwise")
    argv = [*TRAINWISE_CLI, "profile", "--full", "-o", str(run_dir / "profile.json")]
    if plan.workload:
        argv += ["--workload", plan.workload]
    return [*argv, "--", *command], "trainwise profile --full (trainwise run not available)"


def run_local(plan: PlanDocument, *, work_dir: Path, console: Console, timeout_s: float | None = None,
              use_run: bool | None = None) -> RunRecord:
    started_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    wall_start = time.perf_counter()
    run_id = _run_id(plan)
    run_dir = (work_dir / run_id).resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    notes: list[str] = []
    env = dict(os.environ)

    dataset_manifest = None
    staging_s = 0.0
    if plan.dataset_uri:
        t0 = time.perf_counter()
        transfer = staging.copy_tree(plan.dataset_uri, str(run_dir / "data"), console=console, what="staging dataset")
        staging_s = time.perf_counter() - t0
        dataset_manifest = transfer.manifest()
        env["TRAINWISE_DATA_DIR"] = str(run_dir / "data")
        console.print(f"staged {len(transfer.files)} file(s), {transfer.total_bytes:,} bytes, SHA-256 verified, "
                      f"in {staging_s:.2f} s")

    # Checkpoints: a local checkpoint URI is used in place; a remote one gets a local working
    # directory that is uploaded after the run (trainwise run writes fsspec URIs itself).
    local_checkpoint = staging.local_path(plan.checkpoint_uri) if plan.checkpoint_uri else None
    checkpoint_dir = local_checkpoint if local_checkpoint is not None else run_dir / "checkpoints"
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    model_dir = run_dir / "model"
    model_dir.mkdir()
    env["TRAINWISE_CHECKPOINT_DIR"] = str(checkpoint_dir)
    env["TRAINWISE_MODEL_DIR"] = str(model_dir)
    env["TRAINWISE_RUN_ID"] = run_id

    command = local_command(plan.command)
    argv, how = executor_argv(plan, command=command, checkpoint_dir=plan.checkpoint_uri or str(checkpoint_dir),
                              run_dir=run_dir, use_run=use_run)
    log_path = run_dir / "job.log"
    console.print(f"running [bold]{plan.name}[/bold] here with {how}; log: {log_path}")
    t0 = time.perf_counter()
    with log_path.open("wb") as log, phase(f"training ({how}); log: {log_path}"):
        try:
            completed = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s,
                                       check=False)
            exit_code = completed.returncode
        except subprocess.TimeoutExpired:
            exit_code = 124
            notes.append(f"killed after --timeout {timeout_s:g} s")
    training_s = time.perf_counter() - t0
    if "profile --full" in how:
        notes.append("executed under `trainwise profile --full` because `trainwise run` is not in this install")

    model_location = checkpoint_location = None
    model_files: list[dict] = []
    if exit_code == 0 and plan.model_uri:
        files = _model_files(model_dir)
        if files:
            target = f"{plan.model_uri.rstrip('/')}/{run_id}/model"
            transfer = staging.copy_tree(str(model_dir), target, console=console, what="persisting model")
            model_files, model_location = transfer.files, target
        else:
            notes.append("the job wrote no model to $TRAINWISE_MODEL_DIR; nothing persisted but the run record")
    if plan.checkpoint_uri and local_checkpoint is None and any(checkpoint_dir.iterdir()):
        staging.copy_tree(str(checkpoint_dir), plan.checkpoint_uri, console=console, what="uploading checkpoints")
        checkpoint_location = plan.checkpoint_uri
    elif local_checkpoint is not None:
        checkpoint_location = str(local_checkpoint)

    if plan.here is not None:
        predicted = plan.here
        prediction_note = f"plan's prediction for this machine ({predicted.time_source})"
    else:
        predicted = plan.prediction
        prediction_note = (f"plan's prediction for {plan.offering.offering_id} ({predicted.time_source}); "
                           "the plan did not price this machine")
    wall_s = time.perf_counter() - wall_start
    record = RunRecord(
        run_id=run_id, started_at=started_at, finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        backend="local", executed_with=how, ran_on="this machine", exit_code=exit_code, plan=plan,
        predicted=predicted, prediction_note=prediction_note, measured_training_s=training_s,
        measured_staging_s=staging_s, measured_wall_s=wall_s, price_per_hour=predicted.price_per_hour,
        price_source=predicted.price_source, measured_cost_usd=wall_s / 3600.0 * predicted.price_per_hour,
        dataset=dataset_manifest, model_files=model_files, model_location=model_location,
        checkpoint_location=checkpoint_location, notes=notes)
    text = record.model_dump_json(indent=1) + "\n"
    assert_no_secrets([text], f"run record {run_id}")
    save_record(record)
    if plan.model_uri:
        _write_uri_text(f"{plan.model_uri.rstrip('/')}/{run_id}/run-record.json", text)
    if exit_code != 0:
        tail = log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or [""]
        raise TrainwiseError(f"the training command exited with code {exit_code} ({tail[0][:200]}); full log: {log_path}; "
                             "the run record was kept")
    return record

