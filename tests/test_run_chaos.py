"""Chaos: kill -9 a checkpointing job at 20 random moments (some aimed at checkpoint writes), restart
it each time; its final weights must be bit-identical to an uninterrupted run with the same seed, and
no restart may load a corrupt checkpoint (a torn newest checkpoint is planted once and must be skipped)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
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
    # The first attempt that reads it sets it aside as NAME.corrupt (so it no longer counts towards --keep);
    # that attempt may be killed before it reports what it skipped, so the set-aside file is the evidence.
    assert (tmp_path / "ck" / f"{torn}.corrupt").exists() or any(torn in " ".join(a.skipped_corrupt) for a in after)
    # the first attempt to read it did not resume from it (a later one may: the name is written again, valid, when
    # training reaches that step once more)
    first_after = next(a for a in after if a.resumed_from is not None or a.skipped_corrupt)
    assert first_after.resumed_from != torn
    assert any(a.resumed_from for a in report.attempts), "no attempt resumed from a checkpoint"
    final = torch.load(out)
    assert final.keys() == plain.keys()
    assert all(torch.equal(final[k], plain[k]) for k in plain), "resumed training diverged from the uninterrupted run"


# ---------------------------------------------------------------------------- DDP: kill a rank, kill torchrun

DDP_SCRIPT = str(Path(__file__).parent / "scripts" / "ddp_train.py")


def _processes_mentioning(text: str) -> dict[int, str]:
    """Live processes whose command line holds `text` (zombies excluded): {pid: command line}."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state not in ("Z", "X"):
            found[int(entry.name)] = cmdline
    return found


def _rank_of(pid: int) -> int | None:
    try:
        for variable in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if variable.startswith(b"RANK="):
                return int(variable[5:])
    except (OSError, ValueError):
        pass
    return None


def _no_orphans(marker: str, within_s: float = 5.0) -> dict[int, str]:
    deadline = time.time() + within_s
    while (left := _processes_mentioning(marker)) and time.time() < deadline:
        time.sleep(0.1)
    return left


def _kill_when(process, ck: Path, newer_than: int, victim) -> None:
    """Once a checkpoint past batch `newer_than` exists, SIGKILL the process `victim()` picks."""
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if any(newer_than < int(p.name[5:17]) < 999_000 for p in ck.glob("ckpt-*.twckpt")):  # not the planted ones
            pid = victim()
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.05)
    raise AssertionError(f"no checkpoint past batch {newer_than} before the job ended: {process.poll()}")


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds the job's processes through /proc")
def test_ddp_kill_one_rank_then_torchrun_leaves_no_orphans_and_loads_no_corrupt_or_foreign_checkpoint(tmp_path):
    """`trainwise run --engine ddp --nproc 2` with checkpoints: SIGKILL rank 1 mid-training, rerun, SIGKILL
    torchrun itself (its workers are orphaned: trainwise must end them), plant a forged and a foreign-key
    checkpoint, rerun to the end. No process of the job survives any attempt, the planted files are refused by
    name and never loaded, and the final weights are those of an uninterrupted run."""
    from trainwise.run.checkpoint import CheckpointStore

    marker = str(tmp_path)
    args = ["--epochs", "3", "--samples", "384", "--sleep", "0.05", "--width", "64"]
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--engine", "ddp", "--nproc", "2", "--checkpoint-every-batches", "5"]

    def start(ck: Path, out: Path) -> subprocess.Popen:
        return subprocess.Popen([*cli, "--checkpoint-dir", str(ck), "--", sys.executable, DDP_SCRIPT, "--out", str(out), *args],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    plain = start(tmp_path / "plain-ck", tmp_path / "plain.pt")
    out, _ = plain.communicate(timeout=300)
    assert plain.returncode == 0, out[-2000:]

    ck, weights = tmp_path / "ck", tmp_path / "chaos.pt"
    # 1. SIGKILL one rank: torchrun ends the other, trainwise reports the failure; nothing is left running
    job = start(ck, weights)
    _kill_when(job, ck, 5, lambda: next((pid for pid, cmd in _processes_mentioning(marker).items()
                                         if DDP_SCRIPT in cmd and "_torchrun" not in cmd and _rank_of(pid) == 1), None))
    out, _ = job.communicate(timeout=120)
    assert job.returncode != 0, out[-2000:]
    assert not (left := _no_orphans(marker)), f"left running after a rank was killed: {left}"
    newest = max(int(p.name[5:17]) for p in ck.glob("ckpt-*.twckpt"))

    # 2. a forged (unkeyed) and a foreign-key checkpoint, newer than any real one
    forged = ck / "ckpt-000000999998.twckpt"
    forged.write_bytes(b"TRAINWISE-CKPT 1 " + b"0" * 64 + b" 4\nevil")
    foreign = ck / "ckpt-000000999999.twckpt"
    os.environ["TRAINWISE_CHECKPOINT_KEY"] = "f" * 64
    try:
        from trainwise.run.checkpoint import encode

        foreign.write_bytes(encode({"format": 1, "kind": "auto"}, foreign.name))
    finally:
        del os.environ["TRAINWISE_CHECKPOINT_KEY"]

    # 3. SIGKILL torchrun itself once the rerun wrote a checkpoint of its own: its orphaned workers must end
    job = start(ck, weights)
    _kill_when(job, ck, newest, lambda: next((pid for pid, cmd in _processes_mentioning(marker).items()
                                              if "trainwise.run._torchrun" in cmd), None))
    out, _ = job.communicate(timeout=120)
    assert job.returncode != 0, out[-2000:]
    assert f"refusing checkpoint {foreign}" in out and "signed with another key" in out, out[-3000:]
    assert f"refusing checkpoint {forged}" in out and "format 1 has no key" in out, out[-3000:]
    assert not (left := _no_orphans(marker)), f"left running after torchrun was killed: {left}"
    assert (ck / f"{foreign.name}.untrusted").exists() and not foreign.exists()

    # 4. to the end: every final-named checkpoint verifies, the rerun resumes from one trainwise wrote
    store = CheckpointStore(str(ck))
    for name in store.names():
        from trainwise.run.checkpoint import decode

        decode((ck / name).read_bytes(), name)
    job = start(ck, weights)
    out, _ = job.communicate(timeout=300)
    assert job.returncode == 0, out[-3000:]
    assert "resumed from ckpt-" in out and "ckpt-00000099999" not in out.split("resumed from")[1][:40], out[-2000:]
    assert not (left := _no_orphans(marker)), left
    final, reference = torch.load(weights), torch.load(tmp_path / "plain.pt")
    assert final.keys() == reference.keys()
    assert all(torch.equal(final[k], reference[k]) for k in reference), "resumed DDP training diverged"
