"""The Profile: what one measured run of a training job tells us, as versioned JSON.

Times are seconds since the launcher started the process (`*_s`), durations are seconds, sizes are
bytes. Every number here is *measured* on the host named in `environment`; consumers that import a
profile from another machine say so (provenance lives with the number's consumer, e.g. a plan row).
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainwise import __version__
from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.predict.characterise import WorkloadCharacterisation
from trainwise.profile import stats
from trainwise.profile.host_noise import HostNoise

PROFILE_SCHEMA_VERSION = 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Measurement(_Model):
    """A duration with its spread (mean and its 95 % interval, median, IQR, extremes)."""

    n: int = Field(ge=0)
    mean_s: float = Field(ge=0)
    median_s: float = Field(ge=0)
    std_s: float = Field(ge=0)
    iqr_s: float = Field(ge=0)
    min_s: float = Field(ge=0)
    max_s: float = Field(ge=0)
    ci95_low_s: float = Field(ge=0)
    ci95_high_s: float = Field(ge=0)

    @classmethod
    def of(cls, times_s: list[float]) -> "Measurement":
        if not times_s:
            return cls(n=0, mean_s=0, median_s=0, std_s=0, iqr_s=0, min_s=0, max_s=0, ci95_low_s=0, ci95_high_s=0)
        s = stats.summarise([max(0.0, t) for t in times_s])
        high = s.ci95_high_s if s.ci95_high_s != float("inf") else s.mean_s * 10
        return cls(n=s.n, mean_s=s.mean_s, median_s=s.median_s, std_s=s.std_s, iqr_s=s.iqr_s, min_s=s.min_s,
                   max_s=s.max_s, ci95_low_s=s.ci95_low_s, ci95_high_s=high)

    @property
    def relative_ci95_halfwidth(self) -> float:
        return (self.ci95_high_s - self.ci95_low_s) / 2 / self.mean_s if self.mean_s > 0 else 0.0


class Iteration(_Model):
    index: int = Field(ge=0)
    epoch: int = Field(ge=0)
    start_s: float
    wall_s: float = Field(ge=0)
    data_wait_s: float = Field(ge=0)
    compute_s: float = Field(ge=0, description="wall_s − data_wait_s: forward, backward, optimizer, Python")
    samples: int = Field(ge=0)
    batches: int = Field(ge=0)


class ValidationPass(_Model):
    epoch: int = Field(ge=0)
    start_s: float
    wall_s: float = Field(ge=0)
    batches_timed: int = Field(ge=0)
    batches_total: int | None = Field(default=None, ge=0, description="batches in a full pass, when the loader has a length")
    samples: int = Field(ge=0)
    truncated: bool
    batch_wall_s: list[float]
    data_wait_s: float = Field(ge=0)
    loader: int | None = Field(default=None, ge=0, description=(
        "which DataLoader the pass iterated, numbered in the order the script first iterated each (passes over one "
        "loader are alike: validation is modelled per loader); None when not known (a framework's validation loop)"))


class LevelProbe(_Model):
    """The host-noise probe timed beside the sampled steps: the host's speed level there."""

    where: Literal["before", "after"] = Field(description="right before the sampled steps (after iteration 1) or right after them")
    after_iteration: int = Field(ge=0)
    level_s: float = Field(gt=0, description="seconds per probe sample (host_noise.probe_level_s); higher is slower")


class Epoch(_Model):
    index: int = Field(ge=0)
    start_s: float
    end_s: float | None
    iterations: int = Field(ge=0)
    truncated: bool
    batches_per_epoch: int | None = None


