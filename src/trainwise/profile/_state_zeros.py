"""Optimizer state zeros: counted along the run and their square-root cost timed, outside the measured
iterations (trainwise.predict.state_zeros uses them). A mixin of the recorder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

# Optimizer state entries a step takes the square root of (Adam/AdamW, RMSprop, Adagrad)
SQRT_STATE_KEYS = ("exp_avg_sq", "square_avg", "sum")
# Fewer zeros than this cannot cost a step anything measurable: not timed
MIN_ZEROS_TO_TIME = 65_536
# Square roots timed on at most this many state elements (the zeroiest tensors first), ~0.1 s here
TIMED_STATE_ELEMENTS = 16_000_000
# A fused optimizer's whole step is timed instead, on at most this many elements (~2 ms a step here)
FUSED_TIMED_ELEMENTS = 1 << 21
# Zeros in that state are also counted after these optimizer steps (about 1.5x apart: a few dozen counts
# over a whole run, ~1 ms each per 2.5 M elements here, in observer time, never in an iteration): how fast
# training fills the state in, for the prediction (trainwise.predict.state_zeros)
ZERO_COUNT_STEPS = frozenset(sorted({int(round(1.5 ** k)) for k in range(60)} | {2 ** k for k in range(40)}))


def _best_of_five_s(run: Callable[[], Any], before: Callable[[], Any] | None = None) -> float:
    """The shortest of five timed calls of `run` (each after an untimed `before`): the cost without the
    host's interruptions."""
    best = float("inf")
    for _ in range(5):
        if before is not None:
            before()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def optimizer_copy(optimizer: Any, group: dict, param: Any) -> Any:
    """A new optimizer of `optimizer`'s class over `param` alone, with the settings of its param `group` that the
    class's __init__ takes: a probe to time, never the job's. Step it inside the recorder's `bus.muted()`."""
    import inspect

    accepted = inspect.signature(type(optimizer).__init__).parameters
    return type(optimizer)([param], **{key: value for key, value in group.items() if key != "params" and key in accepted})


def _fused_step_seconds_per_element(torch: Any, optimizer: Any, group: dict, timed: list,
                                    count: int) -> tuple[float, float, float]:
    """Seconds per element of one step of a copy of a fused optimizer (its class, the settings of its fused
    param `group`) over `count` elements whose square-rooted state is (a) the job's, (b) ones, (c) zeros: what a
    zero in the state costs the fused kernel. A state element that is zero had a zero gradient (an embedding
    row no batch touched), so the copy's gradient is zero where its state is."""
    dtype = timed[0].dtype
    count = min(count, FUSED_TIMED_ELEMENTS)
    param = torch.nn.Parameter(torch.zeros(count, dtype=dtype))
    probe = optimizer_copy(optimizer, group, param)
    param.grad = torch.zeros(count, dtype=dtype)
    probe.step()  # creates the state
    state = probe.state[param]
    keys = [key for key in SQRT_STATE_KEYS if isinstance(state.get(key), torch.Tensor)]
    job_state = torch.cat([t.detach().reshape(-1)[:count].to(dtype) for t in timed])[:count]
    noise = torch.randn(count, dtype=dtype).abs_().add_(0.1)

    def seconds(values: Any, grad: Any) -> float:
        def reset() -> None:
            for key in keys:
                state[key].copy_(values)
            param.grad = grad

        return _best_of_five_s(probe.step, reset) / count

    return (seconds(job_state, noise * (job_state != 0)), seconds(torch.ones(count, dtype=dtype), noise),
            seconds(torch.zeros(count, dtype=dtype), torch.zeros(count, dtype=dtype)))


