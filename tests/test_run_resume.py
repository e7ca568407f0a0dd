"""trainwise run's resume and the script around its training loop: a checkpoint of another model, a
script that uses its loop's last batch after the loop (the epochs finished before the checkpoint are
not run again), the loop scan that tells the two apart, and what a failure after a resume says."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from resume_helpers import resume, stop_with_sigterm

from trainwise.errors import TrainwiseError
from trainwise.run._loopscan import loop_leaves_unbound
from trainwise.run.options import CheckpointOptions, RunOptions
from trainwise.run.result import build_result

SCRIPTS = Path(__file__).parent / "scripts"
LOSS_SCRIPT = SCRIPTS / "loss_after_loop.py"
CHAOS_SCRIPT = SCRIPTS / "chaos_train.py"


# ---------------------------------------------------------------------------- the loop scan

SCANNER = """
import sys
from trainwise.run._loopscan import loop_leaves_unbound

class Loader:
    def __iter__(self):
        print("ANSWER", loop_leaves_unbound(sys._getframe(1)), flush=True)
        return iter([])  # a pass the resume ends at once

dl, val = Loader(), [(1, 2)]
"""


@pytest.mark.parametrize("body, answers", [
    # the last batch's loss printed after the loop: unbound after an empty pass
    ("for epoch in range(2):\n    for xb, yb in dl:\n        loss = xb + yb\n    print(loss)\n", [True]),
    # a running total set before the loop, and the validation loop binding its own x, y
    ("for epoch in range(2):\n    total = 0\n    for x, y in dl:\n        total += x\n"
     "    for x, y in val:\n        print(x, y)\n    print(total)\n", [False, False]),
    # a value given before the training, then the loop's
    ("loss = None\nfor epoch in range(2):\n    for xb in dl:\n        loss = xb\n    print(loss)\n", [False, False]),
    # inside a function that returns the loop's last value
    ("def epoch(loader):\n    for batch in loader:\n        out = batch\n    return out\n"
     "for e in range(2):\n    try:\n        epoch(dl)\n    except NameError:\n        pass\n", [True, True]),
    # through a wrapper's generator (a progress bar): the script's loop is the one that leaks
    ("def bar(it):\n    for o in it:\n        yield o\nfor e in range(2):\n    for xb in bar(dl):\n        loss = xb\n"
     "    print(loss)\n", [True]),
    # read before the loop in the next round of the epoch loop
    ("for e in range(2):\n    if e:\n        try:\n            print(loss)\n        except NameError:\n            pass\n"
     "    for xb in dl:\n        loss = xb\n", [True, True]),
    # a function of the module with its own local of that name
    ("def helper():\n    loss = 3\n    return loss\nfor e in range(2):\n    for xb in dl:\n        loss = xb\nhelper()\n",
     [False, False]),
    # a closure reading the loop's name
    ("def main():\n    def report():\n        return last\n    for e in range(2):\n        for xb in dl:\n"
     "            last = xb\n        try:\n            report()\n        except NameError:\n            pass\nmain()\n", [True, True]),
    # nothing after the loop: enumerate's step and the batch are not used
    ("for e in range(2):\n    for step, (xb, yb) in enumerate(dl):\n        pass\n    print('done', e)\n", [False, False]),
])
def test_the_loop_scan_finds_names_an_empty_pass_would_leave_unbound(tmp_path, body, answers):
    script = tmp_path / "train.py"
    script.write_text(SCANNER + body)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    # one answer per pass; where it is True the script then fails with the NameError it predicts
    seen = [line.split()[1] == "True" for line in done.stdout.splitlines() if line.startswith("ANSWER")]
    assert seen == answers, (seen, done.stderr[-500:])
    assert ("NameError" in done.stderr) == (done.returncode != 0)


def test_the_loop_scan_says_yes_when_it_cannot_read_the_source():
    namespace: dict = {}
    code = compile("import sys\ndef f(scan):\n    for x in [1]:\n        return scan(sys._getframe(0))\n", "<no source>", "exec")
    exec(code, namespace)
    assert namespace["f"](loop_leaves_unbound) is True


# ---------------------------------------------------------------------------- real runs


def _reference(tmp_path: Path, script: Path, args: list[str]) -> dict:
    out = tmp_path / "reference.pt"
    subprocess.run([sys.executable, str(script), "--out", str(out), *args], check=True, timeout=300, capture_output=True)
    return torch.load(out)


def _run_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainwise.cli", "run", *args]


# A resume run (the `long` marker's kind); the loop scan that decides it is unit-tested above.
@pytest.mark.long
@pytest.mark.slow
def test_a_script_that_prints_its_last_loss_after_the_loop_resumes_to_the_same_weights(tmp_path):
    reference = _reference(tmp_path, LOSS_SCRIPT, ["--epochs", "3"])
    out, ck, record = tmp_path / "out.pt", tmp_path / "ck", tmp_path / "run.json"
    cli = _run_cli("--checkpoint-dir", str(ck), "--checkpoint-every-batches", "20", "-o", str(record), "--",
                   "python", str(LOSS_SCRIPT), "--out", str(out), "--epochs", "3", "--sleep", "0.02")
    # 40 batches per epoch: stopped during the second epoch, the first is not run again on resume
    stop_with_sigterm(cli, lambda: any(int(p.name[5:17]) > 40 for p in ck.glob("ckpt-*.twckpt")))
    again = resume(cli)
    assert "NameError" not in again.stdout + again.stderr
    assert "epoch 0 loss" in again.stdout and "epoch 2 loss" in again.stdout
    final = torch.load(out)
    assert all(torch.equal(final[k], reference[k]) for k in reference)  # the batch let through epoch 0 left no trace
    result = json.loads(record.read_text())
    resumed_at = int(result["checkpoint"]["resumed_from"][5:17])
    assert result["ranks"][0]["iterations"] == 3 * 40 - resumed_at  # and is not one of the run's measured steps


# A resume run (the `long` marker's kind); `trainwise run`'s SIGTERM-and-resume stays in the default run (test_run.py).
@pytest.mark.long
@pytest.mark.slow
def test_a_checkpoint_at_an_epoch_end_resumes_a_script_that_uses_its_last_batch(tmp_path):
    # A 1-epoch run checkpoints at its end (batch 40, the pass's end); a 2-epoch run resumes there: the
    # resumed epoch has no batch left, yet the script prints that epoch's loss.
    reference = _reference(tmp_path, LOSS_SCRIPT, ["--epochs", "2"])
    out, ck = tmp_path / "out.pt", tmp_path / "ck"
    first = subprocess.run(_run_cli("--checkpoint-dir", str(ck), "--checkpoint-every-batches", "40", "--", "python",
                                    str(LOSS_SCRIPT), "--out", str(out), "--epochs", "1"),
                           capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert [p.name for p in ck.glob("ckpt-*.twckpt")] == ["ckpt-000000000040.twckpt"]
    again = resume(_run_cli("--checkpoint-dir", str(ck), "--checkpoint-every-batches", "40", "--", "python",
                            str(LOSS_SCRIPT), "--out", str(out), "--epochs", "2"))
    assert "at epoch 0, batch 40" in again.stdout
    final = torch.load(out)
    assert all(torch.equal(final[k], reference[k]) for k in reference)


# A resume run (the `long` marker's kind); `trainwise run`'s SIGTERM-and-resume stays in the default run (test_run.py).
@pytest.mark.long
@pytest.mark.slow
def test_a_script_that_takes_a_finished_epochs_batches_with_next_gets_a_one_line_error(tmp_path):
    out, ck = tmp_path / "out.pt", tmp_path / "ck"
    cli = _run_cli("--checkpoint-dir", str(ck), "--checkpoint-every-batches", "20", "--", "python", str(LOSS_SCRIPT),
                   "--out", str(out), "--epochs", "3", "--sleep", "0.02", "--loop", "next")
    stop_with_sigterm(cli, lambda: any(int(p.name[5:17]) > 40 for p in ck.glob("ckpt-*.twckpt")))
    again = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2
    assert "Traceback" not in again.stderr, again.stderr
    assert "loss_after_loop.py, line" in again.stderr and "iterate it with a for loop" in again.stderr
    assert "error: the job failed right after resuming from the checkpoint" in again.stderr
    assert "run it without trainwise" not in again.stderr


@pytest.mark.slow
@pytest.mark.long
def test_a_checkpoint_of_a_model_of_another_size_is_a_one_line_error(tmp_path):
    ck = tmp_path / "ck"
    args = ["--out", str(tmp_path / "out.pt"), "--epochs", "1", "--samples", "128"]
    first = subprocess.run(_run_cli("--checkpoint-dir", str(ck), "--checkpoint-every-batches", "4", "--", "python",
                                    str(CHAOS_SCRIPT), *args, "--width", "32"), capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    again = subprocess.run(_run_cli("--checkpoint-dir", str(ck), "--", "python", str(CHAOS_SCRIPT), *args, "--width", "128"),
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2
    assert "Traceback" not in again.stderr, again.stderr
    assert "does not match the checkpoint (RuntimeError: size mismatch for 0.weight" in again.stderr
    assert f"or delete {ck}" in again.stderr and "error: the checkpoint in" in again.stderr
    assert "before its first optimizer step" not in again.stderr


def test_a_resumed_job_that_fails_before_its_first_step_is_not_sent_to_run_without_trainwise():
    options = RunOptions(checkpoint=CheckpointOptions(directory="memory://trainwise-test/resumed"))
    runs = {0: {"checkpoint": {"resumed_from": "ckpt-000000000062.twckpt"}, "notes": []}}
    raws = {0: {"config": {}, "iterations": []}}
    with pytest.raises(TrainwiseError, match="after resuming from ckpt-000000000062.twckpt in memory://trainwise-test/resumed"
                                             ".*start afresh with another --checkpoint-dir") as caught:
        build_result(options, ["python", "x.py"], [1], 0.0, 1.0, raws, runs)
    assert "run it without trainwise" not in str(caught.value)
    with pytest.raises(TrainwiseError, match="run it without trainwise"):  # not resumed: the script's own error
        build_result(options, ["python", "x.py"], [1], 0.0, 1.0, raws, {0: {"checkpoint": {"resumed_from": None}}})
    with pytest.raises(TrainwiseError, match="failed right after resuming"):
        build_result(options, ["python", "x.py"], [76], 0.0, 1.0, raws, runs)


SELF_RESUMING_SCRIPT = SCRIPTS / "self_resuming.py"


# A resume run (the `long` marker's kind); `trainwise run`'s SIGTERM-and-resume stays in the default run (test_run.py).
@pytest.mark.long
@pytest.mark.slow
def test_a_script_that_resumes_itself_is_refused_instead_of_skipping_its_remaining_epochs(tmp_path):
    own, out, ck = tmp_path / "own.pt", tmp_path / "model.pt", tmp_path / "ck"
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--checkpoint-dir", str(ck), "--checkpoint-every-batches", "4",
           "--", sys.executable, str(SELF_RESUMING_SCRIPT), "--own", str(own), "--out", str(out), "--sleep", "0.05"]
    # Stopped in its second epoch (8 batches each), once it has its own checkpoint of the first.
    stop_with_sigterm(cli, lambda: own.exists() and any(int(p.name[5:17]) > 9 for p in ck.glob("ckpt-*.twckpt")))
    again = subprocess.run(cli, capture_output=True, text=True, timeout=300)
    # Before: trainwise ended the script's epochs 1-3 at once as "done before the checkpoint" (it counts epochs
    # from the script's start), the checkpoint was never loaded, and the run ended with exit 0 and a model
    # trained for one epoch.
    assert again.returncode != 0, again.stdout[-1500:]
    assert "the script resumed itself" in again.stderr and "Traceback" not in again.stderr
    assert not out.exists()


# A resume run (the `long` marker's kind); `trainwise run`'s SIGTERM-and-resume stays in the default run (test_run.py).
@pytest.mark.long
@pytest.mark.slow
def test_an_evaluation_of_the_training_set_without_eval_or_no_grad_resumes_to_the_same_weights(tmp_path):
    """After each epoch the script takes a loss over the training loader in train mode with gradients on
    and no step (dropout and the loader's shuffle draw from the RNGs): a pass of the training loader that is
    not training. Stopped in the second epoch and resumed, the run ends with the plain run's weights: the resume
    replays the script's passes over its training loader, whichever of them trained."""
    args = ["--epochs", "3", "--samples", "128", "--sleep", "0.03", "--train-eval"]
    reference = tmp_path / "reference.pt"
    subprocess.run([sys.executable, str(CHAOS_SCRIPT), "--out", str(reference), *args], check=True, timeout=300)
    out, ck = tmp_path / "out.pt", tmp_path / "ck"
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--checkpoint-dir", str(ck), "--checkpoint-every-batches", "3",
           "--", "python", str(CHAOS_SCRIPT), "--out", str(out), *args]
    # 8 batches an epoch: stop once there is a checkpoint of the 12th batch or later (past the first epoch)
    stop_with_sigterm(cli, lambda: any(int(p.name[5:17]) >= 12 for p in ck.glob("ckpt-*.twckpt")))
    resume(cli)
    final, want = torch.load(out), torch.load(reference)
    assert all(torch.equal(final[k], want[k]) for k in want)
