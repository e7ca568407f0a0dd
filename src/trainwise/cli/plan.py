"""`trainwise plan`: rank where to train (time and cost on every offering with a measured profile);
`trainwise plan save PLAN.json [-- COMMAND]`: rank, then save the best plan for `trainwise launch`;
`trainwise plan history`: predicted vs actual for past launched runs.

`plan` and `plan save` share the ranking options, declared once (`_ranking_options`) and turned into
one typed `PlanRequest`, checked when it is built. The old `plan --save PATH` and `plan --history`
still work, with a note naming the command that replaces them.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from typer.core import TyperGroup

from trainwise.cli._app import console, err_console, given, parse_int_list
from trainwise.core.invocation import options_given, passthrough
from trainwise.errors import TrainwiseError
from trainwise.plan.bounds import DEFAULT_NODE_COUNTS

if TYPE_CHECKING:
    from trainwise.plan.request import PlanRequest

class _PlanGroup(TyperGroup):
    """`plan` ranks by itself, so a word that is not `save` or `history` is a stray argument (a profile
    given without --profile), not a command name."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
            # `trainwise predict PROFILE` takes it positionally; plan's subcommands take the word
            hint = f": a profile goes after --profile (trainwise plan --profile {args[0]})" if args[0].endswith(".json") else ""
            ctx.fail(f"Got unexpected extra argument(s) ({' '.join(args)}){hint}")
        return super().resolve_command(ctx, args)


plan_app = typer.Typer(cls=_PlanGroup, add_completion=False, pretty_exceptions_enable=False,
                       help="Rank where to train; `plan save` saves the best plan, `plan history` compares past runs.")


