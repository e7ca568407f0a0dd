"""Measure a named model's training throughput on a real device: the device model's ground truth.

`measure_throughput("resnet50", 256, "amp_fp16", device="cuda")` runs exactly the training step the
characteriser traces on the meta device (`characterise.named_step`: same model builder, inputs,
loss and optimizer), for real, on synthetic inputs that live on the device (so the input pipeline
is not measured, as in the published benchmarks the device model is calibrated on), and times it
with `torch.utils.benchmark.Timer.blocked_autorange` (which synchronises CUDA around each block):
the result carries the median step time and its spread, not a bare number.

`to_validation_row` turns a measurement into a row of the validation CSV (`trainwise validate`),
so a user with a GPU can check the device model on their own hardware and keep the rows.

Precision, with the device model's meaning of each label: `fp32` is PyTorch's default, which is
TF32 for cuDNN convolutions and full FP32 for matmuls (`cudnn.allow_tf32=True`,
`cuda.matmul.allow_tf32=False`), `tf32` turns TF32 on for both, `amp_fp16` runs the step under
`torch.autocast(float16)` with a `GradScaler`, `amp_bf16` under `torch.autocast(bfloat16)` (the
AMP modes use the `fp32` switches for what stays in fp32). cuDNN's autotuner is on
(`cudnn.benchmark`), as in the calibration sources. Every switch is restored after.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise.agent.trace.categories import category_of
from trainwise.agent.trace.optimizers import normalise_optimizer
from trainwise.agent.trace.step import default_loss, materialise_inputs, normalise_precision
from trainwise.errors import TrainwiseError
from trainwise.predict import characterise as ch
from trainwise.predict.measurements import REQUIRED_COLUMNS

TIMER = "torch.utils.benchmark.Timer.blocked_autorange"


class ThroughputMeasurement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    per_device_batch: int
    precision: str
    optimizer: str
    seq_len: int | None = None
    image_size: int | None = None
    task: str | None = None
    memory_format: str = "nchw"
    device: str
    device_name: str
    samples_per_s: float
    step_time_s_median: float
    step_time_s_iqr: float
    step_time_s_blocks: list[float]  # the mean step time of each timed block
    steps_per_block: int
    warmup_steps: int
    warmup_s: float
    peak_memory_bytes: int | None = None  # torch.cuda.max_memory_allocated over warm-up and timing
    torch_version: str
    cuda_version: str | None = None
    timer: str = TIMER
    loss_finite: bool


def make_optimizer(name: str, parameters: Any) -> Any:
    """A real torch.optim optimizer for an OPTIMIZER_STATE name (the kind the characteriser costs)."""
    import torch

    key = normalise_optimizer(name)
    params = list(parameters)
    makers = {
        "sgd": lambda: torch.optim.SGD(params, lr=0.01),
        "sgd_momentum": lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9),
        "adam": lambda: torch.optim.Adam(params, lr=1e-4),
        "adamw": lambda: torch.optim.AdamW(params, lr=1e-4),
        "sgd_fused": lambda: torch.optim.SGD(params, lr=0.01, fused=True),
        "sgd_momentum_fused": lambda: torch.optim.SGD(params, lr=0.01, momentum=0.9, fused=True),
        "adam_fused": lambda: torch.optim.Adam(params, lr=1e-4, fused=True),
        "adamw_fused": lambda: torch.optim.AdamW(params, lr=1e-4, fused=True),
        "adadelta": lambda: torch.optim.Adadelta(params),
        "rmsprop": lambda: torch.optim.RMSprop(params, lr=1e-4),
        "rmsprop_momentum": lambda: torch.optim.RMSprop(params, lr=1e-4, momentum=0.9),
        "adagrad": lambda: torch.optim.Adagrad(params, lr=0.01),
    }
    if key not in makers:
        raise TrainwiseError(f"optimizer {name!r} has no torch.optim class to measure with: use one of {', '.join(makers)}")
    return makers[key]()


@contextlib.contextmanager
def _precision_switches(precision: str, device_type: str) -> Iterator[None]:
    import torch

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = True
        if device_type == "cuda":
            torch.backends.cudnn.benchmark = True
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved


def _to_device(value: Any, device: Any, channels_last: bool) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if channels_last and value.dim() == 4 and value.is_floating_point():
            value = value.contiguous(memory_format=torch.channels_last)
        return value
    if isinstance(value, dict):
        return {k: _to_device(v, device, channels_last) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device, channels_last) for v in value)
    return value


@dataclass
class _RealStep:
    """The named step built on a real device: `run()` trains one step, `sync()` waits for the device."""

    spec: ch.NamedStep
    device: Any
    precision: str
    memory_format: str  # nchw | nhwc
    run: Callable[[], None]
    sync: Callable[[], None]
    last_loss: list[Any]

    @property
    def device_name(self) -> str:
        import torch

        return torch.cuda.get_device_name(self.device) if self.device.type == "cuda" else "cpu"


def _build_real_step(model_name: str, per_device_batch: int, precision: str, *, seq_len: int | None,
                     image_size: int | None, optimizer: str | None, task: str | None, memory_format: str,
                     device: str, seed: int) -> _RealStep:
    import torch

    precision = normalise_precision(precision)
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TrainwiseError(f"device {device!r} asked for but torch.cuda.is_available() is False: pass --device cpu")
    channels_last = ch.normalise_memory_format(memory_format) == "nhwc"
    step_spec = ch.named_step(model_name, per_device_batch, seq_len, image_size, optimizer, task)
    torch.manual_seed(seed)
    model = step_spec.build().to(dev)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    model.train()
    inputs = _to_device(materialise_inputs(step_spec.inputs, "cpu"), dev, channels_last)
    args, kwargs = ((), inputs) if isinstance(inputs, dict) else (tuple(inputs) if isinstance(inputs, (tuple, list)) else (inputs,), {})
    loss_fn = step_spec.loss or default_loss
    opt = make_optimizer(step_spec.optimizer, [p for p in model.parameters() if p.requires_grad])
    amp_dtype = {"amp_fp16": torch.float16, "amp_bf16": torch.bfloat16}.get(precision)
    scaler = torch.amp.GradScaler(dev.type) if precision == "amp_fp16" else None
    last_loss: list[Any] = [None]

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        autocast = torch.autocast(dev.type, dtype=amp_dtype) if amp_dtype is not None else contextlib.nullcontext()
        with autocast:
            loss = loss_fn(model(*args, **kwargs))
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        last_loss[0] = loss

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    return _RealStep(step_spec, dev, precision, "nhwc" if channels_last else "nchw", step, sync, last_loss)


def measure_throughput(model_name: str, per_device_batch: int, precision: str = "fp32", *, seq_len: int | None = None,
                       image_size: int | None = None, optimizer: str | None = None, task: str | None = None,
                       memory_format: str = "nchw", device: str = "cuda", warmup_steps: int = 10,
                       min_run_time_s: float = 3.0, seed: int = 0) -> ThroughputMeasurement:
    """Train `model_name` for real on `device` and return its steady-state samples/s with spread."""
    import logging

    import torch

    # torch.utils.benchmark imports cpp_extension, which warns on a machine without a CUDA toolkit
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    import torch.utils.benchmark as benchmark

    if warmup_steps < 1 or min_run_time_s <= 0:
        raise TrainwiseError("warm-up steps must be ≥ 1 and the timed run > 0 s")
    real = _build_real_step(model_name, per_device_batch, precision, seq_len=seq_len, image_size=image_size,
                            optimizer=optimizer, task=task, memory_format=memory_format, device=device, seed=seed)
    dev, precision, step, sync, last_loss, step_spec = real.device, real.precision, real.run, real.sync, real.last_loss, real.spec

    with _precision_switches(precision, dev.type):
        if dev.type == "cuda":
            torch.cuda.reset_peak_memory_stats(dev)
        started = time.perf_counter()
        try:
            for _ in range(warmup_steps):  # cuDNN autotuning, allocator growth, lazy optimizer state
                step()
            sync()
        except torch.OutOfMemoryError:
            raise TrainwiseError(f"{model_name} at per-device batch {per_device_batch} ({precision}) does not fit "
                                 f"on {device}: lower the batch") from None
        warmup_s = time.perf_counter() - started
        timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
        result = timer.blocked_autorange(min_run_time=min_run_time_s)
        sync()
    loss_value = float(last_loss[0].detach().float().cpu()) if last_loss[0] is not None else float("nan")
    blocks = [float(t) for t in result.times]
    median = float(statistics.median(blocks))
    return ThroughputMeasurement(
        model=model_name, per_device_batch=per_device_batch, precision=precision, optimizer=step_spec.optimizer,
        seq_len=step_spec.seq_len, image_size=step_spec.image_size, task=task,
        memory_format=real.memory_format, device=str(dev), device_name=real.device_name,
        samples_per_s=per_device_batch / median, step_time_s_median=median, step_time_s_iqr=float(result.iqr),
        step_time_s_blocks=blocks, steps_per_block=int(result.number_per_run), warmup_steps=warmup_steps,
        warmup_s=warmup_s, peak_memory_bytes=int(torch.cuda.max_memory_allocated(dev)) if dev.type == "cuda" else None,
        torch_version=torch.__version__, cuda_version=torch.version.cuda if dev.type == "cuda" else None,
        loss_finite=bool(loss_value == loss_value and abs(loss_value) != float("inf")))


def accelerator_of_device_name(device_name: str, catalog: Any) -> str:
    """The catalog accelerator for a CUDA device name (`NVIDIA H100 80GB HBM3` -> `H100`), read as the planner
    reads a profile's device (`catalog.names.resolve_device_name`: never a variant taken for its base part)."""
    from trainwise.catalog.names import resolve_device_name

    name = resolve_device_name(device_name, catalog)
    if name is None:
        raise TrainwiseError(f"no catalog accelerator matches the device {device_name!r}: pass its catalog name "
                             "(`trainwise catalog accelerators`)")
    return name


