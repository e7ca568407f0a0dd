"""Workload characterisation: FLOP/byte accounting, meta-device tracing, AMP, memory, named models."""

from __future__ import annotations

import json
import os

import psutil
import pytest
import torch
from torch import nn

from trainwise.agent.trace.live import batch_shapes_of
from trainwise.agent.trace.characterisation import characterise_model, trace_training_step
from trainwise.agent.trace.step import normalise_precision
from trainwise.core.workload import WorkloadCharacterisation
from trainwise.errors import TrainwiseError
from trainwise.predict.characterise import characterise_named


pytestmark = pytest.mark.usefixtures("no_disk_cache")


def _flops(char: WorkloadCharacterisation, category: str, phase: str) -> float:
    return sum(r.total_flops for r in char.records if r.category == category and r.phase == phase)


def test_linear_flops_match_hand_count():
    model = nn.Sequential(nn.Linear(64, 32), nn.Linear(32, 16))
    char = characterise_model(model, ((8, 64), "float32"), None, "sgd")
    first, second = 2 * 8 * 64 * 32, 2 * 8 * 32 * 16  # 2 x batch x in x out
    assert _flops(char, "matmul", "forward") == first + second
    # backward: weight gradient of both, input gradient only where the input needs one (not the data)
    assert _flops(char, "matmul", "backward") == first + 2 * second
    assert char.parameters == 64 * 32 + 32 + 32 * 16 + 16
    assert char.gradient_bytes == 4 * char.parameters


def test_conv_flops_match_hand_count_including_groups():
    conv = nn.Conv2d(3, 16, 3, padding=1, bias=False)
    char = characterise_model(conv, ((2, 3, 8, 8), "float32"), lambda out: out.mean(), "sgd")
    assert _flops(char, "conv", "forward") == 2 * 2 * 16 * 8 * 8 * 3 * 9
    # the first layer needs no input gradient: backward = weight gradient only
    assert _flops(char, "conv", "backward") == pytest.approx(_flops(char, "conv", "forward"))
    depthwise = nn.Sequential(nn.Conv2d(3, 16, 1), nn.Conv2d(16, 16, 7, padding=3, groups=16))
    char = characterise_model(depthwise, ((2, 3, 8, 8), "float32"), lambda out: out.mean(), "sgd")
    dw = [r for r in char.records if r.category == "conv" and r.groups == 16]
    fwd = sum(r.total_flops for r in dw if r.phase == "forward")
    bwd = sum(r.total_flops for r in dw if r.phase == "backward")
    assert fwd == 2 * 2 * 16 * 8 * 8 * 1 * 49
    assert bwd == pytest.approx(2 * fwd)  # not 16x: torch's formula ignores groups, ours does not
    assert all(r.align < 4 for r in dw)  # depthwise: off the tensor cores


def test_resnet50_forward_is_4_1_gmacs_and_training_about_3x():
    char = characterise_named("resnet50", 8, "fp32")
    fwd = char.total_flops("forward") / 8
    assert fwd == pytest.approx(8.2e9, rel=0.02)  # 4.1 GMACs = 8.2 GFLOPs per 224x224 image
    step = (char.total_flops("forward") + char.total_flops("backward")) / 8
    assert step / fwd == pytest.approx(3.0, rel=0.05)
    assert char.parameters == 25_557_032
    assert not char.unsupported_ops


def test_convnext_large_batch_64_traces_on_meta_without_allocating():
    rss = psutil.Process(os.getpid()).memory_info().rss
    char = characterise_named("convnext_large", 64, "amp_fp16")
    grown = psutil.Process(os.getpid()).memory_info().rss - rss
    assert char.trace_device == "meta"
    assert char.parameters == pytest.approx(197.8e6, rel=0.005)  # Erben et al. (VLDB 2024) Table 2: ConvNextLarge 197.8M
    assert char.activation_bytes > 5 * 2**30  # gigabytes of activations, modelled ...
    assert grown < 400 * 2**20  # ... but nothing of that size allocated
    assert char.total_flops("forward") / 64 == pytest.approx(2 * 34.4e9, rel=0.03)


