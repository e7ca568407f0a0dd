"""The Plan document (`trainwise plan --save PLAN.json`): what `trainwise launch` needs to run the
plan's best candidate anywhere, as versioned JSON.

It freezes one decision of the planner — the offering (cloud, region, instance type, accelerators,
count, spot), the number of nodes and the engine — with the user's training command, the profile the
times came from, the predicted time and cost with their provenance, and where the data, the
checkpoints and the final model live. `alternatives` keeps the planner's predicted training time for
every accelerator configuration it ranked, so SkyPilot's optimizer can be given trainwise's times
(`Task.set_time_estimator`). `here` is the prediction for this machine when the plan priced it, so a
local run can be judged against a prediction for the machine it actually ran on.
"""

from __future__ import annotations

import math
import re
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainwise import __version__
from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.core.profile import reference_workload_command
from trainwise.launch import safety

PLAN_SCHEMA_VERSION = 1
Engine = Literal["local", "ddp", "hivemind"]
ENGINES: tuple[str, ...] = ("local", "ddp", "hivemind")


class _Model(BaseModel):
    # inf/NaN never describe a real plan: refused on load, and never written (allow_nan=False)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _safe_name(value: str | None, what: str) -> str | None:
    from trainwise.userfiles import check_safe_name

    if value is None:
        return None
    try:
        return check_safe_name(value, what)
    except TrainwiseError as exc:
        raise ValueError(str(exc)) from None


class ChosenOffering(_Model):
    offering_id: str
    cloud: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerator: str | None = Field(default=None, description="trainwise's canonical accelerator name")
    sky_accelerator: str | None = Field(default=None, description="the accelerator as SkyPilot names it (source catalog)")
    accelerator_count: float = 0.0
    spot: bool = False
    kind: str = "cloud"
    price_per_hour: float = Field(ge=0)
    price_source: str

    @model_validator(mode="after")
    def _names(self) -> "ChosenOffering":
        # a cloud offering's names reach the SkyPilot task (`instance_type: ...`): shell or YAML syntax is
        # refused here (this machine's offering, "this machine", runs locally and reaches no task)
        if self.is_cloud:
            for field in ("cloud", "region", "zone", "instance_type", "accelerator", "sky_accelerator"):
                _safe_name(getattr(self, field), field.replace("_", " "))
        return self

    @property
    def is_cloud(self) -> bool:
        return self.kind != "on_premise" and self.cloud != "local"


class Prediction(_Model):
    """Predicted time and cost of the run on one offering, with where each number came from."""

    offering_id: str
    epochs: int = Field(gt=0)
    batch_size: int = Field(gt=0)
    training_s: float = Field(ge=0, description="training only, under expected interruptions excluded")
    wall_s: float = Field(ge=0, description="provisioning + staging + expected training")
    low_s: float = Field(ge=0)
    high_s: float = Field(ge=0)
    cost_usd: float = Field(ge=0)
    cost_low_usd: float = Field(ge=0)
    cost_high_usd: float = Field(ge=0)
    price_per_hour: float = Field(ge=0)
    time_source: str
    price_source: str

    @model_validator(mode="after")
    def _ordered(self) -> "Prediction":
        if self.low_s > self.high_s:
            raise ValueError(f"low_s {self.low_s:g} is above high_s {self.high_s:g}: an interval's low end must not "
                             "exceed its high end")
        if self.cost_low_usd > self.cost_high_usd:
            raise ValueError(f"cost_low_usd {self.cost_low_usd:g} is above cost_high_usd {self.cost_high_usd:g}: an "
                             "interval's low end must not exceed its high end")
        return self


class Alternative(_Model):
    """The planner's predicted training time for one accelerator configuration (any cloud)."""

    accelerator: str | None
    sky_accelerator: str | None = None
    accelerator_count: float
    instance_types: list[str] = []
    training_s: float = Field(ge=0)
    time_source: str