def _ranking_options(
    workload: Annotated[str, typer.Option(help="Reference workload to profile here when no --profile is given (mnist_cnn: a quick example)")] = "resnet50_imagenet",
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
    epochs: Annotated[Optional[int], typer.Option(help="The headline epoch count (default: the saved command's --epochs, else the script's own count the --profile read, else the largest option)")] = None,
    report: Annotated[Optional[Path], typer.Option("--report", help="Write the HTML/PNG/JSON/Markdown report here (default OUT_DIR/report)")] = None,
    local_offering: Annotated[Optional[Path], typer.Option(help="TOML/YAML user offering pricing this machine (e.g. on-premise capex)")] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the plan as JSON instead of tables (the top plans, Pareto set and best per epoch option)")] = False,
    all_plans: Annotated[bool, typer.Option("--all-plans", help="With --json: also every ranked plan (tens of MB for the whole catalog; the report's plans.csv.gz has them as a table)")] = False,
    dataset_gb: Annotated[Optional[float], typer.Option(help="Dataset size to stage to cloud machines, GB")] = None,
    pipeline: Annotated[Optional[Path], typer.Option("--pipeline", help="Stage what a pipeline strategy stores (JSON from `trainwise pipeline profile --json`) instead of --dataset-gb")] = None,
    pipeline_strategy: Annotated[Optional[str], typer.Option(help="With --pipeline: the strategy id (default: the one the pipeline profile selected)")] = None,
    bandwidth_mbps: Annotated[Optional[float], typer.Option(help="Staging bandwidth, Mb/s (default: 70 Mb/s, the 8.75 MB/s Künas measured)")] = None,
    provisioning_minutes: Annotated[Optional[float], typer.Option(help="Provisioning/boot time of a cloud machine, one figure for all (default: per cloud and kind of machine, with sources in the report)")] = None,
    interruption_rate: Annotated[Optional[float], typer.Option(help="Spot interruptions per hour")] = None,
    interruption_frequency_30d: Annotated[Optional[float], typer.Option(help="AWS-style interruption frequency over 30 days, e.g. 0.05")] = None,
    checkpoint_write_s: Annotated[Optional[float], typer.Option(help="Seconds to write a checkpoint (default: from the model size)")] = None,
    reference: Annotated[Optional[str], typer.Option(help="offering_id of the reference platform (default: this machine, else the best plan)")] = None,
    billing: Annotated[Optional[str], typer.Option(help="Override billing granularity: per_second, per_minute or per_hour")] = None,
    min_billed_seconds: Annotated[Optional[float], typer.Option(help="Override the minimum billed seconds")] = None,
    assume_accelerator: Annotated[bool, typer.Option(help="Rank GPUs for a profile whose command never asked torch for an accelerator, and TPUs/Trainium for one that never imported torch_xla (as profiled it would not use them): you will run it with its device flag or port it")] = False,
    top: Annotated[int, typer.Option(help="Alternatives in the answer (rows of each table with --all)")] = 8,
    all_tables: Annotated[bool, typer.Option("--all", help="Every table: top plans, Pareto set, best per epoch option, groups")] = False,
    out_dir: Annotated[Path, typer.Option(help="Where the profile and the default report are written")] = Path("trainwise-out"),
    distributed: Annotated[bool, typer.Option("--distributed/--single-machine", help="Also rank groups of machines: multi-node DDP, Hivemind and hybrid (default); or one machine each (a machine with several accelerators included)")] = True,
    node_counts: Annotated[str, typer.Option(help="With --distributed: machine counts for N x machine groups")] = ",".join(map(str, DEFAULT_NODE_COUNTS)),
    target_batch_size: Annotated[Optional[int], typer.Option(help="With --distributed: Hivemind target batch size (default: the profile's batch)")] = None,
    network: Annotated[Optional[Path], typer.Option(help="With --distributed: bandwidth/RTT overrides (JSON/YAML, e.g. from `trainwise net probe`)")] = None,
    hivemind_groups: Annotated[Optional[Path], typer.Option(help="With --distributed: YAML list of Hivemind groups {name, peers: [{offering, count}]}")] = None,
    bytes_per_sample: Annotated[Optional[float], typer.Option(help="With --distributed: training data streamed per sample from object storage")] = None,
    local_continent: Annotated[Optional[str], typer.Option(help="With --distributed: where this machine is (us, eu, asia, oce, sa or af) for hybrid groups")] = None,
    average_state_every: Annotated[Optional[int], typer.Option(help="With --distributed: count Hivemind parameter averaging every N epochs in egress (as `trainwise run --average-state-every`; default: gradient rounds only)")] = None,
) -> None:
    """The options `plan` and `plan save` share (a template: never called)."""


def _save_options(
    engine: Annotated[Optional[str], typer.Option(help="Saved plan: local, ddp or hivemind (default: ddp for several GPUs or nodes)")] = None,
    nodes: Annotated[int, typer.Option(help="Saved plan: number of nodes (the saved plan predicts N x its machine, a row the planner ranks)")] = 1,
    dataset_uri: Annotated[Optional[str], typer.Option(help="Saved plan: where the dataset lives (local path, s3://, gs://)")] = None,
    checkpoint_uri: Annotated[Optional[str], typer.Option(help="Saved plan: where checkpoints go (a bucket for cloud runs)")] = None,
    model_uri: Annotated[Optional[str], typer.Option(help="Saved plan: where the final model and the run record go")] = None,
    name: Annotated[Optional[str], typer.Option(help="Saved plan: job/cluster name (default from the workload)")] = None,
    requirements: Annotated[Optional[str], typer.Option(help="Saved plan: requirements file the cluster installs")] = None,
) -> None:
    """What a saved plan records besides the ranking (a template: never called)."""


def _parameters(template: Any) -> list[inspect.Parameter]:
    return list(inspect.signature(template, eval_str=True).parameters.values())


RANKING = _parameters(_ranking_options)
SAVE = _parameters(_save_options)
_CTX = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)


def _deprecated_flags(
    save: Annotated[Optional[Path], typer.Option("--save", help="Deprecated: use `trainwise plan save PLAN.json`")] = None,
    history: Annotated[bool, typer.Option("--history", help="Deprecated: use `trainwise plan history`")] = False,
) -> None:
    """`plan --save` and `plan --history`, kept working (a template: never called)."""


