"""PyTorch-Ignite integration, with the real Ignite: the handler on a trainer engine, evaluations run from its
EPOCH_COMPLETED handlers (over the training and the validation loader), gradient accumulation, a step budget,
and automatic detection under `trainwise profile`."""

from __future__ import annotations

import sys
import textwrap

import pytest

pytest.importorskip("ignite")

import torch  # noqa: E402
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer  # noqa: E402
from ignite.metrics import Loss  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from trainwise.integrations.ignite import ProfilingHandler, trains  # noqa: E402
from trainwise.profile.runner import ProfileOptions, run_profile  # noqa: E402

# budget_fraction=1: these tests pin the integration's counting, not the cost budget (test_profile.py).
QUICK = ProfileOptions(min_iterations=5, max_iterations=10, validation_batches=3, epoch2_iterations=4, budget_fraction=1.0)


def _engines(*, train=640, val=160, batch=8, accumulate=1):
    generator = torch.Generator().manual_seed(0)
    x, y = torch.randn(train + val, 16, generator=generator), torch.randn(train + val, 1, generator=generator)
    train_loader = DataLoader(TensorDataset(x[:train], y[:train]), batch_size=batch, shuffle=True)
    val_loader = DataLoader(TensorDataset(x[train:], y[train:]), batch_size=batch * 2)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = create_supervised_trainer(model, optimizer, nn.MSELoss(), gradient_accumulation_steps=accumulate)
    evaluator = create_supervised_evaluator(model, metrics={"mse": Loss(nn.MSELoss())})
    printed = []

    @trainer.on(Events.EPOCH_COMPLETED)
    def evaluate(engine):  # the shape of Ignite's own examples: the training set, then the validation set
        for loader in (train_loader, val_loader):
            evaluator.run(loader)
            printed.append(evaluator.state.metrics["mse"])  # the metric exists even for a cut pass

    return trainer, evaluator, train_loader, printed


def test_sampled_profile_times_both_evaluations_and_epoch_2():
    trainer, evaluator, train_loader, printed = _engines()
    handler = ProfilingHandler(options=QUICK).attach(trainer)
    trainer.run(train_loader, max_epochs=3)
    profile = handler.profile
    assert profile.stop_reason == "sampled" and trainer.state.epoch == 2  # stopped inside epoch 2
    assert profile.epochs[0].truncated and profile.epochs[0].iterations == 10
    assert profile.epochs[1].iterations == QUICK.epoch2_iterations
    assert profile.dataset.train_batches_per_epoch == 80 and profile.dataset.n_train == 640
    assert all(it.batches == 1 and it.samples == 8 for it in profile.iterations)
    # two evaluations after epoch 1, each cut after the timed batches, told apart by the data they read
    assert [(v.loader, v.batches_timed, v.batches_total, v.truncated) for v in profile.validations] == \
        [(0, 3, 80, True), (1, 3, 10, True)]
    assert len(printed) == 2
    assert profile.model.parameters == 16 * 64 + 64 + 64 + 1 and profile.model.optimizer == "SGD"
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 3  # Engine.run(max_epochs=3)
    assert any(note.startswith("ignite ") for note in profile.notes)
    assert trains(trainer) and not trains(evaluator)


def test_gradient_accumulation_makes_an_iteration_of_several_batches():
    trainer, _, train_loader, _ = _engines(accumulate=2)
    handler = ProfilingHandler(options=QUICK).attach(trainer)
    trainer.run(train_loader, max_epochs=2)
    profile = handler.profile
    assert all(it.batches == 2 and it.samples == 16 for it in profile.iterations)
    assert profile.dataset.iterations_per_epoch == 40


def test_a_step_budget_is_not_an_epoch_count_and_full_mode_records_every_epoch():
    trainer, _, train_loader, _ = _engines(train=160, val=32)
    handler = ProfilingHandler(options=QUICK).attach(trainer)
    trainer.run(train_loader, max_iters=200)
    assert handler.profile.script_epochs is None and handler.profile.script_iterations.iterations == 200
    trainer, _, train_loader, _ = _engines(train=160, val=32)
    full = ProfilingHandler(mode="full").attach(trainer)
    trainer.run(train_loader, max_epochs=2)
    assert [e.iterations for e in full.profile.epochs] == [20, 20]
    assert [(v.epoch, v.loader, v.batches_timed) for v in full.profile.validations] == [(0, 0, 20), (0, 1, 2),
                                                                                       (1, 0, 20), (1, 1, 2)]