class PlanDocument(_Model):
    schema_version: Literal[1] = PLAN_SCHEMA_VERSION
    trainwise_version: str = __version__
    created_at: str
    name: str = Field(description="job/cluster name (lower-case DNS label)")
    offering: ChosenOffering
    nodes: int = Field(default=1, ge=1)
    engine: Engine = "local"
    processes_per_node: int = Field(default=1, ge=1)
    target_batch_size: int | None = Field(default=None, gt=0, description="Hivemind: samples per averaging round")
    command: list[str] = Field(min_length=1, description="the user's training command, one argument per item")
    workload: str | None = None
    profile_label: str | None = None
    profile_path: str | None = None
    profile_host: str | None = None
    prediction: Prediction
    here: Prediction | None = None
    alternatives: list[Alternative] = []
    dataset_uri: str | None = None
    checkpoint_uri: str | None = None
    model_uri: str | None = None
    requirements: str | None = Field(default=None, description="requirements file installed by the task's setup")
    disk_size_gb: int = Field(default=100, ge=10)
    objective: str = "cheapest"
    catalog: str = ""
    notes: list[str] = []

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        try:
            return safety.check_name(value, "plan name")
        except TrainwiseError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("dataset_uri", "checkpoint_uri", "model_uri", "requirements")
    @classmethod
    def _uri(cls, value: str | None, info: Any) -> str | None:
        if value is None:
            return None
        try:
            return safety.check_uri(value, info.field_name.replace("_", " "))
        except TrainwiseError as exc:
            raise ValueError(str(exc)) from None

    @model_validator(mode="after")
    def _engine_fits(self) -> "PlanDocument":
        if self.engine == "local" and (self.nodes > 1 or self.processes_per_node > 1):
            raise ValueError(f"engine local runs one process; {self.nodes} node(s) x {self.processes_per_node} "
                             "process(es) need --engine ddp or hivemind")
        if self.engine == "hivemind" and self.target_batch_size is None:
            raise ValueError("engine hivemind needs a target batch size")
        return self

    # ---- persistence ----
    def save(self, path: str | Path) -> Path:
        from trainwise.userfiles import json_text

        # json_text: no NaN/Infinity, and command bytes that are not UTF-8 kept as \udcXX escapes
        text = json_text(self.model_dump(mode="python"), f"plan {path}")
        safety.assert_no_secrets([text], f"plan {path}")
        return atomic_write_text(path, text + "\n")

    @property
    def command_line(self) -> str:
        return shlex.join(self.command)


def load_plan(path: str | Path) -> PlanDocument:
    """Read a Plan JSON with one-line errors for every way it can be wrong."""
    from trainwise.userfiles import load_json

    p = Path(path)
    data = load_json(p, "plan", missing_hint=f"create it with `trainwise plan --save {p}`")
    if isinstance(data, dict) and "iterations" in data and "steady_state" in data:
        raise TrainwiseError(f"{p} is a profile, not a plan: make a plan from it with `trainwise plan --profile {p} "
                             "--save plan.json -- python train.py ARGS`, then launch plan.json")
    if not isinstance(data, dict) or "schema_version" not in data:
        raise TrainwiseError(f"{p} is not a trainwise plan (no schema_version): create one with `trainwise plan --save`")
    if data["schema_version"] != PLAN_SCHEMA_VERSION:
        raise TrainwiseError(f"plan {p} has schema version {data['schema_version']!r}; this trainwise reads version "
                             f"{PLAN_SCHEMA_VERSION}: recreate it with `trainwise plan --save`")
    try:
        return PlanDocument.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise TrainwiseError(f"plan {p} is invalid at `{where}`: {message}") from None


# ---------------------------------------------------------------------------- from a PlanResult


def _text(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value)
    return text if text and text != "nan" else None


def _prediction(row: dict[str, Any]) -> Prediction:
    return Prediction(offering_id=str(row["offering_id"]), epochs=int(row["epochs"]), batch_size=int(row["batch_size"]),
                      training_s=float(row["training_s"]), wall_s=float(row["wall_s"]), low_s=float(row["low_s"]),
                      high_s=float(row["high_s"]), cost_usd=float(row["total_cost"]), cost_low_usd=float(row["cost_low"]),
                      cost_high_usd=float(row["cost_high"]), price_per_hour=float(row["price_per_hour"]),
                      time_source=str(row["time_provenance"]), price_source=str(row["price_provenance"]))


