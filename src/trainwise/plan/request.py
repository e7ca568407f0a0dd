"""What one `trainwise plan` is asked: a typed request, checked once when it is built (by the
command line, or by code that plans), then handed whole to `trainwise.plan.command.run_plan_command`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from trainwise.errors import TrainwiseError
from trainwise.plan.objectives import check_objective_kind
from trainwise.plan.bounds import DEFAULT_NODE_COUNTS  # noqa: F401 - the import path code that plans uses
from trainwise.predict.epochs import DEFAULT_EPOCH_OPTIONS

# The options that shape the distributed groups only: refused with --single-machine.
_DISTRIBUTED_ONLY = {"target_batch_size": "--target-batch-size", "network": "--network",
                     "hivemind_groups": "--hivemind-groups", "bytes_per_sample": "--bytes-per-sample",
                     "local_continent": "--local-continent", "average_state_every": "--average-state-every"}


class PlanRequest(BaseModel):
    """The ranking a plan is asked for; field names are the command line's options."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workload: str = "resnet50_imagenet"
    profile_paths: tuple[Path, ...] = ()
    catalog: str = "current"
    objective: str = "cheapest"
    weights: str | None = None
    deadline: str | None = None
    budget: str | None = None
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    spot: bool = True
    min_gpu_memory: float | None = None
    max_global_batch: int | None = None
    epoch_options: tuple[int, ...] = DEFAULT_EPOCH_OPTIONS
    epoch_options_given: bool = False
    epochs: int | None = None
    report: Path | None = None
    local_offering: Path | None = None
    json_output: bool = False
    all_plans: bool = False
    dataset_gb: float | None = None
    pipeline: Path | None = None
    pipeline_strategy: str | None = None
    bandwidth_mbps: float | None = None
    provisioning_minutes: float | None = None
    interruption_rate: float | None = None
    interruption_frequency_30d: float | None = None
    checkpoint_write_s: float | None = None
    reference: str | None = None
    billing: str | None = None
    min_billed_seconds: float | None = None
    assume_accelerator: bool = False
    top: int = 8
    show_all: bool = False
    out_dir: Path = Path("trainwise-out")
    distributed: bool = True
    node_counts: tuple[int, ...] = DEFAULT_NODE_COUNTS
    target_batch_size: int | None = None
    network: Path | None = None
    hivemind_groups: Path | None = None
    bytes_per_sample: float | None = None
    local_continent: str | None = None
    average_state_every: int | None = None
    saved_nodes: int | None = None  # a plan saved for N machines: N x machine is ranked too

    @model_validator(mode="after")
    def _consistent(self) -> "PlanRequest":
        # TrainwiseError, not ValueError: pydantic passes it through as the one-line error it is.
        if self.all_plans and not self.json_output:
            raise TrainwiseError("--all-plans only changes the --json output: add --json (the report's plans.csv.gz "
                                 "always has every ranked plan)")
        if not self.distributed:
            given = [option for field, option in _DISTRIBUTED_ONLY.items() if getattr(self, field) is not None]
            if given or self.node_counts != DEFAULT_NODE_COUNTS:
                raise TrainwiseError("--node-counts, --target-batch-size, --network, --hivemind-groups, --bytes-per-sample, "
                                     "--local-continent and --average-state-every rank distributed groups: drop --single-machine")
        if any(count < 1 for count in (*self.epoch_options, *self.node_counts)) or not self.epoch_options:
            raise TrainwiseError("--epoch-options and --node-counts must be positive whole numbers")
        check_objective_kind(self.objective)  # before anything is profiled or printed
        if not self.profile_paths:  # the reference workload will be profiled here: its extra must be installed
            from trainwise.workloads import check_requirements

            try:
                check_requirements(self.workload)
            except ValueError as exc:  # an unknown workload: its own one line (with the nearest names)
                raise TrainwiseError(f"--workload: {exc}") from None
        return self

    @property
    def report_dir(self) -> Path:
        return self.report if self.report is not None else self.out_dir / "report"

    def input_paths(self) -> list[Path]:
        """Every file the plan reads: no output may overwrite one."""
        return [*self.profile_paths, *(p for p in (self.local_offering, self.pipeline, self.network,
                                                   self.hivemind_groups, Path(self.catalog)) if p is not None)]

    def distributed_options(self) -> Any:
        """The planner's DistributedOptions for this request."""
        from trainwise.plan import distributed

        if not self.distributed:
            return distributed.single_machine_options()
        counts = list(self.node_counts)
        if self.saved_nodes is not None and self.saved_nodes > 1 and self.saved_nodes not in counts:
            # `plan save --nodes N`: the saved plan takes its prediction from the planner's N x machine row
            # (launch.plan_document.build_plan_document), so N machines are ranked too.
            counts.append(self.saved_nodes)
        return distributed.options_from_cli(counts, self.target_batch_size, self.network, self.hivemind_groups,
                                            self.bytes_per_sample, self.local_continent,
                                            average_state_every=self.average_state_every)
