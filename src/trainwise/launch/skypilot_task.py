"""A Plan as a SkyPilot task: the YAML, its validation, and trainwise's time estimate for SkyPilot.

`task_config(plan)` builds the task as a plain dict (SkyPilot's YAML schema): resources (cloud,
region, instance type and/or accelerators, `use_spot`, disk), `num_nodes`, `file_mounts` (dataset
copied in, checkpoint and model buckets mounted read-write so they outlive the cluster), `envs`
(where the job finds them; never a credential), `setup` (the user's requirements and trainwise) and
`run` (the user's command under `trainwise run`, with SkyPilot's node-rank environment for several
nodes). Spot plans get `job_recovery` and are launched as a SkyPilot managed job.

Two validators: `validate_with_skypilot` — SkyPilot's own loader and resource validation
(`sky.Task.from_yaml_config` + `Task.validate()`, which checks instance types, regions and
accelerators against SkyPilot's catalog) when the `skypilot` package is installed; and
`validate_packaged` — the packaged schema (pydantic, the subset of SkyPilot's schema trainwise
writes) plus the offering checked against trainwise's own catalog snapshot, used when it is not.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import io
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainwise.errors import TrainwiseError
from trainwise.launch import safety
from trainwise.launch.package import WHEEL_MOUNT_DIR, trainwise_package
from trainwise.launch.plan_document import PlanDocument
from trainwise.launch.run_command import HEAD_IDENTITY_PATH, HEAD_IP_LINE, HeadIdentity, initial_peers_lines, run_argv

DATA_DIR = "/trainwise/data"
CHECKPOINT_DIR = "/trainwise/checkpoints"
MODEL_DIR = "/trainwise/model"
REQUIREMENTS_PATH = "/trainwise/requirements.txt"
MAX_RESTARTS_ON_ERRORS = 3
# AWS catalog zones are zone *ids* (use1-az1) that SkyPilot maps per account; only GCP zones are names.
_ZONE_NAMED_CLOUDS = ("gcp",)


# ------------------------------------------------------------------------------ packaged schema


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobRecoverySpec(_Spec):
    strategy: Literal["FAILOVER", "EAGER_NEXT_REGION"]
    max_restarts_on_errors: int = Field(ge=0)


class ResourcesSpec(_Spec):
    cloud: str
    region: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    accelerators: dict[str, float] | None = None
    use_spot: bool = False
    disk_size: int = Field(ge=10)
    job_recovery: JobRecoverySpec | None = None

    @field_validator("accelerators")
    @classmethod
    def _one_accelerator(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is not None and (len(value) != 1 or any(v <= 0 for v in value.values())):
            raise ValueError("accelerators must name exactly one accelerator with a positive count")
        return value


class MountSpec(_Spec):
    source: str
    mode: Literal["MOUNT", "COPY", "MOUNT_CACHED"]


class TaskSpec(_Spec):
    """The part of SkyPilot's task schema (sky/utils/schemas.py, skypilot 0.14) trainwise writes."""

    name: str
    workdir: str | None = None
    num_nodes: int = Field(ge=1)
    resources: ResourcesSpec
    envs: dict[str, str] = {}
    file_mounts: dict[str, str | MountSpec] = {}
    setup: str
    run: str

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not safety.NAME_PATTERN.match(value):
            raise ValueError(f"task name {value!r} is not a lower-case DNS label")
        return value

    @field_validator("envs")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", key):
                raise ValueError(f"environment variable name {key!r} is not valid")
        return value

    @field_validator("file_mounts")
    @classmethod
    def _absolute(cls, value: dict[str, Any]) -> dict[str, Any]:
        for key in value:
            if not key.startswith("/") and not key.startswith("~/"):
                raise ValueError(f"file mount destination {key!r} must be an absolute path")
        return value


# ------------------------------------------------------------------------------ building


def _accelerators(plan: PlanDocument) -> dict[str, float] | None:
    offering = plan.offering
    name = offering.sky_accelerator or offering.accelerator
    if not name or offering.accelerator_count <= 0:
        return None
    count = offering.accelerator_count
    return {name: int(count) if float(count).is_integer() else count}


def _is_tpu(plan: PlanDocument) -> bool:
    name = (plan.offering.sky_accelerator or plan.offering.accelerator or "").lower()
    return name.startswith("tpu")


