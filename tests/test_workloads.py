"""Tests of the reference workloads (trainwise.workloads): registry, and tiny end-to-end runs."""

from __future__ import annotations

import gzip
import importlib
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from trainwise.workloads import (
    DEFAULT_WORKLOAD,
    MEASURED_CPU_ITERATION_S,
    MEASURED_CPU_NOTES,
    WORKLOADS,
    WorkloadSpec,
    command_for,
    get_workload,
)

SRC = Path(__file__).resolve().parents[1] / "src"
EXPECTED = {"mnist_cnn", "seismic_fcn", "resnet50_cifar10", "inceptionv3_dr", "nn_twins_mlp", "rnn_sa_lstm",
            "resnet50_imagenet"}
EPOCH_LINE = re.compile(r"^epoch (\d+)/(\d+) loss=\S+ val_loss=\S+ val_acc=([0-9.]+) time=[0-9.]+s$", re.M)

# Tiny sizes per workload: (batch, train samples, val samples). Slow ones are marked below.
TINY = {
    "mnist_cnn": (16, 32, 16),
    "seismic_fcn": (16, 32, 16),
    "nn_twins_mlp": (16, 32, 16),
    "rnn_sa_lstm": (8, 16, 8),
    "resnet50_cifar10": (4, 8, 4),
    "inceptionv3_dr": (2, 4, 2),
    "resnet50_imagenet": (2, 4, 2),
}
SLOW = {"resnet50_cifar10", "inceptionv3_dr", "resnet50_imagenet"}


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)


# ------------------------------------------------------------------------------------------------
# registry
# ------------------------------------------------------------------------------------------------


