"""Trace one training step of a model into the plain fields of its WorkloadCharacterisation (see
trainwise.agent.trace); `trace_step_fields` is the profiler's entry point. This module runs inside the user's job,
whose environment may hold nothing but torch: it imports only the standard library, torch and trainwise's leaf
modules, and `trainwise.agent.trace.characterisation` turns the fields into the pydantic model."""

from __future__ import annotations

import copy
import math
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal

from trainwise.agent.trace.dispatch import Tracer, make_dispatch_mode
from trainwise.agent.trace.flops import tensor_bytes
from trainwise.agent.trace.fused import make_function_mode
from trainwise.agent.trace.live import unwrap_model
from trainwise.agent.trace.optimizers import OPTIMIZER_STATE, normalise_optimizer, step_traffic
from trainwise.core.precisions import PRECISIONS
from trainwise.errors import TrainwiseError


def normalise_precision(precision: str) -> str:
    key = str(precision).strip().lower().replace("-", "_")
    aliases = {"fp16": "amp_fp16", "amp": "amp_fp16", "mixed": "amp_fp16", "bf16": "amp_bf16", "float32": "fp32",
               "single": "fp32", "amp16": "amp_fp16"}
    key = aliases.get(key, key)
    if key not in PRECISIONS:
        raise TrainwiseError(f"unknown precision {precision!r}: use one of {', '.join(PRECISIONS)}")
    return key


InputSpec = Any  # a tensor (any device), or (shape, dtype) / (shape, dtype, "index", high)


def materialise_inputs(example_inputs: Any, device: str) -> Any:
    """Meta (or CPU) tensors from tensors / (shape, dtype) specs; integer inputs get valid index values on CPU."""
    import torch

    def one(spec: Any) -> Any:
        if isinstance(spec, torch.Tensor):
            if device == "meta":
                return torch.empty(spec.shape, dtype=spec.dtype, device="meta")
            return spec.detach().to("cpu")
        if (isinstance(spec, (tuple, list)) and len(spec) >= 2 and isinstance(spec[0], (tuple, list, torch.Size))
                and all(isinstance(x, int) for x in spec[0]) and isinstance(spec[1], (str, torch.dtype))):
            shape = tuple(int(s) for s in spec[0])
            dtype = spec[1] if len(spec) > 1 else torch.float32
            if isinstance(dtype, str):
                dtype = getattr(torch, dtype.replace("torch.", ""))
            high = int(spec[3]) if len(spec) > 3 else 2
            if device == "meta":
                return torch.empty(shape, dtype=dtype, device="meta")
            if dtype.is_floating_point:
                return torch.randn(shape, dtype=dtype)
            return torch.randint(0, max(high, 1), shape, dtype=dtype)
        if isinstance(spec, dict):
            return {k: one(v) for k, v in spec.items()}
        if isinstance(spec, (tuple, list)):
            return type(spec)(one(v) for v in spec)
        return spec

    return one(example_inputs)


def default_loss(output: Any) -> Any:
    """A surrogate loss for a traced step: cross-entropy for (N, C) logits, else the mean."""
    import torch
    import torch.nn.functional as F

    if isinstance(output, dict):
        output = output.get("loss", output.get("logits", next(iter(output.values()))))
    if isinstance(output, (tuple, list)):
        output = output[0]
    if not isinstance(output, torch.Tensor):
        raise TrainwiseError("the model's output is not a tensor: pass loss_fn= to characterise_model")
    if output.dim() == 0:
        return output
    if output.dim() == 2 and output.shape[1] > 1 and output.is_floating_point():
        target = torch.empty(output.shape[0], dtype=torch.long, device=output.device)
        if output.device.type != "meta":
            target = target.fill_(0)
        return F.cross_entropy(output, target)
    return output.float().mean()


# How deep and how many of a module's plain attributes are searched for tensors (`attribute_tensors`).
ATTRIBUTE_TENSOR_DEPTH = 3
ATTRIBUTE_TENSORS_MAX = 100_000


