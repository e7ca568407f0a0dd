"""The step tracer's results as core's WorkloadCharacterisation (a pydantic model): for trainwise's own process
(`trainwise characterise`, the device model's reference workloads, the tests). Inside the user's job the profiler
keeps the plain fields (`step.trace_step_fields`), since pydantic need not be installed there; the profile's
reader validates them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from trainwise.agent.trace.step import step_fields, trace_step_fields
from trainwise.core.workload import WorkloadCharacterisation


def characterise_model(model: Any, example_inputs: Any, loss_fn: Callable[..., Any] | None = None,
                       optimizer_name: str = "sgd_momentum", precision: str = "fp32", *, model_name: str = "model",
                       per_device_batch: int | None = None, device: Literal["meta", "cpu"] = "meta",
                       seq_len: int | None = None, image_size: int | None = None,
                       copy_model: bool = True, memory_format: str = "nchw") -> WorkloadCharacterisation:
    """Trace one training step of `model` and return its characterisation (the arguments: `step.step_fields`)."""
    return WorkloadCharacterisation.model_validate(step_fields(
        model, example_inputs, loss_fn, optimizer_name, precision, model_name=model_name,
        per_device_batch=per_device_batch, device=device, seq_len=seq_len, image_size=image_size,
        copy_model=copy_model, memory_format=memory_format))


def trace_training_step(model: Any, batch_shapes: Any, *, precision: str = "fp32", optimizer_name: str = "sgd_momentum",
                        model_name: str | None = None, memory_format: str = "nchw") -> WorkloadCharacterisation | None:
    """`step.trace_step_fields` as a WorkloadCharacterisation (None when the model could not be traced)."""
    fields = trace_step_fields(model, batch_shapes, precision=precision, optimizer_name=optimizer_name,
                               model_name=model_name, memory_format=memory_format)
    return None if fields is None else WorkloadCharacterisation.model_validate(fields)
