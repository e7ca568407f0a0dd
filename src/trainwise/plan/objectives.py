"""What the user wants (an objective) and what they will not accept (constraints), as pydantic models,
plus the parsers the CLI uses for "2h", "$25" and "time=1,cost=2".

Objectives
- fastest: smallest expected wall time (provisioning + staging + training + expected preemption loss);
- cheapest: smallest expected total cost (compute + egress + storage);
- weighted: PRESTO's convention (Erben et al., SIGMOD 2022): every metric min–max normalised over
  the candidates, lower-is-better metrics inverted (1 − minmax), score = Σ wᵢ·mᵢ', highest wins.
  Metrics here are all lower-is-better: `time` (wall s), `cost` ($), `risk` (relative half-width
  of the time band);
- deadline: the cheapest plan whose expected wall time meets `deadline_s`;
- budget: the fastest plan whose expected total cost is within `budget_usd`.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainwise.errors import TrainwiseError

ObjectiveKind = Literal["fastest", "cheapest", "weighted", "deadline", "budget"]
WEIGHTED_METRICS = {"time": "wall_s", "cost": "total_cost", "risk": "relative_band"}
OBJECTIVES = ("fastest", "cheapest", "weighted", "deadline", "budget")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Objective(_Model):
    kind: ObjectiveKind = "cheapest"
    weights: dict[str, float] = Field(default_factory=lambda: {"time": 1.0, "cost": 1.0})
    deadline_s: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> "Objective":
        unknown = sorted(set(self.weights) - set(WEIGHTED_METRICS))
        if unknown:
            raise ValueError(f"unknown weight(s) {', '.join(unknown)}: use {', '.join(WEIGHTED_METRICS)}")
        # NaN compares False with everything, so it would pass a plain `w < 0` test and then make every
        # score NaN; inf makes the min–max normalised sum NaN too.
        if (any(not math.isfinite(w) or w < 0 for w in self.weights.values())
                or not any(w > 0 for w in self.weights.values())):
            raise ValueError("weights must be finite numbers >= 0 with at least one > 0, e.g. time=1,cost=2")
        if self.kind == "deadline" and self.deadline_s is None:
            raise ValueError("the deadline objective needs a deadline (e.g. --deadline 2h)")
        if self.kind == "budget" and self.budget_usd is None:
            raise ValueError("the budget objective needs a budget (e.g. --budget 25)")
        return self

    @property
    def describe(self) -> str:
        if self.kind == "weighted":
            return "weighted: " + ", ".join(f"{k}×{v:g}" for k, v in self.weights.items()) + " (min–max normalised, PRESTO)"
        if self.kind == "deadline":
            return f"cheapest meeting a deadline of {format_hours(self.deadline_s)}"
        if self.kind == "budget":
            return f"fastest within a budget of {format_money(self.budget_usd)}"
        return self.kind


class Constraints(_Model):
    clouds: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    accelerators: tuple[str, ...] = ()
    allow_spot: bool = True
    min_gpu_memory_gib: float | None = Field(default=None, ge=0)
    # Weak scaling keeps the profile's batch per device, so N devices train with N times its global
    # batch; past some size the profile's epoch count no longer converges the model (Goyal et al.
    # 2017 kept ImageNet accuracy up to 8k only with a retuned learning rate and warm-up).
    max_global_batch: int | None = Field(default=None, gt=0)
    deadline_s: float | None = Field(default=None, gt=0)
    budget_usd: float | None = Field(default=None, gt=0)

    def with_objective(self, objective: Objective) -> "Constraints":
        """The objective's deadline/budget is also a constraint."""
        update = {}
        if objective.deadline_s is not None and self.deadline_s is None:
            update["deadline_s"] = objective.deadline_s
        if objective.budget_usd is not None and self.budget_usd is None:
            update["budget_usd"] = objective.budget_usd
        return self.model_copy(update=update) if update else self