def attribute_tensors(model: Any) -> list[Any]:
    """Tensors the model's modules keep in plain attributes, also inside lists, tuples and dicts (an RL policy's
    saved log-probabilities and rewards, a cache): deepcopy refuses a tensor that is not a graph leaf, so a copy
    must map them itself. Bounded: `ATTRIBUTE_TENSOR_DEPTH` levels, `ATTRIBUTE_TENSORS_MAX` values."""
    import torch

    found: list[Any] = []
    budget = [ATTRIBUTE_TENSORS_MAX]

    def walk(value: Any, depth: int) -> None:
        budget[0] -= 1
        if budget[0] < 0:
            return
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif depth < ATTRIBUTE_TENSOR_DEPTH and isinstance(value, (list, tuple, set, frozenset)):
            for item in value:
                walk(item, depth + 1)
        elif depth < ATTRIBUTE_TENSOR_DEPTH and isinstance(value, dict):
            for item in value.values():
                walk(item, depth + 1)

    for module in model.modules():
        for name, value in vars(module).items():
            if name not in ("_parameters", "_buffers", "_modules"):
                walk(value, 0)
    return found


def trace_copy(model: Any, device: str = "meta") -> Any:
    """A copy of `model` to trace on `device`; on the meta device without copying data.

    deepcopy with a memo that maps every parameter and buffer (and every tensor kept in a plain attribute,
    `attribute_tensors`) to an empty meta tensor, so a 20 GB model on a GPU costs nothing to copy; on the CPU
    the attribute tensors are detached copies. Hooks and other attributes are copied as usual.
    """
    import torch

    memo: dict[int, Any] = {}
    if device == "meta":
        for p in model.parameters():
            if id(p) not in memo:
                memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
        for b in model.buffers():
            if id(b) not in memo:
                memo[id(b)] = torch.empty_like(b, device="meta")
    for t in attribute_tensors(model):
        if id(t) not in memo:
            memo[id(t)] = torch.empty_like(t, device="meta") if device == "meta" else t.detach().to("cpu", copy=True)
    copied = copy.deepcopy(model, memo)
    return copied if device == "meta" else copied.to("cpu")


_TRACE_LOCK = threading.Lock()


def infer_batch_size(model: Any, flat_inputs: Sequence[Any]) -> int:
    """The batch size of a step's first input tensor: its dim 0, except for a sequence-first model (every
    recurrent layer or transformer layer built with batch_first=False, PyTorch's default for nn.LSTM/GRU/RNN and
    nn.Transformer*), whose (seq, batch, ...) inputs carry the batch in dim 1."""
    import torch

    if not flat_inputs or flat_inputs[0].dim() == 0:
        return 1
    first = flat_inputs[0]
    if first.dim() == 1 and first.is_floating_point() and any(
            isinstance(m, torch.nn.Linear) and m.in_features == first.shape[0] for m in model.modules()):
        return 1  # one unbatched sample (an RL policy fed one state): its length is a Linear's input width
    seq_layers = (torch.nn.RNNBase, torch.nn.TransformerEncoderLayer, torch.nn.TransformerDecoderLayer,
                  torch.nn.MultiheadAttention)
    flags = [bool(getattr(m, "batch_first", False)) for m in model.modules() if isinstance(m, seq_layers)]
    if flags and not any(flags) and first.dim() >= 2:
        return int(first.shape[1])
    return int(first.shape[0])


