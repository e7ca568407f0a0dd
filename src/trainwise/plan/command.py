"""`trainwise plan`: the I/O around the pure planner. Load or take the profiles (profiling the
default workload here when none is given), load the catalog and the local offering, call `plan()`,
print the tables, write the report. Progress bars cover every step that can take over a second."""

from __future__ import annotations

import json
import math
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from trainwise._progress import phase
from trainwise.errors import TrainwiseError
from trainwise.core import costs
from trainwise.plan.objectives import (Constraints, check_option_number, make_objective, parse_duration, parse_money,
                                       parse_weights)
from trainwise.plan.models import PlanOptions, PlanResult
from trainwise.plan.planner import check_inputs, plan
from trainwise.plan.request import PlanRequest
from trainwise.profile.schema import Profile, load_profile


# Ranges of the numeric options, far past any real setup: beyond them the modelled times and costs
# stop meaning anything (and products of them overflow to inf).
MAX_DATASET_GB = 1e7                  # 10 PB staged to one machine
MIN_BANDWIDTH_MBPS = 0.001            # 1 kb/s
MAX_PROVISIONING_MINUTES = 525_600.0  # a year
MAX_INTERRUPTIONS_PER_HOUR = 3600.0   # one a second
MAX_SECONDS_OPTION = 31_536_000.0     # a year: --min-billed-seconds, --checkpoint-write-s


def _split(values: Sequence[str] | None) -> tuple[str, ...]:
    out: list[str] = []
    for value in values or ():
        out += [part.strip() for part in value.split(",") if part.strip()]
    return tuple(out)