def resources_config(plan: PlanDocument) -> dict[str, Any]:
    offering = plan.offering
    if not offering.is_cloud:
        raise TrainwiseError(f"the plan's offering {offering.offering_id} is not a cloud machine: run it here with "
                             "`trainwise launch PLAN --backend local`, or re-plan with --cloud aws,gcp")
    resources: dict[str, Any] = {"cloud": offering.cloud}
    if offering.region:
        resources["region"] = offering.region
    if offering.zone and offering.cloud in _ZONE_NAMED_CLOUDS:
        resources["zone"] = offering.zone
    accelerators = _accelerators(plan)
    if offering.instance_type and not _is_tpu(plan):
        resources["instance_type"] = offering.instance_type
    if accelerators is not None:
        if _is_tpu(plan):
            accelerators = {offering.sky_accelerator or offering.instance_type or "": 1}
        resources["accelerators"] = accelerators
    resources["use_spot"] = offering.spot
    resources["disk_size"] = plan.disk_size_gb
    if offering.spot:
        # SkyPilot's managed-job recovery: relaunch on preemption (FAILOVER tries other zones/regions),
        # and restart a few times on user-code errors before giving up.
        resources["job_recovery"] = {"strategy": "FAILOVER", "max_restarts_on_errors": MAX_RESTARTS_ON_ERRORS}
    return resources


def _mounts(plan: PlanDocument) -> tuple[dict[str, Any], dict[str, str]]:
    mounts: dict[str, Any] = {}
    envs: dict[str, str] = {}
    if plan.dataset_uri:
        uri = safety.check_uri(plan.dataset_uri, "dataset URI")
        # A bucket is copied onto the node's disk (training reads it every epoch); a local path is
        # uploaded by SkyPilot.
        mounts[DATA_DIR] = {"source": uri, "mode": "COPY"} if safety.is_bucket_uri(uri) else uri
        envs["TRAINWISE_DATA_DIR"] = DATA_DIR
    if plan.checkpoint_uri:
        # Mounted for every engine: it also receives the nodes' run records (`--output`), and the
        # script may save there itself ($TRAINWISE_CHECKPOINT_DIR). Only the local and DDP engines
        # are given it as --checkpoint-dir (run_command.run_argv).
        uri = safety.check_uri(plan.checkpoint_uri, "checkpoint URI", bucket_only=True)
        mounts[CHECKPOINT_DIR] = {"source": uri, "mode": "MOUNT"}
        envs["TRAINWISE_CHECKPOINT_DIR"] = CHECKPOINT_DIR
    elif plan.offering.spot and plan.engine != "hivemind":
        # Hivemind does not resume from checkpoints (a rejoining peer loads the state from the
        # others), so a bucket would not make its spot run resumable; the plan's notes say what a
        # preemption costs it instead (plan_document.build_plan_document).
        raise TrainwiseError("a spot plan needs a checkpoint bucket so a preempted run resumes: re-plan with "
                             "--checkpoint-uri s3://BUCKET/PATH (or gs://...)")
    if plan.model_uri:
        uri = safety.check_uri(plan.model_uri, "model URI", bucket_only=True)
        mounts[MODEL_DIR] = {"source": uri, "mode": "MOUNT"}
        envs["TRAINWISE_MODEL_DIR"] = MODEL_DIR
    if plan.requirements:
        mounts[REQUIREMENTS_PATH] = safety.check_uri(plan.requirements, "requirements file")
    return mounts, envs


def run_records_dir(plan: PlanDocument) -> str:
    """Where the nodes write their run records: a mounted bucket when the plan has one (the checkpoint
    bucket, else the model bucket), so they outlive the cluster; /tmp on the node otherwise."""
    if plan.checkpoint_uri:
        return CHECKPOINT_DIR
    if plan.model_uri:
        return MODEL_DIR
    return "/tmp"


def keeps_nothing(plan: PlanDocument) -> bool:
    """True when nothing of the run (the trained model, the run records) is written outside the
    cluster: no checkpoint bucket and no model bucket."""
    return not plan.checkpoint_uri and not plan.model_uri


def cluster_extras(plan: PlanDocument) -> tuple[str, ...]:
    """The trainwise extras the cluster needs beyond the core: the Hivemind engine, the reference workloads."""
    extras = ["hivemind"] if plan.engine == "hivemind" else []
    if any(arg.startswith("trainwise.workloads.") and arg != "trainwise.workloads.mnist_cnn" for arg in plan.command):
        extras.append("workloads")
    return tuple(extras)


