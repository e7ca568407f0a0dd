"""The Profile: what one measured run of a training job tells us, as versioned JSON.

Times are seconds since the launcher started the process (`*_s`), durations are seconds, sizes are
bytes. Every number here is *measured* on the host named in `environment`; consumers that import a
profile from another machine say so (provenance lives with the number's consumer, e.g. a plan row).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError

from trainwise import __version__
from trainwise.agent.stop_rule import closure_converging_steps
from trainwise.core import stats
from trainwise.core.host_noise import HostNoise  # noqa: F401 - re-exported
from trainwise.core.profile import (PROFILE_SCHEMA_VERSION, DatasetShape, Environment,  # noqa: F401 - re-exported
                                    Epoch, FullRun, InitBreakdown, Iteration, Iterations, LevelProbe, Measurement, Memory,
                                    ModelShape, OptimizerStateSubnormals, OptimizerStateZeros, Profile, ScriptEpochs,
                                    ScriptIterations,
                                    SteadyState,
                                    ValidationPass, _Model)
from trainwise.core.workload import WorkloadCharacterisation  # noqa: F401 - re-exported
from trainwise.errors import TrainwiseError
from trainwise.profile._iteration_log import iteration_columns
from trainwise.profile.step_passes import step_passes


def script_epochs_of(profiles: Sequence[Profile]) -> ScriptEpochs | None:
    """The epoch count every profile's script sets for itself; None when one of them sets none or they
    differ (a batch-size sweep of one script agrees)."""
    found = {p.script_epochs.epochs: p.script_epochs for p in profiles if p.script_epochs is not None}
    if len(found) != 1 or any(p.script_epochs is None for p in profiles):
        return None
    return next(iter(found.values()))


def script_iterations_of(profiles: Sequence[Profile]) -> ScriptIterations | None:
    """The step budget every profile's script sets for itself (as script_epochs_of); None when one sets none
    or they differ."""
    found = {p.script_iterations.iterations: p.script_iterations for p in profiles if p.script_iterations is not None}
    if len(found) != 1 or any(p.script_iterations is None for p in profiles):
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
    if version == 1:  # a row per iteration: read as columns, the only difference
        data["schema_version"] = PROFILE_SCHEMA_VERSION
    elif version != PROFILE_SCHEMA_VERSION:
        raise TrainwiseError(
            f"profile {p} has schema version {version!r}; this trainwise {__version__} reads version "
            f"{PROFILE_SCHEMA_VERSION} (and 1): re-run `trainwise profile` with this version")
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
    an interval whose low end exceeds its high end, zero batches per epoch or a counted batch of 0 samples.
    Checked when a profile is read (a hand-edited or foreign file), not when one is recorded."""
    found = _first_huge_duration(profile.model_dump(mode="python"))
    if found is not None:
        return found, f"{found.rsplit('.', 1)[-1]} is over {MAX_SECONDS:g} s (31 years): not a measured time"
    dataset = profile.dataset
    if dataset.train_batches_per_epoch is not None and dataset.train_batches_per_epoch < 1:
        return "dataset.train_batches_per_epoch", "an epoch has at least 1 batch"
    # 0 is "not seen" where no iteration counted a sample (a loop without a DataLoader slices its own
    # tensors): only a profile whose iterations did count samples cannot have a batch of none
    if dataset.global_batch_size < 1 and any(n > 0 for n in profile.iterations.column("samples")):
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
            if _all_scalars(item):  # a column: one pass, nothing to descend into
                if path.rsplit(".", 1)[-1].endswith("_s"):
                    huge = next((i for i, child in enumerate(item) if type(child) in (int, float) and
                                 abs(child) > MAX_SECONDS), None)
                    if huge is not None:
                        return f"{path}.{huge}" if path else str(huge)
                continue
            for i, child in enumerate(item):
                child_path = f"{path}.{i}" if path else str(i)
                if isinstance(child, (int, float)) and not isinstance(child, bool) and \
                        path.rsplit(".", 1)[-1].endswith("_s") and abs(child) > MAX_SECONDS:
                    return child_path
                stack.append((child, child_path))
    return None




_SCALARS = (int, float, bool, str, type(None))


def _all_scalars(items: list | tuple) -> bool:
    return all(type(item) in _SCALARS for item in items)