def build_inputs(*, objective: str = "cheapest", weights: str | None = None, deadline: str | None = None,
                 budget: str | None = None, clouds: Sequence[str] | None = None, regions: Sequence[str] | None = None,
                 accelerators: Sequence[str] | None = None, spot: bool = True, min_gpu_memory: float | None = None,
                 max_global_batch: int | None = None,
                 primary_epochs: int | None = None, dataset_gb: float | None = None, bandwidth_mbps: float | None = None,
                 provisioning_minutes: float | None = None, interruption_rate: float | None = None,
                 interruption_frequency_30d: float | None = None, checkpoint_write_s: float | None = None,
                 reference: str | None = None, top: int = 10, this_host: str | None = None,
                 billing: str | None = None, min_billed_seconds: float | None = None, distributed: Any = None,
                 assume_accelerator: bool = False,
                 pipeline_profile: str | None = None, pipeline_strategy: str | None = None):
    """(Objective, Constraints, PlanOptions) from CLI-style values, with one-line errors."""
    deadline_s = parse_duration(deadline) if deadline else None
    budget_usd = parse_money(budget) if budget else None
    objective_model = make_objective(objective, weights=parse_weights(weights) if weights else None,
                                     deadline_s=deadline_s, budget_usd=budget_usd)
    if primary_epochs is not None and primary_epochs < 1:
        raise TrainwiseError(f"--epochs must be a positive number of epochs (got {primary_epochs})")
    if top < 1:
        raise TrainwiseError(f"--top must be at least 1 (got {top})")
    check_option_number(min_gpu_memory, "--min-gpu-memory", "GiB")
    if max_global_batch is not None and max_global_batch < 1:
        raise TrainwiseError(f"--max-global-batch must be at least 1 sample (got {max_global_batch})")
    constraints = Constraints(clouds=_split(clouds), regions=_split(regions), accelerators=_split(accelerators),
                              allow_spot=spot, min_gpu_memory_gib=min_gpu_memory, max_global_batch=max_global_batch,
                              deadline_s=deadline_s, budget_usd=budget_usd)
    update: dict[str, Any] = {"reference": reference, "primary_epochs": primary_epochs, "top_n": top,
                              "this_host": this_host or socket.gethostname(), "distributed": distributed}
    if dataset_gb is not None:
        # the storage cost grows with it times the wall time, which grows with it too (staging): squared, it overflows
        check_option_number(dataset_gb, "--dataset-gb", "GB", maximum=MAX_DATASET_GB)
        if pipeline_profile is not None:
            raise TrainwiseError("give either --dataset-gb or --pipeline (the staged size of a pipeline strategy), not both")
        update["dataset_gb"] = dataset_gb
    elif pipeline_profile is not None:
        from trainwise.plan.staging import staged_dataset

        update["dataset_gb"], update["dataset_source"] = staged_dataset(pipeline_profile, pipeline_strategy)
    elif pipeline_strategy is not None:
        raise TrainwiseError("--pipeline-strategy needs --pipeline PIPE.json (from `trainwise pipeline profile --json`)")
    if bandwidth_mbps is not None:
        check_option_number(bandwidth_mbps, "--bandwidth-mbps", "Mb/s", minimum=MIN_BANDWIDTH_MBPS)
        update["staging_bytes_per_s"] = bandwidth_mbps * 1e6 / 8
        update["staging_source"] = f"user-given {bandwidth_mbps:g} Mb/s"
    if provisioning_minutes is not None:
        check_option_number(provisioning_minutes, "--provisioning-minutes", "minutes", maximum=MAX_PROVISIONING_MINUTES)
        s = provisioning_minutes * 60
        update["provisioning_s"] = (s, s, s)
        update["provisioning_source"] = f"user-given {provisioning_minutes:g} min"
    if interruption_rate is not None and interruption_frequency_30d is not None:
        raise TrainwiseError("give either --interruption-rate (per hour) or --interruption-frequency-30d, not both")
    if interruption_rate is not None:
        check_option_number(interruption_rate, "--interruption-rate", "per hour", maximum=MAX_INTERRUPTIONS_PER_HOUR)
        update["interruptions_per_hour"] = interruption_rate
        update["interruption_source"] = f"user-given {interruption_rate:g} per hour"
    if interruption_frequency_30d is not None:
        rate = costs.rate_from_30day_frequency(interruption_frequency_30d)
        update["interruptions_per_hour"] = rate
        update["interruption_source"] = (f"user-given AWS-style 30-day interruption frequency {interruption_frequency_30d:.0%} "
                                         f"= {rate:.3g} per hour (Poisson)")
    if billing is not None:
        from trainwise.core.costs import GRANULARITY_S

        if billing not in GRANULARITY_S:
            raise TrainwiseError(f"--billing {billing}: use one of {', '.join(GRANULARITY_S)}")
        update["billing"] = billing
    if min_billed_seconds is not None:
        check_option_number(min_billed_seconds, "--min-billed-seconds", "seconds", maximum=MAX_SECONDS_OPTION)
        update["min_billed_seconds"] = min_billed_seconds
    if checkpoint_write_s is not None:
        check_option_number(checkpoint_write_s, "--checkpoint-write-s", "seconds", maximum=MAX_SECONDS_OPTION)
        update["checkpoint_write_s"] = checkpoint_write_s
    if assume_accelerator:
        update["assume_accelerator"] = True
    return objective_model, constraints, PlanOptions(**{k: v for k, v in update.items() if v is not None})


def check_plan_outputs(*, save_path: Path | None, report_dir: Path | None, inputs: Sequence[Path]) -> None:
    """Refuse a --save or --report that cannot be written, or would overwrite one of the plan's input
    files, before any profiling or ranking: not after it, with the report half-written."""
    from trainwise._io import check_output_folder, check_output_path
    from trainwise.report.bundle import REPORT_FILES

    if report_dir is not None:
        check_output_folder(report_dir, "--report", files=tuple(REPORT_FILES.values()), inputs=tuple(inputs))
    if save_path is not None:
        check_output_path(save_path, "--save", inputs=tuple(inputs))
        if report_dir is not None:
            # The plan is saved after the report is written: the same path would replace a report file.
            clash = [name for name in REPORT_FILES.values() if (report_dir / name).absolute() == save_path.absolute()]
            if clash:
                raise TrainwiseError(f"--save {save_path} is the report's {clash[0]} (--report {report_dir}): "
                                     "save the plan to another file")


