"""Hugging Face Trainer integration, with the real transformers Trainer and a tiny randomly
initialised BERT built from a config (nothing is downloaded)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from integration_checks import assert_sampled_predicts_full

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import torch  # noqa: E402
from torch.utils.data import Dataset  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments  # noqa: E402

from trainwise.integrations.huggingface import ProfilingCallback  # noqa: E402
from trainwise.predict.same_machine import predict_total  # noqa: E402
from trainwise.profile.runner import ProfileOptions, run_profile  # noqa: E402

# budget_fraction=1: these tests pin the integration's counting; the cost budget (tested in test_profile.py)
# would stop a slow, loaded machine at min_iterations.
QUICK = ProfileOptions(min_iterations=5, max_iterations=8, validation_batches=2, epoch2_iterations=3, budget_fraction=1.0)
SEQ_LEN = 16


class Tokens(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 200, (n, SEQ_LEN), generator=generator)
        self.labels = torch.randint(0, 2, (n,), generator=generator)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(SEQ_LEN, dtype=torch.long),
                "labels": self.labels[i]}


def _model() -> BertForSequenceClassification:
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(
        vocab_size=200, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=SEQ_LEN, num_labels=2))


def _train(callback, tmp_path, *, epochs=3, train=320, val=40, batch=8, accumulate=2, eval_strategy="epoch",
           eval_steps=None):
    args = TrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=epochs,
                             per_device_train_batch_size=batch, per_device_eval_batch_size=batch,
                             gradient_accumulation_steps=accumulate, eval_strategy=eval_strategy, eval_steps=eval_steps,
                             save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=_model(), args=args, train_dataset=Tokens(train, 0), eval_dataset=Tokens(val, 1),
                      callbacks=[callback])
    trainer.train()
    return trainer


def test_sampled_profile_with_gradient_accumulation_and_evaluation(tmp_path):
    callback = ProfilingCallback(tmp_path / "hf.json", options=QUICK)
    _train(callback, tmp_path)
    profile = callback.profile
    assert profile.mode == "sampled" and profile.stop_reason == "sampled"
    assert profile.dataset.batches_per_iteration == 2 and profile.dataset.global_batch_size == 16
    assert all(it.batches == 2 and it.samples == 16 for it in profile.iterations)
    assert profile.dataset.train_batches_per_epoch == 40 and profile.dataset.iterations_per_epoch == 20
    assert profile.dataset.n_train == 320 and profile.dataset.n_val == 40 and profile.dataset.val_batch_size == 8
    assert profile.epochs[0].truncated and profile.epochs[0].iterations == 8
    assert profile.epochs[1].iterations == QUICK.epoch2_iterations
    # the Trainer's evaluation loop cannot be cut from a callback: the pass is timed in full
    assert len(profile.validations) == 1
    assert profile.validations[0].batches_timed == 5 and not profile.validations[0].truncated
    assert profile.validations[0].samples == 40
    assert profile.model.optimizer == "AdamW" and profile.model.parameters > 0
    assert predict_total(profile, 3).breakdown_s["validation_s"] > 0
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 3  # num_train_epochs=3


def test_full_mode_with_evaluation_every_few_steps(tmp_path):
    callback = ProfilingCallback(mode="full")
    _train(callback, tmp_path, epochs=2, train=160, val=24, accumulate=1, eval_strategy="steps", eval_steps=10)
    profile = callback.profile
    assert profile.full_run is not None and profile.full_run.epochs_completed == 2
    assert [e.iterations for e in profile.epochs] == [20, 20]
    assert [v.batches_timed for v in profile.validations] == [3, 3, 3, 3]
    assert [v.epoch for v in profile.validations] == [0, 0, 1, 1]
    # evaluation after a step is not counted in any iteration: no iteration's interval overlaps an
    # evaluation pass (checked on timestamps, not durations: this machine's timing is noisy)
    for v in profile.validations:
        v_end = v.start_s + v.wall_s
        for it in profile.iterations:
            assert it.start_s + it.wall_s <= v.start_s + 1e-6 or it.start_s >= v_end - 1e-6, (it, v)


# The callback's sampled and full records are pinned by the tests above, the estimate by tests/test_same_machine.py
# and its accuracy by benchmarks/integrations_prediction.py: this end-to-end comparison runs with the long tests.
@pytest.mark.long
def test_sampled_profile_predicts_a_short_full_run(tmp_path):
    """Loose tolerance on purpose: a noisy shared 2-core machine and a run of seconds; the benchmark
    (benchmarks/integrations_prediction.py) is the real check. Init (pytest's start-up) is left out."""
    options = ProfileOptions(min_iterations=15, max_iterations=30, validation_batches=5, epoch2_iterations=5)
    sampled = ProfilingCallback(options=options)
    _train(sampled, tmp_path, epochs=3, train=960, val=64, accumulate=1, batch=16)
    full = ProfilingCallback(mode="full")
    _train(full, tmp_path, epochs=3, train=960, val=64, accumulate=1, batch=16)
    assert_sampled_predicts_full(sampled.profile, full.profile, 3)


@pytest.mark.long
def test_trainwise_profile_detects_the_trainer_without_code_change(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import torch
        from transformers import Trainer, TrainingArguments
        from hf_parts import Tokens, model

        args = TrainingArguments(output_dir={str(tmp_path / "out")!r}, num_train_epochs=3, per_device_train_batch_size=8,
                                 per_device_eval_batch_size=8, gradient_accumulation_steps=2, eval_strategy="epoch",
                                 save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
        Trainer(model=model(), args=args, train_dataset=Tokens(320, 0), eval_dataset=Tokens(40, 1)).train()
        raise SystemExit("the profiler should have ended the process after sampling")
    """))
    (tmp_path / "hf_parts.py").write_text(textwrap.dedent(f"""
        import torch
        from torch.utils.data import Dataset
        from transformers import BertConfig, BertForSequenceClassification
        SEQ_LEN = {SEQ_LEN}
    """) + textwrap.dedent(_source_of(Tokens)) + textwrap.dedent("""
        def model():
            torch.manual_seed(0)
            return BertForSequenceClassification(BertConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2,
                num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ_LEN, num_labels=2))
    """))
    extra = {"characterise": False} if "characterise" in ProfileOptions.__dataclass_fields__ else {}
    profile = run_profile([sys.executable, str(script)], ProfileOptions(min_iterations=5, max_iterations=6,
                                                                        validation_batches=2, epoch2_iterations=2,
                                                                        budget_fraction=1.0, **extra),
                          quiet=True)
    assert profile.stop_reason == "sampled" and profile.exit_code == 0
    assert any("transformers" in note for note in profile.notes)
    assert len(profile.iterations) == 6 + 2  # counted once: the core hooks stood down
    assert profile.dataset.batches_per_iteration == 2 and profile.dataset.global_batch_size == 16
    assert [v.batches_timed for v in profile.validations] == [5]
    # the Trainer's (accelerate-wrapped) AdamW reaches the recorder: its exp_avg_sq is inspected during the run
    zeros = profile.optimizer_state_zeros
    assert zeros is not None and zeros.optimizer == "AdamW" and zeros.elements > 0
    assert [s for s, _ in zeros.trajectory][:5] == [1, 2, 3, 4, 5]


def _source_of(obj) -> str:
    import inspect

    return inspect.getsource(obj)


STEPS_SCRIPT = textwrap.dedent("""
    import hashlib, sys, time, torch
    from torch.utils.data import Dataset
    from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                              TrainingArguments)

    class Tokens(Dataset):
        def __init__(self, n):
            g = torch.Generator().manual_seed(1)
            self.ids, self.labels = torch.randint(1, 1000, (n, 32), generator=g), torch.randint(0, 2, (n,), generator=g)
        def __len__(self):
            return len(self.labels)
        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.labels[i]}

    class Slow(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            time.sleep(0.03)

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=1000, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64,
                                                     max_position_embeddings=32, num_labels=2))
    args = TrainingArguments(output_dir=sys.argv[1], max_steps=90, per_device_train_batch_size=16, save_strategy="no",
                             report_to=[], use_cpu=True, seed=0, logging_strategy="no", disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(480), callbacks=[Slow()])
    trainer.train()
    weights = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
    print(f"END global_step={trainer.state.global_step} weights={weights}", flush=True)