def _plan_path(
    path: Annotated[Path, typer.Argument(help="Plan JSON to write, for `trainwise launch` (your training command after --)")],
) -> None:
    """(a template: never called)"""


def _signature(*parameters: inspect.Parameter):
    """Give a `**options` command the typer parameters listed (typer reads the signature)."""
    def apply(function: Any) -> Any:
        function.__signature__ = inspect.Signature(list(parameters))
        return function
    return apply


@plan_app.callback(invoke_without_command=True)
@_signature(_CTX, *RANKING, *_parameters(_deprecated_flags), *SAVE)
def plan(ctx: typer.Context, **options: Any) -> None:
    """Rank where to train: time and cost on every offering with a measured profile (the default workload profiled here when no --profile is given)."""
    if ctx.invoked_subcommand is not None:
        spelled = {param.name: param.opts[0] for param in ctx.command.params if getattr(param, "opts", None)}
        misplaced = [spelled.get(name, name) for name in options if given(ctx, name)]
        if misplaced:
            raise TrainwiseError(f"options go after `trainwise plan {ctx.invoked_subcommand}`, not before it: move "
                                 + ", ".join(misplaced))
        return
    save, history = options.pop("save"), options.pop("history")
    # The note comes after the work: an error stays the one line it is.
    if history:
        _history()
        return _note("trainwise plan --history", "trainwise plan history")
    _rank(ctx, options, save_path=save)
    if save is not None:
        _note(f"trainwise plan --save {save}", f"trainwise plan save {save}")


def _note(old: str, new: str) -> None:
    err_console.print(f"note: `{old}` still works; it is now `{new}`", highlight=False, soft_wrap=True)


@plan_app.command("save")
@_signature(_CTX, *_parameters(_plan_path), *RANKING, *SAVE)
def plan_save(ctx: typer.Context, path: Path, **options: Any) -> None:
    """Rank as `trainwise plan` does, then save the best plan as a Plan JSON for `trainwise launch` (training command after --)."""
    _rank(ctx, options, save_path=path)


@plan_app.command("history")
def plan_history() -> None:
    """Show predicted vs actual for past launched runs."""
    _history()


def _workload_epochs(name: str) -> int | None:
    """The epochs a reference workload trains (the job `plan` profiles here when no --profile is given)."""
    from trainwise.workloads import get_workload

    try:
        return get_workload(name).default_epochs
    except ValueError as exc:  # names the valid workloads and the nearest one
        raise TrainwiseError(f"--workload: {exc}") from None


def _history() -> None:
    from trainwise.launch.command import show_history

    show_history(console)


def _request(ctx: typer.Context, options: dict[str, Any], saved_nodes: int | None) -> PlanRequest:
    """The typed request of the ranking options (checked once, here)."""
    from trainwise.plan.request import PlanRequest

    return PlanRequest(
        workload=options["workload"], profile_paths=tuple(options["profile_paths"] or ()), catalog=options["catalog"],
        objective=options["objective"], weights=options["weights"], deadline=options["deadline"],
        budget=options["budget"], clouds=tuple(options["cloud"] or ()), regions=tuple(options["region"] or ()),
        accelerators=tuple(options["accelerator"] or ()), spot=options["spot"], min_gpu_memory=options["min_gpu_memory"],
        max_global_batch=options["max_global_batch"],
        epoch_options=tuple(parse_int_list(options["epoch_options"], "--epoch-options")),
        epoch_options_given=given(ctx, "epoch_options"), epochs=options["epochs"], report=options["report"],
        local_offering=options["local_offering"], json_output=options["json_output"], all_plans=options["all_plans"],
        dataset_gb=options["dataset_gb"], pipeline=options["pipeline"], pipeline_strategy=options["pipeline_strategy"],
        bandwidth_mbps=options["bandwidth_mbps"], provisioning_minutes=options["provisioning_minutes"],
        interruption_rate=options["interruption_rate"], interruption_frequency_30d=options["interruption_frequency_30d"],
        checkpoint_write_s=options["checkpoint_write_s"], reference=options["reference"], billing=options["billing"],
        min_billed_seconds=options["min_billed_seconds"], assume_accelerator=options["assume_accelerator"],
        top=options["top"], show_all=options["all_tables"],
        out_dir=options["out_dir"],
        distributed=options["distributed"],
        node_counts=tuple(parse_int_list(options["node_counts"], "--node-counts")),
        target_batch_size=options["target_batch_size"], network=options["network"],
        hivemind_groups=options["hivemind_groups"], bytes_per_sample=options["bytes_per_sample"],
        local_continent=options["local_continent"], average_state_every=options["average_state_every"],
        saved_nodes=saved_nodes)