def step_fields(model: Any, example_inputs: Any, loss_fn: Callable[..., Any] | None = None,
                optimizer_name: str = "sgd_momentum", precision: str = "fp32", *, model_name: str = "model",
                per_device_batch: int | None = None, device: Literal["meta", "cpu"] = "meta",
                seq_len: int | None = None, image_size: int | None = None,
                copy_model: bool = True, memory_format: str = "nchw") -> dict[str, Any]:
    """Trace one training step of `model` and return its characterisation's fields (JSON-ready:
    `WorkloadCharacterisation.model_validate` takes them; `characterisation.characterise_model` does that).

    - `example_inputs`: the model's positional input(s) for one step at the per-device batch — a
      tensor (any device: only its shape and dtype are used on meta), a (shape, dtype) pair, or a
      tuple/list/dict of those. Integer inputs are token ids.
    - `loss_fn(output) -> scalar`: defaults to cross-entropy on (N, C) logits, else the mean of the output.
    - `optimizer_name`: a key of OPTIMIZER_STATE (sgd, sgd_momentum, adam, adamw, ...).
    - `precision`: fp32, tf32, amp_fp16 or amp_bf16 (AMP is simulated, see trainwise.agent.trace).
    - `device="meta"` (default) never allocates data; `"cpu"` runs the step for real (small models,
      or models whose forward needs real values).
    - The model is not modified: a meta copy is traced (`copy_model=False` traces `model` itself,
      which must then already live on `device`).
    """
    import torch

    precision = normalise_precision(precision)
    optimizer_name = normalise_optimizer(optimizer_name)
    started = time.perf_counter()
    if copy_model:
        traced = trace_copy(model, device)
    else:
        traced = model
    traced.train()
    inputs = materialise_inputs(example_inputs, device)
    args = inputs if isinstance(inputs, (tuple, list)) else (inputs,)
    kwargs: dict[str, Any] = {}
    if isinstance(inputs, dict):
        args, kwargs = (), inputs
    flat_inputs = [t for t in (list(args) + list(kwargs.values())) if isinstance(t, torch.Tensor)]
    batch = per_device_batch or infer_batch_size(traced, flat_inputs)

    params = [p for p in traced.parameters()]
    trainable = [p for p in params if p.requires_grad]
    tracer = Tracer(precision)
    tracer.param_ids = {id(p) for p in params}
    saved: dict[int, tuple[Any, int]] = {}

    def pack(t: Any) -> Any:
        base = t._base if t._base is not None else t
        if id(base) in tracer.param_ids or isinstance(base, torch.nn.Parameter):
            return t
        if any(entry[1] is base for entry in tracer.cast_cache.values()):
            return t  # autocast's weight copies are counted in amp_weight_copy_bytes
        if id(base) not in saved:
            saved[id(base)] = (base, int(tensor_bytes(base)))
        return t

    mode = make_dispatch_mode(tracer)
    autocast = make_function_mode(tracer, fused_attention=(device == "meta"))
    with _TRACE_LOCK:
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                with mode:
                    tracer.phase = "forward"
                    with autocast:
                        output = traced(*args, **kwargs)
                        loss = (loss_fn or default_loss)(output)
                    tracer.phase = "backward"
                    loss.backward()
        except TrainwiseError:
            raise
        except Exception as exc:
            raise TrainwiseError(
                f"tracing one training step of {model_name} on the {device} device failed "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}); "
                + ("a forward pass that needs real values (data-dependent shapes, .item()) cannot be traced on meta: "
                   "retry with device='cpu' at a small batch" if device == "meta" else
                   "the captured inputs do not fit the model's forward (e.g. a model called with extra arguments): "
                   "the device model cannot predict this job from its operators")) from None
        finally:
            tracer.phase = "forward"

    n_params = sum(p.numel() for p in params)
    n_trainable = sum(p.numel() for p in trainable)
    param_bytes = int(sum(tensor_bytes(p) for p in params))
    grad_bytes = int(sum(p.numel() * 4 if p.is_floating_point() else 0 for p in trainable))
    _, _, flops_pe, state_pe = OPTIMIZER_STATE[optimizer_name]
    read_b, write_b, calls = step_traffic(optimizer_name)
    opt_state = int(n_trainable * state_pe)
    n_tensors = len(trainable)
    if optimizer_name != "none" and n_trainable:
        # multi-tensor kernels: one launch per foreach call (one for a fused step) per group of tensors
        launches = max(1, math.ceil(n_tensors / 64)) * calls
        per_launch = n_trainable / launches
        tracer.add(f"optimizer.{optimizer_name}", "optimizer", flops_pe * per_launch, read_b * per_launch,
                   write_b * per_launch, "float32", [[n_trainable]], phase="optimizer")
        tracer.records[next(reversed(tracer.records))]["count"] = launches
    if precision == "amp_fp16" and n_trainable:
        # GradScaler: unscale + inf check over all gradients (one foreach pass), and the scale update
        launches = max(1, math.ceil(n_tensors / 64))
        per_launch = n_trainable / launches
        tracer.add("amp.unscale_", "optimizer", per_launch, 4 * per_launch, 4 * per_launch, "float32",
                   [[n_trainable]], phase="optimizer")
        tracer.records[next(reversed(tracer.records))]["count"] = launches
    records = [dict(r) for r in tracer.records.values()]
    activation_bytes = int(sum(b for _, b in saved.values()))
    inputs_desc = [f"{'x'.join(str(int(s)) for s in t.shape)}:{str(t.dtype).replace('torch.', '')}" for t in flat_inputs]
    notes = []
    if tracer.unsupported:
        notes.append("operators without a cost rule are modelled as memory-bound and widen the error band")
    return dict(
        format="trainwise.workload/1",
        model=model_name, per_device_batch=batch, precision=precision, optimizer=optimizer_name, inputs=inputs_desc,
        seq_len=seq_len, image_size=image_size, memory_format="nhwc" if memory_format in ("nhwc", "channels_last") else "nchw",
        records=records, parameters=int(n_params),
        trainable_parameters=int(n_trainable), parameter_tensors=len(params), parameter_bytes=param_bytes,
        gradient_bytes=grad_bytes, optimizer_state_bytes=opt_state, activation_bytes=activation_bytes,
        amp_weight_copy_bytes=int(tracer.amp_weight_copy_bytes), peak_temporary_bytes=int(tracer.peak_temporary_bytes),
        unsupported_ops=sorted(tracer.unsupported), trace_device=device,
        trace_seconds=round(time.perf_counter() - started, 3), torch_version=torch.__version__, notes=notes)