def setup_script(plan: PlanDocument, trainwise_spec: str) -> str:
    lines = ["set -euo pipefail"]
    if plan.requirements:
        lines.append(safety.quote_argv(["python", "-m", "pip", "install", "-r", REQUIREMENTS_PATH]))
    lines.append(safety.quote_argv(["python", "-m", "pip", "install", trainwise_spec]))
    return "\n".join(lines) + "\n"


def needs_head_identity(plan: PlanDocument) -> bool:
    """Hivemind across nodes: the head's peer id must be known before the nodes start."""
    return plan.engine == "hivemind" and plan.nodes > 1


def run_script(plan: PlanDocument, head_identity: HeadIdentity | None = None) -> str:
    multinode = plan.nodes > 1
    checkpoint = CHECKPOINT_DIR if plan.checkpoint_uri else None
    output_dir = run_records_dir(plan)
    output = safety.ShellExpr(f'{output_dir}/run-node"${{SKYPILOT_NODE_RANK}}".json')
    argv = run_argv(plan, command=plan.command, checkpoint_dir=checkpoint, output=output, multinode=multinode)
    lines = ["set -euo pipefail"]
    if multinode:
        lines.append(HEAD_IP_LINE)
        if needs_head_identity(plan):
            if head_identity is None:
                raise TrainwiseError("a multi-node Hivemind task needs the head peer's identity: launch it with "
                                     "`trainwise launch PLAN` (it writes one next to the task YAML)")
            lines += list(initial_peers_lines(head_identity))
    lines.append(safety.quote_argv(argv))
    return "\n".join(lines) + "\n"


def local_files_in_command(command: Sequence[str], cwd: Path | None = None) -> list[str]:
    """Arguments of the training command that name files under `cwd` by a relative path (a
    `train.py`, a config): the cluster only has them if SkyPilot syncs a workdir."""
    base = Path.cwd() if cwd is None else cwd
    found = []
    for arg in command:
        if not arg or arg.startswith("-") or "=" in arg or Path(arg).is_absolute():
            continue
        try:
            if (base / arg).is_file():
                found.append(arg)
        except (OSError, ValueError):  # a name too long or with odd characters for this filesystem
            continue
    return found


def task_config(plan: PlanDocument, *, workdir: str | None = None, trainwise_spec: str | None = None,
                head_identity: HeadIdentity | None = None) -> dict[str, Any]:
    """The SkyPilot task for `plan`, as the dict `yaml.safe_dump` writes. A multi-node Hivemind plan
    needs `head_identity` (`run_command.write_head_identity`): SkyPilot uploads the key (to every
    node; only the head's `trainwise run` uses it) and the other nodes dial its peer id."""
    for arg in plan.command:
        if "\x00" in arg:
            raise TrainwiseError(f"training command argument {arg!r} contains a NUL byte: remove it")
    package = trainwise_package(trainwise_spec)
    spec = package.requirement(cluster_extras(plan))
    safety.no_control_characters(spec, "trainwise package spec")
    mounts, envs = _mounts(plan)
    if package.wheel is not None:
        mounts[str(package.mount_path)] = str(package.wheel)  # SkyPilot uploads the wheel; setup installs it
    if needs_head_identity(plan) and head_identity is not None:
        mounts[HEAD_IDENTITY_PATH] = safety.no_control_characters(head_identity.local_path, "identity path")
    config: dict[str, Any] = {"name": safety.check_name(plan.name, "plan name")}
    if workdir is not None:
        config["workdir"] = safety.no_control_characters(workdir, "workdir")
    config.update({
        "num_nodes": plan.nodes,
        "resources": resources_config(plan),
        "envs": {"TRAINWISE_PLAN_NAME": plan.name, **envs},
        "file_mounts": mounts,
        "setup": setup_script(plan, spec),
        "run": run_script(plan, head_identity),
    })
    return config


