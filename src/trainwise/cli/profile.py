"""`trainwise profile -- COMMAND...`: run an unmodified PyTorch script for a few iterations and write its Profile."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from trainwise.cli._app import console, parse_int_list
from trainwise.core.invocation import options_given, passthrough
from trainwise.errors import TrainwiseError


def profile(
    ctx: typer.Context,
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile JSON to write")] = Path("trainwise-profile.json"),
    iterations: Annotated[int, typer.Option("--iterations", "-k", help="Minimum epoch-1 iterations before the stability test may stop sampling")] = 20,
    max_iterations: Annotated[int, typer.Option(help="Stop sampling epoch 1 after this many iterations even if not stable")] = 50_000,
    min_seconds: Annotated[float, typer.Option(help="Sample at least this many seconds of iterations before the stability test may stop (the cost budget may stop sooner)")] = 3.0,
    max_seconds: Annotated[float, typer.Option(help="Stop sampling epoch 1 after this many seconds of iterations")] = 60.0,
    val_batches: Annotated[int, typer.Option(help="Validation batches to time (0: stop before validation)")] = 10,
    epoch2_iterations: Annotated[int, typer.Option(help="Iterations of epoch 2 to time (epoch-start cost)")] = 5,
    target_ci: Annotated[float, typer.Option(help="Stop when the 95% interval of the mean iteration time is within this fraction")] = 0.02,
    full: Annotated[bool, typer.Option("--full", help="Let the job run to completion, recording everything")] = False,
    timeout: Annotated[Optional[float], typer.Option(help="Kill the job after this many seconds")] = None,
    batch_sizes: Annotated[Optional[str], typer.Option(help="Profile once per batch size, e.g. 64,128,256; the command must contain {batch}")] = None,
    workload: Annotated[Optional[str], typer.Option(help="A name for the job, kept in the profile")] = None,
    epochs: Annotated[Optional[int], typer.Option(help="Planned epochs: keeps the whole profile within --budget of the predicted run (default: the script's own epoch count, when it sets one with argparse --epochs, Keras, Lightning or the HF Trainer)")] = None,
    budget: Annotated[float, typer.Option(help="With --epochs: the profile, start-up included, may cost at most this fraction of the predicted full run (at least --min-budget-seconds, and --iterations or 10 s of --min-budget-iterations steady ones, are always sampled)")] = 0.02,
    min_budget_seconds: Annotated[float, typer.Option(help="With --epochs: sample at least this many seconds of iterations even when --budget would stop sooner")] = 1.0,
    min_budget_iterations: Annotated[int, typer.Option(help="With --epochs: the budget may stop sampling after this many steady iterations, once they have lasted 10 s, instead of --iterations (steps of seconds)")] = 5,
    averaging_seconds: Annotated[float, typer.Option(help="With the planned epochs known: sample this many seconds of steady steps (at most --max-seconds) before stopping, so the sample averages the host's speed wander (--budget stops short runs sooner); 0: stop at the first steady verdict")] = 30.0,
    characterise: Annotated[bool, typer.Option(help="Trace one training step on the meta device after sampling (per-operator FLOPs/bytes for the device model; a few seconds)")] = True,
    tune_allocator: Annotated[bool, typer.Option(help="Opt in: launch with trainwise's glibc malloc settings (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_=256 MiB; measured 20-24 % faster on two CPU workloads, 65 % slower on an LBFGS job: a change to the job); off by default so the job is measured as it runs; profile and run the same way for the prediction to hold")] = False,
    flush_denormal: Annotated[bool, typer.Option(help="Opt in: flush denormal floats to zero in the job (torch.set_flush_denormal; measured 13x faster on an LSTM, 6-11 % on two CPU workloads, within noise on a fourth: a change to the job's numerics); off by default so the job is measured as it runs; profile and run the same way for the prediction to hold")] = False,
    host_noise: Annotated[bool, typer.Option(help="Attach this host's speed wander, if `trainwise host-noise` measured it here (predictions widen their band by it)")] = True,
    level_probe_seconds: Annotated[float, typer.Option(help="Time the host-noise probe for this long right before and after the sampled steps (the host's speed level there; with `trainwise host-noise` measured here, predictions scale the steps to the host's mean level); 0: off")] = 0.1,
    max_epoch_wait: Annotated[float, typer.Option(help="A loop without a DataLoader shows its epoch's length only when the epoch ends: wait at most this many seconds for the end of epoch 1 (its cost is part of the profile's)")] = 600.0,
    no_iteration_limit_s: Annotated[float, typer.Option("--no-iteration-limit-s", help="Stop a job in which no training iteration shows (no optimizer step, no backward pass reaching a model's parameters) this many seconds after its first forward pass, and say so")] = 30.0,
) -> None:
    """Run `-- COMMAND...` (an unmodified PyTorch script) for a few iterations and write its Profile."""
    from trainwise.profile.runner import ProfileOptions, expand_batch_sizes, run_profile
    from trainwise.report.terminal import profile_table

    # Without `--`, the training command's own words land here too: only an option before them is a typo.
    command_started = passthrough() is None and bool(ctx.args) and not ctx.args[0].startswith("-")
    unknown = None if command_started else next((arg for arg in ctx.args if arg.startswith("-")), None)
    if unknown is not None:
        import difflib

        known = [name for param in ctx.command.params for name in getattr(param, "opts", [])]
        near = difflib.get_close_matches(unknown.split("=")[0], known, n=1)
        raise TrainwiseError(f"no such option {unknown} for `trainwise profile`"
                             + (f": did you mean {near[0]}?" if near else ": see `trainwise profile --help`"))
    if passthrough() is None or ctx.args:
        raise TrainwiseError("missing `--` before the training command: use `trainwise profile [OPTIONS] -- python train.py ARGS`")
    # The cost budget is a share of the planned run, which only --epochs gives: without it the
    # budget options used to be ignored without a word.
    budget_given = options_given(("--budget", budget, ProfileOptions.budget_fraction),
                                 ("--min-budget-seconds", min_budget_seconds, ProfileOptions.min_budget_seconds),
                                 ("--min-budget-iterations", min_budget_iterations, ProfileOptions.min_budget_iterations))
    if epochs is None and budget_given:
        raise TrainwiseError(f"{', '.join(budget_given)} {'needs' if len(budget_given) == 1 else 'need'} --epochs E, the "
                             "planned run the profile's cost is a share of: add --epochs")
    options = ProfileOptions(mode="full" if full else "sampled", min_iterations=iterations, max_iterations=max_iterations,
                             max_profile_seconds=max_seconds, min_profile_seconds=min_seconds,
                             validation_batches=val_batches,
                             epoch2_iterations=epoch2_iterations, target_relative_ci=target_ci, timeout_s=timeout,
                             epochs_hint=epochs, budget_fraction=budget, min_budget_seconds=min_budget_seconds,
                             min_budget_iterations=min_budget_iterations,
                             averaging_seconds=averaging_seconds,
                             characterise=characterise,
                             tune_allocator=tune_allocator, flush_denormal=flush_denormal, host_noise=host_noise,
                             level_probe_s=level_probe_seconds, no_iteration_limit_s=no_iteration_limit_s,
                             max_epoch_wait_s=max_epoch_wait)
    options.validate()
    from trainwise._io import check_output_path, write_output_text

    jobs: list[tuple[Path, list[str]]]
    if batch_sizes:
        sizes = parse_int_list(batch_sizes, "--batch-sizes")
        jobs = [(output.with_name(f"{output.stem}-b{size}{output.suffix}"), cmd) for size, cmd in expand_batch_sizes(passthrough(), sizes)]
    else:
        jobs = [(output, passthrough())]
    for path, command in jobs:
        # Before the job runs: a profile that cannot be written is minutes of profiling lost.
        check_output_path(path, "--output", inputs=tuple(arg for arg in command if not arg.startswith("-")))
    for path, command in jobs:
        result = run_profile(command, options, workload=workload)
        write_output_text(path, result.to_json(), "--output")
        console.print(profile_table(result))
        console.print(f"profile written to [bold]{path}[/bold]")
