"""What a catalog offers: accelerator specs and one offering (an instance type in a region at a
price). The catalog (`trainwise.catalog`) stores and queries them; predict and plan rank them."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainwise.core.costs import GRANULARITY_S

AcceleratorKind = Literal["gpu", "tpu", "other"]
Granularity = Literal["per_gpu", "per_die", "per_chip", "per_board"]
OfferingKind = Literal["cloud", "on_premise", "reserved"]
Billing = Literal["per_second", "per_minute", "per_hour"]

class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Accelerator(_Model):
    """Peak specs of one accelerator unit (dense, not sparse; see ACCELERATORS.md)."""

    name: str = Field(description="canonical short name, e.g. V100, A100-80GB, K80, TPU-v3")
    vendor: str
    kind: AcceleratorKind
    granularity: Granularity = Field(description="what one unit is: a GPU, a die of a 2-die board, a chip, a 4-chip board")
    architecture: str | None = None
    year: int | None = None
    memory_gib: float | None = None
    memory_bw_gbs: float | None = None
    fp64_tflops: float | None = None
    fp32_tflops: float | None = None
    tf32_tflops: float | None = None
    fp16_tflops: float | None = None
    bf16_tflops: float | None = None
    fp8_tflops: float | None = None
    int8_tops: float | None = None
    fp16_nontensor_tflops: float | None = None
    tdp_w: float | None = None
    cores: int | None = Field(default=None, description="SMs (NVIDIA), TensorCores (TPU), NeuronCores (Trainium) per unit")
    boost_clock_mhz: float | None = Field(default=None, description="datasheet boost clock (NVIDIA GPUs)")
    l2_cache_mib: float | None = Field(default=None, description="L2 cache per unit, MiB (NVIDIA GPUs)")
    interconnect: str | None = None
    aliases: tuple[str, ...] = ()
    spec_name: str = Field(description="the row of accelerators.csv the specs come from")
    notes: str = ""
    source: str = ""

    @property
    def peak_tflops(self) -> float | None:
        """Best dense 16-bit matmul peak (bf16, else fp16, else fp32): a normaliser, not a promise."""
        for value in (self.bf16_tflops, self.fp16_tflops, self.fp32_tflops):
            if value is not None:
                return value
        return None


class Offering(_Model):
    """One place to train: an instance type (or slice, or machine) in a region/zone at a price."""

    catalog: str
    offering_id: str
    cloud: str
    region: str | None
    zone: str | None = None
    instance_type: str
    accelerator: str | None = None
    source_accelerator: str | None = None
    accelerator_count: float = Field(default=0.0, ge=0)
    vcpus: float | None = Field(default=None, ge=0)
    memory_gib: float | None = Field(default=None, ge=0)
    accelerator_memory_gib: float | None = Field(default=None, ge=0)
    price_per_hour: float | None = Field(default=None, ge=0)
    spot_price_per_hour: float | None = Field(default=None, ge=0)
    kind: OfferingKind = "cloud"
    billing: Billing = "per_second"
    min_billed_seconds: float = Field(default=0.0, ge=0)
    price_date: str = ""
    source: str = ""
    notes: tuple[str, ...] = ()

    def price(self, spot: bool = False) -> float | None:
        return self.spot_price_per_hour if spot else self.price_per_hour

    def billed_hours(self, seconds: float) -> float:
        """Hours billed for a run of `seconds`: the minimum, then the billing granularity."""
        seconds = max(float(seconds), self.min_billed_seconds)
        step = GRANULARITY_S[self.billing]
        return math.ceil(seconds / step - 1e-9) * step / 3600.0
