"""Typer commands `trainwise launch` and `trainwise sweep` (registered in trainwise.cli); thin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from trainwise.errors import TrainwiseError

console = Console()


def _passthrough() -> list[str] | None:
    from trainwise.core.invocation import passthrough

    return passthrough()


DEFAULT_WORK_DIR = Path("trainwise-out/runs")


def resolve_code_dir(code_dir: str | None, workdir: str | None) -> str | None:
    """`--code-dir`, or the deprecated `--workdir` it replaced (too close to the local backend's
    `--work-dir`, which means something else), with a warning."""
    if workdir is None:
        return code_dir
    if code_dir is not None:
        raise TrainwiseError("--workdir is the old name of --code-dir: give --code-dir only")
    Console(stderr=True).print("[yellow]warning:[/yellow] --workdir is deprecated: use --code-dir (the directory "
                               "SkyPilot syncs); --work-dir is the local backend's run folder", highlight=False)
    return workdir


def launch_command(
    plan: Annotated[Path, typer.Argument(help="Plan JSON written by `trainwise plan --save`")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write and validate the SkyPilot task; launch nothing")] = False,
    backend: Annotated[str, typer.Option(help="sky (SkyPilot: any cloud it supports) or local (this machine)")] = "sky",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Where to write the SkyPilot task YAML (default PLAN.sky.yaml)")] = None,
    code_dir: Annotated[Optional[str], typer.Option("--code-dir", help="Directory SkyPilot syncs to the cluster (your training code)")] = None,
    workdir_deprecated: Annotated[Optional[str], typer.Option("--workdir", hidden=True, help="Deprecated: --code-dir")] = None,
    trainwise_spec: Annotated[Optional[str], typer.Option(help="pip requirement that installs trainwise on the cluster (default: what this trainwise was installed from; a wheel built from a source checkout, uploaded)")] = None,
    work_dir: Annotated[Path, typer.Option(help="Local backend: where each run's staged data, log and working files go")] = DEFAULT_WORK_DIR,
    timeout: Annotated[Optional[float], typer.Option(help="Local backend: kill the training after this many seconds")] = None,
    validate: Annotated[str, typer.Option("--validate", help="auto (SkyPilot's loader when installed, else the packaged schema), skypilot or packaged")] = "auto",
    keep_cluster: Annotated[bool, typer.Option("--keep-cluster", help="On-demand SkyPilot plans: keep the cluster up after the job (you copy the results off and `sky down` it); needed to launch a plan with no --model-uri/--checkpoint-uri")] = False,
) -> None:
    """Run a saved plan: a SkyPilot task on the plan's cloud (managed job for spot), or here with --backend local."""
    from trainwise.launch.command import launch

    workdir = resolve_code_dir(code_dir, workdir_deprecated)
    if _passthrough():
        raise TrainwiseError("launch takes no command after `--`: the training command is in the plan (trainwise plan --save PLAN -- python train.py)")
    # Each backend reads only its own options; one given to the other backend used to be dropped
    # without a word (`--timeout 600` on a cloud launch limited nothing).
    from trainwise.core.invocation import options_given

    if backend == "sky":
        given = options_given(("--timeout", timeout, None), ("--work-dir", work_dir, DEFAULT_WORK_DIR))
        if given:
            raise TrainwiseError(f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --backend local only: "
                                 "add --backend local, or drop " + ("it" if len(given) == 1 else "them"))
    elif backend == "local":
        given = options_given(("--output", output, None), ("--code-dir", workdir, None),
                              ("--trainwise-spec", trainwise_spec, None), ("--validate", validate, "auto"))
        if given:
            raise TrainwiseError(f"{', '.join(given)} {'describes' if len(given) == 1 else 'describe'} the SkyPilot task, "
                                 "which --backend local does not write: drop " + ("it" if len(given) == 1 else "them"))
    launch(plan, dry_run=dry_run, backend=backend, output=output, workdir=workdir, trainwise_spec=trainwise_spec,
           work_dir=work_dir, timeout_s=timeout, console=console, validator=validate, keep_cluster=keep_cluster)


def sweep_command(
    candidates: Annotated[list[str], typer.Option("--candidates", "-c", help="local:N (this machine, N threads) and/or catalog offering ids [:spot]; comma-separated or repeated")],
    iterations: Annotated[int, typer.Option("--iterations", "-k", help="Minimum iterations each short profile samples")] = 20,
    max_seconds: Annotated[float, typer.Option(help="Stop sampling each profile after this many seconds of iterations")] = 60.0,
    epochs: Annotated[int, typer.Option(help="Epochs of the planned full run (for the plan and the full-training cost)")] = 20,
    workload: Annotated[str, typer.Option(help="Reference workload to sweep when no command is given after --")] = "mnist_cnn",
    out_dir: Annotated[Path, typer.Option(help="Where the profiles, logs, task files and sweep.json go")] = Path("trainwise-out/sweep"),
    results_uri: Annotated[Optional[str], typer.Option(help="Bucket the cloud candidates write their profiles to, e.g. s3://BUCKET/sweep")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Write and validate the cloud candidates' tasks; run nothing")] = False,
    trainwise_spec: Annotated[Optional[str], typer.Option(help="pip requirement that installs trainwise on the clusters")] = None,
    provisioning_minutes: Annotated[float, typer.Option(help="Boot time added to a cloud candidate's full-training cost (Jorge et al.: 15-20 min)")] = 17.5,
    timeout: Annotated[Optional[float], typer.Option(help="Kill a local target's profile after this many seconds")] = None,
    validate: Annotated[str, typer.Option("--validate", help="Cloud tasks: auto, skypilot or packaged")] = "auto",
) -> None:
    """Profile the job briefly on every candidate (Malta methodology 2), plan from the measured profiles, and compare the sweep's cost with profiling by full training."""
    from trainwise.launch.command import sweep

    sweep(candidates=candidates, command=_passthrough(), workload=workload, iterations=iterations,
          max_seconds=max_seconds, epochs=epochs, out_dir=out_dir, results_uri=results_uri, dry_run=dry_run,
          trainwise_spec=trainwise_spec, provisioning_minutes=provisioning_minutes, timeout_s=timeout, console=console,
          validator=validate)