def test_amp_changes_dtypes_activations_and_adds_weight_copies():
    fp32 = characterise_named("hf:bert-base-uncased", 4, "fp32", 128)
    amp = characterise_named("hf:bert-base-uncased", 4, "amp_fp16", 128)
    mm = [r for r in amp.records if r.category in ("matmul", "attention")]
    assert mm and all(r.dtype == "float16" for r in mm)
    norms = [r for r in amp.records if r.op.startswith("aten.native_layer_norm.")]
    assert norms and all(r.dtype == "float32" for r in norms)  # autocast runs layer_norm in fp32
    assert amp.activation_bytes < 0.8 * fp32.activation_bytes
    # fp16 copies of every matmul weight: the 85M of the layers + the 23.4M tied word embedding of the MLM head
    assert amp.amp_weight_copy_bytes == pytest.approx(2 * (85.0e6 + 30522 * 768), rel=0.03)
    assert any(r.category == "copy" and r.dtype == "float16" for r in amp.records)
    bf16 = characterise_named("hf:bert-base-uncased", 4, "amp_bf16", 128)
    assert all(r.dtype == "bfloat16" for r in bf16.records if r.category == "matmul")
    assert amp.total_flops() == pytest.approx(fp32.total_flops(), rel=0.01)


def test_hf_configs_match_published_parameter_counts():
    # Erben et al. (VLDB 2024) Table 2: RoBERTaBase 124.7M, RoBERTaLarge 355.4M, RoBERTaXLM 560.1M
    for name, params in (("hf:roberta-base", 124.7e6), ("hf:roberta-large", 355.4e6), ("hf:xlm-roberta-large", 560.1e6)):
        char = characterise_named(name, 1, "fp32", 16)
        assert char.parameters == pytest.approx(params, rel=0.005), name
    assert characterise_named("hf:FacebookAI/roberta-base", 1, "fp32", 16).parameters == pytest.approx(124.7e6, rel=0.005)


def test_fused_attention_for_sdpa_models():
    char = characterise_named("hf:gpt2", 2, "amp_bf16", 256)
    att = [r for r in char.records if r.category == "attention"]
    assert {r.phase for r in att} == {"forward", "backward"}
    fwd = sum(r.total_flops for r in att if r.phase == "forward")
    assert fwd == pytest.approx(12 * 4 * 2 * 12 * 256 * 256 * 64 * 0.5)  # causal: half of 4 B H S^2 D per layer


def test_reference_workloads_and_unknown_names():
    char = characterise_named("resnet50_cifar10", 32, "fp32")
    assert char.image_size == 32 and char.parameters > 23e6
    lstm = characterise_named("rnn_sa_lstm", 16, "fp32")
    assert not lstm.unsupported_ops
    with pytest.raises(TrainwiseError, match="resnet50"):
        characterise_named("resnet5", 8)
    with pytest.raises(TrainwiseError, match="hf:roberta-base"):
        characterise_named("hf:roberta-bas", 8)
    with pytest.raises(TrainwiseError, match="precision"):
        normalise_precision("fp64")


def test_unsupported_operator_is_listed_not_fatal():
    class Spectral(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(32, 32)

        def forward(self, x):
            return torch.fft.rfft(self.lin(x)).abs()

    char = characterise_model(Spectral(), ((4, 32), "float32"), lambda out: out.mean(), "adam")
    assert char.unsupported_ops  # the FFT kernels have no cost rule
    assert any("fft" in op for op in char.unsupported_ops)
    assert any(r.category == "other" for r in char.records)


def test_cpu_tracing_matches_meta_and_json_round_trip():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 10))
    meta = characterise_model(model, ((2, 1, 8, 8), "float32"), None, "sgd_momentum")
    cpu = characterise_model(model, ((2, 1, 8, 8), "float32"), None, "sgd_momentum", device="cpu")
    assert cpu.total_flops() == pytest.approx(meta.total_flops(), rel=1e-3)  # + the CPU target's fill
    again = WorkloadCharacterisation.model_validate(json.loads(meta.model_dump_json()))
    assert again == meta
    assert next(model.parameters()).device.type == "cpu"  # the live model is untouched


