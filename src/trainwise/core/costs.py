"""The cost model's parts, each a small pure function that works on scalars and numpy arrays alike.

- billing: the seconds a provider bills for a run (minimum, then the granularity: per second, minute
  or hour; `Offering.billed_hours` is the one-offering form of the same rule);
- provisioning: the time from "go" to the first training step on a fresh machine. The seeds' figure
  is 15–20 minutes for a deployed cluster (Jorge et al., 'Deployment Service for Scalable Distributed Deep Learning Training on Multiple Clouds': "Deployment took 15–20 min"); a
  single VM can be faster (Erben et al.: seconds to 10 minutes). User-settable;
- data staging: dataset bytes / bandwidth (Jorge et al. staged 4.5 GB in 13 min; Künas' thesis moved
  932.2 MB edge→cloud in 106.5 s), object-storage egress ($/GB) and storage ($/GB-month; Erben et al.:
  Backblaze B2 0.01 $/GB egress, 0.005 $/GB-month);
- spot / preemptible interruptions: the expected runtime of a checkpointed job under exponential
  interruptions with the Young/Daly optimum checkpoint interval, and its spread; and the seed's
  throughput-penalty reading for elastic (Hivemind-style) training (Erben et al.).

Spot model (checkpoint / restart). Work W seconds, checkpoint write time C, restart time R (boot a
replacement + the job's start-up), interruption rate λ (MTBF M = 1/λ). Young's interval is
τ = sqrt(2·C·M) (Daly's first-order optimum is the same to leading order). Daly's expected wall
time for exponential interruptions (Daly 2006, Eq. 14):

    E[T] = M · e^{R/M} · (e^{(τ + C)/M} − 1) · W / τ

which → W + (W/τ)·C as λ → 0, and to first order in λ is W · (1 + C/τ + λ(R + (τ + C)/2)).
Spread: the number of interruptions is ~Poisson(λ·E[T]); each costs R plus the work lost since the
last checkpoint, ~U(0, τ + C); so Var[T] ≈ λ·E[T]·(R² + R(τ + C) + (τ + C)²/3).

Interruption rates come per hour, or as AWS's interruption frequency (the share of instances
interrupted over 30 days, Erben et al.: "between 5 and 20 %"), converted to a Poisson rate
λ = −ln(1 − f) / 720 h.

Erben et al.'s own rule (§7): "a 5 % interruption frequency over the entire
training time means roughly a 5 % slower training": for elastic training, where a preempted peer
loses no work and the others carry on, the interruption frequency is the share of VM-time lost, so
throughput × (1 − f) and runtime / (1 − f) (`elastic_runtime_s`): 5 % → 95 % throughput, 5.3 %
longer — "roughly 5 % slower".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainwise.errors import TrainwiseError

HOURS_PER_30_DAYS = 720.0
SECONDS_PER_MONTH = 30 * 86_400  # storage $/GB-month: a 30-day month, as AWS's 30-day interruption window
GRANULARITY_S = {"per_second": 1.0, "per_minute": 60.0, "per_hour": 3600.0}

# Defaults, each with where it comes from (shown in every report's assumptions).
DEFAULT_PROVISIONING_S = (900.0, 1050.0, 1200.0)  # low, expected, high: Jorge et al., 15–20 min
PROVISIONING_SOURCE = "Jorge et al., 'Deployment Service for Scalable Distributed Deep Learning Training on Multiple Clouds' (CLOSER 2021): deploying the cluster took 15–20 min"
DEFAULT_STAGING_BYTES_PER_S = 932.2e6 / 106.51  # 8.75 MB/s: Künas' thesis, Table 6.1, measured edge→cloud
STAGING_SOURCE = "Künas' thesis, Table 6.1: 932.2 MB moved edge→cloud in 106.51 s = 8.75 MB/s"
DEFAULT_STORAGE_USD_PER_GB_MONTH = 0.005
STORAGE_SOURCE = "Erben et al. §4: Backblaze B2 storage 0.005 $/GB/month"
DEFAULT_INTERRUPTIONS_PER_HOUR = 0.05
INTERRUPTION_SOURCE = ("assumed 0.05 interruptions per hour (MTBF 20 h): the catalog has no interruption data; "
                       "Erben et al. report AWS's 30-day frequency of 5–20 % as unrepresentative of GPU spot VMs")
CHECKPOINT_WRITE_BYTES_PER_S = 200e6
CHECKPOINT_FIXED_S = 1.0


def billed_seconds(seconds: Any, billing: Any = "per_second", min_billed_seconds: Any = 0.0) -> np.ndarray:
    """Seconds billed for runs of `seconds`: at least the minimum, then rounded up to the granularity.

    `billing` is one of per_second / per_minute / per_hour, or an array of them (one per run).
    """
    seconds = np.maximum(np.asarray(seconds, dtype="float64"), np.asarray(min_billed_seconds, dtype="float64"))
    step = _granularity(billing)
    return np.ceil(seconds / step - 1e-9) * step


def _granularity(billing: Any) -> np.ndarray:
    if isinstance(billing, str):
        if billing not in GRANULARITY_S:
            raise TrainwiseError(f"unknown billing {billing!r}: use one of {', '.join(GRANULARITY_S)}")
        return np.asarray(GRANULARITY_S[billing])
    values = np.asarray(billing, dtype=object)
    out = np.ones(values.shape, dtype="float64")
    for name, step in GRANULARITY_S.items():
        out[values == name] = step
    unknown = ~np.isin(values, list(GRANULARITY_S))
    if unknown.any():
        raise TrainwiseError(f"unknown billing {values[unknown][0]!r}: use one of {', '.join(GRANULARITY_S)}")
    return out


def compute_cost(seconds: Any, price_per_hour: Any, billing: Any = "per_second", min_billed_seconds: Any = 0.0) -> np.ndarray:
    """Cost of keeping a machine on for `seconds` at `price_per_hour`, with the provider's billing."""
    return billed_seconds(seconds, billing, min_billed_seconds) / 3600.0 * np.asarray(price_per_hour, dtype="float64")


