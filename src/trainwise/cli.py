"""The `trainwise` command: thin wiring of profile → predict → plan; no logic lives here."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from trainwise.errors import TrainwiseError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Profile a PyTorch training job for a few iterations, predict its full training time, plan where to run it.")
console = Console()
err_console = Console(stderr=True)

from trainwise.catalog.cli import catalog_app  # noqa: E402 - light: pandas is imported lazily

app.add_typer(catalog_app, name="catalog")

from trainwise.predict.cli import LINK_HELP, device_app, validate_command  # noqa: E402

app.add_typer(device_app, name="device")
app.command("validate")(validate_command)

from trainwise.launch.cli import launch_command, sweep_command  # noqa: E402

app.command("launch")(launch_command)
app.command("sweep")(sweep_command)

from trainwise.predict.net_cli import net_app  # noqa: E402

app.add_typer(net_app, name="net")

from trainwise.pipeline.cli import pipeline_app  # noqa: E402 - light: torch is imported by the commands

app.add_typer(pipeline_app, name="pipeline")

from trainwise.run.command import run_command  # noqa: E402 - light: torch is imported by the job only

app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run_command)

# The training command after `--`, split off before typer parses the rest (typer would otherwise try
# to parse the user's own options).
_passthrough: list[str] | None = None


DEFAULT_NODE_COUNTS = "2,4,8"  # plan --node-counts: N x machine groups ranked by default

# An example value of each comma-separated option, for its error message.
_INT_LIST_EXAMPLES = {"--batch-sizes": "64,128,256", "--epoch-options": "5,10,20", "--node-counts": "2,4,8"}


def options_given(*options: tuple[str, object, object]) -> list[str]:
    """The names among (name, value, default) whose value is not the default: options the user gave."""
    return [name for name, value, default in options if value != default]


def _given(ctx: typer.Context, name: str) -> bool:
    """The option was on the command line (or in the environment), not left at its default."""
    source = ctx.get_parameter_source(name)
    # by name: typer's click and the `click` package need not be the same module
    return source is not None and getattr(source, "name", "") not in ("DEFAULT", "DEFAULT_MAP")


def _parse_int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise TrainwiseError(f"{what} must be comma-separated whole numbers (got {text!r}), "
                             f"e.g. {_INT_LIST_EXAMPLES.get(what, '5,10,20')}") from None
    if not values or any(v <= 0 for v in values):
        raise TrainwiseError(f"{what} must be positive whole numbers (got {text!r})")
    return values


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def profile(
    ctx: typer.Context,
    output: Annotated[Path, typer.Option("--output", "-o", help="Profile JSON to write")] = Path("trainwise-profile.json"),
    iterations: Annotated[int, typer.Option("--iterations", "-k", help="Minimum epoch-1 iterations before the stability test may stop sampling")] = 20,
    max_iterations: Annotated[int, typer.Option(help="Stop sampling epoch 1 after this many iterations even if not stable")] = 5000,
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
    budget: Annotated[float, typer.Option(help="With --epochs: the profile, start-up included, may cost at most this fraction of the predicted full run (at least --iterations and --min-budget-seconds are always sampled)")] = 0.02,
    min_budget_seconds: Annotated[float, typer.Option(help="With --epochs: sample at least this many seconds of iterations even when --budget would stop sooner")] = 1.0,
    characterise: Annotated[bool, typer.Option(help="Trace one training step on the meta device after sampling (per-operator FLOPs/bytes for the device model; a few seconds)")] = True,
    tune_allocator: Annotated[bool, typer.Option(help="Launch with trainwise's glibc malloc settings (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_; faster, steadier CPU steps); profile and run the same way for the prediction to hold")] = True,
    flush_denormal: Annotated[bool, typer.Option(help="Flush denormal floats to zero in the job (torch.set_flush_denormal; much faster, steadier CPU steps for models that produce them); profile and run the same way for the prediction to hold")] = True,
    host_noise: Annotated[bool, typer.Option(help="Attach this host's speed wander, if `trainwise host-noise` measured it here (predictions widen their band by it)")] = True,
    level_probe_seconds: Annotated[float, typer.Option(help="Time the host-noise probe for this long right before and after the sampled steps (the host's speed level there; with `trainwise host-noise` measured here, predictions scale the steps to the host's mean level); 0: off")] = 0.1,
) -> None:
    """Run `-- COMMAND...` (an unmodified PyTorch script) for a few iterations and write its Profile."""
    from trainwise.profile.runner import ProfileOptions, expand_batch_sizes, run_profile
    from trainwise.report.terminal import profile_table

    # Without `--`, the training command's own words land here too: only an option before them is a typo.
    command_started = _passthrough is None and bool(ctx.args) and not ctx.args[0].startswith("-")
    unknown = None if command_started else next((arg for arg in ctx.args if arg.startswith("-")), None)
    if unknown is not None:
        import difflib

        known = [name for param in ctx.command.params for name in getattr(param, "opts", [])]
        near = difflib.get_close_matches(unknown.split("=")[0], known, n=1)
        raise TrainwiseError(f"no such option {unknown} for `trainwise profile`"
                             + (f": did you mean {near[0]}?" if near else ": see `trainwise profile --help`"))
    if _passthrough is None or ctx.args:
        raise TrainwiseError("missing `--` before the training command: use `trainwise profile [OPTIONS] -- python train.py ARGS`")
    # The cost budget is a share of the planned run, which only --epochs gives: without it the
    # budget options used to be ignored without a word.
    budget_given = options_given(("--budget", budget, ProfileOptions.budget_fraction),
                                 ("--min-budget-seconds", min_budget_seconds, ProfileOptions.min_budget_seconds))
    if epochs is None and budget_given:
        raise TrainwiseError(f"{', '.join(budget_given)} {'needs' if len(budget_given) == 1 else 'need'} --epochs E, the "
                             "planned run the profile's cost is a share of: add --epochs")
    options = ProfileOptions(mode="full" if full else "sampled", min_iterations=iterations, max_iterations=max_iterations,
                             max_profile_seconds=max_seconds, min_profile_seconds=min_seconds,
                             validation_batches=val_batches,
                             epoch2_iterations=epoch2_iterations, target_relative_ci=target_ci, timeout_s=timeout,
                             epochs_hint=epochs, budget_fraction=budget, min_budget_seconds=min_budget_seconds,
                             characterise=characterise,
                             tune_allocator=tune_allocator, flush_denormal=flush_denormal, host_noise=host_noise,
                             level_probe_s=level_probe_seconds)
    options.validate()
    from trainwise._io import check_output_path, write_output_text

    jobs: list[tuple[Path, list[str]]]
    if batch_sizes:
        sizes = _parse_int_list(batch_sizes, "--batch-sizes")
        jobs = [(output.with_name(f"{output.stem}-b{size}{output.suffix}"), cmd) for size, cmd in expand_batch_sizes(_passthrough, sizes)]
    else:
        jobs = [(output, _passthrough)]
    for path, command in jobs:
        # Before the job runs: a profile that cannot be written is minutes of profiling lost.
        check_output_path(path, "--output", inputs=tuple(arg for arg in command if not arg.startswith("-")))
    for path, command in jobs:
        result = run_profile(command, options, workload=workload)
        write_output_text(path, result.to_json(), "--output")
        console.print(profile_table(result))
        console.print(f"profile written to [bold]{path}[/bold]")


@app.command()
def predict(
    ctx: typer.Context,
    profiles: Annotated[list[Path], typer.Argument(help="Profile JSON file(s), e.g. one per batch size")],
    epochs: Annotated[Optional[int], typer.Option(help="Epochs of the full run")] = None,
    epoch_options: Annotated[str, typer.Option(help="Epoch counts to tabulate when --epochs is not given (Malta methodology 2; default: the script's own epoch count when the profile read it, else 5,10,20)")] = "5,10,20",
    epochs_from: Annotated[Optional[Path], typer.Option(help="Methodology 1: take the epochs from a --full profile of a run with early stopping")] = None,
    estimator: Annotated[str, typer.Option(help="trainwise (default), eq5.4, eq5.3, averaged, eq5.1, eq4.1, or all")] = "trainwise",
    iterations_per_epoch: Annotated[Optional[int], typer.Option(help="Override the iterations per epoch")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the predictions as JSON")] = None,
    accelerator: Annotated[Optional[str], typer.Option("--accelerator", "-a", help="Predict on this catalog accelerator instead (device model): the step and the whole run, e.g. V100")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="With --accelerator: number of accelerators (data parallel)")] = 1,
    link: Annotated[Optional[str], typer.Option("--link", help=LINK_HELP)] = None,
) -> None:
    """Predict the full training time on the machine each profile was taken on (or, with --accelerator,
    on another accelerator from the device model: the step and the whole run)."""
    from trainwise._io import check_output_path, write_output_text
    from trainwise.predict.same_machine import ESTIMATORS, epochs_to_converge, predict_total
    from trainwise.profile.schema import load_profile, script_epochs_disagreement, script_epochs_of
    from trainwise.report.terminal import prediction_table, print_flips, print_notes

    if accelerator is None and (count != 1 or link is not None):
        raise TrainwiseError("--count and --link describe the accelerators of --accelerator: add --accelerator NAME "
                             "(e.g. -a V100), or drop them")
    if accelerator is not None:
        from trainwise.predict.offerings import check_link_count

        check_link_count(link, count)
    if accelerator is not None and estimator != "trainwise":
        raise TrainwiseError("--estimator picks a same-machine estimator; with --accelerator the device model predicts "
                             "the step: drop --estimator")
    if count < 1:
        raise TrainwiseError(f"--count must be at least 1 (got {count})")
    if epochs is not None and epochs < 1:
        raise TrainwiseError(f"--epochs must be a positive whole number (got {epochs}): pass e.g. --epochs 10")
    if iterations_per_epoch is not None and iterations_per_epoch < 1:
        raise TrainwiseError(f"--iterations-per-epoch must be at least 1 (got {iterations_per_epoch})")
    if json_out is not None:
        check_output_path(json_out, "--json", inputs=tuple(profiles) + ((epochs_from,) if epochs_from else ()))
    if epochs is not None and epochs_from is not None:
        raise TrainwiseError("--epochs and --epochs-from both give the epoch count: pass one of them")
    if epochs_from is not None and not epochs_from.exists():
        # load_profile's own hint records a sampled profile; this one must be a complete run.
        raise TrainwiseError(f"--epochs-from {epochs_from} does not exist: record the complete run with "
                             f"`trainwise profile --full -o {epochs_from} -- python train.py`")
    loaded = [(path, load_profile(path)) for path in profiles]
    if epochs is not None:
        epoch_list = [epochs]
    elif epochs_from is not None:
        epoch_list = [epochs_to_converge(load_profile(epochs_from))]
    elif not _given(ctx, "epoch_options") and (own := script_epochs_of([prof for _, prof in loaded])) is not None:
        epoch_list = [own.epochs]
        console.print(f"epochs: {own.epochs}, set by the script itself ({own.source}); --epochs N or "
                      "--epoch-options predict others")
    else:
        epoch_list = _parse_int_list(epoch_options, "--epoch-options")
        if not _given(ctx, "epoch_options") and (why := script_epochs_disagreement([prof for _, prof in loaded])):
            console.print(f"epochs: {epoch_options} (--epoch-options); {why}: pass --epochs N")
    if accelerator is not None:
        from trainwise.predict.cli import predict_on_accelerator

        predict_on_accelerator(loaded, accelerator, count, epoch_list, console, link=link,
                               iterations_per_epoch=iterations_per_epoch, json_out=json_out)
        return
    estimators = list(ESTIMATORS) if estimator == "all" else [estimator]
    rows = []
    skipped: list[str] = []
    for path, prof in loaded:
        label = f"{path.stem} (batch {prof.dataset.global_batch_size})"
        for name in estimators:
            for n_epochs in epoch_list:
                try:
                    rows.append((label, prof, predict_total(prof, n_epochs, name, iterations_per_epoch)))
                except TrainwiseError as exc:
                    if estimator != "all":
                        raise
                    skipped.append(f"{name}: {exc}")
                    break
    console.print(prediction_table(rows))
    print_notes(console, rows)
    print_flips(console, rows)
    for line in sorted(set(skipped)):
        console.print(f"[dim]skipped {line}[/dim]")
    if json_out is not None:
        payload = [{"profile": label, "estimator": p.estimator, "epochs": p.epochs, "iterations_per_epoch": p.iterations_per_epoch,
                    "predicted_s": p.total_s, "low_s": p.low_s, "high_s": p.high_s, "breakdown_s": p.breakdown_s,
                    "provenance": "modelled from a measured profile", "note": p.note} for label, _, p in rows]
        from trainwise.userfiles import json_text

        write_output_text(json_out, json_text(payload, "--json"), "--json")
        console.print(f"predictions written to [bold]{json_out}[/bold]")


@app.command()
def plan(
    ctx: typer.Context,
    workload: Annotated[str, typer.Option(help="Reference workload to profile here when no --profile is given")] = "mnist_cnn",
    profile_paths: Annotated[Optional[list[Path]], typer.Option("--profile", help="Measured profile(s) to plan from, from this or other machines (repeatable)")] = None,
    catalog: Annotated[str, typer.Option(help="Price catalog: current, seed-2021, or a path")] = "current",
    objective: Annotated[str, typer.Option(help="fastest, cheapest, weighted, deadline (cheapest meeting --deadline) or budget (fastest within --budget)")] = "cheapest",
    weights: Annotated[Optional[str], typer.Option(help="Weighted objective weights, e.g. time=1,cost=2 (also risk)")] = None,
    deadline: Annotated[Optional[str], typer.Option(help="Deadline for the whole run, e.g. 2h, 90m, 1h30m")] = None,
    budget: Annotated[Optional[str], typer.Option(help="Budget in USD for the whole run, e.g. 25")] = None,
    cloud: Annotated[Optional[list[str]], typer.Option("--cloud", help="Only these clouds (repeatable or comma-separated)")] = None,
    region: Annotated[Optional[list[str]], typer.Option("--region", help="Only these regions or zones")] = None,
    accelerator: Annotated[Optional[list[str]], typer.Option("--accelerator", help="Only these accelerators, e.g. V100,A100")] = None,
    spot: Annotated[bool, typer.Option("--spot/--no-spot", help="Include spot/preemptible prices")] = True,
    min_gpu_memory: Annotated[Optional[float], typer.Option(help="Minimum memory per accelerator, GiB")] = None,
    max_global_batch: Annotated[Optional[int], typer.Option(help="Only plans whose samples per optimizer step (devices x the profile's batch per device) are at most this")] = None,
    epoch_options: Annotated[str, typer.Option(help="Epoch counts to plan for (Malta methodology 2)")] = "5,10,20",
    epochs: Annotated[Optional[int], typer.Option(help="The headline epoch count (default: the --save command's --epochs, else the script's own count the --profile read, else the largest option)")] = None,
    report: Annotated[Optional[Path], typer.Option("--report", help="Write the HTML/PNG/JSON/Markdown report here (default OUT_DIR/report)")] = None,
    local_offering: Annotated[Optional[Path], typer.Option(help="TOML/YAML user offering pricing this machine (e.g. on-premise capex)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables (the top plans, Pareto set and best per epoch option)")] = False,
    all_plans: Annotated[bool, typer.Option("--all-plans", help="With --json: also every ranked plan (tens of MB for the whole catalog; the report's plans.csv.gz has them as a table)")] = False,
    dataset_gb: Annotated[Optional[float], typer.Option(help="Dataset size to stage to cloud machines, GB")] = None,
    pipeline: Annotated[Optional[Path], typer.Option("--pipeline", help="Stage what a pipeline strategy stores (JSON from `trainwise pipeline profile --json`) instead of --dataset-gb")] = None,
    pipeline_strategy: Annotated[Optional[str], typer.Option(help="With --pipeline: the strategy id (default: the one the pipeline profile selected)")] = None,
    bandwidth_mbps: Annotated[Optional[float], typer.Option(help="Staging bandwidth, Mb/s (default: the seed's measured 8.75 MB/s)")] = None,
    provisioning_minutes: Annotated[Optional[float], typer.Option(help="Provisioning/boot time of a cloud machine (default 15-20 min)")] = None,
    interruption_rate: Annotated[Optional[float], typer.Option(help="Spot interruptions per hour")] = None,
    interruption_frequency_30d: Annotated[Optional[float], typer.Option(help="AWS-style interruption frequency over 30 days, e.g. 0.05")] = None,
    checkpoint_write_s: Annotated[Optional[float], typer.Option(help="Seconds to write a checkpoint (default: from the model size)")] = None,
    reference: Annotated[Optional[str], typer.Option(help="offering_id of the reference platform (default: this machine, else the best plan)")] = None,
    billing: Annotated[Optional[str], typer.Option(help="Override billing granularity: per_second, per_minute or per_hour")] = None,
    min_billed_seconds: Annotated[Optional[float], typer.Option(help="Override the minimum billed seconds")] = None,
    top: Annotated[int, typer.Option(help="Rows in the top-plans table")] = 10,
    out_dir: Annotated[Path, typer.Option(help="Where the profile and the default report are written")] = Path("trainwise-out"),
    save: Annotated[Optional[Path], typer.Option("--save", help="Save the best plan as a Plan JSON for `trainwise launch` (training command after --)")] = None,
    history: Annotated[bool, typer.Option("--history", help="Show predicted vs actual for past launched runs, and exit")] = False,
    engine: Annotated[Optional[str], typer.Option(help="With --save: local, ddp or hivemind (default: ddp for several GPUs or nodes)")] = None,
    nodes: Annotated[int, typer.Option(help="With --save: number of nodes (the saved plan predicts N x its machine, a row the planner ranks)")] = 1,
    dataset_uri: Annotated[Optional[str], typer.Option(help="With --save: where the dataset lives (local path, s3://, gs://)")] = None,
    checkpoint_uri: Annotated[Optional[str], typer.Option(help="With --save: where checkpoints go (a bucket for cloud runs)")] = None,
    model_uri: Annotated[Optional[str], typer.Option(help="With --save: where the final model and the run record go")] = None,
    name: Annotated[Optional[str], typer.Option(help="With --save: job/cluster name (default from the workload)")] = None,
    requirements: Annotated[Optional[str], typer.Option(help="With --save: requirements file the cluster installs")] = None,
    distributed: Annotated[bool, typer.Option("--distributed/--single-machine", help="Also rank groups of machines: multi-node DDP, Hivemind and hybrid (default); or one machine each (a machine with several accelerators included)")] = True,
    node_counts: Annotated[str, typer.Option(help="With --distributed: machine counts for N x machine groups")] = DEFAULT_NODE_COUNTS,
    target_batch_size: Annotated[Optional[int], typer.Option(help="With --distributed: Hivemind target batch size (default: the profile's batch)")] = None,
    network: Annotated[Optional[Path], typer.Option(help="With --distributed: bandwidth/RTT overrides (JSON/YAML, e.g. from `trainwise net probe`)")] = None,
    hivemind_groups: Annotated[Optional[Path], typer.Option(help="With --distributed: YAML list of Hivemind groups {name, peers: [{offering, count}]}")] = None,
    bytes_per_sample: Annotated[Optional[float], typer.Option(help="With --distributed: training data streamed per sample from object storage")] = None,
    local_continent: Annotated[Optional[str], typer.Option(help="With --distributed: where this machine is (us, eu, asia, oce, sa or af) for hybrid groups")] = None,
    average_state_every: Annotated[Optional[int], typer.Option(help="With --distributed: count Hivemind parameter averaging every N epochs in egress (as `trainwise run --average-state-every`; default: gradient rounds only)")] = None,
) -> None:
    """Rank where to train: time and cost on every offering with a measured profile (the default workload profiled here when no --profile is given)."""
    from trainwise.plan.command import check_plan_outputs, run_plan_command

    if save is None and not history:
        # These go into the saved plan only: without --save they were dropped without a word, and a
        # user who asked for `--nodes 4` or a checkpoint bucket got a plan that knows neither.
        given = options_given(
            ("--engine", engine, None), ("--nodes", nodes, 1), ("--dataset-uri", dataset_uri, None),
            ("--checkpoint-uri", checkpoint_uri, None), ("--model-uri", model_uri, None), ("--name", name, None),
            ("--requirements", requirements, None), ("a training command after --", _passthrough, None))
        if given:
            raise TrainwiseError(f"{', '.join(given)} {'goes' if len(given) == 1 else 'go'} into a saved plan: add "
                                 "--save plan.json, or drop " + ("it" if len(given) == 1 else "them"))
    if save is not None and not history:
        from trainwise.launch.plan_document import check_plan_uris, check_save_choices

        check_plan_uris(dataset_uri=dataset_uri, checkpoint_uri=checkpoint_uri, model_uri=model_uri,
                        requirements=requirements)
        check_save_choices(engine=engine, nodes=nodes, name=name, single_machine=not distributed)
    if history:
        from trainwise.launch.command import show_history

        return show_history(console)
    if save is not None and _passthrough:
        from trainwise.launch.command import headline_epochs_for_command

        # The saved plan must predict the run its command does: `-- python train.py --epochs 1` is 1 epoch.
        epochs = headline_epochs_for_command(_passthrough, epochs, console=err_console if json_output else console,
                                             profile_paths=profile_paths or [])
    report_dir = report if report is not None else out_dir / "report"
    check_plan_outputs(save_path=save, report_dir=report_dir,
                       inputs=[*(profile_paths or []), *(p for p in (local_offering, pipeline, network, hivemind_groups,
                                                                      Path(catalog)) if p is not None)])
    result = run_plan_command(workload=workload, profile_paths=profile_paths or [], catalog_name=catalog,
                     epoch_options=_parse_int_list(epoch_options, "--epoch-options"), out_dir=out_dir,
                     epochs_from_profiles=epochs is None and not _given(ctx, "epoch_options"),
                     report_dir=report_dir, local_offering_path=local_offering,
                     json_output=json_output, all_plans=all_plans, console=console, err_console=err_console, objective=objective,
                     weights=weights, deadline=deadline, budget=budget, clouds=cloud, regions=region,
                     accelerators=accelerator, spot=spot, min_gpu_memory=min_gpu_memory, max_global_batch=max_global_batch, primary_epochs=epochs,
                     dataset_gb=dataset_gb, pipeline_profile=pipeline, pipeline_strategy=pipeline_strategy,
                     bandwidth_mbps=bandwidth_mbps, provisioning_minutes=provisioning_minutes,
                     interruption_rate=interruption_rate, interruption_frequency_30d=interruption_frequency_30d,
                     checkpoint_write_s=checkpoint_write_s, reference=reference, top=top, billing=billing,
                     min_billed_seconds=min_billed_seconds,
                     distributed=_distributed_options(distributed, node_counts, target_batch_size, network, hivemind_groups,
                                                      bytes_per_sample, local_continent, average_state_every,
                                                      save_nodes=nodes if save is not None else None))
    if save is not None:
        from trainwise.launch.command import save_plan

        save_plan(result, save, catalog_name=catalog, passthrough=_passthrough, profile_paths=profile_paths or [],
                  workload=workload, console=err_console if json_output else console, name=name, engine=engine,
                  nodes=nodes, dataset_uri=dataset_uri, checkpoint_uri=checkpoint_uri, model_uri=model_uri,
                  requirements=requirements, objective=objective)


def _distributed_options(enabled: bool, node_counts: str, target_batch_size: int | None, network: Path | None,
                         groups: Path | None, bytes_per_sample: float | None, local_continent: str | None,
                         average_state_every: int | None = None, save_nodes: int | None = None):
    if not enabled:
        if any(v is not None for v in (target_batch_size, network, groups, bytes_per_sample, local_continent,
                                       average_state_every)) or node_counts != DEFAULT_NODE_COUNTS:
            raise TrainwiseError("--node-counts, --target-batch-size, --network, --hivemind-groups, --bytes-per-sample, "
                                 "--local-continent and --average-state-every rank distributed groups: drop --single-machine")
        from trainwise.plan.distributed import single_machine_options

        return single_machine_options()
    from trainwise.plan.distributed import options_from_cli

    counts = _parse_int_list(node_counts, "--node-counts")
    if save_nodes is not None and save_nodes > 1 and save_nodes not in counts:
        # `--save --nodes N`: the saved plan takes its prediction from the planner's N × machine row
        # (launch.plan_document.build_plan_document), so N machines are ranked too.
        counts.append(save_nodes)
    return options_from_cli(counts, target_batch_size, network, groups, bytes_per_sample, local_continent,
                            average_state_every=average_state_every)


@app.command("workloads")
def list_workloads() -> None:
    """List the reference workloads of the seed documents."""
    from rich.table import Table

    from trainwise.workloads import WORKLOADS

    table = Table(title="Reference workloads")
    for column in ("name", "data", "batch", "epochs", "source", "description"):
        table.add_column(column)
    for spec in WORKLOADS.values():
        table.add_row(spec.name, f"{spec.data_kind}: {spec.data_description}", str(spec.default_batch_size),
                      str(spec.default_epochs), spec.seed_source, spec.description)
    console.print(table)


@app.command("host-noise")
def host_noise_command(
    seconds: Annotated[float, typer.Option(help="How long to probe (at least 40; longer sees more of the host's moods)")] = 180.0,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here instead of the trainwise cache (profiles attach only the cached one)")] = None,
) -> None:
    """Measure how much this host's speed wanders (a fixed probe, one thread); profiles taken here then carry it and predictions widen their band by it."""
    from rich.progress import Progress

    from trainwise.profile import host_noise

    host_noise.check_seconds(seconds)  # before minutes of probing, not after
    if output is not None:
        from trainwise._io import check_output_path

        check_output_path(output, "--output")  # likewise: a folder was refused only after the probe
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("probing this host's speed", total=seconds)
        noise = host_noise.measure(seconds, on_progress=lambda done: progress.update(task, completed=done))
    path = host_noise.save(noise, output)
    for name, levels in (("compute", noise.compute), ("memory", noise.memory)):
        strays = ", ".join(f"{w.window_s} s ±{w.p90:.1%}" for w in levels.windows)
        console.print(f"{name}: p90/p10 level {levels.p90_over_p10:.2f}, one level lasts ~{levels.correlation_length_s} s; "
                      f"90th-percentile stray of a window: {strays}")
    console.print(f"wrote {path}")
    carried, _ = host_noise.load_for_host(noise.hostname) if output is None else (None, None)
    if carried is not None and carried.measurements > 1:
        console.print(f"profiles on this host carry {carried.describe()}: 3 s windows ±{carried.stray_fraction(3.0):.1%}")


