"""Subnormal floats in the optimizer state: counted when sampling stops, and what they cost a step on
this CPU, timed on a copy of the job's optimizer outside the measured iterations (trainwise.predict.
state_subnormals uses them). A mixin of the recorder.

Why: x86 CPUs handle arithmetic on subnormal (denormal) floats in microcode. A parameter whose gradient
stays exactly zero (a ReLU unit that stopped firing, an embedding row no batch reaches) has optimizer
moments that decay geometrically (Adam's exp_avg by beta1 and exp_avg_sq by beta2 each step, SGD's
momentum buffer by its momentum) into the subnormal range, and there they stick: rounding k * 2^-149
times 0.999 gives k back for k < 500. Seen here (tests/scripts/clients/checkpoint_every_epoch.py, a
ReLU MLP with Adam, 975,000 steps): no unit dead in the first 7,800 steps a profile samples, 157 of 256
dead after 195,000; 31,000 of its 33,800 state values subnormal by the end and the step 0.56 -> 0.82 ms.
A short profile cannot see units that die later, so the prediction states the worst case, measured.
"""

from __future__ import annotations

from typing import Any

from trainwise.profile._state_zeros import _best_of_five_s, optimizer_copy

# The copy of the optimizer steps over at most this many elements (~1 ms a step here)
PROBE_ELEMENTS = 1 << 18
# State larger than this is not counted element by element (its masks would be as large)
MAX_COUNTED_ELEMENTS = 64_000_000


def _per_parameter_state(torch: Any, optimizer: Any) -> list[Any]:
    """CPU floating-point state tensors shaped like their parameter: what a step reads per element."""
    out = []
    for param, state in list(getattr(optimizer, "state", {}).items()):
        if not isinstance(state, dict):
            continue
        for value in state.values():
            if (isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.is_floating_point()
                    and value.dim() > 0 and tuple(value.shape) == tuple(getattr(param, "shape", ()))):
                out.append(value)
    return out


def step_ns_per_element(torch: Any, optimizer: Any, dtype: Any, count: int) -> tuple[float, float] | None:
    """(normal, subnormal): ns per state value of a step of a copy of `optimizer` (its class, its first group's
    settings) over `count` elements whose gradient is zero and whose per-element state holds normal values,
    then subnormal ones: what a parameter that stopped learning costs it. None when the optimizer cannot
    step without the job (a closure, as LBFGS's) or keeps no per-element state."""
    param = torch.nn.Parameter(torch.randn(count, dtype=dtype))
    probe = optimizer_copy(optimizer, optimizer.param_groups[0], param)
    param.grad = torch.zeros(count, dtype=dtype)
    try:
        probe.step()  # creates the state
    except TypeError:
        return None  # a step that needs the job's closure (LBFGS)
    state = [v for v in probe.state[param].values() if isinstance(v, torch.Tensor) and v.shape == param.shape]
    if not state:
        return None
    subnormal = torch.finfo(dtype).tiny / 64

    def seconds(value: float) -> float:
        def reset() -> None:
            for tensor in state:
                tensor.fill_(value)
            param.grad = torch.zeros(count, dtype=dtype)

        return _best_of_five_s(probe.step, reset)

    values = count * len(state)  # per state value: Adam keeps two per parameter element, SGD's momentum one
    return seconds(1e-3) / values * 1e9, seconds(subnormal) / values * 1e9


class StateSubnormalsRecording:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    optimizer_state_subnormals: dict[str, Any] | None = None  # set once, when sampling stops

    def _measure_state_subnormals(self) -> None:
        torch = self._torch
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if torch is None or optimizer is None or self.optimizer_state_subnormals is not None:
            return
        try:
            tensors = _per_parameter_state(torch, optimizer)
            elements = sum(t.numel() for t in tensors)
            if not elements:
                return
            subnormals = None
            if elements <= MAX_COUNTED_ELEMENTS:
                subnormals = 0
                for t in tensors:
                    tiny = torch.finfo(t.dtype).tiny
                    magnitude = t.abs()
                    subnormals += int(((magnitude < tiny) & (magnitude > 0)).sum())
            timed = None
            # torch's own optimizers only: a copy of another (ZeroRedundancyOptimizer's kind) may talk to other ranks
            if type(optimizer).__module__.startswith("torch.optim"):
                with self.bus.muted():  # the copy's steps are not the job's iterations
                    timed = step_ns_per_element(torch, optimizer, tensors[0].dtype, min(elements, PROBE_ELEMENTS))
            record: dict[str, Any] = {"optimizer": type(optimizer).__name__, "elements": elements,
                                      "subnormals": subnormals, "steps": len(self.iterations)}
            if timed is not None:
                record.update(step_normal_ns_per_element=timed[0], step_subnormal_ns_per_element=timed[1])
            self.optimizer_state_subnormals = record
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"optimizer state subnormals not timed: {type(exc).__name__}: {exc}")