# The calibration reader's required columns, then the optional ones a measurement fills.
VALIDATION_COLUMNS = (*REQUIRED_COLUMNS, "seq_len", "image_size", "task", "optimizer", "grad_accumulation",
                      "memory_format", "framework", "notes")


def to_validation_row(m: ThroughputMeasurement, accelerator: str, source: str) -> dict[str, Any]:
    """A row of the validation CSV (`trainwise validate --dataset`) for one measurement."""
    spread = m.step_time_s_iqr / m.step_time_s_median if m.step_time_s_median else 0.0
    notes = (f"{m.device_name}; torch {m.torch_version}, CUDA {m.cuda_version}; synthetic inputs on the device; "
             f"median of {len(m.step_time_s_blocks)} blocks of {m.steps_per_block} steps (IQR {spread:.1%}) after "
             f"{m.warmup_steps} warm-up steps")
    return {"model": m.model, "accelerator": accelerator, "count": 1, "per_device_batch": m.per_device_batch,
            "precision": m.precision, "samples_per_s": round(m.samples_per_s, 3), "source": source,
            "seq_len": m.seq_len or "", "image_size": m.image_size or "", "task": m.task or "",
            "optimizer": m.optimizer, "grad_accumulation": "", "memory_format": m.memory_format, "framework": "pytorch",
            "notes": notes}


