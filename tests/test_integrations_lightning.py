"""PyTorch Lightning integration, with the real Lightning: callback, gradient accumulation, validation
loops, and automatic detection under `trainwise profile`."""

from __future__ import annotations

import sys
import textwrap

import pytest

from integration_checks import assert_sampled_predicts_full

pl = pytest.importorskip("lightning.pytorch")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from trainwise.integrations.lightning import ProfilingCallback  # noqa: E402
from trainwise.profile.runner import ProfileOptions, run_profile  # noqa: E402

# budget_fraction=1: these tests pin the integration's counting, not the cost budget (test_profile.py).
QUICK = ProfileOptions(min_iterations=5, max_iterations=10, validation_batches=3, epoch2_iterations=4, budget_fraction=1.0)


class Regressor(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", nn.functional.mse_loss(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _loaders(train: int, val: int, batch: int):
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(train + val, 16, generator=generator), torch.randn(train + val, 1, generator=generator)
    return (DataLoader(TensorDataset(x[:train], y[:train]), batch_size=batch, shuffle=True),
            DataLoader(TensorDataset(x[train:], y[train:]), batch_size=batch))


def _fit(callback, *, epochs=3, train=640, val=160, batch=8, accumulate=2, **trainer_kwargs):
    torch.manual_seed(0)
    trainer = pl.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, accumulate_grad_batches=accumulate,
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback], **trainer_kwargs)
    trainer.fit(Regressor(), *_loaders(train, val, batch))
    return trainer


def test_sampled_profile_with_gradient_accumulation(tmp_path):
    callback = ProfilingCallback(tmp_path / "lightning.json", options=QUICK)
    trainer = _fit(callback)
    profile = callback.profile
    assert profile.mode == "sampled" and profile.stop_reason == "sampled"
    assert trainer.current_epoch <= 2  # stopped early: the profile was complete
    # an iteration is one optimizer step: 2 batches of 8 samples
    assert profile.dataset.batches_per_iteration == 2 and profile.dataset.global_batch_size == 16
    assert all(it.batches == 2 and it.samples == 16 for it in profile.iterations)
    assert profile.dataset.train_batches_per_epoch == 80 and profile.dataset.iterations_per_epoch == 40
    assert profile.dataset.n_train == 640 and profile.dataset.n_val == 160 and profile.dataset.val_batch_size == 8
    assert profile.epochs[0].truncated and profile.epochs[0].iterations == 10
    assert profile.epochs[1].iterations == QUICK.epoch2_iterations
    # the sanity check is start-up; the epoch-1 pass was cut after the timed batches
    assert len(profile.validations) == 1
    assert profile.validations[0].truncated and profile.validations[0].batches_timed == 3
    assert profile.validations[0].batches_total == 20
    assert profile.model.parameters == 16 * 64 + 64 + 64 + 1 and profile.model.optimizer == "SGD"
    assert profile.init.total_s == pytest.approx(profile.iterations[0].start_s)
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 3  # Trainer(max_epochs=3)


def test_full_mode_with_mid_epoch_validation():
    callback = ProfilingCallback(mode="full")
    _fit(callback, epochs=2, train=320, val=64, accumulate=1, val_check_interval=0.5)
    profile = callback.profile
    assert profile.full_run is not None and profile.full_run.epochs_completed == 2
    assert [e.iterations for e in profile.epochs] == [40, 40]
    assert [v.batches_timed for v in profile.validations] == [8, 8, 8, 8]
    assert [v.epoch for v in profile.validations] == [0, 0, 1, 1]
    # validation inside the epoch is not counted in the next iteration
    slowest = max(it.wall_s for it in profile.iterations[1:])
    assert slowest < min(v.wall_s for v in profile.validations) * 4


def test_sampled_profile_predicts_a_short_full_run():
    """Loose tolerance on purpose: a noisy shared 2-core machine and a run of seconds; the benchmark
    (benchmarks/integrations_prediction.py) is the real check. Init (pytest's start-up) is left out."""
    sampled = ProfilingCallback(options=ProfileOptions(min_iterations=20, max_iterations=40, validation_batches=5,
                                                       epoch2_iterations=5))
    _fit(sampled, epochs=3, train=1600, val=160, batch=16)
    full = ProfilingCallback(mode="full")
    _fit(full, epochs=3, train=1600, val=160, batch=16)
    assert_sampled_predicts_full(sampled.profile, full.profile, 3)