class InitBreakdown(_Model):
    """T(Init): launch → first iteration start, split where the hooks could see it."""

    total_s: float = Field(ge=0)
    python_startup_s: float = Field(ge=0, description="launch → interpreter ready (trainwise bootstrap)")
    import_torch_s: float | None = Field(default=None, ge=0)
    before_torch_s: float | None = Field(default=None, ge=0, description="script code before `import torch` finished")
    model_build_s: float | None = Field(default=None, ge=0, description="first nn.Module built → first optimizer built")
    data_setup_s: float | None = Field(default=None, ge=0, description="first DataLoader built → next mark")
    optimizer_setup_s: float | None = Field(default=None, ge=0, description="building the first optimizer (torch's lazy imports)")
    other_s: float = Field(ge=0, description="the rest of the script's set-up")
    marks: dict[str, float]


class DatasetShape(_Model):
    n_train: int | None = Field(default=None, ge=0)
    n_val: int | None = Field(default=None, ge=0)
    train_batches_per_epoch: int | None = Field(default=None, ge=0)
    val_batches_per_pass: int | None = Field(default=None, ge=0)
    batches_per_iteration: float = Field(gt=0, description="> 1 with gradient accumulation")
    global_batch_size: int = Field(ge=0, description="samples per optimizer step, all batches of the step")
    val_batch_size: int | None = Field(default=None, ge=0)
    drop_last: bool = False
    num_workers: int = 0

    @property
    def iterations_per_epoch(self) -> int | None:
        if self.train_batches_per_epoch is None:
            return None
        return max(1, round(self.train_batches_per_epoch / self.batches_per_iteration))


class Memory(_Model):
    peak_rss_bytes: int = Field(ge=0)
    peak_device_bytes: int | None = Field(default=None, ge=0)


class ModelShape(_Model):
    parameters: int = Field(default=0, ge=0)
    trainable_parameters: int = Field(default=0, ge=0)
    gradient_bytes: int = Field(default=0, ge=0)
    device: str = "cpu"
    parameter_dtypes: list[str] = []
    optimizer: str | None = None


class Environment(_Model):
    python_version: str
    platform: str
    hostname: str
    cpu_model: str
    logical_cores: int | None
    torch_version: str | None
    torch_threads: int | None
    device: str
    device_name: str | None
    # Allocator variables the job ran with (MALLOC_*, GLIBC_TUNABLES, LD_PRELOAD): step time
    # depends on them, so a prediction holds for a launch with the same ones.
    allocator_env: dict[str, str] = Field(default_factory=dict)
    # Whether denormal floats were flushed to zero (trainwise.denormals): CPU step time depends on
    # it; None in profiles made before trainwise recorded it.
    flush_denormal: bool | None = None


class SteadyState(_Model):
    """Robust per-iteration time after warm-up, with its spread."""

    warmup_iterations: int = Field(ge=0)
    iteration: Measurement
    data_wait: Measurement
    compute: Measurement
    first_iteration_s: float = Field(ge=0, description="T(It1): the cold-start iteration")
    epoch_start_extra_s: float | None = Field(default=None, description="first iteration of a later epoch minus the steady mean")
    stop_reason: str
    stabilised_after: int | None = Field(default=None, description="epoch-1 iterations sampled when the estimate was judged stable")
    relative_drift: float | None = Field(default=None, description=(
        "relative gap between the medians of the steady sample's two halves; None when too few steady "
        "iterations were sampled to measure it"))
    sampling_stopped_by: str | None = Field(default=None, description=(
        "what ended epoch-1 sampling of a sampled profile: stable, max_iterations, time_budget (--max-seconds) "
        "or cost_budget (--epochs/--budget); None for --full and for profiles written before it was recorded"))

    @field_validator("relative_drift", mode="before")
    @classmethod
    def _unmeasured_drift_is_none(cls, value: Any) -> Any:
        # the stopping rule reports an unmeasurable drift as inf; JSON has no inf (it is written as null),
        # so keeping it would make a saved profile read back different from the one in memory
        return None if isinstance(value, float) and not math.isfinite(value) else value


