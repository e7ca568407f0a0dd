"""The planner's typed options and results: the cost model's assumptions (`PlanOptions`), the
ranked candidates (`PlanResult`), and the error raised when nothing is feasible."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from trainwise.core import costs
from trainwise.errors import TrainwiseError
from trainwise.plan.objectives import Constraints, Objective


class InfeasiblePlanError(TrainwiseError):
    """No candidate meets the constraints; says which constraint excluded everything and what the
    best infeasible option would be."""

    def __init__(self, message: str, constraint: str | None = None, best_infeasible: dict[str, Any] | None = None):
        super().__init__(message)
        self.constraint = constraint
        self.best_infeasible = best_infeasible


class PlanOptions(BaseModel):
    """Assumptions of the cost model, each overridable; defaults cite their source."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provisioning_s: tuple[float, float, float] | None = Field(
        default=None, description="low, expected, high seconds to a running cloud machine; None: per cloud and kind "
                                  "of machine (trainwise.plan.provisioning)")
    provisioning_source: str = "per cloud and kind of machine (trainwise.plan.provisioning)"
    dataset_gb: float | None = Field(default=None, ge=0, description="dataset staged to cloud machines; None: not modelled")
    dataset_source: str = Field(default="user-given --dataset-gb", description="where dataset_gb comes from")
    staging_bytes_per_s: float = Field(default=costs.DEFAULT_STAGING_BYTES_PER_S, gt=0)
    staging_source: str = costs.STAGING_SOURCE
    storage_usd_per_gb_month: float = Field(default=costs.DEFAULT_STORAGE_USD_PER_GB_MONTH, ge=0)
    interruptions_per_hour: float = Field(default=costs.DEFAULT_INTERRUPTIONS_PER_HOUR, ge=0)
    interruption_source: str = costs.INTERRUPTION_SOURCE
    checkpoint_write_s: float | None = Field(default=None, ge=0, description="None: from the model's size")
    estimator: str = "trainwise"
    reference: str | None = Field(default=None, description="offering_id of the reference platform; None: this machine")
    primary_epochs: int | None = Field(default=None, gt=0)
    this_host: str | None = Field(default=None, description="None: socket.gethostname()")
    top_n: int = Field(default=10, gt=0)
    billing: Literal["per_second", "per_minute", "per_hour"] | None = Field(
        default=None, description="override every offering's billing granularity (None: the catalog's)")
    min_billed_seconds: float | None = Field(default=None, ge=0, description="override the minimum billed time")
    distributed: Any = Field(default=None, description="a trainwise.plan.distributed.DistributedOptions: also rank "
                                                       "multi-GPU, multi-node, Hivemind and hybrid groups; None: single machines")
    assume_accelerator: bool = Field(default=False, description="rank accelerators for a profile whose command never "
                                     "asked torch for one (Profile.cpu_only_command): the user will run it with its device flag")


@dataclass(frozen=True)
class PlanResult:
    plans: pd.DataFrame              # every predicted candidate, feasible or not (see PLAN_COLUMNS)
    not_predicted: pd.DataFrame      # offerings with no runtime source, grouped
    primary_epochs: int
    epoch_options: tuple[int, ...]
    objective: Objective
    constraints: Constraints
    flags: tuple[str, ...]
    assumptions: tuple[str, ...]
    exclusions: Mapping[str, int]    # constraint -> candidates it excluded (at the primary epoch option)

    catalog_caption: str
    reference: str | None
    profiles: tuple[Mapping[str, Any], ...]
    inconsistencies: tuple[str, ...] = field(default=())
    # reason -> offerings/groups not ranked because they would change the job's global batch
    pruned: Mapping[str, int] = field(default_factory=dict)
    job_global_batch: int | None = None
    # reason -> offerings/groups not ranked because the job would leave their accelerators idle
    idle: Mapping[str, int] = field(default_factory=dict)

    @property
    def ranked(self) -> pd.DataFrame:
        """Feasible candidates, best first within each epoch option."""
        feasible = self.plans[self.plans["feasible"]]
        return with_plan_ids(feasible.sort_values(["epochs", "rank"], kind="stable"))

    @property
    def primary(self) -> pd.DataFrame:
        ranked = self.ranked
        return ranked[ranked["epochs"] == self.primary_epochs]

    @property
    def best(self) -> dict[str, Any]:
        return self.primary.iloc[0].to_dict()

    @property
    def pareto(self) -> pd.DataFrame:
        frame = self.plans[self.plans["pareto"]]
        return with_plan_ids(frame.sort_values(["epochs", "wall_s", "total_cost"], kind="stable"))

    def best_per_epochs(self) -> pd.DataFrame:
        ranked = self.ranked
        return ranked[ranked["rank"] == 1]


def plan_ids(frame: pd.DataFrame) -> pd.Series:
    """"offering | market | batch B | E epochs": a readable, unique id of each candidate (built on
    demand for the rows shown, not for every candidate)."""
    if frame.empty:
        return pd.Series([], index=frame.index, dtype=object)
    return (frame["offering_id"].astype(str) + " | " + frame["market"].astype(str) + " | batch "
            + frame["batch_size"].astype(str) + " | " + frame["epochs"].astype(str) + " epochs")


def with_plan_ids(frame: pd.DataFrame) -> pd.DataFrame:
    if "plan_id" in frame.columns:
        return frame
    out = frame.copy()
    out.insert(0, "plan_id", plan_ids(frame))
    return out