def append_validation_row(path: str | Path, row: dict[str, Any]) -> Path:
    """Append `row` to the validation CSV at `path` (written whole, atomically; a new file gets the header).

    An existing file must have the validation columns' header, so rows never land under other columns."""
    from trainwise._io import atomic_write_text

    existing = check_validation_csv(path)
    if not existing.strip():
        existing = ""
    elif not existing.endswith("\n"):
        existing += "\n"
    return atomic_write_text(path, existing + validation_csv_text([row], header=not existing.strip()))


def check_validation_csv(path: str | Path) -> str:
    """The text of an existing validation CSV ("" when there is none), or an error when its header is not
    `VALIDATION_COLUMNS` (so rows never land under other columns)."""
    import csv

    path = Path(path)
    if path.is_dir():
        raise TrainwiseError(f"{path} is a directory: give a file path")
    if not path.exists():
        return ""
    existing = path.read_text(encoding="utf-8")
    header = next(csv.reader([existing.splitlines()[0]])) if existing.strip() else []
    if header and header != list(VALIDATION_COLUMNS):
        raise TrainwiseError(f"{path} has other columns ({', '.join(header[:7])}...): append to a file written by "
                             "`trainwise device measure --csv`, or give a new path")
    return existing


def validation_csv_text(rows: list[dict[str, Any]], header: bool = True) -> str:
    """Rows of the validation CSV (`VALIDATION_COLUMNS`), as text."""
    import csv
    import io

    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(VALIDATION_COLUMNS), lineterminator="\n")
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


