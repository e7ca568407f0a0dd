"""Comparison metrics of the papers trainwise builds on (Künas; Malta; Erben et al.), as pure functions (scalars or numpy arrays).

Künas' thesis and Künas et al.: cost per training = hours × $/h; cost efficiency of x against a
reference = 1 − C_x / C_ref; break-even speedup = p_x / p_ref (x pays off when it is at least that
much faster); speedup including data transfer S' = S · T / (T + t_transfer), T the accelerated
training time. Erben et al. (VLDB 2024): $/1M samples = $/h ÷ (samples/s × 3600) × 10⁶, with the
hourly cost = Σ VM prices + egress + data loading. Malta's methodology 2:
estimated times for several epoch counts, each column normalised by its minimum, cost = time × price
(`methodology2_tables`, reusing `trainwise.predict.malta.normalise_by_minimum`).

`SOURCE_INCONSISTENCIES` lists the places where the seeds' own numbers disagree: flagged, not
reproduced (`inconsistencies()` recomputes each from its inputs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainwise.predict.malta import normalise_by_minimum


def _arr(value: Any) -> np.ndarray:
    return np.asarray(value, dtype="float64")


def _scalar_or_array(value: np.ndarray) -> Any:
    return float(value) if value.ndim == 0 else value


def cost_per_million_samples(price_per_hour: Any, samples_per_s: Any) -> Any:
    """$/1M samples = $/h ÷ (samples/s × 3600) × 10⁶ (Erben et al.)."""
    return _scalar_or_array(_arr(price_per_hour) / (_arr(samples_per_s) * 3600.0) * 1e6)


def hourly_cost(vm_prices_per_hour: Any, egress_per_hour: float = 0.0, data_loading_per_hour: float = 0.0) -> float:
    """Hourly cost of a (distributed) setup: Σ VM prices + egress + data loading (Erben et al.)."""
    return float(np.sum(_arr(vm_prices_per_hour))) + egress_per_hour + data_loading_per_hour


def cost_efficiency(cost: Any, reference_cost: Any) -> Any:
    """1 − C / C_ref: the share of the reference's cost saved (negative: more expensive)."""
    return _scalar_or_array(1.0 - _arr(cost) / _arr(reference_cost))


def break_even_speedup(price_per_hour: Any, reference_price_per_hour: Any) -> Any:
    """p / p_ref: the speedup at which the pricier platform costs the same per training."""
    return _scalar_or_array(_arr(price_per_hour) / _arr(reference_price_per_hour))


def speedup(reference_time: Any, time: Any) -> Any:
    """How many times faster than the reference: T_ref / T."""
    return _scalar_or_array(_arr(reference_time) / _arr(time))


def speedup_with_transfer(speedup_value: Any, time_s: Any, transfer_s: Any) -> Any:
    """S' = S · T / (T + t_transfer): the speedup once moving the data to the platform is paid."""
    t = _arr(time_s)
    return _scalar_or_array(_arr(speedup_value) * t / (t + _arr(transfer_s)))


def cost_per_epoch(cost: Any, epochs: Any) -> Any:
    return _scalar_or_array(_arr(cost) / _arr(epochs))


def methodology2_tables(times_s: Mapping[str, Mapping[int, float]], price_per_hour: Mapping[str, float]
                        ) -> tuple[dict[int, dict[str, float]], dict[int, dict[str, float]]]:
    """Malta's methodology 2: per epoch count, every VM's estimated time and cost
    (time × price) divided by the column's minimum. Returns (normalised time, normalised cost),
    each {epochs: {vm: ratio}}. Any time unit works (the columns are ratios)."""
    epochs = sorted({e for row in times_s.values() for e in row})
    time_table: dict[int, dict[str, float]] = {}
    cost_table: dict[int, dict[str, float]] = {}
    for e in epochs:
        column = {vm: row[e] for vm, row in times_s.items() if e in row}
        time_table[e] = normalise_by_minimum(column)
        cost_table[e] = normalise_by_minimum({vm: t * price_per_hour[vm] for vm, t in column.items()})
    return time_table, cost_table


@dataclass(frozen=True)
class Inconsistency:
    """A number a paper states that its own inputs contradict: flagged, never reproduced."""

    where: str
    stated: str
    computed: float
    explanation: str


def inconsistencies() -> list[Inconsistency]:
    """Recompute each known inconsistency of the papers from its inputs (Künas' thesis and Malta)."""
    transfer_rate = 932.2 / 106.510
    nn_twins_more = 0.10 / 0.060 - 1.0
    nn_twins_less = 1.0 - 0.060 / 0.10
    table_5_13 = 2.39 * 24.48 / 3.06  # Table 5.12 (no validation, 5 epochs) p3.16xlarge x price / p3.2xlarge
    return [
        Inconsistency("Künas' thesis Table 6.1 / Künas et al. Table 1: average transfer throughput", "12.2 MB/s",
                      transfer_rate,
                      "932.2 MB in 106.510 s is 8.75 MB/s; the stated 12.2 MB/s is not the ratio of the table's own "
                      "numbers (trainwise uses 8.75 MB/s)"),
        Inconsistency("Künas' thesis §6.3 NN-TWINS: TPUv3 vs local cluster", "66 % more expensive / 41 % less efficient",
                      nn_twins_more,
                      f"0.10 $ vs ~0.060 $ is {nn_twins_more:.0%} more expensive, i.e. a cost efficiency of "
                      f"{1 - 0.10 / 0.060:.0%}; '41 % less efficient' matches neither (1 − 0.060/0.10 = {nn_twins_less:.0%})"),
        Inconsistency("Malta's Table 5.13 (no validation, 5 epochs): p3.16xlarge relative cost", "12.2",
                      table_5_13,
                      "Table 5.12's relative time 2.39 × 24.48 $/h ÷ (1.00 × 3.06 $/h) = 19.1; the printed 12.2 cannot "
                      "come from the published time table and prices (every other cell does)"),
    ]


SOURCE_INCONSISTENCIES = tuple(item.where for item in inconsistencies())
