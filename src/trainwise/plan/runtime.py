"""Where a candidate's training time comes from: pluggable runtime sources.

A runtime source is a callable `source(offerings, context) -> DataFrame` that returns, for the
offerings it can predict, one row per (offering row, profile, epoch option) with the columns in
`RUNTIME_COLUMNS`: the predicted training seconds with their band, the breakdown, the provenance
string shown in every report, and the relative error. The planner asks the sources in order of
preference and keeps, for each (offering, batch size, epoch option), the first source's answer.

Sources today (issue "plan"):
- `measured_profiles`: a profile whose `environment.device_name` resolves (catalog alias table) to
  the offering's accelerator — measured here, or on another host and imported (`--profile`);
  single-device profiles price single-device offerings only (scaling to N devices is the device
  model's job);
- `this_machine`: a profile taken on this host, priced on the local (on-premise) offering.
- `device_model`: the device model (trainwise.predict.device_model) for every other offering, from
  the profile's workload characterisation, with provenance "modelled ±x %"; a one-device offering of the
  profiled GPU's own family (H100 and H200, A100 40 and 80 GB) from the profile's measured step scaled by the
  model's ratio instead (trainwise.predict.transfer.transfer_from_profile, "transferred").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trainwise.catalog.model import Catalog
from trainwise.errors import TrainwiseError
from trainwise.plan.scaling import REASON_SLICE, job_global_batch, rebatch, split_batch
from trainwise.profile.schema import Profile

RUNTIME_COLUMNS = ("offering_row", "profile", "epochs", "training_s", "training_low_s", "training_high_s",
                   "init_s", "first_epoch_s", "steady_s", "validation_s", "time_provenance", "relative_error",
                   "time_source")
# Columns a source may add (the data-parallel source does); kept through `collect`, filled with these
# defaults for the other sources' rows when any source gave them.
OPTIONAL_RUNTIME_COLUMNS = {"parallelism": "", "workers": 1.0, "granularity": np.nan, "communication_s": np.nan,
                            "network_usd_per_hour": 0.0, "fits_memory": True, "scaling_note": "",
                            "global_batch_size": np.nan}


@dataclass(frozen=True)
class LabelledProfile:
    label: str
    profile: Profile
    accelerator: str | None  # canonical accelerator name when the profile ran on a known GPU/TPU
    here: bool               # taken on this host

    @property
    def host(self) -> str:
        return self.profile.environment.hostname

    @property
    def provenance(self) -> str:
        return "measured here" if self.here else f"measured on {self.host} (imported)"

    @property
    def device(self) -> str:
        env = self.profile.environment
        return env.device_name or env.device


@dataclass(frozen=True)
class RuntimeContext:
    """What a runtime source may use: the profiles (with their resolved accelerator and whether
    they were taken here), each profile's same-machine prediction per epoch option (columns
    profile, epochs, training_s, training_low_s, training_high_s, init_s, first_epoch_s, steady_s,
    validation_s, relative_error, …), the local offering ids, and the catalog (accelerator specs
    for a device model)."""

    profiles: Sequence[LabelledProfile]
    predictions: pd.DataFrame
    local_offering_ids: frozenset[str] = field(default_factory=frozenset)
    catalog: Catalog | None = None
    # data-parallel groups (trainwise.plan.distributed): offering_id -> Group, and their options
    groups: dict = field(default_factory=dict)
    distributed: object = None
    # reason -> offerings (or groups) not ranked because they would change the job's global batch
    pruned: dict = field(default_factory=dict)
    # reason -> offerings (or groups) not ranked because the command would leave their accelerators idle
    idle: dict = field(default_factory=dict)
    # plan accelerators for a command that never asked torch for one (the user will give it its device flag)
    assume_accelerator: bool = False

    def prune(self, reason: str, count: int = 1) -> None:
        self.pruned[reason] = self.pruned.get(reason, 0) + int(count)

    def leave_idle(self, reason: str, count: int = 1) -> None:
        self.idle[reason] = self.idle.get(reason, 0) + int(count)


RuntimeSource = Callable[[pd.DataFrame, RuntimeContext], pd.DataFrame]

# Why a CPU-profiled command gets no accelerator plan (Profile.cpu_only_command): its model would stay on the CPU.
REASON_CPU_ONLY = "the command never asks torch for an accelerator, so it runs on the CPU on any machine"
# What the user can do about it
CPU_ONLY_FIX = "profile it with its GPU flag or plan with --assume-accelerator"


# Why a TPU or Trainium plan is not ranked: PyTorch runs there only through PyTorch/XLA (torch_xla, torch-neuronx)
REASON_NO_XLA = "TPUs and Trainium run PyTorch only through PyTorch/XLA, which the command never imports"


def leaves_accelerators_idle(item: LabelledProfile, context: RuntimeContext) -> bool:
    """The profile's command would not use an accelerator (and the user did not say it will)."""
    return item.profile.cpu_only_command and not context.assume_accelerator