def test_trace_training_step_for_the_recorder():
    model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 3))
    x = torch.randn(4, 10)
    char = trace_training_step(nn.parallel.DataParallel(model), batch_shapes_of((x,)), optimizer_name="adam")
    assert char is not None and char.per_device_batch == 4
    assert char.optimizer_state_bytes == 8 * char.trainable_parameters

    class NeedsValues(nn.Module):
        def forward(self, x):
            return x[: int(x.sum().item()) % 3 + 1]

    with pytest.warns(RuntimeWarning, match="characterisation skipped"):
        assert trace_training_step(NeedsValues(), batch_shapes_of((x,))) is None


def test_a_forward_needing_real_values_is_traced_on_the_cpu_instead_of_meta():
    import torch

    from trainwise.agent.trace.characterisation import trace_training_step

    class NeedsValues(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(16, 4)

        def forward(self, x, mask):
            keep = int(mask.sum().item())  # data-dependent: impossible on meta tensors
            return self.linear(x[:, :16]) * (keep > -1)

    char = trace_training_step(NeedsValues(), {"x": ((8, 16), "float32"), "mask": ((8,), "int64")})
    assert char is not None and char.trace_device == "cpu"
    assert any("traced on the CPU" in note for note in char.notes)
    assert char.by_category()["matmul"]["flops"] > 0


class _InPlaceReshaper(nn.Module):
    """A forward with in-place operators that keep their argument's metadata (relu_, mul_) and ones
    that change it (unsqueeze_, squeeze_): only the former may be replayed from the dispatch cache."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        for _ in range(3):
            x = self.linear(x).relu_().mul_(0.5)
            x.unsqueeze_(0)
            x = x.squeeze_(0)
        return x


@pytest.mark.parametrize("build,inputs,precision", [
    (lambda: nn.LSTM(32, 64, num_layers=2, batch_first=True), lambda: torch.randn(4, 40, 32), "fp32"),
    (lambda: nn.GRU(32, 48), lambda: torch.randn(30, 4, 32), "amp_fp16"),
    (lambda: nn.TransformerEncoder(nn.TransformerEncoderLayer(64, 4, 128, batch_first=True), 3),
     lambda: torch.randn(2, 16, 64), "amp_bf16"),
    (_InPlaceReshaper, lambda: torch.randn(8, 16), "fp32"),
])
def test_dispatch_cache_replays_exactly_what_a_fresh_trace_records(monkeypatch, build, inputs, precision):
    from trainwise.agent.trace import dispatch

    traced = {}
    for cached in (False, True):
        monkeypatch.setattr(dispatch, "DISPATCH_CACHE", cached)
        torch.manual_seed(0)
        char = characterise_model(build(), inputs(), optimizer_name="adam", precision=precision, model_name="m",
                                  loss_fn=lambda out: (out[0] if isinstance(out, tuple) else out).float().mean())
        data = json.loads(char.model_dump_json())
        data.pop("trace_seconds")
        traced[cached] = data
    assert traced[True]["records"], "nothing was traced"
    assert traced[True] == traced[False]
    # A recurrent layer repeats the same operator per step: the records carry those repeats as counts.
    if isinstance(build(), nn.LSTM):
        assert max(r["count"] for r in traced[True]["records"]) >= 40


class _AttentionBlock(nn.Module):
    """nn.MultiheadAttention as ViT / DETR use it (F.multi_head_attention_forward is Python)."""

    def __init__(self, dim: int = 64, heads: int = 4, classes: int = 10) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.attention(x, x, x, need_weights=False)
        return self.head(out.mean(dim=1))


@pytest.mark.parametrize("precision, dtype", [("amp_bf16", "bfloat16"), ("amp_fp16", "float16"), ("fp32", "float32")])
def test_multihead_attention_traces_in_the_autocast_dtype_with_fused_attention(precision, dtype):
    batch, tokens, dim, heads = 8, 32, 64, 4
    char = characterise_model(_AttentionBlock(dim, heads), ((batch, tokens, dim), "float32"), precision=precision)
    compute = [r for r in char.records if r.category in ("matmul", "attention")]
    # autocast runs the projections and the attention in the low dtype (before: fp32 under AMP)
    assert {r.dtype for r in compute} == {dtype}
    # SDPA inside MultiheadAttention is the fused kernel a GPU runs, not the unfused bmm/softmax fallback
    fused = [r for r in char.records if "scaled_dot_product_attention" in r.op]
    assert {r.phase for r in fused} == {"forward", "backward"}
    assert not [r for r in char.records if r.op.startswith("aten.bmm")]
    head_dim = dim // heads
    assert sum(r.flops * r.count for r in fused if r.phase == "forward") == 4.0 * batch * heads * tokens * tokens * head_dim
    if precision != "fp32":
        assert char.amp_weight_copy_bytes > 0  # the in/out projection weights' low-precision copies


def _rnn_forward_flops(gates: int, layers: int, directions: int, steps: int, batch: int, inputs: int, hidden: int) -> float:
    total, size = 0.0, inputs
    for _ in range(layers):
        total += directions * 2.0 * steps * batch * gates * hidden * (size + hidden)
        size = directions * hidden
    return total


class _Recurrent(nn.Module):
    def __init__(self, kind: str, inputs: int, hidden: int, layers: int, bidirectional: bool) -> None:
        super().__init__()
        self.rnn = getattr(nn, kind)(inputs, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
        self.head = nn.Linear(hidden * (2 if bidirectional else 1), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1]).squeeze(-1)


@pytest.mark.parametrize("kind, gates, layers, bidirectional", [("LSTM", 4, 2, False), ("GRU", 3, 1, True), ("RNN", 1, 1, False)])
def test_recurrent_layers_trace_as_cudnn_runs_them(kind, gates, layers, bidirectional):
    steps, batch, inputs, hidden = 50, 8, 32, 64
    directions = 2 if bidirectional else 1
    char = characterise_model(_Recurrent(kind, inputs, hidden, layers, bidirectional), ((batch, steps, inputs), "float32"),
                              loss_fn=lambda out: out.float().mean(), optimizer_name="adam")
    rnn = [r for r in char.records if r.op in ("fused.rnn_gemm", "fused.rnn_step")]
    forward = sum(r.flops * r.count for r in rnn if r.phase == "forward")
    assert forward == pytest.approx(_rnn_forward_flops(gates, layers, directions, steps, batch, inputs, hidden))
    assert sum(r.flops * r.count for r in rnn if r.phase == "backward") == pytest.approx(2 * forward)
    # one input GEMM and one fused recurrent step per time step and layer-direction, not the
    # per-time-step decomposition into thousands of small kernels
    groups = layers * directions
    assert sum(r.count for r in rnn if r.phase == "forward") == groups * (steps + 1)
    assert sum(r.count for r in char.records) < 4 * groups * steps + 100
    # cuDNN launches the time steps from C++: the host dispatches only the whole-sequence kernels
    from trainwise.predict import operator_time as ot

    steps_launched = sum(r.count for r in rnn if r.op == "fused.rnn_step")
    assert steps_launched == 2 * groups * steps
    assert ot.host_dispatched_kernels(char.records) == char.kernel_launches - steps_launched
    # the weight-gradient GEMMs are there (the optimizer steps every parameter of the recurrent layers)
    assert char.trainable_parameters == sum(p.numel() for p in _Recurrent(kind, inputs, hidden, layers, bidirectional).parameters())


def test_the_characterisation_cache_is_keyed_by_the_tracer_source(monkeypatch, tmp_path):
    from trainwise.predict import characterise as ch

    monkeypatch.delenv("TRAINWISE_NO_CACHE", raising=False)
    monkeypatch.setenv("TRAINWISE_CACHE_DIR", str(tmp_path))
    args = ("mnist_cnn", 8, "fp32", None, None, None, None, None, "nchw")
    current = ch._disk_cache_path(args)
    assert current is not None and current.parent.parent == tmp_path
    assert len(ch._tracer_digest()) == 16
    # a changed tracer (or model builder) never reads an entry traced by the old one
    monkeypatch.setattr(ch, "_tracer_digest", lambda: "0123456789abcdef")
    assert ch._disk_cache_path(args) != current


def test_characterise_output_folder_is_one_line_before_the_trace(tmp_path, capsys, monkeypatch):
    # `device characterise ... -o FOLDER` traced the model, then died with IsADirectoryError
    from trainwise.cli import main
    from trainwise.predict import cli as predict_cli

    def no_trace(*args, **kwargs):
        raise AssertionError("traced although --output could not be written")

    monkeypatch.setattr(predict_cli, "_characterise", no_trace)
    code = main(["device", "characterise", "nn_twins_mlp", "--batch", "8", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--output" in err and "is a folder" in err and "Traceback" not in err


def test_sequence_first_lstm_batch_is_dim_1():
    """An nn.LSTM built with PyTorch's default batch_first=False takes (seq, batch, features): the batch is dim 1."""
    import torch

    from trainwise.agent.trace.characterisation import characterise_model

    class SeqFirst(torch.nn.Module):
        def __init__(self, batch_first: bool) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(8, 16, batch_first=batch_first)
            self.head = torch.nn.Linear(16, 3)

        def forward(self, x):
            out, _ = self.lstm(x)
            return self.head(out).mean()

    seq_first = characterise_model(SeqFirst(False), ((20, 4, 8), torch.float32))
    assert seq_first.per_device_batch == 4
    batch_first = characterise_model(SeqFirst(True), ((4, 20, 8), torch.float32))
    assert batch_first.per_device_batch == 4
    assert seq_first.total_flops() == pytest.approx(batch_first.total_flops(), rel=0.05)


def test_the_profilers_trace_needs_no_pydantic_in_the_jobs_environment():
    """Inside the user's job (their venv: torch, nothing of trainwise's dependencies) the profiler traces the step
    into plain fields; before, the tracer imported core's pydantic model and every profile taken in another
    environment said "workload characterisation skipped: No module named 'pydantic'". The fields it writes
    validate into the same characterisation trainwise's own process builds."""
    import json
    import subprocess
    import sys

    import torch

    child = (
        "import sys, json\n"
        "sys.modules['pydantic'] = None  # as in an environment without it: any import of it fails\n"
        "import torch\n"
        "from trainwise.agent.trace.step import trace_step_fields\n"
        "torch.manual_seed(0)\n"
        "model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))\n"
        "fields = trace_step_fields(model, (torch.randn(4, 8),), optimizer_name='adam', model_name='mlp')\n"
        "assert 'trainwise.core.workload' not in sys.modules\n"
        "print(json.dumps(fields))\n")
    out = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    traced = WorkloadCharacterisation.model_validate(json.loads(out.stdout))
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
    here = characterise_model(model, torch.randn(4, 8), None, "adam", model_name="mlp")
    drop = {"trace_seconds"}
    assert traced.model_dump(exclude=drop) == here.model_dump(exclude=drop)
    assert traced.per_device_batch == 4 and traced.total_flops() > 0 and traced.optimizer == "adam"


def test_a_model_keeping_tensors_with_history_in_its_attributes_is_traced():
    """REINFORCE in PyTorch's examples keeps each action's log-probability (a tensor with autograd history) in a
    list on the policy module; deepcopy refuses such tensors, so the trace of every such job was skipped."""
    import torch

    class Policy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.affine = torch.nn.Linear(4, 2)
            self.saved_log_probs: list = []
            self.cache = {"last": [torch.zeros(3)]}

        def forward(self, x):
            return torch.softmax(self.affine(x), dim=1)

    policy = Policy()
    for _ in range(3):
        policy.saved_log_probs.append(torch.log(policy(torch.randn(1, 4))[0, 0]))  # non-leaf, requires grad
    for device in ("meta", "cpu"):
        char = characterise_model(policy, torch.randn(1, 4), None, "adam", model_name="policy", device=device)
        assert char.per_device_batch == 1 and char.parameters == 10
    assert len(policy.saved_log_probs) == 3 and policy.saved_log_probs[0].grad_fn is not None  # the job's own left as they were
    assert trace_training_step(policy, (((1, 4), torch.float32),), optimizer_name="adam") is not None


def test_an_unbatched_sample_is_a_batch_of_one():
    """PyTorch's actor-critic example feeds its policy one 4-value state at a time, shape (4,): that is one sample,
    not a batch of 4 (the profile said "samples per iteration: 4"). A (4, 4) input stays a batch of 4."""
    import torch

    policy = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    assert characterise_model(policy, torch.randn(4), None, "adam").per_device_batch == 1
    assert characterise_model(policy, torch.randn(4, 4), None, "adam").per_device_batch == 4
    embed = torch.nn.Embedding(100, 8)
    assert characterise_model(embed, torch.randint(0, 100, (6,)), None, "adam").per_device_batch == 6  # token ids