def _sky_accelerators(catalog: Any) -> dict[str, str]:
    """offering_id -> the accelerator name as the source (SkyPilot) catalog writes it."""
    frame = catalog.offerings
    if "source_accelerator" not in frame.columns:
        return {}
    subset = frame[["offering_id", "source_accelerator"]].dropna()
    return dict(zip(subset["offering_id"], subset["source_accelerator"]))


_GROUP_ID = re.compile(r"^(multi-node|hivemind)/(\d+)x/(.+)$")


def _catalog_machine(catalog: Any, offering_id: str) -> dict[str, Any] | None:
    frame = catalog.offerings
    rows = frame[frame["offering_id"] == offering_id]
    if rows.empty:
        return None
    return {key: (None if isinstance(value, float) and math.isnan(value) else value)
            for key, value in rows.iloc[0].to_dict().items()}


def resolve_group(best: dict[str, Any], catalog: Any) -> tuple[dict[str, Any], int | None, str | None]:
    """(the machine, nodes, engine) of the best row: a catalog machine as it is, or the machine of a
    planner group of identical machines (`multi-node/Nx/OFFERING`: DDP, `hivemind/Nx/OFFERING`).
    Groups of different machines (geo-distributed or hybrid Hivemind) are not one SkyPilot task."""
    parallelism = str(best.get("parallelism") or "")
    if parallelism in ("", "ddp-node", "nan"):
        return best, None, None
    match = _GROUP_ID.match(str(best["offering_id"]))
    machine = _catalog_machine(catalog, match.group(3)) if match is not None else None
    if machine is None:
        raise TrainwiseError(f"the best plan {best['offering_id']} mixes different machines (or this machine and the "
                             "cloud); one SkyPilot task runs one machine type: re-plan with --single-machine, or save a "
                             "group of identical machines")
    return machine, int(match.group(2)), "ddp" if match.group(1) == "multi-node" else "hivemind"


_GROUP_PREFIX = {"ddp": "multi-node", "hivemind": "hivemind"}
_ENGINE_WORDS = {"ddp": "DDP", "hivemind": "Hivemind"}
# What makes two catalog offerings the same machine to launch, zone aside.
_MACHINE_KEYS = ("cloud", "region", "instance_type", "accelerator", "accelerator_count")