def _first_non_finite(value: Any, where: str = "") -> tuple[str, float] | None:
    """(dotted path, value) of the first inf or NaN in parsed JSON, paths as pydantic writes them."""
    if isinstance(value, float) and not math.isfinite(value):
        return where, value
    if isinstance(value, list) and _all_scalars(value):  # a column: one pass, no recursion per value
        bad = next((i for i, item in enumerate(value) if type(item) is float and not math.isfinite(item)), None)
        return None if bad is None else (f"{where}.{bad}" if where else str(bad), value[bad])
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


def as_iterations(iterations: Iterations | Sequence[Iteration]) -> Iterations:
    """`iterations` as columns (a list of rows converted once)."""
    return iterations if isinstance(iterations, Iterations) else Iterations.of_rows(list(iterations))


def closure_warmup(iterations: Iterations | Sequence[Iteration]) -> int:
    """Leading iterations of a closure optimizer's converging phase (`stop_rule.closure_converging_steps` of their
    backward passes). They are measured as they were, not extrapolated: the run's later steps look like the latest
    ones."""
    return closure_converging_steps(list(as_iterations(iterations).column("backward_passes")))


def one_iteration_epochs(iterations: Iterations | Sequence[Iteration]) -> bool:
    """Every epoch seen held one iteration (full-batch training: one step, then an evaluation)."""
    per_epoch = Counter(as_iterations(iterations).column("epoch"))
    return len(per_epoch) >= 2 and set(per_epoch.values()) == {1}


def steady_positions(iterations: Iterations | Sequence[Iteration]) -> tuple[int, list[int]]:
    """(warm-up iterations, positions of the steady iterations): epoch-1 iterations after warm-up plus later
    epochs' iterations except each later epoch's first (which carries the epoch-start cost, reported
    separately). When every epoch is one iteration, the epochs' iterations are one sequence: an epoch's start
    cost is then inside its only iteration and cannot be told apart from it. Read from columns: a --full
    profile holds hundreds of thousands of iterations."""
    its = as_iterations(iterations)
    n = len(its)
    if not n:
        raise TrainwiseError("the job recorded no training iteration: nothing to estimate")
    walls, passes = its.column("wall_s"), its.column("backward_passes")
    if one_iteration_epochs(its):
        warmup = max(stats.detect_warmup(walls), closure_converging_steps(list(passes)))
        return warmup, list(range(warmup, n)) or [n - 1]
    by_epoch: dict[int, list[int]] = {}
    for position, epoch in enumerate(its.column("epoch")):
        by_epoch.setdefault(epoch, []).append(position)
    first_epoch = its.column("epoch")[0]
    epoch1 = by_epoch[first_epoch]
    warmup = stats.detect_warmup([walls[i] for i in epoch1]) if len(epoch1) > 1 else 0
    warmup = max(warmup, closure_converging_steps([passes[i] for i in epoch1]))
    steady = epoch1[warmup:]
    for epoch in sorted(e for e in by_epoch if e != first_epoch):
        steady.extend(by_epoch[epoch][1:])
    return warmup, steady or [n - 1]


def steady_iterations(iterations: Iterations | Sequence[Iteration]) -> tuple[int, list[Iteration]]:
    """`steady_positions` as rows."""
    its = as_iterations(iterations)
    warmup, positions = steady_positions(its)
    return warmup, [its[i] for i in positions]


def steady_state_of(iterations: Iterations | Sequence[Iteration], stop_reason: str,
                    stability: dict[str, Any]) -> SteadyState:
    """Steady-state iteration time over `steady_positions`, with its spread."""
    its = as_iterations(iterations)
    warmup, steady = steady_positions(its)
    walls, waits, epochs = its.column("wall_s"), its.column("data_wait_s"), its.column("epoch")
    iteration = Measurement.of([walls[i] for i in steady])
    epoch_start_excess: list[float] = []
    if not one_iteration_epochs(its):
        firsts: dict[int, int] = {}
        for position, epoch in enumerate(epochs):
            firsts.setdefault(epoch, position)
        epoch_start_excess = [walls[firsts[e]] - iteration.mean_s for e in sorted(firsts) if e != epochs[0]]
    return SteadyState(
        warmup_iterations=warmup,
        iteration=iteration,
        data_wait=Measurement.of([waits[i] for i in steady]),
        compute=Measurement.of([max(0.0, walls[i] - waits[i]) for i in steady]),
        first_iteration_s=walls[0],
        epoch_start_extra_s=statistics.median(epoch_start_excess) if epoch_start_excess else None,
        stop_reason=stop_reason,
        stabilised_after=stability.get("iterations") if stability.get("stable") else None,
        relative_drift=stability.get("relative_drift") if stability else None,
        sampling_stopped_by=stability.get("reason"),
    )