class OptimizerStateZeros(_Model):
    """Zeros in the optimizer state the step takes a square root of (Adam's exp_avg_sq, RMSprop's
    square_avg, Adagrad's sum), counted when sampling stopped, and what a square root of a zero costs
    on this CPU: torch's CPU sqrt of a zero can cost an order of magnitude more than of a normal float
    (benchmarks/results/sqrt_zeros.json: 13.5x here), and an embedding's rows stay zero until a batch
    touches them, so such a job's steps get faster as training fills the state in, after a short
    profile has ended."""

    optimizer: str
    state: str = Field(description="the state entries counted (names joined by '+')")
    elements: int = Field(ge=0, description="CPU floating-point elements of those entries")
    zeros: int = Field(ge=0)
    sqrt_state_ns_per_element: float | None = Field(default=None, ge=0, description=(
        "torch.sqrt of the state as it was when sampling stopped, measured here (per element of a fused step: "
        "square_root_timed_in)"))
    sqrt_zero_ns_per_element: float | None = Field(default=None, ge=0, description="torch.sqrt of zeros, measured here")
    sqrt_normal_ns_per_element: float | None = Field(default=None, ge=0, description="torch.sqrt of ones, measured here")
    step_time_at_stake_s: float | None = Field(default=None, ge=0, description=(
        "elements x (state - normal) sqrt time: how much shorter each step gets once no zero is left (the "
        "speed-up still to come, at most); None when there were too few zeros to time"))
    steps: int | None = Field(default=None, ge=0, description="optimizer steps taken when `zeros` was counted")
    sparse_elements: int | None = Field(default=None, ge=0, description=(
        "elements of the state tensors that had zeros at the first count (an embedding's; dense layers fill in at once)"))
    square_root_timed_in: str | None = Field(default=None, description=(
        "how the sqrt_* costs were timed: 'torch.sqrt' (what Adam's, RMSprop's and Adagrad's for-each and "
        "single-tensor steps call) or 'fused step' (a copy of a fused optimizer's whole step: its kernel takes "
        "the square root itself); None in profiles before 2026-11-26"))
    trajectory: list[tuple[int, int]] = Field(default_factory=list, description=(
        "(optimizer steps, zeros) counted during the run after steps about 1.5x apart: how fast training fills the "
        "state in (trainwise.predict.state_zeros fits it)"))

    @property
    def zero_fraction(self) -> float:
        return self.zeros / self.elements if self.elements else 0.0


class ScriptEpochs(_Model):
    """The epoch count the profiled script sets for itself (its argparse `--epochs`, Keras
    `fit(epochs=)`, Lightning `Trainer(max_epochs=)`, HF `num_train_epochs`): the N_ep of the run the
    user launches, which `predict` and `plan` take when not told another."""

    epochs: int = Field(ge=1)
    source: str = Field(description="where it was read, e.g. \"the script's argparse argument epochs=30\"")


class FullRun(_Model):
    """Recorded only with `--full`: the real totals the prediction is judged against."""

    training_end_s: float = Field(ge=0, description="launch → end of the last iteration or validation pass")
    epochs_completed: int = Field(ge=0)