def prediction_row(result: Any, best: dict[str, Any], machine: dict[str, Any], nodes: int, engine: str,
                   catalog: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the ranked row that predicts what the plan launches, the machine it launches). One machine:
    the best row. Several: the planner's group of `nodes` × the machine under `engine`
    (`multi-node/Nx/…` for DDP, `hivemind/Nx/…`), same market, profile and epochs — or, since the
    planner groups only the cheapest zone of a region, its group of the same instance type in the same
    region, and then that zone's machine is the one launched. A single machine's time and cost are not
    N machines', so without such a row the plan is refused rather than saved with them."""
    if nodes == 1:
        return best, machine
    prefix = f"{_GROUP_PREFIX[engine]}/{nodes}x/"
    what = f"{nodes} × {machine['offering_id']} ({best['market']}) with {_ENGINE_WORDS[engine]}"
    if str(best["offering_id"]) == prefix + str(machine["offering_id"]):
        return best, machine
    frame = result.plans
    ids = frame["offering_id"].astype(str)
    if not ids.str.match(r"^(multi-node|hivemind)/").any():
        raise TrainwiseError(f"--nodes {nodes} needs the planner's prediction for {what}, and --single-machine ranked "
                             "no groups: drop --single-machine")
    same = ((frame["epochs"] == result.primary_epochs) & (frame["market"].astype(str) == str(best["market"]))
            & (frame["profile"].astype(str) == str(best["profile"])) & ids.str.startswith(prefix))
    groups = frame[same].sort_values("rank", na_position="last", kind="stable")
    exact = groups[groups["offering_id"].astype(str) == prefix + str(machine["offering_id"])]
    candidates = [(exact.iloc[0].to_dict(), machine)] if len(exact) else []
    if not candidates:
        for _, group in groups.iterrows():
            other = _catalog_machine(catalog, str(group["offering_id"])[len(prefix):])
            if other is not None and all(str(other.get(k)) == str(machine.get(k)) for k in _MACHINE_KEYS):
                candidates.append((group.to_dict(), other))
        candidates.sort(key=lambda pair: not bool(pair[0]["feasible"]))  # a feasible one first, else by rank
    if candidates:
        row, launched = candidates[0]
        if not bool(row["feasible"]):
            raise TrainwiseError(f"the planner's row for {what}, {row['offering_id']}, is excluded by "
                                 f"{row['excluded_by']}: relax that constraint, or save fewer --nodes")
        return row, launched
    accelerator = str(best.get("accelerator"))
    groups = groups.assign(_other=groups["accelerator"].astype(str) != accelerator,
                           _excluded=~groups["feasible"].astype(bool)).sort_values(
        ["_other", "_excluded", "rank"], na_position="last", kind="stable")
    named = ", ".join(str(i) for i in groups["offering_id"].head(3)) or "none"
    more = f" (+{len(groups) - 3} more)" if len(groups) > 3 else ""
    where = "each cloud region and accelerator" if engine == "ddp" else "each accelerator"
    raise TrainwiseError(f"the ranking has no row for {what}: the planner groups only the cheapest single-accelerator "
                         f"machine of {where}; its {nodes}-node {_ENGINE_WORDS[engine]} rows: {named}{more}: re-plan so "
                         "that one of those machines is the best (e.g. --region, --accelerator), or drop --nodes")


def default_engine(nodes: int, accelerator_count: float) -> str:
    return "ddp" if nodes > 1 or accelerator_count > 1 else "local"


def on_the_gpu(command: list[str], accelerator: str | None, count: float) -> tuple[list[str], str | None]:
    """The command of a trainwise reference workload (`-m trainwise.workloads.NAME`, whose --device defaults to cpu)
    with `--device cuda` when the plan puts it on GPUs and it names no device; else the command as it is. Without
    it a saved plan of the default workload trained on the CPU of the GPU machine it paid for."""
    reference = reference_workload_command(command)
    gpu = bool(accelerator) and count >= 1 and not str(accelerator).upper().startswith(("TPU", "TRAINIUM", "INFERENTIA"))
    if not (reference and gpu) or any(str(arg) == "--device" or str(arg).startswith("--device=") for arg in command):
        return list(command), None
    return [*command, "--device", "cuda"], "the reference workload trains on the GPUs: `--device cuda` added to its command"


def portable_command(command: list[str]) -> list[str]:
    """A command recorded for another machine: this interpreter's path becomes `python`."""
    if command and command[0] == sys.executable:
        return ["python", *command[1:]]
    return list(command)


URI_OPTIONS = (("dataset_uri", "--dataset-uri"), ("checkpoint_uri", "--checkpoint-uri"), ("model_uri", "--model-uri"),
               ("requirements", "--requirements"))


def check_plan_uris(**values: str | None) -> None:
    """The locations `plan --save` records (dataset_uri=, checkpoint_uri=, model_uri=, requirements=),
    checked by the rules the Plan document applies — before the planning, so that a bad one is one
    line at once rather than a validation error once the plan and its report are done."""
    for field, option in URI_OPTIONS:
        if values.get(field) is not None:
            safety.check_uri(values[field], option)
    unknown = set(values) - {field for field, _ in URI_OPTIONS}
    if unknown:
        raise TypeError(f"check_plan_uris() got unexpected keyword arguments {sorted(unknown)}")