@pytest.mark.long
def test_trainwise_profile_detects_lightning_without_code_change(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import lightning.pytorch as pl
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Linear(8, 1)
            def training_step(self, batch, batch_idx):
                x, y = batch
                return nn.functional.mse_loss(self.net(x), y)
            def validation_step(self, batch, batch_idx):
                x, y = batch
                self.log("val_loss", nn.functional.mse_loss(self.net(x), y))
            def configure_optimizers(self):
                return torch.optim.Adam(self.parameters(), lr=0.01)

        x, y = torch.randn(600, 8), torch.randn(600, 1)
        train = DataLoader(TensorDataset(x[:480], y[:480]), batch_size=8)
        val = DataLoader(TensorDataset(x[480:], y[480:]), batch_size=8)
        trainer = pl.Trainer(max_epochs=4, accumulate_grad_batches=3, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Model(), train, val)
        raise SystemExit("the profiler should have ended the process after sampling")
    """))
    profile = run_profile([sys.executable, str(script)],
                          ProfileOptions(min_iterations=5, max_iterations=8, validation_batches=2, epoch2_iterations=3, budget_fraction=1.0,
                                         **({"characterise": False} if "characterise" in ProfileOptions.__dataclass_fields__ else {})),
                          quiet=True)
    assert profile.stop_reason == "sampled" and profile.exit_code == 0
    assert any("lightning" in note for note in profile.notes)
    # counted once: the core optimizer-step and DataLoader hooks stood down for the callback
    assert len(profile.iterations) == 8 + 3
    assert profile.dataset.batches_per_iteration == 3 and profile.dataset.global_batch_size == 24
    assert profile.dataset.train_batches_per_epoch == 60 and profile.dataset.iterations_per_epoch == 20
    assert [v.batches_timed for v in profile.validations] == [2]
    assert profile.init.marks["torch_imported"] < profile.init.total_s
    # the callback hands Lightning's optimizer to the recorder: Adam's exp_avg_sq is inspected, after steps 1, 2, 3, …
    zeros = profile.optimizer_state_zeros
    assert zeros is not None and zeros.optimizer == "Adam" and zeros.elements == 9
    assert [s for s, _ in zeros.trajectory][:5] == [1, 2, 3, 4, 5]


@pytest.mark.long
def test_trainwise_run_checkpoints_a_lightning_job_on_sigterm_and_resumes_its_step_count(tmp_path):
    """Lightning's SIGTERM handler would end the loop with exit 0 and no checkpoint, and its step
    counter restarts at 0 after a resume (a max_steps run would train its budget again): trainwise
    takes SIGTERM back and sets the counter, so the resumed run ends where an uninterrupted one does."""
    import glob
    import subprocess

    from resume_helpers import resume, stop_with_sigterm

    script = tmp_path / "steps.py"
    script.write_text(textwrap.dedent("""
        import time
        import lightning.pytorch as pl
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset

        pl.seed_everything(0)

        class Model(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
            def training_step(self, batch, batch_idx):
                time.sleep(0.01)
                x, y = batch
                return nn.functional.mse_loss(self.net(x), y)
            def on_train_end(self):
                print(f"END global_step={self.global_step} "
                      f"checksum={sum(p.double().sum().item() for p in self.parameters()):.10f}", flush=True)
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.01)

        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(3200, 16, generator=g), torch.randn(3200, 1, generator=g)
        train = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True)
        pl.Trainer(max_epochs=-1, max_steps=250, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False).fit(Model(), train)
    """))
    reference = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    expected = [line for line in reference.stdout.splitlines() if line.startswith("END")]
    assert expected and "global_step=250" in expected[0]
    ck = tmp_path / "ck"
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--checkpoint-dir", str(ck), "--checkpoint-every-batches", "30",
           "--", sys.executable, str(script)]
    out = stop_with_sigterm(cli, lambda: bool(glob.glob(str(ck / "ckpt-*.twckpt"))))
    assert not [line for line in out.splitlines() if line.startswith("END")]  # stopped, not finished
    assert [line for line in resume(cli).stdout.splitlines() if line.startswith("END")] == expected


@pytest.mark.parametrize("limits, expected", [
    ({"epochs": 5}, 5),
    ({"epochs": 5, "max_steps": 10_000}, 5),  # max_steps past 5 epochs' steps: the epochs end the run
    ({"epochs": None}, None),                  # Lightning's 1000, not the script's
    ({"epochs": 5, "max_steps": 30}, None),    # 30 steps: before the 5th epoch (40 steps per epoch)
    ({"epochs": -1, "max_steps": 30}, None),
    ({"epochs": 5, "max_time": "00:01:00:00"}, None),
])
def test_the_scripts_epochs_are_the_loops_epoch_limit_only(limits, expected):
    """A script's argparse --epochs 7 the Trainer does not run (a step or time limit, or none) is dropped."""
    callback = ProfilingCallback(options=QUICK)
    callback.session.recorder.note_script_epochs(7, "the script's argparse argument epochs=7", rank=(True, True, True))
    _fit(callback, train=640, batch=8, accumulate=2, **limits)
    script_epochs = callback.session.recorder.script_epochs
    assert (script_epochs or {}).get("epochs") == expected
    if expected is None:
        assert any(note.startswith("no epoch count read: ") for note in callback.profile.notes)
    # a step limit that ends the run first is kept as its optimizer steps
    steps = callback.profile.script_iterations
    assert (steps.iterations if steps else None) == (30 if limits.get("max_steps") == 30 else None)


@pytest.mark.long  # a whole framework run: with the long tests
def test_an_early_stopping_callback_is_named_as_the_runs_other_end():
    from lightning.pytorch.callbacks import EarlyStopping

    callback = ProfilingCallback(options=QUICK)
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[callback, EarlyStopping(monitor="val_loss", patience=4)])
    trainer.fit(Regressor(), *_loaders(640, 160, 8))
    exits = callback.profile.epoch_loop_exits
    assert exits.where == "Lightning Trainer's callbacks" and exits.tests == ["EarlyStopping(monitor='val_loss', patience=4)"]
