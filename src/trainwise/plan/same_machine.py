"""Profile a reference workload on this machine: what `trainwise plan` does when no --profile is
given (the priced, ranked plan itself is `trainwise.plan.command`)."""

from __future__ import annotations

from rich.console import Console

from trainwise.errors import TrainwiseError
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.profile.schema import Profile


def profile_workload_quiet(name: str, console: Console, **overrides) -> Profile:
    """Profile reference workload `name` here, without a spinner (the caller shows progress)."""
    from trainwise.workloads import command_for, get_workload

    try:
        spec = get_workload(name)
    except ValueError as exc:
        raise TrainwiseError(f"{exc} Pick one with --workload (list them with `trainwise workloads`).") from None
    command = command_for(name, **overrides)
    console.print(f"profiling reference workload [bold]{spec.name}[/bold] ({spec.data_kind} data: {spec.data_description}) on this machine…")
    return run_profile(command, ProfileOptions(), workload=spec.name, quiet=True)