class Profile(_Model):
    schema_version: Literal[1] = PROFILE_SCHEMA_VERSION
    trainwise_version: str = __version__
    created_at: str
    workload: str | None = None
    command: list[str]
    mode: Literal["sampled", "full"]
    stop_reason: str
    process_wall_s: float = Field(ge=0, description="launch → process exit, as the launcher saw it")
    exit_code: int
    environment: Environment
    init: InitBreakdown
    iterations: list[Iteration]
    validations: list[ValidationPass]
    epochs: list[Epoch]
    dataset: DatasetShape
    memory: Memory
    model: ModelShape
    steady_state: SteadyState
    full_run: FullRun | None = None
    # One training step traced on the meta device after sampling (per-operator FLOPs/bytes,
    # parameters, memory): what the device model predicts other accelerators from. None when the
    # model could not be traced or `--no-characterise` was given.
    characterisation: WorkloadCharacterisation | None = None
    # None when the optimizer keeps no such state, or in profiles made before trainwise counted it
    optimizer_state_zeros: OptimizerStateZeros | None = None
    # This host's speed wander (`trainwise host-noise`), attached when it was measured on this host:
    # the estimator widens its band by it. None when never measured here.
    host_noise: HostNoise | None = None
    # None when the script's epoch count could not be read (or in profiles made before trainwise read it)
    script_epochs: ScriptEpochs | None = None
    # The host's speed level beside the sampled steps (sampled profiles on CPU; empty otherwise, or when
    # --level-probe-seconds 0): with host_noise's mean level, the estimator's level correction
    level_probes: list[LevelProbe] = []
    notes: list[str] = []

    # ---- persistence ----
    def to_json(self) -> str:
        """The profile as JSON: NaN/Infinity refused with the field named, and command arguments that
        are not UTF-8 (a path with a byte such as 0xff) kept as \\udcXX escapes that read back as the
        same bytes, never a serialisation error after the training ran."""
        from trainwise.userfiles import json_text

        return json_text(self.model_dump(mode="python"), "the profile")

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, self.to_json())


def script_epochs_of(profiles: Sequence[Profile]) -> ScriptEpochs | None:
    """The epoch count every profile's script sets for itself; None when one of them sets none or they
    differ (a batch-size sweep of one script agrees)."""
    found = {p.script_epochs.epochs: p.script_epochs for p in profiles if p.script_epochs is not None}
    if len(found) != 1 or any(p.script_epochs is None for p in profiles):
        return None
    return next(iter(found.values()))


def script_epochs_disagreement(profiles: Sequence[Profile]) -> str | None:
    """Why script_epochs_of gave None although some profile read its script's count (they differ, or some
    read none), in words; None when no profile read one or they agree."""
    counts = sorted({p.script_epochs.epochs for p in profiles if p.script_epochs is not None})
    unread = sum(1 for p in profiles if p.script_epochs is None)
    if not counts or (len(counts) == 1 and not unread):
        return None
    said = ", ".join(str(c) for c in counts)
    return (f"the profiles' scripts set {said} epochs" + (f" ({unread} set none that could be read)" if unread else "")
            + ": not one count to use")


def load_profile(path: str | Path) -> Profile:
    """Read a Profile JSON, with one-line errors for every way it can be wrong."""
    from trainwise.userfiles import UserFileError, load_json

    p = Path(path)
    try:
        # bounded size, UTF-8, depth and integer length; NaN/Infinity are read so the message below names the field
        data = load_json(p, "profile", allow_non_finite=True,
                         missing_hint=f"create it with `trainwise profile -o {p} -- python train.py`")
    except UserFileError as exc:
        if "not valid JSON" in str(exc):
            raise TrainwiseError(f"{exc}: re-run `trainwise profile` to recreate it") from None
        raise
    if not isinstance(data, dict) or "schema_version" not in data:
        raise TrainwiseError(f"profile {p} is not a trainwise profile (no schema_version): pass a file written by `trainwise profile`")
    # trainwise's other JSON outputs also carry a schema_version: name them, rather than call them a
    # malformed profile to re-record.
    if "offering" in data and "prediction" in data:
        raise TrainwiseError(f"{p} is a saved plan, not a profile: pass the profile it was made from "
                             f"({data.get('profile_path') or 'its profile_path'}), or launch it with `trainwise launch {p}`")
    if "world_size" in data and "ranks" in data:
        raise TrainwiseError(f"{p} is a `trainwise run` result, not a profile: profile the job with "
                             "`trainwise profile -o job.json -- python train.py` (or `--full` for a whole run)")
    version = data.get("schema_version")
    if version != PROFILE_SCHEMA_VERSION:
        raise TrainwiseError(
            f"profile {p} has schema version {version!r}; this trainwise {__version__} reads version "
            f"{PROFILE_SCHEMA_VERSION}: re-run `trainwise profile` with this version")
    # json reads Infinity and NaN, which no trainwise profile contains (it writes null): a hand-edited
    # inf would become an infinite prediction, a NaN a NaN one.
    bad = _first_non_finite(data)
    if bad is not None:
        where, value = bad
        raise TrainwiseError(f"profile {p} is malformed at `{where}`: {value} is not a finite number; "
                             "re-run `trainwise profile` to recreate it")
    try:
        profile = Profile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise TrainwiseError(f"profile {p} is malformed at `{where}`: {first['msg']}; re-run `trainwise profile` to recreate it") from None
    problem = _implausible(profile)
    if problem is not None:
        where, why = problem
        raise TrainwiseError(f"profile {p} is malformed at `{where}`: {why}; re-run `trainwise profile` to recreate it")
    return profile