def runs_on_xla(item: LabelledProfile, context: RuntimeContext) -> bool:
    """The profile's command can use a TPU or Trainium: it imported torch_xla, or the user says it will. Profiles from
    before trainwise looked keep them (unknown); trainwise's reference workloads never (their --device is cpu or
    cuda)."""
    if context.assume_accelerator:
        return True
    query = item.profile.accelerator_query
    return query.xla if query is not None else not item.profile.reference_workload


def xla_kind(catalog: Catalog | None, accelerator: Any) -> bool:
    """A TPU, Trainium or other non-GPU accelerator (the catalog's kind), which PyTorch reaches through XLA."""
    if catalog is None or accelerator is None or (isinstance(accelerator, float) and np.isnan(accelerator)):
        return False
    try:
        return str(catalog.accelerator(str(accelerator)).kind) != "gpu"
    except TrainwiseError:
        return False


def _empty() -> pd.DataFrame:
    return pd.DataFrame({column: [] for column in RUNTIME_COLUMNS})


def _attach(matches: pd.DataFrame, context: RuntimeContext, provenance: dict[str, str], source: str) -> pd.DataFrame:
    """(offering_row, profile) matches × the profile's predictions for every epoch option
    (integer joins: one profile's predictions are contiguous rows of `context.predictions`)."""
    if matches.empty:
        return _empty()
    labels = [p.label for p in context.profiles]
    index = {label: i for i, label in enumerate(labels)}
    predictions = context.predictions
    pred_profile = predictions["profile"].map(index).to_numpy()
    order = np.argsort(pred_profile, kind="stable")
    counts = np.bincount(pred_profile, minlength=len(labels))
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    match_profile = matches["profile"].map(index).to_numpy()
    per_match = counts[match_profile]
    match_rows = np.repeat(np.arange(len(matches)), per_match)
    offsets = np.arange(per_match.sum()) - np.repeat(np.cumsum(per_match) - per_match, per_match)
    pred_rows = order[np.repeat(starts[match_profile], per_match) + offsets]
    data = {"offering_row": matches["offering_row"].to_numpy()[match_rows]}
    for column in RUNTIME_COLUMNS:
        if column in ("offering_row", "time_provenance", "time_source", "profile"):
            continue
        data[column] = predictions[column].to_numpy()[pred_rows]
    data["profile"] = pd.Categorical.from_codes(match_profile[match_rows], categories=pd.Index(labels, dtype=object))
    prov_codes, prov_texts = pd.factorize(pd.Index([provenance.get(label, "") for label in labels], dtype=object))
    data["time_provenance"] = pd.Categorical.from_codes(prov_codes[match_profile[match_rows]], categories=prov_texts)
    data["time_source"] = pd.Categorical.from_codes(np.zeros(match_rows.size, dtype="int8"), categories=[source])
    data["_profile_idx"] = match_profile[match_rows]
    return pd.DataFrame(data)


def _measured_at_other_batch(item: LabelledProfile) -> bool:
    """The profile measured a slice of the job at another batch: its step is not the job's step."""
    return job_global_batch(item.profile) != max(1, int(item.profile.dataset.global_batch_size))


def measured_profiles(offerings: pd.DataFrame, context: RuntimeContext) -> pd.DataFrame:
    """Offerings whose accelerator is the one a profile was measured on (one device)."""
    single = offerings[(offerings["accelerator_count"] == 1.0) & offerings["accelerator"].notna()]
    by_accelerator = []
    for p in context.profiles:
        if p.accelerator is None:
            continue
        if _measured_at_other_batch(p):
            context.prune(REASON_SLICE, int((single["accelerator"] == p.accelerator).sum()))
            continue
        by_accelerator.append((p.label, p.accelerator))
    if not by_accelerator:
        return _empty()
    table = pd.DataFrame(by_accelerator, columns=["profile", "accelerator"])
    rows = pd.DataFrame({"offering_row": single.index.to_numpy(), "accelerator": single["accelerator"].to_numpy()})
    matches = rows.merge(table, on="accelerator", how="inner")[["offering_row", "profile"]]
    provenance = {p.label: f"{p.provenance} on {p.accelerator}" for p in context.profiles}
    return _attach(matches, context, provenance, "measured")


