"""Same-machine planning: profile the job here (or take given profiles) and predict its full
training time for each epoch option. `trainwise plan` now runs the priced, ranked plan
(`trainwise.plan.command`); `profile_workload*` is shared with it."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.predict.same_machine import predict_total
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.profile.schema import Profile, load_profile
from trainwise.report.terminal import prediction_table, print_flips, profile_table


def profile_workload(name: str, console: Console, **overrides) -> Profile:
    return _profile_workload(name, console, spinner=True, **overrides)


def profile_workload_quiet(name: str, console: Console, **overrides) -> Profile:
    """The same, without a spinner of its own (for callers that show a progress display)."""
    return _profile_workload(name, console, spinner=False, **overrides)


def _profile_workload(name: str, console: Console, *, spinner: bool, **overrides) -> Profile:
    from contextlib import nullcontext

    from trainwise.workloads import command_for, get_workload

    try:
        spec = get_workload(name)
    except ValueError as exc:
        raise TrainwiseError(f"{exc} Pick one with --workload (list them with `trainwise workloads`).") from None
    command = command_for(name, **overrides)
    console.print(f"profiling reference workload [bold]{spec.name}[/bold] ({spec.data_kind} data: {spec.data_description}) on this machine…")
    with console.status("running a few iterations of the job") if spinner else nullcontext():
        return run_profile(command, ProfileOptions(), workload=spec.name, quiet=True)


def plan_same_machine(*, workload: str, profile_paths: list[Path], epoch_options: list[int], out_dir: Path,
                      console: Console) -> list[dict]:
    if profile_paths:
        profiles = [(path.stem, load_profile(path)) for path in profile_paths]
    else:
        measured = profile_workload(workload, console)
        path = measured.save(out_dir / f"{workload}.profile.json")
        console.print(profile_table(measured))
        console.print(f"profile written to [bold]{path}[/bold]")
        profiles = [(workload, measured)]
    rows = [(label, prof, predict_total(prof, epochs)) for label, prof in profiles for epochs in epoch_options]
    console.print(prediction_table(rows, title="Predicted full training time on the profiled machine"))
    print_flips(console, rows)
    payload = [{"profile": label, "epochs": p.epochs, "predicted_s": p.total_s, "low_s": p.low_s, "high_s": p.high_s,
                "breakdown_s": p.breakdown_s, "estimator": p.estimator,
                "provenance": f"modelled (trainwise estimator) from a profile measured on {prof.environment.hostname}"}
               for label, prof, p in rows]
    target = atomic_write_text(out_dir / "predictions.json", json.dumps(payload, indent=1))
    console.print(f"predictions written to [bold]{target}[/bold]")
    return payload