@pytest.mark.long
def test_trainwise_profile_detects_an_ignite_trainer_without_code_change(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch import nn
        from torch.utils.data import DataLoader, TensorDataset
        from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
        from ignite.metrics import Loss

        x, y = torch.randn(600, 8), torch.randn(600, 1)
        train = DataLoader(TensorDataset(x[:480], y[:480]), batch_size=8)
        val = DataLoader(TensorDataset(x[480:], y[480:]), batch_size=40)
        model = nn.Linear(8, 1)
        trainer = create_supervised_trainer(model, torch.optim.Adam(model.parameters(), lr=0.01), nn.MSELoss())
        evaluator = create_supervised_evaluator(model, metrics={"mse": Loss(nn.MSELoss())})
        trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda engine: evaluator.run(val))
        trainer.run(train, max_epochs=4)
        raise SystemExit("the profiler should have ended the process after sampling")
    """))
    profile = run_profile([sys.executable, str(script)],
                          ProfileOptions(min_iterations=5, max_iterations=8, validation_batches=2, epoch2_iterations=3,
                                         budget_fraction=1.0, characterise=False), quiet=True)
    assert profile.stop_reason == "sampled" and profile.exit_code == 0
    assert any(note.startswith("ignite ") for note in profile.notes)
    assert len(profile.iterations) == 8 + 3  # counted once: the core hooks stood down for the handler
    assert profile.dataset.train_batches_per_epoch == 60
    assert [(v.batches_timed, v.batches_total) for v in profile.validations] == [(2, 3)]
    assert profile.script_epochs.epochs == 4 and profile.optimizer_state_zeros.optimizer == "Adam"


def test_an_evaluation_every_n_iterations_is_validation_not_part_of_an_iteration():
    import time

    from ignite.engine import Engine

    trainer, _, train_loader, _ = _engines(train=320, val=32)
    evaluator = Engine(lambda engine, batch: time.sleep(0.01))  # 4 batches of 10 ms: 40 ms a pass
    val_loader = DataLoader(TensorDataset(torch.randn(32, 16)), batch_size=8)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=10), lambda engine: evaluator.run(val_loader))
    full = ProfilingHandler(mode="full").attach(trainer)
    trainer.run(train_loader, max_epochs=1)
    profile = full.profile
    passes = [v for v in profile.validations if v.batches_total == 4]  # not the end-of-epoch handler's 40 and 2
    assert [v.batches_timed for v in passes] == [4] * 4 and all(v.wall_s >= 0.04 for v in passes)
    assert max(it.wall_s for it in profile.iterations[1:]) < 0.03  # no iteration holds an evaluation


def test_the_ignite_mnist_workload_evaluates_both_sets_every_epoch(capsys):
    from trainwise.workloads import ignite_mnist

    assert ignite_mnist.main(["--epochs", "2", "--batch-size", "32", "--train-samples", "64", "--val-samples", "32",
                              "--eval-batch-size", "32"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in printed] == ["epoch 1 training", "epoch 1 validation",
                                                       "epoch 2 training", "epoch 2 validation"]


def test_a_process_function_that_is_a_method_finds_its_objects_model_and_optimizer():
    from ignite.engine import Engine

    class Step:
        def __init__(self):
            self.model = nn.Linear(16, 1)
            self.optimizer = torch.optim.Adam(self.model.parameters())

        def train_step(self, engine, batch):
            x, y = batch
            self.optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.optimizer.step()
            return loss.item()

    _, _, train_loader, _ = _engines(train=160)
    trainer = Engine(Step().train_step)
    assert trains(trainer)
    handler = ProfilingHandler(mode="full").attach(trainer)
    trainer.run(train_loader, max_epochs=1)
    assert handler.profile.model.parameters == 17 and handler.profile.model.optimizer == "Adam"
    assert len(handler.profile.iterations) == 20