def cost_per_training(hours: float, price_per_hour: float) -> float:
    """Künas: cost per training = time (h) × price ($/h)."""
    return hours * price_per_hour


def staging_seconds(dataset_bytes: Any, bytes_per_s: Any) -> np.ndarray:
    """Time to move the dataset to the machine: size / bandwidth (0 for no data to move)."""
    size = np.asarray(dataset_bytes, dtype="float64")
    rate = np.asarray(bytes_per_s, dtype="float64")
    if np.any(rate <= 0):
        raise TrainwiseError("the staging bandwidth must be positive (e.g. --bandwidth-mbps 100)")
    return size / rate


def egress_cost(dataset_gb: Any, usd_per_gb: Any) -> np.ndarray:
    """Object-storage (or inter-cloud) egress: GB moved × $/GB."""
    return np.asarray(dataset_gb, dtype="float64") * np.asarray(usd_per_gb, dtype="float64")


def storage_cost(dataset_gb: Any, usd_per_gb_month: Any, seconds: Any) -> np.ndarray:
    """Keeping the dataset in object storage while the run lasts (30-day months)."""
    return (np.asarray(dataset_gb, dtype="float64") * np.asarray(usd_per_gb_month, dtype="float64")
            * np.asarray(seconds, dtype="float64") / SECONDS_PER_MONTH)


# --------------------------------------------------------------------------- interruptions


def rate_from_30day_frequency(frequency: float) -> float:
    """AWS's interruption frequency (share of instances interrupted in 30 days) → interruptions per hour."""
    if not 0 <= frequency < 1:
        raise TrainwiseError(f"an interruption frequency is a fraction in [0, 1) (got {frequency!r}), e.g. 0.05 for 5 %")
    return -math.log1p(-frequency) / HOURS_PER_30_DAYS