def _rank(ctx: typer.Context, options: dict[str, Any], *, save_path: Path | None) -> None:
    from trainwise.plan import command as plan_command
    from trainwise.predict.epochs import decide_epochs
    from trainwise.profile.schema import load_profile

    saved = {parameter.name: options.pop(parameter.name) for parameter in SAVE}
    command = passthrough()
    if save_path is None:
        # These go into the saved plan only: without saving they were dropped without a word, and a
        # user who asked for `--nodes 4` or a checkpoint bucket got a plan that knows neither.
        unsaved = options_given(
            ("--engine", saved["engine"], None), ("--nodes", saved["nodes"], 1), ("--dataset-uri", saved["dataset_uri"], None),
            ("--checkpoint-uri", saved["checkpoint_uri"], None), ("--model-uri", saved["model_uri"], None),
            ("--name", saved["name"], None), ("--requirements", saved["requirements"], None),
            ("a training command after --", command, None))
        if unsaved:
            raise TrainwiseError(f"{', '.join(unsaved)} {'goes' if len(unsaved) == 1 else 'go'} into a saved plan: use "
                                 "`trainwise plan save plan.json`, or drop " + ("it" if len(unsaved) == 1 else "them"))
    else:
        from trainwise.launch.plan_document import check_plan_uris, check_save_choices

        check_plan_uris(dataset_uri=saved["dataset_uri"], checkpoint_uri=saved["checkpoint_uri"],
                        model_uri=saved["model_uri"], requirements=saved["requirements"])
        check_save_choices(engine=saved["engine"], nodes=saved["nodes"], name=saved["name"],
                           single_machine=not options["distributed"])
    request = _request(ctx, options, saved_nodes=saved["nodes"] if save_path is not None else None)
    status_console = err_console if request.json_output else console
    from trainwise.plan.bounds import check_plan_request  # before profiling or ranking: 10^8 machines, 10^12 epochs
    check_plan_request(epochs=request.epochs, epoch_options=list(request.epoch_options), node_counts=list(request.node_counts))
    plan_command.check_plan_outputs(save_path=save_path, report_dir=request.report_dir, inputs=request.input_paths())
    profiles = [(path.stem, load_profile(path)) for path in request.profile_paths]
    decision = decide_epochs(epochs=request.epochs, epoch_options=request.epoch_options,
                             epoch_options_given=request.epoch_options_given,
                             profiles=[(str(path), profile) for path, (_, profile) in zip(request.profile_paths, profiles)],
                             command=command if save_path is not None else None,
                             workload_epochs=None if request.profile_paths else _workload_epochs(request.workload))
    if decision.says:
        status_console.print(decision.says)
    request = request.model_copy(update={"epochs": decision.headline})
    result = plan_command.run_plan_command(request=request, console=console, err_console=err_console,
                                           profiles=profiles or None)
    if save_path is not None:
        from trainwise.launch.command import save_plan

        save_plan(result, save_path, catalog_name=request.catalog, passthrough=command,
                  profile_paths=list(request.profile_paths), workload=request.workload, console=status_console,
                  objective=request.objective, **saved)

