"""Run records: what a launched run measured against what its plan predicted, kept where the next
`trainwise plan --history` can read them.

One JSON file per run in the history directory: `$TRAINWISE_HISTORY_DIR`, else
`~/.trainwise/history`. The same record is also persisted next to the model (`model URI/<run id>/
run-record.json`), so it outlives this machine with the model.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.table import Table

from trainwise import __version__
from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.launch import safety
from trainwise.launch.plan_document import PlanDocument, Prediction

HISTORY_ENV = "TRAINWISE_HISTORY_DIR"
RUN_RECORD_SCHEMA_VERSION = 1


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = RUN_RECORD_SCHEMA_VERSION
    trainwise_version: str = __version__
    run_id: str
    started_at: str
    finished_at: str
    backend: Literal["local", "sky"]
    executed_with: str = Field(description="how the job ran, e.g. `trainwise run --engine local` or `trainwise profile --full`")
    ran_on: str = Field(description="the machine or offering the run actually used")
    exit_code: int
    plan: PlanDocument
    predicted: Prediction = Field(description="the plan's prediction for the machine the run used (or the chosen offering)")
    prediction_note: str
    measured_training_s: float = Field(ge=0, description="launch of the training command → its exit, measured here")
    measured_staging_s: float = Field(ge=0)
    measured_wall_s: float = Field(ge=0, description="staging + training + persisting, measured here")
    price_per_hour: float = Field(ge=0)
    price_source: str
    measured_cost_usd: float = Field(ge=0, description="measured wall time × the price the plan used for that machine")
    dataset: dict | None = None
    model_files: list[dict] = []
    model_location: str | None = None
    checkpoint_location: str | None = None
    notes: list[str] = []

    @property
    def relative_error(self) -> float | None:
        """(actual − predicted) / predicted on the training time."""
        if self.predicted.training_s <= 0:
            return None
        return (self.measured_training_s - self.predicted.training_s) / self.predicted.training_s


def history_dir() -> Path:
    override = os.environ.get(HISTORY_ENV)
    return Path(override).expanduser() if override else Path.home() / ".trainwise" / "history"


def save_record(record: RunRecord, directory: Path | None = None) -> Path:
    from trainwise.userfiles import json_text

    text = json_text(record.model_dump(mode="python"), f"run record {record.run_id}") + "\n"
    safety.assert_no_secrets([text], f"run record {record.run_id}")
    return atomic_write_text((directory or history_dir()) / f"{record.run_id}.json", text)


def load_records(directory: Path | None = None) -> tuple[list[RunRecord], list[str]]:
    """Every readable record, oldest first, and one line per file that could not be read."""
    from trainwise.userfiles import UserFileError, load_json

    root = directory or history_dir()
    records: list[RunRecord] = []
    problems: list[str] = []
    if not root.is_dir():
        return records, problems
    for path in sorted(root.glob("*.json")):
        try:
            records.append(RunRecord.model_validate(load_json(path, "run record")))
        except UserFileError as exc:
            problems.append(f"{exc}; skipped")
        except ValidationError as exc:
            problems.append(f"{path.name}: not a trainwise run record ({exc.__class__.__name__}); skipped")
    records.sort(key=lambda r: r.started_at)
    return records, problems


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def history_table(records: list[RunRecord]) -> Table:
    """Predicted vs actual per run; each row's prediction source is in the caption lines below it."""
    table = Table(title=f"Past runs: predicted vs actual ({history_dir()})")
    for column in ("run", "ran on", "predicted", "actual", "error", "predicted $", "actual $"):
        table.add_column(column, overflow="fold")
    for r in records:
        error = r.relative_error
        table.add_row(r.run_id, r.ran_on, _duration(r.predicted.training_s), _duration(r.measured_training_s),
                      "—" if error is None else f"{error:+.1%}", f"{r.predicted.cost_usd:.4f}", f"{r.measured_cost_usd:.4f}")
    table.caption = "\n".join(f"{r.run_id}: {r.executed_with}, finished {r.finished_at}; predicted: {r.prediction_note}; "
                              f"actual: measured here, cost at {r.price_per_hour:.4f} $/h ({r.price_source})" for r in records)
    table.caption_justify = "left"
    return table


def require_records(directory: Path | None = None) -> list[RunRecord]:
    records, _ = load_records(directory)
    if not records:
        raise TrainwiseError(f"no past runs in {directory or history_dir()}: launch one with `trainwise launch PLAN.json "
                             f"--backend local` (or set ${HISTORY_ENV})")
    return records