def inputs_of(request: PlanRequest):
    """(Objective, Constraints, PlanOptions) of a request, with one-line errors."""
    return build_inputs(objective=request.objective, weights=request.weights, deadline=request.deadline,
                        budget=request.budget, clouds=request.clouds, regions=request.regions,
                        accelerators=request.accelerators, spot=request.spot, min_gpu_memory=request.min_gpu_memory,
                        max_global_batch=request.max_global_batch, primary_epochs=request.epochs,
                        dataset_gb=request.dataset_gb, bandwidth_mbps=request.bandwidth_mbps,
                        provisioning_minutes=request.provisioning_minutes, interruption_rate=request.interruption_rate,
                        interruption_frequency_30d=request.interruption_frequency_30d,
                        checkpoint_write_s=request.checkpoint_write_s, reference=request.reference, top=request.top,
                        billing=request.billing, min_billed_seconds=request.min_billed_seconds,
                        distributed=request.distributed_options(), assume_accelerator=request.assume_accelerator,
                        pipeline_profile=None if request.pipeline is None else str(request.pipeline),
                        pipeline_strategy=request.pipeline_strategy)


def run_plan_command(request: PlanRequest, *, console: Console, err_console: Console,
                     profiles: Sequence[tuple[str, Profile]] | None = None) -> PlanResult:
    """Rank `request` (its epochs already decided: `trainwise.predict.epochs.decide_epochs`), print the
    tables or the JSON, write the report. `profiles`: the request's profiles, when already read."""
    from trainwise.catalog import load_catalog, load_user_offerings

    objective, constraints, options = inputs_of(request)
    status_console = err_console if request.json_output else console
    catalog = load_catalog(request.catalog)
    local = load_user_offerings(request.local_offering) if request.local_offering is not None else None
    check_inputs(catalog, constraints, options, local)
    report_dir = request.report_dir
    epoch_options = list(request.epoch_options)
    json_output, all_plans, workload = request.json_output, request.all_plans, request.workload
    if request.profile_paths:
        with phase(f"reading {len(request.profile_paths)} profile(s)"):
            profiles = list(profiles) if profiles is not None else [(path.stem, load_profile(path))
                                                                    for path in request.profile_paths]
    else:
        from trainwise.plan.same_machine import profile_workload_quiet

        with phase(f"profiling the default workload {workload} on this machine (a few iterations)"):
            measured = profile_workload_quiet(workload, status_console)
        path = measured.save(request.out_dir / f"{workload}.profile.json")
        status_console.print(f"profile written to [bold]{path}[/bold]", highlight=False)
        profiles = [(workload, measured)]
        from trainwise.workloads import get_workload

        spec = get_workload(workload)
        if options.dataset_gb is None and spec.hyperparameters.get("dataset_gb"):
            # the reference job's full-size data set (profiled here on a slice, staged at full size)
            options = options.model_copy(update={"dataset_gb": float(spec.hyperparameters["dataset_gb"]),
                                                 "dataset_source": spec.hyperparameters["dataset_gb_source"]})
    with phase("ranking candidates"):
        result = plan(profiles, catalog, objective, constraints, epoch_options=epoch_options, local_offering=local,
                      options=options)
    from trainwise.report.bundle import write_report

    with phase(f"rendering the chart and writing the report to {report_dir}"):
        try:
            paths = write_report(result, report_dir, top_n=options.top_n)
        except OSError as exc:  # checked up front; a disk that fills up meanwhile still gets one line
            raise TrainwiseError(f"cannot write the report to --report {report_dir} ({exc.strerror or exc}): "
                                 "choose a writable folder") from None
    if json_output:
        from trainwise.report.data import plan_payload

        # Plain text, not rich's highlighted print_json: with --all-plans the document is tens of MB,
        # which rich takes minutes to colour.
        text = json.dumps(plan_payload(result, options.top_n, all_plans=all_plans), indent=1, allow_nan=False,
                          default=_json_default)
        console.file.write(text + "\n")
        console.file.flush()
    elif request.show_all:
        from trainwise.report.terminal import print_plan

        print_plan(console, result, options.top_n)
    else:
        from trainwise.report.terminal import print_answer

        print_answer(console, result, options.top_n)
    if paths:
        others = ", ".join(path.name for kind, path in paths.items() if kind != "html")
        status_console.print(f"report: [bold]{paths['html']}[/bold] (with {others})", highlight=False)
    return result


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)