class _TaskDumper(yaml.SafeDumper):
    """yaml.SafeDumper that writes multi-line scripts as `|` blocks (readable `setup`/`run`); PyYAML
    falls back to a quoted scalar whenever a block cannot represent the text exactly."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if "\n" in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_TaskDumper.add_representer(str, _represent_str)


def dump_yaml(config: dict[str, Any]) -> str:
    text = yaml.dump(config, Dumper=_TaskDumper, sort_keys=False, default_flow_style=False, allow_unicode=False)
    safety.assert_no_secrets([text], "the SkyPilot task")
    return text


# ------------------------------------------------------------------------------ validation


def skypilot_installed() -> bool:
    try:
        return importlib.util.find_spec("sky") is not None
    except (ImportError, ValueError):  # a broken or deliberately blocked install
        return False


_MOUNT_NAMES = {DATA_DIR: "the plan's dataset URI (--dataset-uri)", REQUIREMENTS_PATH: "the plan's requirements "
                "file (--requirements)", HEAD_IDENTITY_PATH: "the Hivemind head identity"}


def _check_local_sources(spec: TaskSpec) -> None:
    """What SkyPilot uploads from this machine must be here, as its own validation demands (a
    workdir that is a folder, file mount sources that exist): the packaged schema refuses the same."""
    if spec.workdir is not None:
        path = Path(spec.workdir).expanduser()
        if not path.is_dir():
            raise TrainwiseError(f"--code-dir {spec.workdir} {'is not a folder' if path.exists() else 'does not exist'}: "
                                 "give the folder with your training code (SkyPilot syncs it to the cluster)")
    for destination, mount in spec.file_mounts.items():
        source = mount if isinstance(mount, str) else mount.source
        if safety.scheme_of(source) == "file" and not Path(source).expanduser().exists():
            what = ("the trainwise wheel" if destination.startswith(WHEEL_MOUNT_DIR + "/")
                    else _MOUNT_NAMES.get(destination, f"the file mount for {destination}"))
            raise TrainwiseError(f"{what}: {source} does not exist here, and SkyPilot uploads it from this machine: "
                                 "fix the path (or run from the folder it is relative to)")


def validate_packaged(config: dict[str, Any], catalog: Any | None = None) -> TaskSpec:
    """The packaged schema check, plus the offering checked against trainwise's catalog snapshot."""
    try:
        spec = TaskSpec.model_validate(config)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TrainwiseError(f"the task does not match SkyPilot's schema at `{where}`: {first['msg']}") from None
    _check_local_sources(spec)
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog("current")
    frame = catalog.offerings
    rows = frame[frame["cloud"] == spec.resources.cloud]
    if rows.empty:
        raise TrainwiseError(f"cloud {spec.resources.cloud!r} is not in the {catalog.name} catalog: pick one of "
                             + ", ".join(sorted(frame["cloud"].dropna().unique())))
    if spec.resources.region is not None:
        rows = rows[rows["region"] == spec.resources.region]
        if rows.empty:
            raise TrainwiseError(f"region {spec.resources.region!r} has no {spec.resources.cloud} offering in the "
                                 f"{catalog.name} catalog")
    if spec.resources.instance_type is not None:
        rows = rows[rows["instance_type"] == spec.resources.instance_type]
        if rows.empty:
            raise TrainwiseError(f"instance type {spec.resources.instance_type!r} is not offered by {spec.resources.cloud} "
                                 f"in {spec.resources.region or 'any region'} ({catalog.name} catalog)")
    if spec.resources.accelerators is not None:
        (name, count), = spec.resources.accelerators.items()
        names = rows["source_accelerator"].fillna(rows["accelerator"]).astype(str).str.lower()
        match = rows[(names == name.lower()) | (rows["accelerator"].astype(str).str.lower() == name.lower())]
        where = f"{spec.resources.instance_type} in " if spec.resources.instance_type else ""
        if match.empty:
            raise TrainwiseError(f"accelerator {name!r} is not offered by {spec.resources.cloud} {where}"
                                 f"{spec.resources.region or 'any region'} ({catalog.name} catalog)")
        if not name.lower().startswith("tpu-") and not (match["accelerator_count"] == float(count)).any():
            have = ", ".join(f"{c:g}" for c in sorted(match["accelerator_count"].unique()))
            raise TrainwiseError(f"accelerator {name}:{count:g} is not offered by {spec.resources.cloud} {where}"
                                 f"{spec.resources.region or 'any region'} (counts offered: {have})")
    return spec


VALIDATORS = ("auto", "skypilot", "packaged")


def validate(config: dict[str, Any], validator: str = "auto", catalog: Any | None = None) -> str:
    """Validate with SkyPilot (`auto` when it is installed, or `skypilot`) and/or the packaged
    schema; returns how it was validated, in words."""
    if validator not in VALIDATORS:
        raise TrainwiseError(f"--validate {validator}: use one of {', '.join(VALIDATORS)}")
    validate_packaged(config, catalog)
    if validator == "packaged":
        return "validated against trainwise's packaged schema and catalog"
    if not skypilot_installed():
        if validator == "skypilot":
            raise TrainwiseError("--validate skypilot: SkyPilot is not installed: pip install 'skypilot==0.14.1'")
        return "validated against trainwise's packaged schema and catalog (SkyPilot is not installed)"
    validate_with_skypilot(config)
    return "validated by SkyPilot's own loader (sky.Task.from_yaml_config + Task.validate) and the packaged schema"


