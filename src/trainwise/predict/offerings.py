"""Device-model rows for the planner and the `predict --accelerator` path (integration helpers).

- `characterisation_of(profile)`: the WorkloadCharacterisation a profile carries (recorded by the
  profiler hook), with a one-line fix when it has none.
- `device_predictions(char, accelerator=None, count=1, host_overhead_s=0)`: one accelerator or every
  catalog accelerator, fastest first.
- `device_full_run(profile, pred, epochs, same_machine_validation_s)`: the whole run on the predicted
  device(s): the profile's measured init, epochs × iterations × the modelled step, validation scaled
  by the modelled speed-up (the planner's device-model rows and `predict --accelerator` share it).
- `modelled_offerings(char, catalog, measured=...)`: one row per catalog offering with an
  accelerator — iteration time, samples/s, USD per 1M samples — marked "modelled ±x %", or
  "measured" where a measured profile for that accelerator and count is given (it overrides).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.predict import device_model as dm
from trainwise.predict.accelerator_features import normalise_link
from trainwise.core.workload import WorkloadCharacterisation
from trainwise.predict.device_params import DeviceModelParams


def characterisation_of(profile: Any) -> WorkloadCharacterisation:
    char = getattr(profile, "characterisation", None)
    if char is None:
        raise TrainwiseError("this profile has no workload characterisation (profiled by an older trainwise, or the "
                             "model could not be traced): re-profile it, or characterise the model by name with "
                             "`trainwise device characterise MODEL --batch N`")
    if isinstance(char, dict):
        char = WorkloadCharacterisation.model_validate(char)
    return char


def characterisation_or_none(profile: Any) -> WorkloadCharacterisation | None:
    """The profile's characterisation; for a profile of a reference workload without one, the
    workload characterised by name at the profile's batch size; else None (not predictable)."""
    try:
        return characterisation_of(profile)
    except TrainwiseError:
        pass
    name = getattr(profile, "workload", None)
    from trainwise.workloads import WORKLOADS

    if not name or name not in WORKLOADS:
        return None
    from trainwise.predict.characterise import characterise_named

    try:
        return characterise_named(name, per_device_batch=max(1, profile.dataset.global_batch_size))
    except TrainwiseError:
        return None


def check_link_count(link: str | None, count: int) -> None:
    """--link says how gradients travel between devices: one device exchanges none, and a link given
    with it would be ignored without a word."""
    if link is not None and count == 1:
        raise TrainwiseError(f"--link {link} describes how gradients travel between devices: it needs --count 2 or "
                             "more (one device exchanges none); drop --link or add --count N")


def device_predictions(char: WorkloadCharacterisation, accelerator: str | None = None, count: int = 1,
                       host_overhead_s: float = 0.0, catalog: Any = None,
                       params: DeviceModelParams | None = None, link: str | None = None) -> list[dm.DevicePrediction]:
    """One accelerator's prediction, or every catalog accelerator's (`link`: how gradients travel, accelerator_features.LINKS)."""
    dm.check_host_overhead(host_overhead_s)
    check_link_count(link, count)
    link = normalise_link(link, "--link")
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    if accelerator is not None:
        acc = catalog.accelerator(accelerator)  # unknown names raise with the nearest catalog names
        return [dm.predict_iteration(char, acc, count, None, host_overhead_s, params=params, link=link)]
    return dm.predict_all(char, catalog, count, host_overhead_s, params, link=link)


@dataclass(frozen=True)
class DeviceFullRun:
    """A whole training run on `count` modelled accelerators; times in seconds."""

    epochs: int
    iterations_per_epoch: int
    init_s: float
    iterations_s: float
    validation_s: float
    total_s: float
    low_s: float
    high_s: float


def _micro_batches(profile: Any, char: WorkloadCharacterisation) -> float:
    """Traced steps per measured iteration: an optimizer step of a job with gradient accumulation takes several
    micro-batches, which a characterisation from before `passes_per_step` traced as one step each."""
    if getattr(char, "pass_batch", None) and char.per_device_batch > char.traced_batch:
        return 1.0  # the characterisation is the whole step, every micro-batch a pass
    return max(1.0, float(profile.dataset.batches_per_iteration or 1.0))


def device_iterations_per_epoch(profile: Any, char: WorkloadCharacterisation, count: int) -> int:
    """Steps per epoch with `count` devices at the profile's batch per device (weak scaling)."""
    micro_batches = _micro_batches(profile, char)
    n_train = profile.dataset.n_train or ((profile.dataset.iterations_per_epoch or 1) * char.per_device_batch * micro_batches)
    return int(math.ceil(n_train / (count * char.per_device_batch)))