""")


@pytest.fixture(scope="module")
def steps_script(tmp_path_factory):
    """A 90-step Trainer run (30 steps per epoch, 3 epochs) and the weights it ends with when run
    plainly, without trainwise."""
    folder = tmp_path_factory.mktemp("hf-steps")
    script = folder / "steps.py"
    script.write_text(STEPS_SCRIPT)
    plain = subprocess.run([sys.executable, str(script), str(folder / "plain")], capture_output=True, text=True,
                           timeout=300)
    assert plain.returncode == 0, plain.stderr[-2000:]
    return script, re.search(r"END global_step=90 weights=(\w+)", plain.stdout).group(1)


@pytest.mark.long
@pytest.mark.parametrize("every, epoch", [(20, 0), (35, 1)])
def test_trainwise_run_resumes_a_trainer_run_to_the_weights_of_the_plain_run(tmp_path, steps_script, every, epoch):
    """Interrupted (SIGTERM) in its first or second epoch and resumed, a Trainer run under `trainwise
    run` ends with the very weights of the same run without trainwise. Three defects made it differ:
    the Trainer's DataLoader wrapper (accelerate) fetches a batch ahead, so a checkpoint counted one
    batch that was not trained yet; the sampler's epoch was set one behind from the third epoch on
    (that epoch repeated the second's order, interrupted or not); and the Trainer ends training after
    an epoch without a step and counts global_step from 0 again (a resume in a later epoch trained
    nothing, or in the first its whole max_steps again)."""
    import glob

    from resume_helpers import resume, stop_with_sigterm

    script, plain_weights = steps_script
    ck = tmp_path / "ck"
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--checkpoint-dir", str(ck), "--checkpoint-every-batches",
           str(every), "--", sys.executable, str(script), str(tmp_path / "out")]
    stop_with_sigterm(cli, lambda: bool(glob.glob(str(ck / "ckpt-*.twckpt"))))
    resumed = resume(cli).stdout
    assert f"END global_step=90 weights={plain_weights}" in resumed, resumed[-2000:]
    assert f"at epoch {epoch}, batch" in resumed  # the checkpoint was in the epoch this case is about


@pytest.mark.parametrize("seq_len, message", [
    ("0", "--seq-len must be >= 1 (got 0)"),
    ("-3", "--seq-len must be >= 1 (got -3)"),
    ("4096", "--seq-len 4096 is longer than the synthetic reviews' 300 tokens: use --seq-len 300 or less"),
])
def test_hf_tiny_bert_refuses_a_sequence_length_its_data_cannot_give(capsys, seq_len, message):
    from trainwise.workloads import hf_tiny_bert

    # before: 0 kept all 300 tokens for a model of 0 positions and -3 asked for -3 (two tracebacks),
    # 4096 trained on 300 tokens while saying 4096
    with pytest.raises(SystemExit) as exit_info:
        hf_tiny_bert.main(["--seq-len", seq_len, "--epochs", "1", "--train-samples", "8", "--val-samples", "8"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith(f"error: {message}"), err


def test_hf_tiny_bert_takes_the_whole_review(monkeypatch):
    from trainwise.workloads import hf_tiny_bert

    class Accepted(Exception):
        pass

    def accepted(train_samples, val_samples, seq_len, seed=0):
        raise Accepted(seq_len)

    monkeypatch.setattr(hf_tiny_bert, "build_datasets", accepted)
    with pytest.raises(Accepted, match="300"):
        hf_tiny_bert.main(["--seq-len", "300", "--epochs", "1", "--train-samples", "8", "--val-samples", "8"])


@pytest.mark.parametrize("limits", [{"max_steps": 3}, {"num_train_epochs": 1.5}])
def test_a_run_bound_by_steps_or_a_fraction_of_an_epoch_holds_no_epoch_count(tmp_path, limits):
    """HfArgumentParser's num_train_epochs default (3.0) is read from argparse; max_steps replaces it, and a
    fraction of an epoch is not a count: the profile keeps neither."""
    callback = ProfilingCallback(options=QUICK)
    callback.session.recorder.note_script_epochs(3.0, "the argparse argument num_train_epochs=3", rank=(True, False, False))
    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8, save_strategy="no",
                             logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, **limits)
    Trainer(model=_model(), args=args, train_dataset=Tokens(64, 0), callbacks=[callback]).train()
    assert callback.session.recorder.script_epochs is None
    assert any(note.startswith("no epoch count read: ") for note in callback.profile.notes)
    # a step limit is kept as the run's optimizer steps (predict turns them into epochs)
    steps = callback.profile.script_iterations
    assert (steps.iterations if steps else None) == limits.get("max_steps")


@pytest.mark.long  # a whole framework run: with the long tests
def test_an_early_stopping_callback_is_named_as_the_runs_other_end(tmp_path):
    from transformers import EarlyStoppingCallback

    callback = ProfilingCallback(options=QUICK)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), num_train_epochs=3, per_device_train_batch_size=8,
                             per_device_eval_batch_size=8, eval_strategy="epoch", save_strategy="epoch",
                             load_best_model_at_end=True, metric_for_best_model="eval_loss", logging_strategy="no",
                             report_to=[], use_cpu=True, disable_tqdm=True)
    Trainer(model=_model(), args=args, train_dataset=Tokens(160, 0), eval_dataset=Tokens(24, 1),
            callbacks=[EarlyStoppingCallback(early_stopping_patience=2), callback]).train()
    exits = callback.profile.epoch_loop_exits
    assert exits.where == "Hugging Face Trainer's callbacks"
    assert exits.tests == ["EarlyStoppingCallback(early_stopping_patience=2, metric_for_best_model='eval_loss')"]