def test_registry_names_and_specs():
    assert set(WORKLOADS) == EXPECTED
    assert DEFAULT_WORKLOAD == "mnist_cnn" and DEFAULT_WORKLOAD in WORKLOADS
    for name, spec in WORKLOADS.items():
        assert isinstance(spec, WorkloadSpec)
        assert spec.name == name
        assert spec.module == f"trainwise.workloads.{name}"
        assert spec.data_kind in ("real", "synthetic")
        assert spec.seed_source and spec.description and spec.data_description
        assert min(spec.default_batch_size, spec.default_epochs, spec.default_train_samples,
                   spec.default_val_samples) >= 1
        assert "lr" in spec.hyperparameters
        if name == "resnet50_imagenet":
            continue  # a step at full size takes about a minute here: planned by the device model, not timed
        measured = MEASURED_CPU_ITERATION_S[name]
        assert set(measured) == {spec.default_batch_size, spec.default_batch_size // 2}
        assert all(v > 0 for v in measured.values())
        assert name in MEASURED_CPU_NOTES
    assert WORKLOADS["mnist_cnn"].data_kind == "real"
    assert {n for n, s in WORKLOADS.items() if s.data_kind == "synthetic"} == EXPECTED - {"mnist_cnn"}


def test_spec_is_frozen():
    spec = get_workload("mnist_cnn")
    with pytest.raises(AttributeError):
        spec.default_epochs = 3  # type: ignore[misc]


def test_seed_numbers():
    m, s, r = WORKLOADS["mnist_cnn"], WORKLOADS["seismic_fcn"], WORKLOADS["resnet50_cifar10"]
    assert (m.default_train_samples, m.default_val_samples, m.default_batch_size) == (50_000, 10_000, 256)
    assert (s.default_train_samples, s.default_val_samples, s.default_epochs) == (40_512, 212, 13)
    assert r.default_train_samples == 50_000 and r.hyperparameters["lr_final"] == 0.002
    i, t, l = WORKLOADS["inceptionv3_dr"], WORKLOADS["nn_twins_mlp"], WORKLOADS["rnn_sa_lstm"]
    assert (i.default_batch_size, i.default_epochs, i.hyperparameters["lr"]) == (32, 25, 0.0014)
    assert (t.default_train_samples, t.default_val_samples, t.default_batch_size) == (27_238, 11_674, 32)
    assert (l.default_batch_size, l.default_epochs, l.hyperparameters["seq_len"]) == (1024, 5, 300)
    # Table 5.1: ceil(50,000 / 2048) = 25 iterations per epoch
    assert -(-m.default_train_samples // 2048) == m.hyperparameters["iterations_per_epoch_by_batch"][2048]


def test_package_import_does_not_import_torch():
    code = "import sys, trainwise.workloads; print('torch' in sys.modules)"
    out = _run([sys.executable, "-c", code], timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_command_for_defaults_and_overrides():
    cmd = command_for("seismic_fcn")
    assert cmd[:3] == [sys.executable, "-m", "trainwise.workloads.seismic_fcn"]
    args = cmd[3:]
    assert args == ["--batch-size", "256", "--epochs", "13", "--train-samples", "40512", "--val-samples", "212"]
    cmd = command_for("mnist_cnn", batch_size=64, epochs=2, lr=0.5, threads=1, device="cpu",
                      num_workers=0, seed=3, mnist_dir="/data/mnist")
    joined = " ".join(cmd)
    for fragment in ("--batch-size 64", "--epochs 2", "--lr 0.5", "--threads 1", "--device cpu",
                     "--num-workers 0", "--seed 3", "--mnist-dir /data/mnist", "--val-samples 10000"):
        assert fragment in joined
    assert "--threads" not in command_for("mnist_cnn", threads=None)


def test_command_for_rejects_unknown_option_and_name():
    with pytest.raises(ValueError, match="unknown option"):
        command_for("seismic_fcn", mnist_dir="/x")
    with pytest.raises(ValueError, match="unknown option"):
        command_for("mnist_cnn", batchsize=3)
    with pytest.raises(ValueError):
        command_for("no_such_workload")


def test_get_workload_unknown_name_lists_and_suggests():
    with pytest.raises(ValueError) as err:
        get_workload("resnet50_cifar")
    msg = str(err.value)
    assert "resnet50_cifar10" in msg and "Did you mean" in msg
    for name in EXPECTED:
        assert name in msg
    with pytest.raises(ValueError, match="Valid workloads"):
        get_workload("zzzz")


def test_module_defaults_match_registry():
    for name, spec in WORKLOADS.items():
        mod = importlib.import_module(spec.module)
        assert mod.NAME == name
        assert mod.DEFAULTS == {
            "batch_size": spec.default_batch_size,
            "epochs": spec.default_epochs,
            "train_samples": spec.default_train_samples,
            "val_samples": spec.default_val_samples,
            "lr": spec.hyperparameters["lr"],
        }
        for fn in ("build_model", "build_datasets", "build_optimizer", "main"):
            assert callable(getattr(mod, fn))


def test_scripts_do_not_import_profiling_code():
    pkg = SRC / "trainwise" / "workloads"
    for path in pkg.glob("*.py"):
        text = path.read_text()
        for other in ("trainwise.profile", "trainwise.run", "trainwise.predict", "trainwise.pipeline"):
            assert other not in text, f"{path.name} imports {other}"


# ------------------------------------------------------------------------------------------------
# data builders (fast, in-process)
# ------------------------------------------------------------------------------------------------


def test_synthetic_data_is_deterministic_and_shaped():
    import torch

    from trainwise.workloads import inceptionv3_dr, resnet50_cifar10, rnn_sa_lstm, seismic_fcn

    for mod, shape in ((seismic_fcn, (1, 64, 64)), (resnet50_cifar10, (3, 32, 32)),
                       (inceptionv3_dr, (3, 256, 256))):
        a, _, line = mod.build_datasets(8, 4, seed=1)
        b, _, _ = mod.build_datasets(8, 4, seed=1)
        c, _, _ = mod.build_datasets(8, 4, seed=2)
        assert line.startswith("data: synthetic (")
        assert len(a) == 8
        x, y = a[5]
        assert tuple(x.shape) == shape
        assert torch.equal(x, b[5][0]) and y == b[5][1]
        assert not torch.equal(x, c[5][0])
    tr, va, _ = rnn_sa_lstm.build_datasets(6, 3, seed=0)
    x, y = tr[0]
    assert x.shape == (300,) and int(x.max()) < 20_000 and float(y) in (0.0, 1.0)
    assert len(va) == 3


def test_mnist_digits_and_idx_loading(tmp_path):
    import numpy as np
    import torch

    from trainwise.workloads import mnist_cnn

    tr, va, line = mnist_cnn.build_datasets(3000, 500, seed=0)
    assert line.startswith("data: real (scikit-learn digits")
    x, y = tr[2999]
    assert x.shape == (1, 28, 28) and 0 <= int(y) < 10 and float(x.min()) >= 0.0
    assert torch.equal(tr[2999][0], x)

    # write tiny IDX files (one gzipped) and read them back through --mnist-dir
    def write_idx(path: Path, arr: np.ndarray, gz: bool = False) -> None:
        header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
        data = header + arr.astype(np.uint8).tobytes()
        if gz:
            with gzip.open(str(path) + ".gz", "wb") as fh:
                fh.write(data)
        else:
            path.write_bytes(data)

    rng = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte", rng.integers(0, 256, (10, 28, 28)), gz=True)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.arange(10) % 10)
    write_idx(tmp_path / "t10k-images-idx3-ubyte", rng.integers(0, 256, (4, 28, 28)))
    write_idx(tmp_path / "t10k-labels-idx1-ubyte", np.array([3, 1, 4, 1]))
    tr, va, line = mnist_cnn.build_datasets(12, 4, mnist_dir=tmp_path)
    assert line.startswith("data: real (MNIST IDX files")
    assert len(tr) == 12 and len(va) == 4
    assert int(va[2][1]) == 4 and int(tr[11][1]) == 1  # cyclic repeat past the 10 images
    assert tr[0][0].shape == (1, 28, 28) and float(tr[0][0].max()) <= 1.0

    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="t10k-labels"):
        mnist_cnn.build_datasets(12, 4, mnist_dir=tmp_path)


# ------------------------------------------------------------------------------------------------
# the scripts end to end (subprocesses, tiny sizes)
# ------------------------------------------------------------------------------------------------


def _tiny_command(name: str, epochs: int = 1) -> list[str]:
    batch, train, val = TINY[name]
    return command_for(name, batch_size=batch, epochs=epochs, train_samples=train, val_samples=val,
                       threads=1, seed=0)


def _check_run(name: str, out: subprocess.CompletedProcess[str], epochs: int = 1) -> None:
    assert out.returncode == 0, f"{name} failed:\n{out.stdout}\n{out.stderr}"
    first = out.stdout.splitlines()[0]
    assert first.startswith(f"data: {WORKLOADS[name].data_kind} ("), first
    epochs_seen = EPOCH_LINE.findall(out.stdout)
    assert [int(e) for e, _, _ in epochs_seen] == list(range(1, epochs + 1)), out.stdout
    assert all(0.0 <= float(acc) <= 1.0 for _, _, acc in epochs_seen)


@pytest.mark.parametrize(
    "name",
    # mnist_cnn in the default run; the other reference workloads (6-10 s each) in the long run
    [n if n == "mnist_cnn" else pytest.param(n, marks=[pytest.mark.slow, pytest.mark.long]) for n in TINY],
)
def test_script_runs_tiny(name):
    epochs = 1 if name in SLOW else 2
    cmd = _tiny_command(name, epochs=epochs)
    if name == "nn_twins_mlp":
        cmd += ["--num-workers", "1"]  # DataLoader worker processes work too
    _check_run(name, _run(cmd), epochs=epochs)


def test_script_rejects_bad_arguments(capsys):
    from trainwise.workloads import nn_twins_mlp

    with pytest.raises(SystemExit) as exc:
        nn_twins_mlp.main(["--batch-size", "0"])
    assert exc.value.code == 2
    assert "--batch-size must be >= 1" in capsys.readouterr().err


def test_scripts_fire_standard_hooks():
    """The idioms an outside profiler hooks: global optimizer step hooks, DataLoader, eval/no_grad."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook
    from torch.utils.data import dataloader

    from trainwise.workloads import seismic_fcn

    steps: list[int] = []
    nexts: list[int] = []
    evals: list[bool] = []
    handle = register_optimizer_step_post_hook(lambda opt, args, kwargs: steps.append(1))
    orig_next = dataloader._BaseDataLoaderIter.__next__
    orig_eval = torch.nn.Module.eval

    def counting_next(self):
        nexts.append(1)
        return orig_next(self)

    def recording_eval(self):
        evals.append(torch.is_grad_enabled())
        return orig_eval(self)

    dataloader._BaseDataLoaderIter.__next__ = counting_next
    torch.nn.Module.eval = recording_eval
    try:
        rc = seismic_fcn.main(["--epochs", "2", "--batch-size", "8", "--train-samples", "20",
                               "--val-samples", "8", "--threads", "1"])
    finally:
        handle.remove()
        dataloader._BaseDataLoaderIter.__next__ = orig_next
        torch.nn.Module.eval = orig_eval
    assert rc == 0
    assert len(steps) == 2 * 3  # ceil(20 / 8) = 3 iterations per epoch
    # per epoch: 3 train batches + StopIteration, 1 val batch + StopIteration
    assert len(nexts) == 2 * (4 + 2)
    assert len(evals) == 2


def test_measure_helper_times_iterations():
    from trainwise.workloads.measure import seconds_per_iteration

    s = seconds_per_iteration("nn_twins_mlp", 8, iters=3, warmup=1)
    assert 0 < s < 5