class StateZerosRecording:
    """Methods of trainwise.profile._child.Recorder; they use its state."""

    def _sqrt_state_tensors(self) -> list[tuple[str, Any]]:
        """(state name, tensor) of every CPU floating-point entry the step takes a square root of."""
        torch = self._torch
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if torch is None or optimizer is None:
            return []
        out = []
        for state in list(getattr(optimizer, "state", {}).values()):
            for name in SQRT_STATE_KEYS:
                t = state.get(name) if isinstance(state, dict) else None
                if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.is_floating_point():
                    out.append((name, t))
        return out

    def _track_state_zeros(self, steps: int) -> None:
        """(steps, zeros) of the square-rooted state, counted in the tensors that had zeros at the
        first count (an embedding's; a dense layer's state fills in at its first step)."""
        try:
            named = self._sqrt_state_tensors()
            if not named:
                return
            counts = [t.numel() - int(self._torch.count_nonzero(t)) for _, t in named]
            if self._sparse_state_elements is None:
                self._sparse_state_elements = sum(t.numel() for (_, t), z in zip(named, counts) if z > 0)
            self.state_zeros_trajectory.append([steps, sum(counts)])
            self._zeros_seen = {"optimizer": type(self._optimizer_ref()).__name__, "elements": sum(t.numel() for _, t in named),
                                "state": "+".join(sorted({name for name, _ in named}))}
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"optimizer state zeros not tracked: {exc}")
            self._zero_tracking_failed = True

    def _count_state_zeros(self) -> None:
        """Zeros in the square-rooted optimizer state, and the cost of a square root of zero here
        (see OptimizerStateZeros); after the measured iterations, never during them."""
        self._measure_state_subnormals()  # the same moment: after the measured iterations
        torch = self._torch
        optimizer = self._optimizer_ref() if self._optimizer_ref is not None else None
        if self.optimizer_state_zeros is not None:
            return
        if (torch is None or optimizer is None) and self.state_zeros_trajectory and self._zeros_seen:
            # The script ended and its optimizer is gone (a --full run reaching its end): what was
            # counted during the run stands, without the timing of the final state.
            steps, zeros = self.state_zeros_trajectory[-1]
            self.optimizer_state_zeros = {**self._zeros_seen, "zeros": zeros, "steps": steps,
                                          "sparse_elements": self._sparse_state_elements,
                                          "trajectory": list(self.state_zeros_trajectory)}
            return
        if torch is None or optimizer is None:
            return
        try:
            elements = zeros = 0
            names: set[str] = set()
            tensors = []
            for name, t in self._sqrt_state_tensors():
                names.add(name)
                # count_nonzero: no temporary mask as large as the state
                tensor_zeros = t.numel() - int(torch.count_nonzero(t))
                tensors.append((tensor_zeros, t))
                elements += t.numel()
                zeros += tensor_zeros
            if not elements:
                return
            record: dict[str, Any] = {"optimizer": type(optimizer).__name__, "state": "+".join(sorted(names)),
                                      "elements": elements, "zeros": zeros, "steps": len(self.iterations),
                                      "sparse_elements": self._sparse_state_elements,
                                      "trajectory": list(self.state_zeros_trajectory)}
            if zeros >= MIN_ZEROS_TO_TIME:
                # Time the square root of the state as it is (a mix of zeros and normal values costs more
                # per zero than all zeros do: 50 % zeros took 16-17 ms per 2.56 M elements here, all
                # zeros 10 ms), of as many ones, and of as many zeros; at most TIMED_STATE_ELEMENTS of
                # the state, scaled to all of it.
                timed = []
                count = 0
                for _, t in sorted(tensors, key=lambda pair: -pair[0]):
                    if count >= TIMED_STATE_ELEMENTS:
                        break
                    timed.append(t)
                    count += t.numel()

                fused = next((group for group in optimizer.param_groups if group.get("fused")), None)
                if fused is not None:
                    # A fused optimizer takes its square roots inside one vectorised kernel, not with
                    # torch.sqrt, and there a zero costs no more than a normal value (the Hugging Face
                    # Trainer's default AdamW: 1.30 ms per 1.28 M zeros, 1.43 ms per 1.28 M ones here,
                    # where torch.sqrt took 5.4 and 0.4 ms): time the optimizer's own fused step instead.
                    with self.bus.muted():  # the copy's steps are not the job's iterations
                        state_s, normal_s, zero_s = _fused_step_seconds_per_element(torch, optimizer, fused, timed, count)
                    record["square_root_timed_in"] = "fused step"
                else:
                    def seconds(xs: list) -> float:
                        def roots() -> None:
                            for x in xs:
                                torch.sqrt(x)  # each result freed at once: up to 16 M elements in all

                        return _best_of_five_s(roots)

                    state_s = seconds(timed) / count
                    normal_s = seconds([torch.ones(count)]) / count
                    zero_s = seconds([torch.zeros(min(count, 1 << 20))]) / min(count, 1 << 20)
                    record["square_root_timed_in"] = "torch.sqrt"
                record.update(sqrt_state_ns_per_element=state_s * 1e9, sqrt_zero_ns_per_element=zero_s * 1e9,
                              sqrt_normal_ns_per_element=normal_s * 1e9,
                              step_time_at_stake_s=elements * max(0.0, state_s - normal_s))
            self.optimizer_state_zeros = record
        except Exception as exc:  # noqa: BLE001 - a diagnostic must never lose the profile
            self.notes.append(f"optimizer state not inspected: {exc}")
