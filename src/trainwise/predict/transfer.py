"""Transfer a measured step from the GPU the user has to one they have not rented.

When a profile was taken on a GPU, its measured device time per operator category (torch.profiler kernel times,
`measure.measure_breakdown`) is scaled by the device model's per-category ratio between the two GPUs, and the
part of the step the device did not account for (host dispatch, idle gaps, data wait) is kept as measured:

    T_target = T_measured x (f_unattributed + sum_c f_c x t_model(c, target) / t_model(c, source))

where f_c is category c's share of the measured step. Habitat (Yu et al., USENIX ATC 2021) scales measured
kernel times between GPUs the same way (by wave scaling); here the ratios come from the device model, so an
error the model makes on both GPUs alike cancels. Categories the model gives no time on either GPU scale with
the model's whole-step device ratio.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError


class TransferPrediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    target: str
    measured_step_s: float
    iteration_s: float
    ratio_by_category: dict[str, float]
    unattributed_fraction: float = Field(description="share of the measured step kept as measured (host, idle)")
    provenance: str


def transfer_step(characterisation: Any, source: Any, target: Any, measured_step_s: float,
                  measured_by_category_s: dict[str, float], measured_wall_s: float | None = None, *,
                  core: str | None = None, params: Any = None) -> TransferPrediction:
    """Predict `target`'s step time from a step measured on `source` (see the module docstring).

    `measured_by_category_s`: device seconds per category from a profile of `measured_wall_s` seconds (default
    `measured_step_s`); their shares of that profile are applied to `measured_step_s`."""
    from trainwise.predict.device_model import predict_iteration

    if not measured_step_s > 0:
        raise TrainwiseError(f"the measured step time must be positive (got {measured_step_s})")
    wall = measured_wall_s or measured_step_s
    shares = {c: max(0.0, float(t)) / wall for c, t in measured_by_category_s.items()}
    total_share = sum(shares.values())
    if total_share > 1.05:
        raise TrainwiseError(f"the measured categories add up to {total_share:.0%} of the step: pass the profiled "
                             "step's wall time as measured_wall_s")
    src = predict_iteration(characterisation, source, core=core, params=params)
    tgt = predict_iteration(characterisation, target, core=core, params=params)
    whole = tgt.device_s / src.device_s if src.device_s > 0 else 1.0
    ratios = {}
    for c in shares:
        a, b = src.breakdown_s.get(c, 0.0), tgt.breakdown_s.get(c, 0.0)
        ratios[c] = b / a if a > 0 and b > 0 else whole
    unattributed = max(0.0, 1.0 - total_share)
    scale = unattributed + sum(shares[c] * ratios[c] for c in shares)
    return TransferPrediction(source=source.name, target=target.name, measured_step_s=measured_step_s,
                              iteration_s=measured_step_s * scale, ratio_by_category={k: round(v, 4) for k, v in ratios.items()},
                              unattributed_fraction=round(unattributed, 4),
                              provenance=f"measured on {source.name}, scaled to {target.name} by the device model's "
                                         "per-category ratios (band not calibrated)")


def transfer_from_profile(profile: Any, char: Any, pred: Any, catalog: Any) -> Any:
    """`pred` (a one-device `DevicePrediction` of `char` on some accelerator) replaced by the profile's own measured
    step moved to that accelerator, when the profile ran on a GPU of the same family (`kernel_model.family`: one die,
    e.g. H100 and H200, A100 40 and 80 GB); otherwise None and the device model's prediction stands.

    The measured iteration's data wait is kept (host work a faster GPU does not remove) and the rest scaled by the
    device model's whole-iteration ratio target ÷ source, so what the model gets wrong on both GPUs alike cancels.
    Across families a measured step did no better than no measurement on the held-out rows
    (benchmarks/results/device_model.json, `transfer_across_gpus`), so it is used within a family only."""
    from trainwise.predict.device_model import predict_iteration
    from trainwise.catalog.names import resolve_device_name
    from trainwise.predict.kernel_model import family
    from trainwise.predict.offerings import measured_samples_per_iteration

    env = getattr(profile, "environment", None)
    steady = getattr(profile, "steady_state", None)
    if pred.count != 1 or env is None or env.device == "cpu" or not env.device_name or steady is None:
        return None
    if steady.iteration.n <= 0 or steady.iteration.mean_s <= 0:
        return None
    source_name = resolve_device_name(env.device_name, catalog)  # the planner's reading of the name
    if source_name is None or family(source_name) != family(pred.accelerator):
        return None
    source, target = catalog.accelerator(source_name), catalog.accelerator(pred.accelerator)
    # the measured iteration may be several micro-batches (gradient accumulation); the modelled step is one
    per_step = char.per_device_batch / measured_samples_per_iteration(profile, char)
    measured_s = steady.iteration.mean_s * per_step
    wait_s = min(max(0.0, steady.data_wait.mean_s), steady.iteration.mean_s) * per_step
    ratio = predict_iteration(char, target).iteration_s / predict_iteration(char, source).iteration_s
    step_s = wait_s + (measured_s - wait_s) * ratio
    low, high = step_s * (1 - pred.relative_error), step_s * (1 + pred.relative_error)
    how = ("the measured step" if source.name == target.name else
           f"the {source.name} step × the device model's {source.name} → {target.name} ratio {ratio:.2f}")
    return pred.model_copy(update={
        "iteration_s": step_s, "samples_per_s": char.per_device_batch / step_s, "low_s": max(0.0, low), "high_s": high,
        "provenance": f"transferred ±{pred.relative_error * 100:.0f} % from {source.name}",
        "notes": [f"{how}, data wait kept: the profile's {env.device_name} step {measured_s * 1e3:.2f} ms, of it "
                  f"{wait_s * 1e3:.2f} ms data wait; the band the device model's", *pred.notes]})
