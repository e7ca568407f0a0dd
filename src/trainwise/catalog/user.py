"""User-defined offerings: on-premise machines, reserved/committed prices, other providers.

A small TOML or YAML file (same structure in both):

    [catalog]                      # optional
    name = "my-lab"
    price_date = "2025-01"         # default: the file's modification date

    [[accelerator]]                # optional: specs for accelerators the catalog lacks
    name = "RTX3090"
    vendor = "NVIDIA"
    memory_gib = 24
    fp32_tflops = 35.6

    [[offering]]                   # an on-premise node, priced by amortisation
    name = "lab-p100"              # the instance type shown in plans
    kind = "on_premise"
    provider = "on-premise"        # the `cloud` column (default: on-premise)
    region = "porto-alegre"
    accelerator = "P100-SXM2"
    accelerator_count = 1
    capex_usd = 25000
    lifetime_years = 1             # or lifetime_hours
    power_kw = 0.0                 # optional: node power draw while training
    usd_per_kwh = 0.0
    utilisation = 1.0              # share of the lifetime the node does useful work
    share_of_node = 1.0            # share of the node this offering is (1 of 4 GPUs: 0.25)

    [[offering]]                   # reserved / committed: a rate, or upfront + term (+ hourly)
    name = "p3.2xlarge-1y-reserved"
    kind = "reserved"
    provider = "aws"
    region = "us-east-1"
    accelerator = "V100"
    accelerator_count = 1
    upfront_usd = 10000
    term_years = 1
    hourly_usd = 0.50

    [[offering]]                   # any provider not in the snapshot
    name = "1x-rtx3090"
    provider = "vast"
    accelerator = "RTX3090"
    accelerator_count = 1
    price_per_hour = 0.30
    spot_price_per_hour = 0.15

YAML: the same keys, with `offering:`/`offerings:` and `accelerator:`/`accelerators:` as lists.

Price formulas (USD/h):
- on-premise: (capex_usd / (lifetime_hours × utilisation) + power_kw × usd_per_kwh) × share_of_node,
  lifetime_hours = lifetime_years × 8760 (365 × 24, as Künas' thesis computes it); rounded to cents
  unless `round_cents = false`, as the seed does: 25,000 $ over one year = 2.8539… → 2.85 $/h
  (Künas leaves out power, staff and facilities — add power here when known).
  Capex is spread over the hours the node is used, power is paid only while it runs.
- reserved: hourly_usd + upfront_usd / (term_years × 8760), or `price_per_hour` directly.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from trainwise.catalog.model import Accelerator, Catalog, Offering, frame_from_offerings
from trainwise.catalog.packaged import packaged_accelerators
from trainwise.errors import TrainwiseError

HOURS_PER_YEAR = 365 * 24  # 8760, as Künas' thesis ("1 × 365 × 24")


def on_premise_price_per_hour(capex_usd: float, *, lifetime_years: float | None = None,
                              lifetime_hours: float | None = None, power_kw: float = 0.0, usd_per_kwh: float = 0.0,
                              utilisation: float = 1.0, share_of_node: float = 1.0, round_cents: bool = True) -> float:
    """Amortised USD/h of an owned machine (formula in the module docstring)."""
    if (lifetime_years is None) == (lifetime_hours is None):
        raise TrainwiseError("give exactly one of lifetime_years or lifetime_hours for an on-premise offering")
    hours = lifetime_hours if lifetime_hours is not None else lifetime_years * HOURS_PER_YEAR  # type: ignore[operator]
    if capex_usd < 0 or hours <= 0 or power_kw < 0 or usd_per_kwh < 0:
        raise TrainwiseError("capex_usd, power_kw and usd_per_kwh must be >= 0 and the lifetime > 0")
    if not 0 < utilisation <= 1 or not 0 < share_of_node <= 1:
        raise TrainwiseError("utilisation and share_of_node must be in (0, 1]")
    price = (capex_usd / (hours * utilisation) + power_kw * usd_per_kwh) * share_of_node
    return round(price, 2) if round_cents else price


def reserved_price_per_hour(*, upfront_usd: float = 0.0, term_years: float | None = None,
                            hourly_usd: float = 0.0) -> float:
    """Effective USD/h of a reservation: the recurring rate plus the upfront spread over the term."""
    if upfront_usd and not term_years:
        raise TrainwiseError("a reserved offering with upfront_usd needs term_years")
    return hourly_usd + (upfront_usd / (term_years * HOURS_PER_YEAR) if upfront_usd else 0.0)  # type: ignore[operator]


# Upper bounds: far above any real offering, low enough that sums and products stay finite
MAX_PRICE_PER_HOUR = 1e6  # the dearest snapshot offering (a whole GCP TPU pod) is 29,362 $/h
MAX_USD = 1e10
MAX_COUNT = 100_000.0
MAX_SPEC = 1e7  # GiB, GB/s, TFLOPS, W, kW


def _checked_name(value: str, what: str) -> str:
    from trainwise.userfiles import check_safe_name

    try:
        return check_safe_name(value, what)
    except TrainwiseError as exc:
        raise ValueError(str(exc)) from None


class _Strict(BaseModel):
    # inf/nan are valid TOML and YAML floats: an infinite price or memory would rank as a real number
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class UserAccelerator(_Strict):
    name: str = Field(min_length=1)
    vendor: str = "unknown"
    kind: Literal["gpu", "tpu", "other"] = "gpu"
    granularity: Literal["per_gpu", "per_die", "per_chip", "per_board"] = "per_gpu"
    architecture: str | None = None
    year: int | None = None
    memory_gib: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    memory_bw_gbs: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    fp64_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    fp32_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    tf32_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    fp16_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    bf16_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    fp8_tflops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    int8_tops: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    tdp_w: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    # what the per-operator kernel model reads besides the peaks (GPUs): SMs, boost clock, L2
    cores: int | None = Field(default=None, gt=0, le=100_000)
    boost_clock_mhz: float | None = Field(default=None, gt=0, le=10_000)
    l2_cache_mib: float | None = Field(default=None, gt=0, le=MAX_SPEC)
    interconnect: str | None = None
    aliases: list[str] = []
    notes: str = ""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _checked_name(value, "accelerator name")


class UserOffering(_Strict):
    name: str = Field(min_length=1, description="instance type / machine name")
    kind: Literal["cloud", "on_premise", "reserved"] = "cloud"
    provider: str | None = None
    region: str | None = None
    zone: str | None = None
    accelerator: str | None = None
    accelerator_count: float = Field(default=0.0, ge=0, le=MAX_COUNT)
    accelerator_memory_gib: float | None = Field(default=None, ge=0, le=MAX_SPEC)
    vcpus: float | None = Field(default=None, ge=0, le=MAX_COUNT)
    memory_gib: float | None = Field(default=None, ge=0, le=MAX_SPEC)
    price_per_hour: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_HOUR)
    spot_price_per_hour: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_HOUR)
    # on-premise
    capex_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    lifetime_years: float | None = Field(default=None, gt=0, le=1000)
    lifetime_hours: float | None = Field(default=None, ge=1, le=1000 * HOURS_PER_YEAR)
    power_kw: float = Field(default=0.0, ge=0, le=MAX_SPEC)
    usd_per_kwh: float = Field(default=0.0, ge=0, le=MAX_PRICE_PER_HOUR)
    utilisation: float = Field(default=1.0, gt=0, le=1)
    share_of_node: float = Field(default=1.0, gt=0, le=1)
    round_cents: bool = True
    # reserved / committed
    upfront_usd: float | None = Field(default=None, ge=0, le=MAX_USD)
    term_years: float | None = Field(default=None, gt=0, le=1000)
    hourly_usd: float | None = Field(default=None, ge=0, le=MAX_PRICE_PER_HOUR)
    billing: Literal["per_second", "per_minute", "per_hour"] | None = None
    min_billed_seconds: float | None = Field(default=None, ge=0)
    source: str | None = None
    notes: list[str] = []

    @field_validator("name", "provider", "region", "zone", "accelerator")
    @classmethod
    def _names(cls, value: str | None, info: Any) -> str | None:
        # the name becomes the task's instance_type, the provider its cloud: no shell or YAML syntax
        if value is None:
            return None
        what = {"name": "instance type (name)"}.get(info.field_name, info.field_name)
        return _checked_name(value, what)

    @model_validator(mode="after")
    def _consistent(self) -> "UserOffering":
        if self.kind == "on_premise":
            if self.capex_usd is None and self.price_per_hour is None:
                raise ValueError("an on_premise offering needs capex_usd (+ lifetime_years or lifetime_hours) or price_per_hour")
            if self.capex_usd is not None and (self.lifetime_years is None) == (self.lifetime_hours is None):
                raise ValueError("give exactly one of lifetime_years or lifetime_hours with capex_usd")
        elif self.capex_usd is not None:
            raise ValueError("capex_usd is for kind = \"on_premise\"")
        if self.kind == "reserved":
            if self.price_per_hour is None and self.upfront_usd is None and self.hourly_usd is None:
                raise ValueError("a reserved offering needs price_per_hour, or upfront_usd + term_years (and/or hourly_usd)")
            if self.upfront_usd and not self.term_years:
                raise ValueError("upfront_usd needs term_years")
        if self.kind == "cloud" and self.price_per_hour is None and self.spot_price_per_hour is None:
            raise ValueError("a cloud offering needs price_per_hour and/or spot_price_per_hour")
        if self.accelerator is not None and self.accelerator_count <= 0:
            raise ValueError("accelerator_count must be > 0 when an accelerator is given")
        return self

    def hourly(self) -> tuple[float | None, str]:
        """(price_per_hour, formula note)."""
        if self.kind == "on_premise" and self.capex_usd is not None:
            price = on_premise_price_per_hour(self.capex_usd, lifetime_years=self.lifetime_years,
                                              lifetime_hours=self.lifetime_hours, power_kw=self.power_kw,
                                              usd_per_kwh=self.usd_per_kwh, utilisation=self.utilisation,
                                              share_of_node=self.share_of_node, round_cents=self.round_cents)
            life = f"{self.lifetime_years:g} y x 8760 h" if self.lifetime_years else f"{self.lifetime_hours:g} h"
            return price, (f"on-premise: ({self.capex_usd:g} $ / ({life} x utilisation {self.utilisation:g}) + "
                           f"{self.power_kw:g} kW x {self.usd_per_kwh:g} $/kWh) x share {self.share_of_node:g} = {price:g} $/h")
        if self.kind == "reserved" and self.price_per_hour is None:
            price = reserved_price_per_hour(upfront_usd=self.upfront_usd or 0.0, term_years=self.term_years,
                                            hourly_usd=self.hourly_usd or 0.0)
            return price, (f"reserved: {self.hourly_usd or 0:g} $/h + {self.upfront_usd or 0:g} $ / "
                           f"({self.term_years or 0:g} y x 8760 h) = {price:.4f} $/h")
        return self.price_per_hour, ""


class UserFile(_Strict):
    catalog: dict[str, str] = {}
    accelerator: list[UserAccelerator] = []
    offering: list[UserOffering] = []


def _read(path: Path) -> dict[str, Any]:
    from trainwise.userfiles import load_structured

    hint = ("write one, e.g. [[offering]] name = \"my-box\", kind = \"on_premise\", capex_usd = 25000, "
            "lifetime_years = 1 (the format is in trainwise.catalog.user's docstring)")
    data = load_structured(path, "user offerings file", suffixes=(".toml", ".yaml", ".yml"), missing_hint=hint)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise TrainwiseError(f"{path}: expected a table/mapping with `offering` entries at the top level")
    for plural, singular in (("offerings", "offering"), ("accelerators", "accelerator")):
        for key in (plural, singular):
            if data.get(key) is not None and not isinstance(data[key], list):
                raise TrainwiseError(f"{path}, field {key}: expected a list of tables, got a {type(data[key]).__name__}")
        if plural in data:
            data.setdefault(singular, [])
            data[singular] = list(data[singular] or []) + list(data.pop(plural) or [])
    return data


def _validation_message(path: Path, data: dict[str, Any], exc: ValidationError) -> str:
    error = exc.errors()[0]
    loc = list(error["loc"])
    where = str(path)
    if len(loc) >= 2 and loc[0] in ("offering", "accelerator") and isinstance(loc[1], int):
        entries = data.get(loc[0]) or []
        entry = entries[loc[1]] if loc[1] < len(entries) and isinstance(entries[loc[1]], dict) else {}
        label = f" ({entry.get('name')})" if entry.get("name") else ""
        where += f": {loc[0]} {loc[1] + 1}{label}"
        loc = loc[2:]
    field = ".".join(str(p) for p in loc)
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown field (check the spelling; see `trainwise.catalog.user` for the fields)"
    more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
    return f"{where}" + (f", field {field}" if field else "") + f": {message}{more}"


def load_user_offerings(path: str | Path, base_accelerators: dict[str, Accelerator] | None = None) -> Catalog:
    """A Catalog of the offerings in a user TOML/YAML file (merge it with `Catalog.merged_with`)."""
    path = Path(path)
    data = _read(path)
    try:
        parsed = UserFile.model_validate(data)
    except ValidationError as exc:
        raise TrainwiseError(_validation_message(path, data, exc)) from None
    accelerators = dict(base_accelerators if base_accelerators is not None else packaged_accelerators())
    for spec in parsed.accelerator:
        payload = spec.model_dump()
        payload["aliases"] = tuple(payload["aliases"])
        accelerators[spec.name] = Accelerator(**payload, spec_name=spec.name, source=f"user file {path.name}")
    probe = Catalog(name="probe", snapshot_date="", source="", offerings=frame_from_offerings([]), accelerators=accelerators)
    name = parsed.catalog.get("name") or f"user:{path.stem}"
    price_date = parsed.catalog.get("price_date") or datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).date().isoformat()
    offerings: list[Offering] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(parsed.offering, start=1):
        where = f"{path}: offering {index} ({entry.name})"
        accelerator = None
        memory = entry.accelerator_memory_gib
        if entry.accelerator is not None:
            try:
                spec = probe.accelerator(entry.accelerator)
            except TrainwiseError as exc:
                raise TrainwiseError(f"{where}, field accelerator: {exc}; or define it in an [[accelerator]] table") from None
            accelerator = spec.name
            if memory is None and spec.memory_gib is not None:
                memory = spec.memory_gib * min(entry.accelerator_count, 1.0)
        try:
            price, formula = entry.hourly()
        except TrainwiseError as exc:
            raise TrainwiseError(f"{where}: {exc}") from None
        if price is not None and not math.isfinite(price):  # finite inputs can still overflow (capex / a tiny lifetime)
            raise TrainwiseError(f"{where}: the price works out to {price:g} $/h ({formula or 'price_per_hour'}): "
                                 "give finite, realistic prices, capex and lifetimes")
        provider = entry.provider or ("on-premise" if entry.kind == "on_premise" else "user")
        offering_id = f"{provider}/{entry.zone or entry.region or '-'}/{entry.name}"
        if offering_id in seen:
            raise TrainwiseError(f"{where}, field name: duplicate offering {offering_id!r} (also offering {seen[offering_id]}); "
                                 "give each a different name, provider or region")
        seen[offering_id] = index
        default_billing = {"on_premise": ("per_second", 0.0), "reserved": ("per_hour", 0.0), "cloud": ("per_second", 60.0)}
        billing, minimum = default_billing[entry.kind]
        notes = tuple(([formula] if formula else []) + list(entry.notes))
        offerings.append(Offering(
            catalog=name, offering_id=offering_id, cloud=provider, region=entry.region, zone=entry.zone,
            instance_type=entry.name, accelerator=accelerator, source_accelerator=entry.accelerator,
            accelerator_count=entry.accelerator_count, vcpus=entry.vcpus, memory_gib=entry.memory_gib,
            accelerator_memory_gib=memory, price_per_hour=price, spot_price_per_hour=entry.spot_price_per_hour,
            kind=entry.kind, billing=entry.billing or billing,
            min_billed_seconds=entry.min_billed_seconds if entry.min_billed_seconds is not None else minimum,
            price_date=price_date, source=entry.source or f"{path.name} offering {index}", notes=notes))
    if not offerings:
        raise TrainwiseError(f"{path}: no offerings found; add at least one [[offering]] table (TOML) or `offerings:` list (YAML)")
    return Catalog.from_offerings(offerings, name=name, snapshot_date=price_date, source=f"user offerings file {path}",
                                  accelerators=accelerators, origin=f"user file {path}")
