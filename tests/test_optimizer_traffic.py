"""The optimizer step's modelled traffic: torch's foreach path counted from the installed torch itself, the fused
path as one kernel, and the live optimizer's kind read right."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from trainwise.agent.trace.optimizers import FOREACH_TRAFFIC, OPTIMIZER_STATE, optimizer_name_of, step_traffic
from trainwise.agent.trace.characterisation import characterise_model

# each FOREACH_TRAFFIC key as torch builds it at its defaults
TORCH_OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"lr": 0.1}),
    "sgd_momentum": (torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}),
    "adam": (torch.optim.Adam, {}),
    "adamw": (torch.optim.AdamW, {}),
    "adadelta": (torch.optim.Adadelta, {}),
    "rmsprop": (torch.optim.RMSprop, {}),
    "rmsprop_momentum": (torch.optim.RMSprop, {"momentum": 0.9}),
    "adagrad": (torch.optim.Adagrad, {}),
}


class _ForeachCalls(TorchDispatchMode):
    """(bytes read, bytes written) of every `_foreach_*` call over the parameters' tensors (the per-tensor step
    counters, 0-d, left out); a tensor list passed twice to one call is read once."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        lists = [a for a in (*args, *(kwargs or {}).values())
                 if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor) and a[0].dim() > 0]
        if name.startswith("_foreach_") and lists:
            unique = {tuple(id(t) for t in lst): lst for lst in lists}.values()
            read = sum(t.numel() * t.element_size() for lst in unique for t in lst)
            written = sum(t.numel() * t.element_size() for t in (lists[0] if name.endswith("_") else out))
            self.calls.append((name, read, written))
        return out


@pytest.mark.parametrize("name", sorted(FOREACH_TRAFFIC))
def test_foreach_traffic_is_what_torch_runs(name):
    cls, kwargs = TORCH_OPTIMIZERS[name]
    params = [torch.nn.Parameter(torch.randn(1000)), torch.nn.Parameter(torch.randn(24))]
    opt = cls(params, foreach=True, **kwargs)
    for p in params:
        p.grad = torch.randn_like(p)
    opt.step()  # the first step creates the state (a momentum buffer is a copy of the gradient then)
    calls = _ForeachCalls()
    with calls:
        opt.step()
    n = sum(p.numel() for p in params)
    got = (sum(c[1] for c in calls.calls) / n, sum(c[2] for c in calls.calls) / n, len(calls.calls))
    assert got == FOREACH_TRAFFIC[name], calls.calls


def test_a_fused_optimizer_is_named_so_and_moves_the_fused_traffic():
    params = [torch.nn.Parameter(torch.randn(8))]
    assert optimizer_name_of(torch.optim.AdamW(params, fused=True)) == "adamw_fused"
    assert optimizer_name_of(torch.optim.AdamW(params)) == "adamw"
    assert optimizer_name_of(torch.optim.SGD(params, lr=0.1, momentum=0.9, fused=True)) == "sgd_momentum_fused"
    assert step_traffic("adamw_fused") == (*OPTIMIZER_STATE["adamw"][:2], 1)
    assert step_traffic("lamb") == (*OPTIMIZER_STATE["lamb"][:2], 1)  # apex's fused LAMB: no foreach path


def test_a_tensorflow_row_is_characterised_with_fused_updates():
    from trainwise.predict.measurements import Measurement, characterise_row

    def optimizer_bytes(framework):
        m = Measurement(model="mnist_cnn", accelerator="V100", count=1, per_device_batch=64, precision="fp32",
                        samples_per_s=1.0, source="test", optimizer="rmsprop_momentum", framework=framework)
        return sum((r.bytes_read + r.bytes_written) * r.count for r in characterise_row(m).records
                   if r.category == "optimizer")

    assert optimizer_bytes("tensorflow") / optimizer_bytes("pytorch") == pytest.approx(28 / 72)


def test_the_traced_step_charges_foreach_adam_its_seven_passes():
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    n = sum(p.numel() for p in model.parameters())

    def optimizer_bytes(name):
        char = characterise_model(model, ((16, 64), torch.float32), None, name, "fp32")
        recs = [r for r in char.records if r.category == "optimizer"]
        return sum((r.bytes_read + r.bytes_written) * r.count for r in recs), sum(r.count for r in recs)

    foreach_bytes, foreach_launches = optimizer_bytes("adam")
    fused_bytes, fused_launches = optimizer_bytes("adam_fused")
    assert foreach_bytes == pytest.approx(72 * n, rel=1e-6) and fused_bytes == pytest.approx(28 * n, rel=1e-6)
    assert foreach_launches == 7 * fused_launches