def this_machine(offerings: pd.DataFrame, context: RuntimeContext) -> pd.DataFrame:
    """Profiles taken on this host, priced on the local offering(s)."""
    if not context.local_offering_ids:
        return _empty()
    here = [p.label for p in context.profiles if p.here and not _measured_at_other_batch(p)]
    if any(p.here and _measured_at_other_batch(p) for p in context.profiles):
        context.prune(REASON_SLICE, len(context.local_offering_ids))
    if not here:
        return _empty()
    local_rows = offerings.index[offerings["offering_id"].isin(context.local_offering_ids)].to_numpy()
    matches = pd.DataFrame([(row, label) for row in local_rows for label in here], columns=["offering_row", "profile"])
    provenance = {p.label: f"measured here (this machine: {p.device})" for p in context.profiles}
    return _attach(matches, context, provenance, "this machine")


def device_model(offerings: pd.DataFrame, context: RuntimeContext) -> pd.DataFrame:
    """Every offering with whole accelerators the device model knows, from each profile's workload
    characterisation (trainwise.predict.device_model): data parallel with the job's global batch split
    over the N devices (trainwise.plan.scaling), so an epoch is N_train / global batch steps whatever N.
    Init is the profile's own (measured); validation scales with the modelled per-sample speed-up.
    Splits that do not divide or fall below the per-device floor are pruned (counted in
    `context.pruned`); rows whose model does not fit in the accelerator's memory are left out (the
    planner lists them as not predicted)."""
    if context.catalog is None:
        return _empty()
    from trainwise.predict import device_model as dm
    from trainwise.predict.device_params import load_params
    from trainwise.predict.offerings import characterisation_or_none, device_full_run
    from trainwise.predict.transfer import transfer_from_profile

    # Load the fit up front: a missing or unreadable $TRAINWISE_DEVICE_PARAMS is the user's error to
    # report, not thousands of offerings the model "could not predict" (the per-accelerator guard below).
    load_params()
    counts = offerings["accelerator_count"].to_numpy()
    gpu = offerings[offerings["accelerator"].notna() & (counts >= 1) & (np.floor(counts) == counts)]
    groups = gpu.groupby(["accelerator", "accelerator_count"], sort=False).indices
    frames = []
    for profile_idx, item in enumerate(context.profiles):
        if leaves_accelerators_idle(item, context):
            context.leave_idle(REASON_CPU_ONLY, len(gpu))
            continue
        char = characterisation_or_none(item.profile)
        if char is None:
            continue
        predictions = context.predictions[context.predictions["profile"] == item.label]
        profile_batch = max(1, int(item.profile.dataset.global_batch_size))
        job_batch = job_global_batch(item.profile)
        # the measured data wait is per sample of the profiled batch: a device's share is per its batch.
        # A slice profiled here with its data made in the training process says nothing of the full-size
        # job's loader: that one is assumed to keep up (the plan's assumptions say so).
        host_overhead_per_sample_s = (0.0 if job_batch != profile_batch
                                      else dm.host_overhead_from_profile(item.profile) / profile_batch)
        n_train = item.profile.dataset.n_train or ((item.profile.dataset.iterations_per_epoch or 1) * job_batch)
        scaled: dict[int, object] = {}
        xla_ok = runs_on_xla(item, context)
        for (accelerator, count), positions in groups.items():
            if not xla_ok and xla_kind(context.catalog, accelerator):
                context.leave_idle(REASON_NO_XLA, len(positions))
                continue
            per_device, reason = split_batch(job_batch, int(count))
            if per_device is None:
                context.prune(reason, len(positions))
                continue
            if job_batch > n_train:
                continue
            if per_device not in scaled:
                scaled[per_device] = rebatch(char, per_device)
            try:
                pred = dm.predict_iteration(scaled[per_device], context.catalog.accelerator(accelerator), int(count), None,
                                            host_overhead_per_sample_s * per_device)
            except TrainwiseError:
                continue
            if not pred.fits_memory:
                continue
            time_source = "device model"
            if int(count) == 1 and per_device == profile_batch:  # a GPU profile moves to its own family's GPUs
                moved = transfer_from_profile(item.profile, scaled[per_device], pred, context.catalog)
                if moved is not None:
                    pred, time_source = moved, "transferred"
            rows = gpu.index.to_numpy()[positions]
            iterations_per_epoch = int(np.ceil(n_train / job_batch))
            split = "" if int(count) == 1 else f", global batch {job_batch} split {per_device} per device"
            for pred_row in predictions.itertuples():
                # validation measured at the profile's batch: per sample, the devices' rate applies
                run = device_full_run(item.profile, pred, int(pred_row.epochs),
                                      float(pred_row.validation_s) * profile_batch / per_device, iterations_per_epoch)
                epochs, init_s, validation_s, iterations_s, total = (run.epochs, run.init_s, run.validation_s,
                                                                     run.iterations_s, run.total_s)
                band = run.high_s - total
                n = rows.size
                frames.append(pd.DataFrame({
                    "offering_row": rows, "profile": [item.label] * n, "epochs": np.full(n, epochs),
                    "training_s": np.full(n, total), "training_low_s": np.full(n, max(0.0, total - band)),
                    "training_high_s": np.full(n, total + band), "init_s": np.full(n, init_s),
                    "first_epoch_s": np.full(n, iterations_per_epoch * pred.iteration_s),
                    "steady_s": np.full(n, max(0.0, iterations_s - iterations_per_epoch * pred.iteration_s)),
                    "validation_s": np.full(n, validation_s),
                    "time_provenance": [f"{pred.provenance} ({item.provenance} profile)" if time_source == "transferred"
                                        else f"{pred.provenance} (device model from {item.provenance} profile{split})"] * n,
                    "relative_error": np.full(n, band / total if total > 0 else 0.0),
                    "time_source": [time_source] * n, "_profile_idx": np.full(n, profile_idx),
                    "global_batch_size": np.full(n, float(job_batch))}))
    if not frames:
        return _empty()
    out = pd.concat(frames, ignore_index=True)
    for column in ("profile", "time_provenance", "time_source"):
        out[column] = out[column].astype("category")
    return out


