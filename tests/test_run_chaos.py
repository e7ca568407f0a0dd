"""Chaos: kill -9 a checkpointing job at 20 random moments (some aimed at checkpoint writes), restart
it each time; its final weights must be bit-identical to an uninterrupted run with the same seed, and
no restart may load a corrupt checkpoint (a torn newest checkpoint is planted once and must be skipped)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from trainwise.run.chaos import run_chaos, run_uninterrupted

SCRIPT = str(Path(__file__).parent / "scripts" / "chaos_train.py")
# The job must outlast 20 kills on any machine, fast or loaded: an attempt progresses at most 0.6 s
# (a during-write kill waits for the next write, ~3 steps more), so 14 x 0.6 + 6 x 0.9 = 13.8 s at
# most before the 20th kill, against >= 192 steps x 0.08 s = 15.4 s of work; 0.6 s also leaves a
# start-up of ~0.2 s room to write checkpoints (on a fast idle machine the old 2 s job finished
# after ~10 kills).
ARGS = ["--epochs", "3", "--samples", "1024", "--sleep", "0.08", "--width", "2048"]


def _plain_run(out: Path) -> dict:
    """The same script without trainwise at all, in a forked child (torch already imported)."""
    assert run_uninterrupted(SCRIPT, ["--out", str(out), *ARGS]) == 0
    return torch.load(out)


@pytest.mark.long
@pytest.mark.slow
def test_twenty_kills_end_bit_identical_and_never_resume_from_a_corrupt_checkpoint(tmp_path):
    plain = _plain_run(tmp_path / "plain.pt")
    out = tmp_path / "chaos.pt"
    report = run_chaos(SCRIPT, ["--out", str(out), *ARGS], tmp_path / "ck", tmp_path / "work", kills=20,
                       during_write=6, max_kill_s=0.6, every_batches=3, seed=1234, corrupt_newest_at=8)
    assert report.kills == 20, [a.kind for a in report.attempts]
    assert report.kills_during_write >= 1, "no kill landed inside a checkpoint write"
    assert report.injected_corrupt, "the torn checkpoint was not planted"
    # Atomic writes: no final-named checkpoint ever failed verification (the planted one aside) ...
    assert report.corrupt_final_files == []
    # ... the planted one was skipped with a warning, and nothing resumed from it while it was torn.
    torn = report.injected_corrupt[0]
    after = [a for a in report.attempts if a.index > 8]
    assert any(torn in " ".join(a.skipped_corrupt) for a in after)
    first_after = next(a for a in after if a.resumed_from is not None or a.skipped_corrupt)
    assert first_after.resumed_from != torn
    assert any(a.resumed_from for a in report.attempts), "no attempt resumed from a checkpoint"
    final = torch.load(out)
    assert final.keys() == plain.keys()
    assert all(torch.equal(final[k], plain[k]) for k in plain), "resumed training diverged from the uninterrupted run"