def main(argv: list[str] | None = None) -> int:
    """Console entry point: split off the training command, run typer, turn errors into one line."""
    global _passthrough
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" in args:
        position = args.index("--")
        args, _passthrough = args[:position], args[position + 1:]
    else:
        _passthrough = None
    try:
        result = app(args=args, prog_name="trainwise", standalone_mode=False)
        if result == 130:
            # typer turns Ctrl-C (KeyboardInterrupt) into an exit code it returns, not raises, when not
            # in standalone mode: it must not become exit 0 (a script would take it for success).
            err_console.print("[red]interrupted[/red]")
            return 130
    except TrainwiseError as exc:
        from rich.markup import escape

        err_console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/red]")
        return 130
    except (typer.Exit, SystemExit) as exc:  # --help, no_args_is_help
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        return int(code or 0)
    except typer.exceptions.TyperException as exc:  # usage errors from the parser
        message = (exc.format_message() if hasattr(exc, "format_message") else str(exc)).rstrip(".")
        # Point at the help of the command that was mistyped (`trainwise plan --help`), which lists its
        # options, not at the top-level help, which lists only the commands.
        context = getattr(exc, "ctx", None)
        command = getattr(context, "command_path", None) or "trainwise"
        err_console.print(f"[red]error:[/red] {message}; see `{command} --help`", highlight=False, soft_wrap=True)
        return int(getattr(exc, "exit_code", 2) or 2)
    return 0


def run() -> None:
    sys.exit(main())


if __name__ == "__main__":
    run()