def format_hours(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(min|d|h|m|s)?", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """'2h', '90m', '1h30m', '45min', '3600s', '3600' (seconds) → seconds."""
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned:
        raise TrainwiseError("empty duration: use e.g. 2h, 90m or 1h30m")
    total = 0.0
    position = 0
    for match in _DURATION.finditer(cleaned):
        if match.start() != position:
            break
        unit = (match.group(2) or "s").lower()
        total += float(match.group(1)) * {"d": 86400, "h": 3600, "m": 60, "min": 60, "s": 1}[unit]
        position = match.end()
    if cleaned.startswith("-") or (position == len(cleaned) and total <= 0):
        raise TrainwiseError(f"the duration must be positive (got {text!r}): use e.g. 2h, 90m, 1h30m or 3600s")
    if position != len(cleaned):
        raise TrainwiseError(f"cannot read the duration {text!r}: use e.g. 2h, 90m, 1h30m or 3600s")
    return total


def parse_money(text: str) -> float:
    """'25', '$25', '25.50 USD' → 25.0."""
    cleaned = text.strip().lower().replace("$", "").replace("usd", "").replace(",", "").strip()
    try:
        value = float(cleaned)
    except ValueError:
        raise TrainwiseError(f"cannot read the amount {text!r}: use e.g. 25 or $25.50") from None
    if not math.isfinite(value) or value <= 0:
        raise TrainwiseError(f"the budget must be a positive amount (got {text!r}): use e.g. 25 or $25.50")
    return value


def check_option_number(value: float | None, option: str, unit: str, *, minimum: float = 0.0,
                        above_minimum: bool = False, maximum: float = math.inf) -> None:
    """A numeric option is a finite number in [minimum, maximum] ((minimum, maximum] with
    `above_minimum`). A comparison alone lets NaN through (every comparison with NaN is false), and
    inf, or a finite value past any real setup, turns times and costs into inf or NaN downstream."""
    if value is None:
        return
    too_low = value <= minimum if above_minimum else value < minimum
    if not math.isfinite(value) or too_low or value > maximum:
        bound = f"{'>' if above_minimum else '>='} {minimum:,.15g}"
        if math.isfinite(maximum):
            bound += f" and <= {maximum:,.15g}"
        raise TrainwiseError(f"{option} must be a finite number {bound} {unit} (got {value:g})")


def format_money(usd: float) -> str:
    """Dollars with cents, or with significant digits below a cent (a $0.001 budget is not "$0.00")."""
    return f"${usd:,.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.2g}"


def parse_weights(text: str) -> dict[str, float]:
    """'time=1,cost=2' → {'time': 1.0, 'cost': 2.0}."""
    weights: dict[str, float] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        name = name.strip().lower()
        if not sep or name not in WEIGHTED_METRICS:
            raise TrainwiseError(f"cannot read the weight {part.strip()!r}: use NAME=VALUE with NAME one of "
                                 f"{', '.join(WEIGHTED_METRICS)}, e.g. time=1,cost=2")
        try:
            weights[name] = float(value)
        except ValueError:
            raise TrainwiseError(f"weight {name} must be a number (got {value.strip()!r})") from None
        if not math.isfinite(weights[name]) or weights[name] < 0:
            raise TrainwiseError(f"weight {name} must be a finite number >= 0 (got {value.strip()!r}), e.g. time=1,cost=2")
    if not weights:
        raise TrainwiseError("no weights given: use e.g. --weights time=1,cost=2")
    return weights


def check_objective_kind(kind: str) -> None:
    """One line for an objective name that is not one (with the nearest names)."""
    from trainwise.catalog import names

    if kind not in OBJECTIVES:
        near = names.suggest(kind, list(OBJECTIVES))
        raise TrainwiseError(f"unknown objective {kind!r}: " + (f"did you mean {', '.join(near)}?" if near else f"use one of {', '.join(OBJECTIVES)}"))


def make_objective(kind: str, *, weights: dict[str, float] | None = None, deadline_s: float | None = None,
                   budget_usd: float | None = None) -> Objective:
    """An Objective from CLI-like input, with one-line errors."""
    from pydantic import ValidationError

    check_objective_kind(kind)
    payload: dict = {"kind": kind, "deadline_s": deadline_s, "budget_usd": budget_usd}
    if weights is not None:
        payload["weights"] = weights
    try:
        return Objective(**payload)
    except ValidationError as exc:
        raise TrainwiseError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None