# A duration over 10^9 s (31 years) is no measurement: it would turn predictions into inf.
MAX_SECONDS = 1e9


def _implausible(profile: Profile) -> tuple[str, str] | None:
    """(field, why) of the first value a measured profile cannot hold: a duration beyond MAX_SECONDS,
    an interval whose low end exceeds its high end, zero batches per epoch or a batch of 0 samples.
    Checked when a profile is read (a hand-edited or foreign file), not when one is recorded."""
    found = _first_huge_duration(profile.model_dump(mode="python"))
    if found is not None:
        return found, f"{found.rsplit('.', 1)[-1]} is over {MAX_SECONDS:g} s (31 years): not a measured time"
    dataset = profile.dataset
    if dataset.train_batches_per_epoch is not None and dataset.train_batches_per_epoch < 1:
        return "dataset.train_batches_per_epoch", "an epoch has at least 1 batch"
    if dataset.global_batch_size < 1:
        return "dataset.global_batch_size", "a batch has at least 1 sample"
    if dataset.val_batch_size is not None and dataset.val_batch_size < 1:
        return "dataset.val_batch_size", "a batch has at least 1 sample"
    steady = profile.steady_state
    for name in ("iteration", "compute", "data_wait"):
        measurement = getattr(steady, name, None)
        if isinstance(measurement, Measurement):
            if measurement.ci95_low_s > measurement.ci95_high_s:
                return f"steady_state.{name}.ci95_low_s", "an interval's low end exceeds its high end"
            if measurement.min_s > measurement.max_s:
                return f"steady_state.{name}.min_s", "min_s exceeds max_s"
    if profile.iterations and steady.iteration.n > 0 and steady.iteration.mean_s <= 0:
        return "steady_state.iteration.mean_s", "a training step takes more than 0 s"
    return None


def _first_huge_duration(value: Any, where: str = "") -> str | None:
    stack: list[tuple[Any, str]] = [(value, where)]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                if isinstance(child, (int, float)) and not isinstance(child, bool) and str(key).endswith("_s") \
                        and abs(child) > MAX_SECONDS:
                    return child_path
                stack.append((child, child_path))
        elif isinstance(item, (list, tuple)):
            for i, child in enumerate(item):
                child_path = f"{path}.{i}" if path else str(i)
                if isinstance(child, (int, float)) and not isinstance(child, bool) and \
                        path.rsplit(".", 1)[-1].endswith("_s") and abs(child) > MAX_SECONDS:
                    return child_path
                stack.append((child, child_path))
    return None