# Models up to this size are traced for real on the CPU when the meta trace fails (seconds, < 1 GB).
CPU_TRACE_MAX_PARAMETERS = 50_000_000


def trace_step_fields(model: Any, batch_shapes: Any, *, precision: str = "fp32", optimizer_name: str = "sgd_momentum",
                      model_name: str | None = None, memory_format: str = "nchw") -> dict[str, Any] | None:
    """The profiler's entry point: characterise a live model from the shapes/dtypes of its first batch (the
    fields of its WorkloadCharacterisation, as `step_fields` returns them).

    `batch_shapes` is what the recorder captured in a forward pre-hook (`batch_shapes_of(args, kwargs)`):
    (shape, dtype) pairs (or the tensors themselves), a tuple for positional inputs or a dict for
    keyword inputs. The live model is never modified or copied in memory: a meta copy (parameters
    replaced by meta tensors through deepcopy's memo) is traced. Wrappers (DDP, torch.compile) are
    unwrapped. Returns None instead of raising, so a model the tracer cannot handle never breaks a
    profile (the reason is issued as a RuntimeWarning).
    """
    import warnings

    inner = unwrap_model(model)
    name = model_name or type(inner).__name__
    try:
        return step_fields(inner, batch_shapes, None, optimizer_name, precision,
                           model_name=name, memory_format=memory_format)
    except Exception as exc:  # noqa: BLE001 - a profile must survive a failed characterisation
        meta_error = exc
    # A forward that needs real values (HF models call .item() on masks, data-dependent shapes)
    # cannot run on meta: run the step for real on the CPU when the model is small enough for that
    # to take seconds (random inputs, integer inputs in {0, 1}; the live model is not touched).
    parameters = sum(p.numel() for p in inner.parameters())
    if parameters <= CPU_TRACE_MAX_PARAMETERS:
        try:
            char = step_fields(inner, batch_shapes, None, optimizer_name, precision, model_name=name,
                               memory_format=memory_format, device="cpu")
            char["notes"].append(f"traced on the CPU with random inputs: the meta trace failed ({meta_error})")
            return char
        except Exception as exc:  # noqa: BLE001
            meta_error = exc
    warnings.warn(f"trainwise: workload characterisation skipped: {meta_error}", RuntimeWarning, stacklevel=2)
    return None