def young_daly_interval_s(checkpoint_write_s: Any, mtbf_s: Any) -> np.ndarray:
    """Young/Daly optimum checkpoint interval sqrt(2 · C · MTBF) (inf when nothing interrupts)."""
    c = np.asarray(checkpoint_write_s, dtype="float64")
    m = np.asarray(mtbf_s, dtype="float64")
    with np.errstate(invalid="ignore"):
        return np.sqrt(2.0 * c * m)


def spot_expectation(work_s: Any, rate_per_hour: Any, checkpoint_write_s: Any, restart_s: Any,
                     interval_s: Any = None) -> dict[str, np.ndarray]:
    """Expected wall time of `work_s` seconds of training under Poisson interruptions (Daly), its
    standard deviation, the checkpoint interval used (Young/Daly unless given), the expected number
    of interruptions and the expected time lost to them (checkpoints, lost work, restarts).

    All arguments broadcast; rate 0 → no checkpoints, no loss.
    """
    w = np.asarray(work_s, dtype="float64")
    lam = np.asarray(rate_per_hour, dtype="float64") / 3600.0
    c = np.asarray(checkpoint_write_s, dtype="float64")
    r = np.asarray(restart_s, dtype="float64")
    w, lam, c, r = np.broadcast_arrays(w, lam, c, r)
    if np.any(lam < 0) or np.any(c < 0) or np.any(r < 0) or np.any(w < 0):
        raise TrainwiseError("interruption rate, checkpoint write time, restart time and work must be >= 0")
    interrupted = lam > 0
    safe_lam = np.where(interrupted, lam, 1e-30)
    m = 1.0 / safe_lam
    if interval_s is None:
        tau = young_daly_interval_s(c, m)
        tau = np.where(tau > 0, tau, np.maximum(w, 1.0))  # C = 0: checkpoints are free, take them "continuously"
        tau = np.maximum(tau, 1e-3)
    else:
        tau = np.broadcast_to(np.asarray(interval_s, dtype="float64"), w.shape)
        if np.any(tau <= 0):
            raise TrainwiseError("the checkpoint interval must be positive")
    # Daly's expectation; expm1 keeps it exact for tiny rates. Rows without interruptions are
    # computed with a placeholder MTBF and replaced by w.
    with np.errstate(over="ignore", invalid="ignore"):
        expected = m * np.exp(r / m) * np.expm1((tau + c) / m) * w / tau
    expected = np.where(interrupted, expected, w)
    segment = tau + c
    per_interruption_sq = r * r + r * segment + segment * segment / 3.0
    variance = np.where(interrupted, lam * expected * per_interruption_sq, 0.0)
    interruptions = np.where(interrupted, lam * expected, 0.0)
    return {
        "expected_s": expected,
        "std_s": np.sqrt(variance),
        "interval_s": np.where(interrupted, tau, np.inf),
        "interruptions": interruptions,
        "loss_s": expected - w,
    }


def elastic_runtime_s(runtime_s: Any, interruption_frequency: Any) -> np.ndarray:
    """Erben et al.'s rule for elastic training: throughput × (1 − f), so runtime / (1 − f)."""
    f = np.asarray(interruption_frequency, dtype="float64")
    if np.any((f < 0) | (f >= 1)):
        raise TrainwiseError("an interruption frequency is a fraction in [0, 1)")
    return np.asarray(runtime_s, dtype="float64") / (1.0 - f)


def checkpoint_write_s(state_bytes: float, bytes_per_s: float = CHECKPOINT_WRITE_BYTES_PER_S,
                       fixed_s: float = CHECKPOINT_FIXED_S) -> float:
    """Assumed time to write a checkpoint: fixed cost + bytes / write bandwidth."""
    return fixed_s + max(0.0, state_bytes) / bytes_per_s


def training_state_bytes(gradient_bytes: int, optimizer: str | None) -> int:
    """Model + optimizer state: parameters (= gradient bytes) × (1 + optimizer slots: Adam-family 2,
    SGD with momentum 1, otherwise 1)."""
    name = (optimizer or "").lower()
    slots = 2 if "adam" in name or "lamb" in name else 1
    return int(gradient_bytes * (1 + slots))