def iterations_from_raw(raw_iterations: Any) -> Iterations:
    """The recorder's iterations (start/end times; columns or rows) as the profile's columns."""
    raw = iteration_columns(raw_iterations)
    walls = [max(0.0, end - start) for start, end in zip(raw["start_s"], raw["end_s"])]
    return Iterations.of_columns({
        "epoch": raw["epoch"], "start_s": raw["start_s"], "wall_s": walls,
        "data_wait_s": [max(0.0, w) for w in raw["data_wait_s"]],
        "samples": [int(n or 0) for n in raw["samples"]], "batches": [int(n or 0) for n in raw["batches"]],
        "backward_passes": raw["backward_passes"]})


def profile_from_raw(raw: dict[str, Any], *, command: list[str], process_wall_s: float, exit_code: int,
                     workload: str | None = None) -> Profile:
    iterations = iterations_from_raw(raw["iterations"])
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
            data_wait_s=max(0.0, sum(v["data_wait_s"])), loader=v.get("loader"), continued=bool(v.get("continues"))))
    epochs = [Epoch(index=e["index"], start_s=e["start_s"], end_s=e["end_s"], iterations=e["iterations"],
                    truncated=e["truncated"], batches_per_epoch=e.get("batches_per_epoch")) for e in raw["epochs"]]
    train_info = raw["loaders"].get("train", {})
    val_info = raw["loaders"].get("val", {})
    with_batches = [n for n in iterations.column("batches") if n > 0]
    batches_per_iteration = statistics.median(with_batches) if with_batches else 1.0
    samples = [n for n in iterations.column("samples") if n > 0]
    global_batch = int(statistics.median(samples)) if samples else 0
    notes = list(raw.get("notes", []))
    characterisation = raw.get("characterisation")
    traced_batch = (characterisation or {}).get("per_device_batch")
    passes = step_passes(raw, iterations, bool(with_batches))
    if characterisation is not None and passes is not None:
        characterisation = WorkloadCharacterisation.model_validate(characterisation).with_passes(
            passes.passes, passes.forwards_per_backward, passes.new_samples)
        notes.append(f"{passes.passes} passes of the traced batch {traced_batch} per optimizer step ({passes.source}): "
                     "the device model runs them all")
    for other in raw.get("other_models") or [] if characterisation is not None else []:
        characterisation = WorkloadCharacterisation.model_validate(characterisation).with_other_model(
            WorkloadCharacterisation.model_validate(other["fields"]), other["calls"])
    if not global_batch and not with_batches and isinstance(traced_batch, int) and traced_batch > 0:
        # No DataLoader counted the samples: the batch dimension of the model's traced input says it, times the
        # model's training calls per step.
        calls = passes.passes if passes is not None and passes.new_samples else 1
        global_batch = traced_batch * calls
        notes.append(f"samples per iteration: {global_batch}, the batch dimension of the model's traced input "
                     + (f"({traced_batch}) times its {calls} training calls per optimizer step" if calls > 1 else
                        "(the closure evaluates that batch again)" if passes is not None else
                        "(the model was called once per optimizer step)" if raw.get("forward_passes") else
                        "(a loop that feeds the model several inputs per step does more)") + " (no DataLoader counted them)")
    val_batch = None
    if validations and validations[0].batches_timed and validations[0].samples > 0:  # 0: no DataLoader counted them
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
        full_run=full_run, notes=notes,
        script_epochs=ScriptEpochs(**raw["script_epochs"]) if raw.get("script_epochs") else None,
        script_iterations=ScriptIterations(**raw["script_iterations"]) if raw.get("script_iterations") else None,
        characterisation=characterisation, optimizer_state_zeros=raw.get("optimizer_state_zeros"),
        optimizer_state_subnormals=raw.get("optimizer_state_subnormals"),
        epoch_loop_exits=raw.get("epoch_loop_exits"),
        level_probes=[LevelProbe(**probe) for probe in raw.get("level_probes", [])],
        sample_cpu_steal=raw.get("sample_cpu_steal"),
        torch_compile=raw.get("torch_compile"),
        accelerator_query=raw.get("accelerator_query"),
    )