_SKYPILOT_OUTPUT_LOCK = threading.Lock()


@contextlib.contextmanager
def _skypilot_output_kept_back() -> Iterator[io.StringIO]:
    """Keep what SkyPilot prints while its loader runs in this process off the user's terminal;
    trainwise reports the outcome itself, in one line.

    SkyPilot code called outside its client SDK assumes it runs on the API server
    (`sky.utils.annotations.is_on_api_server`) and writes its spinners as encoded `<sky-payload>`
    lines for a client to decode — the `sky` CLI marks its own YAML loading as client-side for that
    reason. Its log lines (e.g. "Failed to fetch … catalog") go to handlers bound to the real stdout
    when `sky` was imported, which redirect_stdout does not reach, so the `sky` logger's handlers are
    swapped too. Serialised: redirect_stdout is process-wide and `trainwise sweep` validates in threads."""
    import logging

    from sky.utils import annotations

    buffer = io.StringIO()
    sky_logger = logging.getLogger("sky")
    with _SKYPILOT_OUTPUT_LOCK:
        saved = annotations.is_on_api_server, sky_logger.handlers[:], sky_logger.propagate
        annotations.is_on_api_server = False
        sky_logger.handlers = [logging.StreamHandler(buffer)]
        sky_logger.propagate = False
        try:
            with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer):
                yield buffer
        finally:
            annotations.is_on_api_server, sky_logger.handlers, sky_logger.propagate = saved


def validate_with_skypilot(config: dict[str, Any]) -> Any:
    """SkyPilot's own loader and resource validation; returns the `sky.Task`."""
    import sky

    try:
        with _skypilot_output_kept_back():
            task = sky.Task.from_yaml_config(copy.deepcopy(config))
            task.validate()
    except Exception as exc:  # SkyPilot raises ValueError, its own exceptions, requests errors
        message = " ".join(str(exc).split()) or exc.__class__.__name__
        if "Failed to resolve" in message or "Max retries exceeded" in message or exc.__class__.__name__ == "ConnectionError":
            # `launch --dry-run` and `sweep --dry-run` offline: the packaged validator needs no network.
            raise TrainwiseError("SkyPilot could not download its price catalog (no network?): connect once, put the "
                                 "catalog CSVs under ~/.sky/catalogs/, or validate offline with `--validate packaged` "
                                 f"(detail: {message[:160]})") from None
        raise TrainwiseError(f"SkyPilot rejected the task: {message[:400]}") from None
    return task


# ------------------------------------------------------------------------------ time estimator


def time_estimator(plan: PlanDocument) -> Callable[[Any], int]:
    """A function SkyPilot's optimizer calls with a `sky.Resources` (`Task.set_time_estimator`):
    trainwise's predicted training seconds for that accelerator configuration, from the plan's
    alternatives (the planner's prediction per accelerator and count)."""
    by_accelerator: dict[tuple[str, float], float] = {}
    by_instance: dict[str, float] = {}
    for alt in plan.alternatives:
        for name in {alt.accelerator, alt.sky_accelerator} - {None}:
            by_accelerator[(str(name).lower(), float(alt.accelerator_count))] = alt.training_s
        for instance in alt.instance_types:
            by_instance.setdefault(instance, alt.training_s)
    chosen = plan.offering
    for name in {chosen.accelerator, chosen.sky_accelerator} - {None}:
        by_accelerator[(str(name).lower(), float(chosen.accelerator_count))] = plan.prediction.training_s
    if chosen.instance_type:
        by_instance[chosen.instance_type] = plan.prediction.training_s

    def estimate(resources: Any) -> int:
        accelerators = getattr(resources, "accelerators", None) or {}
        for name, count in accelerators.items():
            seconds = by_accelerator.get((str(name).lower(), float(count)))
            if seconds is not None:
                return int(round(seconds))
        instance = getattr(resources, "instance_type", None)
        if instance in by_instance:
            return int(round(by_instance[instance]))
        raise ValueError(f"trainwise has no prediction for {resources}: re-plan with that accelerator in the catalog "
                         "filters (trainwise plan --accelerator NAME)")

    return estimate