def measured_samples_per_iteration(profile: Any, char: WorkloadCharacterisation) -> float:
    """Samples of the profile's measured iteration: all micro-batches of an accumulated step, where the traced
    step (`char`) is one micro-batch."""
    return float(profile.dataset.global_batch_size or 0) or char.per_device_batch * _micro_batches(profile, char)


def device_full_run(profile: Any, pred: dm.DevicePrediction, epochs: int, same_machine_validation_s: float,
                    iterations_per_epoch: int, samples_per_step: tuple[float, float] | None = None) -> DeviceFullRun:
    """Init is the profile's own (measured: the same script starts the same way); validation (all
    epochs' passes, as the same-machine prediction counts them) speeds up as the step does and is
    split over the devices; the band is the device model's on the iterations.

    `samples_per_step`: (samples of the measured iteration, samples of the modelled step on one device)
    when they differ (gradient accumulation: the profile's iteration is several micro-batches, the
    traced step one); validation then speeds up as the samples per second do."""
    measured_iteration_s = profile.steady_state.iteration.mean_s
    speedup = measured_iteration_s / pred.iteration_s if pred.iteration_s > 0 else 1.0
    if samples_per_step is not None and all(samples > 0 for samples in samples_per_step):
        measured_samples, modelled_samples = samples_per_step
        speedup *= modelled_samples / measured_samples
    init_s = float(profile.init.total_s)
    validation_s = float(same_machine_validation_s) / max(speedup, 1e-9) / pred.count
    iterations_s = epochs * iterations_per_epoch * pred.iteration_s
    total = init_s + iterations_s + validation_s
    band = iterations_s * pred.relative_error
    return DeviceFullRun(epochs=int(epochs), iterations_per_epoch=int(iterations_per_epoch), init_s=init_s,
                         iterations_s=iterations_s, validation_s=validation_s, total_s=total,
                         low_s=max(0.0, total - band), high_s=total + band)


def modelled_offerings(char: WorkloadCharacterisation, catalog: Any = None, *, host_overhead_s: float = 0.0,
                       measured: dict[tuple[str, int], float] | None = None, spot: bool = False,
                       params: DeviceModelParams | None = None) -> list[dict[str, Any]]:
    """One dict per priced catalog offering with whole accelerators, cheapest per 1M samples first.

    `measured` maps (canonical accelerator name, count) -> measured iteration seconds (from a profile
    taken on that machine); such rows are marked "measured" and use the measured time.
    """
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog()
    measured = dict(measured or {})
    column = "spot_price_per_hour" if spot else "price_per_hour"
    frame = catalog.offerings
    frame = frame[frame["accelerator"].notna() & (frame["accelerator_count"] >= 1) & frame[column].notna()]
    cache: dict[tuple[str, int], dm.DevicePrediction | None] = {}
    rows = []
    for rec in frame.to_dict("records"):
        acc_name = rec["accelerator"]
        count = int(rec["accelerator_count"])
        if count != rec["accelerator_count"]:
            continue
        key = (acc_name, count)
        if key not in cache:
            try:
                cache[key] = dm.predict_iteration(char, catalog.accelerator(acc_name), count, None, host_overhead_s,
                                                  params=params)
            except TrainwiseError:
                cache[key] = None
        pred = cache[key]
        if pred is None and key not in measured:
            continue
        if key in measured:
            iteration_s = float(measured[key])
            provenance = "measured"
        else:
            iteration_s = pred.iteration_s
            provenance = pred.provenance
        samples = count * char.per_device_batch / iteration_s
        price = float(rec[column])
        rows.append({"offering_id": rec["offering_id"], "cloud": rec["cloud"], "region": rec["region"],
                     "instance_type": rec["instance_type"], "accelerator": acc_name, "count": count,
                     "iteration_s": iteration_s, "samples_per_s": samples, "price_per_hour": price,
                     "usd_per_1m_samples": price / (samples * 3600) * 1e6, "provenance": provenance,
                     "relative_error": 0.0 if provenance == "measured" else pred.relative_error,
                     "fits_memory": True if provenance == "measured" else pred.fits_memory})
    return sorted(rows, key=lambda r: (not r["fits_memory"], r["usd_per_1m_samples"]))