class DeviceTimeBreakdown(BaseModel):
    """Where a real training step's device time goes, per operator category (torch.profiler).

    Each ATen operator's self device time (the kernels it launched itself) is put in the category the
    characteriser gives that operator, so it reads side by side with the device model's breakdown."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str
    per_device_batch: int
    precision: str
    seq_len: int | None = None
    memory_format: str
    device_name: str
    profiled_steps: int
    step_wall_s: float = Field(description="wall time per step while profiled (the profiler adds a little)")
    device_busy_s: float = Field(description="kernel time per step, all kernels")
    attributed_s: float = Field(description="kernel time per step attributed to an ATen operator")
    idle_fraction: float = Field(description="1 - device busy / wall: the share of the step the device waits (host-bound)")
    by_category_s: dict[str, float]
    ops: list[tuple[str, str, float]] = Field(description="every operator: (name, category, seconds per step), largest first")


_OPTIMIZER_PREFIXES = ("_foreach_", "_fused_adam", "_fused_adamw", "_fused_sgd", "_amp_foreach_non_finite_check_and_unscale",
                       "_amp_update_scale")
_RNN_OPS = ("_cudnn_rnn", "_cudnn_rnn_backward", "miopen_rnn", "miopen_rnn_backward")


def category_of_aten(name: str) -> str:
    """The characteriser's category for a profiler event name such as `aten::cudnn_convolution`."""
    import torch

    short = name.split("::", 1)[-1]
    if short.startswith(_OPTIMIZER_PREFIXES):
        return "optimizer"
    if short in _RNN_OPS:
        return "matmul"
    if short.startswith(("_flash_attention", "_efficient_attention", "_scaled_dot_product", "_cudnn_attention")):
        return "attention"
    packet = getattr(torch.ops.aten, short, None)
    func = None
    if packet is not None:  # add, mul, div have no .default overload: take one that carries the pointwise tag
        candidates = [getattr(packet, name) for name in packet.overloads()]
        tagged = [f for f in candidates if torch.Tag.pointwise in getattr(f, "tags", ())]
        func = (tagged or candidates or [None])[0]
    return category_of(short, func)


def measure_breakdown(model_name: str, per_device_batch: int, precision: str = "fp32", *, seq_len: int | None = None,
                      image_size: int | None = None, optimizer: str | None = None, task: str | None = None,
                      memory_format: str = "nchw", device: str = "cuda", warmup_steps: int = 10,
                      profiled_steps: int = 5, seed: int = 0) -> DeviceTimeBreakdown:
    """Profile `profiled_steps` real training steps and split their device time by operator category.

    On a CPU device the operators' self CPU time stands in for kernel time."""
    from torch.profiler import ProfilerActivity, profile

    if warmup_steps < 1 or profiled_steps < 1:
        raise TrainwiseError("warm-up and profiled steps must be ≥ 1")
    real = _build_real_step(model_name, per_device_batch, precision, seq_len=seq_len, image_size=image_size,
                            optimizer=optimizer, task=task, memory_format=memory_format, device=device, seed=seed)
    on_cuda = real.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with _precision_switches(real.precision, real.device.type):
        for _ in range(warmup_steps):
            real.run()
        real.sync()
        with profile(activities=activities) as prof:
            started = time.perf_counter()
            for _ in range(profiled_steps):
                real.run()
            real.sync()
            wall = (time.perf_counter() - started) / profiled_steps
    by_category: dict[str, float] = {}
    ops: list[tuple[str, str, float]] = []
    busy_us = 0.0
    for event in prof.key_averages():
        if on_cuda:
            self_us = float(getattr(event, "self_device_time_total", 0.0) or 0.0)
            is_kernel = str(getattr(event, "device_type", "")).endswith("CUDA")
            if is_kernel:
                busy_us += float(getattr(event, "device_time_total", 0.0) or 0.0)
        else:
            self_us = float(event.self_cpu_time_total or 0.0)
        if not event.key.startswith("aten::") or self_us <= 0:
            continue
        seconds = self_us * 1e-6 / profiled_steps
        category = category_of_aten(event.key)
        by_category[category] = by_category.get(category, 0.0) + seconds
        ops.append((event.key, category, seconds))
    attributed = sum(by_category.values())
    busy = busy_us * 1e-6 / profiled_steps if on_cuda else attributed
    ops.sort(key=lambda op: -op[2])
    return DeviceTimeBreakdown(
        model=model_name, per_device_batch=per_device_batch, precision=real.precision, seq_len=real.spec.seq_len,
        memory_format=real.memory_format, device_name=real.device_name, profiled_steps=profiled_steps,
        step_wall_s=wall, device_busy_s=busy, attributed_s=attributed,
        idle_fraction=max(0.0, 1.0 - busy / wall) if wall > 0 else 0.0,
        by_category_s={k: v for k, v in sorted(by_category.items(), key=lambda kv: -kv[1])},
        ops=ops)