def check_save_choices(*, engine: str | None, nodes: int, name: str | None, single_machine: bool) -> None:
    """--engine, --nodes and --name of `plan --save`, checked before the planning as
    build_plan_document checks them after it."""
    if nodes < 1:
        raise TrainwiseError(f"--nodes must be at least 1 (got {nodes})")
    if engine is not None and engine not in ENGINES:
        raise TrainwiseError(f"--engine {engine}: use one of {', '.join(ENGINES)}")
    if engine == "local" and nodes > 1:
        raise TrainwiseError(f"--engine local runs one process on one machine; --nodes {nodes} needs --engine ddp or "
                             "hivemind (or drop --nodes)")
    if nodes > 1 and single_machine:
        raise TrainwiseError(f"--nodes {nodes} takes its prediction from the planner's {nodes} × machine rows, which "
                             "--single-machine does not rank: drop --single-machine")
    if name is not None:
        safety.check_name(name, "--name")


def build_plan_document(result: Any, catalog: Any, *, command: list[str], workload: str | None = None,
                        profile_path: str | None = None, name: str | None = None, engine: str | None = None,
                        nodes: int = 1, dataset_uri: str | None = None, checkpoint_uri: str | None = None,
                        model_uri: str | None = None, requirements: str | None = None,
                        target_batch_size: int | None = None, objective: str = "cheapest",
                        disk_size_gb: int | None = None) -> PlanDocument:
    """Freeze the best candidate of `result` (a `PlanResult`) at its primary epoch option."""
    if nodes < 1:
        raise TrainwiseError(f"--nodes must be at least 1 (got {nodes})")
    if engine is not None and engine not in ENGINES:
        raise TrainwiseError(f"--engine {engine}: use one of {', '.join(ENGINES)}")
    if not command:
        raise TrainwiseError("the plan needs the training command: add `-- python train.py ARGS`")
    for arg in command:
        if "\x00" in arg:
            raise TrainwiseError(f"training command argument {arg!r} contains a NUL byte: remove it")
    if name is not None:
        safety.check_name(name, "--name")
    best = result.best
    sky_names = _sky_accelerators(catalog)
    machine, group_nodes, group_engine = resolve_group(best, catalog)
    if group_nodes is not None:
        if nodes != 1 and nodes != group_nodes:
            raise TrainwiseError(f"the best plan is a group of {group_nodes} machines ({best['offering_id']}); --nodes "
                                 f"{nodes} contradicts it: drop --nodes, or re-plan with --single-machine")
        nodes = group_nodes
        engine = engine or group_engine
    count = float(machine.get("accelerator_count") or 0.0)
    if math.isnan(count):
        count = 0.0
    chosen_engine = engine or default_engine(nodes, count)
    if chosen_engine == "local" and nodes > 1:
        raise TrainwiseError(f"--engine local runs one process on one machine; --nodes {nodes} needs --engine ddp or "
                             "hivemind (or drop --nodes)")
    # The saved prediction is for what is launched: N machines' row, not the single machine's.
    row, launched = prediction_row(result, best, machine, nodes, chosen_engine, catalog)
    per_node = max(1, int(count)) if chosen_engine == "ddp" else 1
    if chosen_engine == "hivemind" and target_batch_size is None:
        target_batch_size = int(row["batch_size"]) * nodes * per_node
    spot = str(best["market"]) == "spot"
    if row is best and group_nodes is None:
        price = float(best["price_per_hour"])  # a single machine's own row (also this machine, user-priced)
    else:
        # Per machine, from the catalog: a group's row prices all of its machines.
        catalog_row = _catalog_machine(catalog, str(launched["offering_id"])) or {}
        machine_price = catalog_row.get("spot_price_per_hour" if spot else "price_per_hour")
        price = float(row["price_per_hour"]) / nodes if machine_price is None else float(machine_price)
    machine = launched
    offering = ChosenOffering(
        offering_id=str(machine["offering_id"]), cloud=str(machine["cloud"]), region=_text(machine.get("region")),
        zone=_text(machine.get("zone")), instance_type=_text(machine.get("instance_type")),
        accelerator=_text(machine.get("accelerator")), sky_accelerator=_text(sky_names.get(str(machine["offering_id"]))),
        accelerator_count=count, spot=spot, kind=_text(machine.get("kind")) or "cloud",
        price_per_hour=price, price_source=str(row["price_provenance"]))
    primary = result.primary
    # This machine's prediction even when constraints (e.g. --cloud) excluded it from the ranking: a
    # local run is judged against the prediction for the machine it ran on.
    every = result.plans[(result.plans["epochs"] == result.primary_epochs)]
    here_rows = every[every["time_source"].astype(str) == "this machine"].sort_values("wall_s")
    here = _prediction(here_rows.iloc[0].to_dict()) if len(here_rows) else None
    alternatives: list[Alternative] = []
    groups = primary.assign(_acc=primary["accelerator"].astype(object).where(primary["accelerator"].notna(), None))
    for (accelerator, acc_count), rows in groups.groupby(["_acc", "accelerator_count"], dropna=False, sort=True):
        if accelerator is None or (isinstance(accelerator, float) and math.isnan(accelerator)):
            continue
        fastest = rows.sort_values("training_s").iloc[0]
        alternatives.append(Alternative(
            accelerator=str(accelerator), sky_accelerator=_text(sky_names.get(str(fastest["offering_id"]))),
            accelerator_count=float(acc_count), instance_types=sorted({str(t) for t in rows["instance_type"].dropna()})[:20],
            training_s=float(fastest["training_s"]), time_source=str(fastest["time_provenance"])))
    profile_rows = {p["label"]: p for p in result.profiles}
    profile = profile_rows.get(str(best.get("profile")), {})
    job_name = name or safety.name_from(workload or (profile.get("workload") or "") or "trainwise-job")
    notes = []
    if row is not best:
        notes.append(f"{nodes}-node prediction: the planner's row {row['offering_id']}"
                     + ("" if launched is best or launched["offering_id"] == best["offering_id"] else
                        f" (the same {launched.get('instance_type')} in {launched.get('region')} as the best single "
                        f"machine {best['offering_id']}; the planner groups that zone)"))
    if chosen_engine == "hivemind":
        notes.append("engine hivemind keeps no checkpoints: a peer that rejoins loads the training state from the "
                     "other peers" + ("; --checkpoint-uri receives the run records and whatever the script saves to "
                                      "$TRAINWISE_CHECKPOINT_DIR" if checkpoint_uri else ""))
        if offering.spot:
            # SkyPilot's managed-job recovery cancels the job on every node and relaunches the cluster
            # (sky/jobs/recovery_strategy.py), so no surviving peer holds the state to rejoin.
            notes.append("spot Hivemind: SkyPilot recovers a preempted job by restarting all of its nodes, so the "
                         "run restarts from the beginning unless the script saves and reloads its own state under "
                         "$TRAINWISE_CHECKPOINT_DIR")
    elif offering.spot and not checkpoint_uri:
        notes.append("spot plan without --checkpoint-uri: a preempted run restarts from the beginning")
    command, device_note = on_the_gpu(command, offering.accelerator, count)
    if device_note:
        notes.append(device_note)
    try:
        return PlanDocument(
            created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"), name=job_name, offering=offering,
            nodes=nodes, engine=chosen_engine, processes_per_node=per_node, target_batch_size=target_batch_size,
            command=portable_command(command), workload=workload or profile.get("workload"),
            profile_label=str(best.get("profile")), profile_path=profile_path, profile_host=profile.get("host"),
            prediction=_prediction(row), here=here, alternatives=alternatives, dataset_uri=dataset_uri,
            checkpoint_uri=checkpoint_uri, model_uri=model_uri, requirements=requirements,
            disk_size_gb=disk_size_gb or 100, objective=objective, catalog=result.catalog_caption, notes=notes)
    except ValidationError as exc:  # what the checks above do not foresee is still one line
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise TrainwiseError(f"the plan cannot be saved: `{where}`: {str(first['msg']).removeprefix('Value error, ')}") from None
