"""The workload characterisation: one training step of a model traced per operator (FLOPs, bytes,
phase, category), device-independent. `trainwise.agent.trace` traces it; the Profile carries it;
the device model predicts other accelerators from it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainwise.core.precisions import PRECISIONS

Category = Literal["matmul", "conv", "attention", "elementwise", "reduction", "normalisation", "embedding",
                   "optimizer", "copy", "other"]
Precision = Literal["fp32", "tf32", "amp_fp16", "amp_bf16"]
Phase = Literal["forward", "backward", "optimizer"]

COMPUTE_CATEGORIES = ("matmul", "conv", "attention")
MEMORY_CATEGORIES = ("elementwise", "reduction", "normalisation", "embedding", "optimizer", "copy", "other")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class OpRecord(_Model):
    """One operator (or `count` identical calls of it) of the traced training step."""

    op: str = Field(description="ATen overload, e.g. aten.convolution.default; optimizer.<name> for the analytic step")
    category: Category
    phase: Phase
    count: int = Field(ge=1, description="identical calls merged into this record")
    flops: float = Field(ge=0, description="per call, FMA = 2 FLOPs")
    bytes_read: float = Field(ge=0, description="per call")
    bytes_written: float = Field(ge=0, description="per call")
    dtype: str = Field(description="the dtype the operator computes in (its first floating input)")
    shapes: list[list[int]] = Field(default_factory=list, description="shapes of the first tensor arguments")
    align: int = Field(default=16, description="largest of 16/8/4/2/1 dividing the matmul/conv dimensions tensor cores need")
    groups: int = Field(default=1, description="convolution groups (depthwise convolutions run off the tensor cores)")

    @property
    def total_flops(self) -> float:
        return self.flops * self.count

    @property
    def total_bytes(self) -> float:
        return (self.bytes_read + self.bytes_written) * self.count


class WorkloadCharacterisation(_Model):
    """One training step of a model at one per-device batch size and precision, device-independent."""

    format: Literal["trainwise.workload/1"] = "trainwise.workload/1"
    model: str
    per_device_batch: int = Field(ge=1)
    precision: Precision
    optimizer: str
    inputs: list[str] = Field(description="shape:dtype of each model input, e.g. 256x3x224x224:float32")
    seq_len: int | None = None
    image_size: int | None = None
    memory_format: Literal["nchw", "nhwc"] = Field(default="nchw", description="activation layout of 4-D tensors "
                                                   "(channels_last = nhwc): NCHW 16-bit convolutions pay layout transposes")
    records: list[OpRecord]
    parameters: int = Field(ge=0)
    trainable_parameters: int = Field(ge=0)
    parameter_tensors: int = Field(ge=0)
    parameter_bytes: int = Field(ge=0)
    gradient_bytes: int = Field(ge=0, description="fp32 gradients of the trainable parameters (what data-parallel all-reduces)")
    optimizer_state_bytes: int = Field(ge=0)
    activation_bytes: int = Field(ge=0, description="distinct tensors saved for backward (parameters excluded)")
    amp_weight_copy_bytes: int = Field(ge=0, description="low-precision copies of the weights autocast keeps during the step")
    peak_temporary_bytes: int = Field(ge=0, description="largest single backward output: the transient on top of the saved activations")
    unsupported_ops: list[str] = Field(default_factory=list, description="operators with no cost rule: modelled as memory-bound, band widened")
    passes_per_step: int = Field(default=1, ge=1, description=(
        "forward/backward passes of the traced input per optimizer step, all in `records` and `per_device_batch`: "
        "gradient accumulation without a DataLoader, a closure optimizer's evaluations, a policy called per action"))
    pass_batch: int | None = Field(default=None, ge=1, description=(
        "the batch of one of several passes (None: one pass of `per_device_batch`)"))
    trace_device: Literal["meta", "cpu"] = "meta"
    trace_seconds: float = 0.0
    torch_version: str = ""
    notes: list[str] = Field(default_factory=list)

    # ---- totals ----
    def total_flops(self, phase: str | None = None) -> float:
        return sum(r.total_flops for r in self.records if phase is None or r.phase == phase)

    def total_bytes(self, phase: str | None = None) -> float:
        return sum(r.total_bytes for r in self.records if phase is None or r.phase == phase)

    @property
    def kernel_launches(self) -> int:
        return sum(r.count for r in self.records)

    def by_category(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for r in self.records:
            entry = out.setdefault(r.category, {"flops": 0.0, "bytes": 0.0, "calls": 0.0})
            entry["flops"] += r.total_flops
            entry["bytes"] += r.total_bytes
            entry["calls"] += r.count
        return out

    @property
    def traced_batch(self) -> int:
        """The batch of one traced pass (`per_device_batch` is the step's samples, over all its passes)."""
        return self.pass_batch or self.per_device_batch

    def with_passes(self, passes: int, forwards_per_backward: float = 1.0,
                    new_samples: bool = True) -> "WorkloadCharacterisation":
        """This single-pass step as one of `passes` forward/backward passes of the traced input and one optimizer
        step: the passes run one after another at the traced batch (their kernels as many times, none merged), each
        on new samples (`new_samples`; a closure optimizer evaluates the same batch again), `forwards_per_backward`
        > 1 when a graph holds several forwards' activations until one backward."""
        passes = int(passes)
        if passes <= 1 or self.passes_per_step != 1:
            return self
        records = [r if r.phase == "optimizer" else r.model_copy(update={"count": r.count * passes})
                   for r in self.records]
        kept = max(1.0, float(forwards_per_backward))
        return self.model_copy(update={
            "records": records, "per_device_batch": self.per_device_batch * (passes if new_samples else 1),
            "passes_per_step": passes, "pass_batch": self.per_device_batch,
            "activation_bytes": int(self.activation_bytes * kept),
            "notes": [*self.notes, f"{passes} forward/backward passes of the traced batch {self.per_device_batch} "
                                   "per optimizer step (counted in the profile)"]})

    def with_other_model(self, other: "WorkloadCharacterisation", calls: int) -> "WorkloadCharacterisation":
        """This step and another model's that trains beside it (a GAN's discriminator, a decoder called apart):
        its forward/backward `calls` times an optimizer step, its own optimizer step once; parameters, gradients
        and state add up, and the activations of all its calls (held until their backward)."""
        calls = max(1, int(calls))
        records = [*self.records, *(r if r.phase == "optimizer" else r.model_copy(update={"count": r.count * calls})
                                    for r in other.records)]
        summed = {key: getattr(self, key) + getattr(other, key) for key in (
            "parameters", "trainable_parameters", "parameter_tensors", "parameter_bytes", "gradient_bytes",
            "optimizer_state_bytes", "amp_weight_copy_bytes")}
        return self.model_copy(update={
            **summed, "model": f"{self.model}+{other.model}", "records": records,
            "activation_bytes": self.activation_bytes + other.activation_bytes * calls,
            "peak_temporary_bytes": max(self.peak_temporary_bytes, other.peak_temporary_bytes),
            "unsupported_ops": sorted(set(self.unsupported_ops) | set(other.unsupported_ops)),
            "trace_seconds": round(self.trace_seconds + other.trace_seconds, 3),
            "notes": [*self.notes, f"also trains: {other.model} ({other.parameters:,} parameters, inputs "
                                   f"{', '.join(other.inputs)}), called {calls}x per optimizer step, its own "
                                   f"{other.optimizer} step"]})

    def memory_breakdown(self, count: int = 1) -> dict[str, int]:
        """Bytes per device during the step; `count` > 1 adds DDP's gradient buckets."""
        parts = {
            "weights": self.parameter_bytes,
            "gradients": self.gradient_bytes,
            "optimizer_state": self.optimizer_state_bytes,
            "amp_weight_copies": self.amp_weight_copy_bytes,
            "activations": self.activation_bytes,
            "backward_temporaries": self.peak_temporary_bytes,
            "ddp_buckets": self.gradient_bytes if count > 1 else 0,
        }
        parts["total"] = sum(parts.values())
        return parts

    def save(self, path: str | Path) -> Path:
        from trainwise._io import atomic_write_text

        return atomic_write_text(path, self.model_dump_json())