def _first_non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """(dotted path, value) of the first inf or NaN in parsed JSON, paths as pydantic writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _first_non_finite(item, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


# ---- building a Profile from the recorder's raw record --------------------------------------

def _init_breakdown(raw: dict[str, Any], first_iteration_start_s: float) -> InitBreakdown:
    marks = {k: float(v) for k, v in raw["marks"].items()}
    bootstrap = marks.get("bootstrap", 0.0)
    import_torch = None
    before_torch = None
    if "torch_import_start" in marks and "torch_imported" in marks:
        import_torch = max(0.0, marks["torch_imported"] - marks["torch_import_start"])
        before_torch = max(0.0, marks["torch_import_start"] - bootstrap)
    ordered = sorted((v, k) for k, v in marks.items() if v <= first_iteration_start_s)
    ordered.append((first_iteration_start_s, "first_iteration_start"))

    def segment_after(name: str) -> float | None:
        for position, (value, key) in enumerate(ordered[:-1]):
            if key == name:
                return max(0.0, ordered[position + 1][0] - value)
        return None

    model_build = None
    if "first_module_init" in marks and "first_optimizer_init" in marks:
        model_build = max(0.0, marks["first_optimizer_init"] - marks["first_module_init"])
        if "first_dataloader_init" in marks and marks["first_module_init"] < marks["first_dataloader_init"] < marks["first_optimizer_init"]:
            model_build = None  # data set-up interleaved with the model: not separable
    data_setup = segment_after("first_dataloader_init")
    optimizer_setup = None
    if "first_optimizer_init" in marks and "first_optimizer_ready" in marks:
        optimizer_setup = max(0.0, marks["first_optimizer_ready"] - marks["first_optimizer_init"])
    total = max(0.0, first_iteration_start_s)
    accounted = (bootstrap + (import_torch or 0) + (before_torch or 0) + (model_build or 0) + (data_setup or 0)
                 + (optimizer_setup or 0))
    return InitBreakdown(total_s=total, python_startup_s=max(0.0, bootstrap), import_torch_s=import_torch,
                         before_torch_s=before_torch, model_build_s=model_build, data_setup_s=data_setup,
                         optimizer_setup_s=optimizer_setup,
                         other_s=max(0.0, total - accounted), marks=marks)


def steady_iterations(iterations: list[Iteration]) -> tuple[int, list[Iteration]]:
    """(warm-up iterations, steady iterations): epoch-1 iterations after warm-up plus later epochs'
    iterations except each later epoch's first (which carries the epoch-start cost, reported separately)."""
    if not iterations:
        raise TrainwiseError("the job recorded no training iteration: nothing to estimate")
    first_epoch = iterations[0].epoch
    epoch1 = [it for it in iterations if it.epoch == first_epoch]
    warmup = stats.detect_warmup([it.wall_s for it in epoch1]) if len(epoch1) > 1 else 0
    steady: list[Iteration] = epoch1[warmup:]
    for epoch in sorted({it.epoch for it in iterations if it.epoch != first_epoch}):
        in_epoch = [it for it in iterations if it.epoch == epoch]
        steady.extend(in_epoch[1:])
    return warmup, steady or iterations[-1:]


def steady_state_of(iterations: list[Iteration], stop_reason: str, stability: dict[str, Any]) -> SteadyState:
    """Steady-state iteration time over `steady_iterations`, with its spread."""
    warmup, steady = steady_iterations(iterations)
    first_epoch = iterations[0].epoch
    epoch_start_excess: list[float] = []
    later_epochs = sorted({it.epoch for it in iterations if it.epoch != first_epoch})
    iteration = Measurement.of([it.wall_s for it in steady])
    for epoch in later_epochs:
        first = next(it for it in iterations if it.epoch == epoch)
        epoch_start_excess.append(first.wall_s - iteration.mean_s)
    return SteadyState(
        warmup_iterations=warmup,
        iteration=iteration,
        data_wait=Measurement.of([it.data_wait_s for it in steady]),
        compute=Measurement.of([it.compute_s for it in steady]),
        first_iteration_s=iterations[0].wall_s,
        epoch_start_extra_s=statistics.median(epoch_start_excess) if epoch_start_excess else None,
        stop_reason=stop_reason,
        stabilised_after=stability.get("iterations") if stability.get("stable") else None,
        relative_drift=stability.get("relative_drift") if stability else None,
        sampling_stopped_by=stability.get("reason"),
    )