DEFAULT_SOURCES: tuple[RuntimeSource, ...] = (measured_profiles, this_machine, device_model)
NOT_PREDICTED = "not predicted (no measured profile on that hardware, and the device model could not predict it)"


def collect(offerings: pd.DataFrame, context: RuntimeContext, sources: Sequence[RuntimeSource]) -> pd.DataFrame:
    """Every source's rows, the preferred source first for each (offering, batch size, epochs)."""
    frames = []
    for priority, source in enumerate(sources):
        frame = source(offerings, context)
        if len(frame):
            missing = [c for c in RUNTIME_COLUMNS if c not in frame.columns]
            if missing:
                raise TypeError(f"runtime source {getattr(source, '__name__', source)!r} lacks columns {missing}")
            extra = [c for c in ("_profile_idx", *OPTIONAL_RUNTIME_COLUMNS) if c in frame.columns]
            frame = frame[list(RUNTIME_COLUMNS) + extra].copy()
            frame["priority"] = priority
            frames.append(frame)
    if not frames:
        out = _empty()
        out["priority"] = pd.Series(dtype="int64")
        out["batch_size"] = pd.Series(dtype="int64")
        return out.astype({"offering_row": "int64", "epochs": "int64"})
    optional = [c for c in OPTIONAL_RUNTIME_COLUMNS if any(c in f.columns for f in frames)]
    frames = [f.astype({c: object for c in optional if c in f.columns and isinstance(f[c].dtype, pd.CategoricalDtype)})
              for f in frames]
    frame = pd.concat(frames, ignore_index=True).astype({"offering_row": "int64", "epochs": "int64"})
    for column in optional:
        default = OPTIONAL_RUNTIME_COLUMNS[column]
        values = frame[column]
        if isinstance(default, bool):
            frame[column] = values.where(values.notna(), default).astype(bool)
        elif isinstance(default, float):
            frame[column] = values.astype("float64").fillna(default) if default == default else values.astype("float64")
        else:
            frame[column] = values.where(values.notna(), default).astype(str).astype("category")
    index = {p.label: i for i, p in enumerate(context.profiles)}
    profile_idx = (frame["_profile_idx"].to_numpy() if "_profile_idx" in frame.columns and not frame["_profile_idx"].isna().any()
                   else frame["profile"].map(index).to_numpy()).astype("int64")
    batches = np.array([job_global_batch(p.profile) for p in context.profiles], dtype="int64")
    batch = batches[profile_idx]
    # Preferred source first, then profile order; keep the first row per (offering, batch, epochs).
    order = np.lexsort((profile_idx, frame["priority"].to_numpy()))
    _, batch_code = np.unique(batch, return_inverse=True)
    epochs = frame["epochs"].to_numpy()
    _, epoch_code = np.unique(epochs, return_inverse=True)
    n_b, n_e = int(batch_code.max()) + 1, int(epoch_code.max()) + 1
    key = (frame["offering_row"].to_numpy() * n_b + batch_code.reshape(-1)) * n_e + epoch_code.reshape(-1)
    _, first = np.unique(key[order], return_index=True)
    keep = np.sort(order[first])
    out = frame.iloc[keep].reset_index(drop=True)
    out["batch_size"] = batch[keep]
    return out.drop(columns=[c for c in ("_profile_idx",) if c in out.columns])


def relative_error_of(low: np.ndarray, high: np.ndarray, total: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, (high - low) / 2 / total, 0.0)