def profile_from_raw(raw: dict[str, Any], *, command: list[str], process_wall_s: float, exit_code: int,
                     workload: str | None = None) -> Profile:
    iterations = [
        Iteration(index=i, epoch=it["epoch"], start_s=it["start_s"], wall_s=max(0.0, it["end_s"] - it["start_s"]),
                  data_wait_s=max(0.0, it["data_wait_s"]),
                  compute_s=max(0.0, it["end_s"] - it["start_s"] - it["data_wait_s"]),
                  samples=int(it["samples"] or 0), batches=int(it["batches"] or 0))
        for i, it in enumerate(raw["iterations"])
    ]
    if not iterations:
        raise TrainwiseError("the job recorded no training iteration")
    validations = []
    for v in raw["validations"]:
        starts = list(v["batch_starts_s"])
        end = v["end_s"] if v["end_s"] is not None else (starts[-1] if starts else v["start_s"])
        bounds = starts + [end]
        validations.append(ValidationPass(
            epoch=v["epoch"], start_s=v["start_s"], wall_s=max(0.0, end - v["start_s"]),
            batches_timed=len(starts), batches_total=v.get("batches_total"), samples=int(v["samples"]),
            truncated=bool(v["truncated"]), batch_wall_s=[max(0.0, b - a) for a, b in zip(bounds, bounds[1:])],
            data_wait_s=max(0.0, sum(v["data_wait_s"])), loader=v.get("loader")))
    epochs = [Epoch(index=e["index"], start_s=e["start_s"], end_s=e["end_s"], iterations=e["iterations"],
                    truncated=e["truncated"], batches_per_epoch=e.get("batches_per_epoch")) for e in raw["epochs"]]
    train_info = raw["loaders"].get("train", {})
    val_info = raw["loaders"].get("val", {})
    with_batches = [it for it in iterations if it.batches > 0]
    batches_per_iteration = statistics.median([it.batches for it in with_batches]) if with_batches else 1.0
    samples = [it.samples for it in iterations if it.samples > 0]
    global_batch = int(statistics.median(samples)) if samples else 0
    val_batch = None
    if validations and validations[0].batches_timed:
        val_batch = round(validations[0].samples / validations[0].batches_timed)
    dataset = DatasetShape(
        n_train=train_info.get("dataset_size"), n_val=val_info.get("dataset_size"),
        train_batches_per_epoch=train_info.get("batches_per_pass"), val_batches_per_pass=val_info.get("batches_per_pass"),
        batches_per_iteration=float(batches_per_iteration), global_batch_size=global_batch, val_batch_size=val_batch,
        drop_last=bool(train_info.get("drop_last", False)), num_workers=int(train_info.get("num_workers", 0)))
    first_start = iterations[0].start_s
    full_run = None
    if raw["mode"] == "full" and raw.get("training_end_s") is not None:
        complete_epochs = sum(1 for e in epochs if e.end_s is not None and not e.truncated)
        full_run = FullRun(training_end_s=raw["training_end_s"], epochs_completed=complete_epochs)
    return Profile(
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        workload=workload, command=list(command), mode=raw["mode"], stop_reason=raw["stop_reason"],
        process_wall_s=max(0.0, process_wall_s), exit_code=exit_code,
        environment=Environment(**raw["environment"]), init=_init_breakdown(raw, first_start),
        iterations=iterations, validations=validations, epochs=epochs, dataset=dataset,
        memory=Memory(**raw["memory"]), model=ModelShape(**raw["model"]) if raw["model"] else ModelShape(),
        steady_state=steady_state_of(iterations, raw["stop_reason"], raw.get("stability") or {}),
        full_run=full_run, notes=list(raw.get("notes", [])),
        script_epochs=ScriptEpochs(**raw["script_epochs"]) if raw.get("script_epochs") else None,
        characterisation=raw.get("characterisation"), optimizer_state_zeros=raw.get("optimizer_state_zeros"),
        level_probes=[LevelProbe(**probe) for probe in raw.get("level_probes", [])],
    )
