"""trainwise run with a custom loop that checkpoints through the explicit API (trainwise.run.checkpoint:
restore / maybe_save): a preemption stops it as preempted, with its record, and the run result counts
the checkpoints the script wrote."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from resume_helpers import resume, stop_with_sigterm

SCRIPTS = Path(__file__).parent / "scripts"
EXPLICIT_SCRIPT = SCRIPTS / "explicit_checkpoint.py"


def _cli(tmp_path: Path, out: Path, result: Path, *script_args: str) -> list[str]:
    return [sys.executable, "-m", "trainwise.cli", "run", "-o", str(result), "--checkpoint-dir", str(tmp_path / "ck"),
            "--checkpoint-every-batches", "10", "--", sys.executable, str(EXPLICIT_SCRIPT), "--out", str(out),
            *script_args]


# A resume run (the `long` marker's kind); the explicit API's files and refusals are unit-tested below, SIGTERM and
# resume of `trainwise run` stays in the default run (test_run.py).
@pytest.mark.long
@pytest.mark.slow
def test_a_preempted_explicit_api_loop_exits_143_with_its_record_and_resumes_to_the_same_weights(tmp_path):
    out, first, second = tmp_path / "model.pt", tmp_path / "first.json", tmp_path / "second.json"
    cli = _cli(tmp_path, out, first, "--steps", "400", "--sleep", "0.02")
    # Before the fix the explicit API ended the process with os._exit(143) before trainwise's records were
    # written: "exited with code 143 before its first optimizer step", exit 2, no result.
    stop_with_sigterm(cli, lambda: bool(list((tmp_path / "ck").glob("ckpt-*.twckpt"))))
    stopped = json.loads(first.read_text())
    assert stopped["exit_codes"] == [143]
    assert stopped["ranks"][0]["iterations"] >= 10
    # the script's checkpoints are counted (the interval's, and the SIGTERM's unless it came during that write)
    newest = sorted(p.name for p in (tmp_path / "ck").glob("ckpt-*.twckpt"))[-1]
    assert stopped["checkpoint"]["written"] >= 1 and stopped["checkpoint"]["last"] == newest
    # No DataLoader and no samples= marker: the rate is unknown, not 0 samples/s.
    assert stopped["throughput_samples_per_s"] is None
    assert any("samples per iteration unknown" in note for note in stopped["notes"])

    again = resume(_cli(tmp_path, out, second, "--steps", "400"))
    assert "checkpoints: 0 written" not in again.stdout
    resumed = json.loads(second.read_text())
    assert resumed["checkpoint"]["written"] >= 1 and resumed["checkpoint"]["resumed_from"]
    assert resumed["ranks"][0]["iterations"] == 400 - int(resumed["checkpoint"]["resumed_from"][5:17])

    reference = tmp_path / "reference.pt"
    import subprocess

    subprocess.run([sys.executable, str(EXPLICIT_SCRIPT), "--out", str(reference), "--steps", "400"], check=True,
                   timeout=120)
    got, want = torch.load(out), torch.load(reference)
    assert all(torch.equal(got[k], want[k]) for k in want)


@pytest.fixture
def explicit_api(monkeypatch):
    """The explicit API in this process, without its SIGTERM handler (pytest keeps its own)."""
    from trainwise.run import checkpoint as twc

    monkeypatch.setattr(twc, "_install_sigterm_flag", lambda: None)
    monkeypatch.delenv("TRAINWISE_RUN_CHECKPOINT", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    return twc


def test_under_data_parallelism_only_rank_0_writes_explicit_checkpoints(tmp_path, monkeypatch, explicit_api):
    model = torch.nn.Linear(4, 1)
    monkeypatch.setenv("RANK", "1")
    assert explicit_api.save(5, directory=str(tmp_path), model=model) is None
    assert not list(tmp_path.glob("ckpt-*"))  # several ranks writing the same names would race
    monkeypatch.setenv("RANK", "0")
    assert explicit_api.save(5, directory=str(tmp_path), model=model) == "ckpt-000000000005.twckpt"


def test_checkpoint_files_get_the_permissions_of_any_new_file(tmp_path, explicit_api):
    import os
    import stat

    old = os.umask(0o022)
    try:
        name = explicit_api.save(1, directory=str(tmp_path), model=torch.nn.Linear(4, 1))
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644  # mkstemp's 0600 before the fix


def test_restore_refuses_a_checkpoint_that_does_not_match_in_one_line(tmp_path, explicit_api):
    from trainwise.errors import TrainwiseError

    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    explicit_api.save(3, directory=str(tmp_path), model=model, optimizer=optimizer)
    # a name save() was not given used to be skipped without a word: the optimizer silently started afresh
    with pytest.raises(TrainwiseError, match=r"it holds no optim \(it holds model, optimizer\); pass restore\(\) the names"):
        explicit_api.restore(directory=str(tmp_path), model=model, optim=optimizer)
    # a changed layer used to end in torch's multi-line traceback
    with pytest.raises(TrainwiseError) as refused:
        explicit_api.restore(directory=str(tmp_path), model=torch.nn.Linear(4, 2))
    message = str(refused.value)
    assert "\n" not in message and "its model does not fit the script's (size mismatch for weight" in message
    assert explicit_api.restore(directory=str(tmp_path), model=model, optimizer=optimizer)["step"] == 3


DDP_EXPLICIT_SCRIPT = SCRIPTS / "ddp_explicit_checkpoint.py"
PLAIN_TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                  str(DDP_EXPLICIT_SCRIPT)]


@pytest.fixture(scope="module")
def ddp_explicit_reference(tmp_path_factory):
    """The final weights of the DDP explicit-API loop run without interruption (plain torchrun, no checkpoints)."""
    import subprocess

    reference = tmp_path_factory.mktemp("ddp_explicit") / "reference.pt"
    subprocess.run([*PLAIN_TORCHRUN, "--out", str(reference)], check=True, capture_output=True, timeout=120)
    return torch.load(reference)


@pytest.mark.long
@pytest.mark.slow
def test_a_ddp_explicit_api_loop_stops_all_ranks_together_and_resumes_each_rank_with_its_own_rng(tmp_path,
                                                                                                ddp_explicit_reference):
    """A custom DDP loop (explicit API, ranks seeded seed + rank, dropout) whose rank 1 alone gets SIGTERM.
    Before the fix rank 1 stopped at its own step and rank 0 waited in an all-reduce it never joined
    ("Connection closed by peer", a traceback), and the checkpoint held rank 0's RNG states only: resumed,
    rank 1 drew rank 0's dropout masks and noise. Now the ranks agree on the stop (the flags ride on the
    gradient all-reduce), every rank's RNG states are in the checkpoint, and the resumed weights equal an
    uninterrupted run's."""
    import subprocess

    ck, out = tmp_path / "ck", tmp_path / "w.pt"
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--engine", "ddp", "--nproc", "2", "--checkpoint-dir", str(ck),
           "--checkpoint-every-batches", "1000", "--output", str(tmp_path / "run.json"), "--", sys.executable,
           str(DDP_EXPLICIT_SCRIPT), "--out", str(out)]
    stopped = subprocess.run([*cli, "--rank1-sigterm-at", "7"], capture_output=True, text=True, timeout=120)
    output = stopped.stdout + stopped.stderr
    assert stopped.returncode == 143, output[-3000:]
    assert "Traceback" not in output and "Connection closed" not in output, output[-3000:]
    record = json.loads((tmp_path / "run.json").read_text())
    ranks = {r["rank"]: r for r in record["ranks"]}
    assert ranks[0]["iterations"] == ranks[1]["iterations"]  # the same stop on both ranks
    # rank 1's flag rides on the next step's all-reduce: both stop, and checkpoint, after step 8
    assert [p.name for p in ck.glob("ckpt-*.twckpt")] == ["ckpt-000000000008.twckpt"]
    assert not out.exists()

    resume([*cli])
    got, want = torch.load(out), ddp_explicit_reference
    assert all(torch.equal(got[k], want[k]) for k in want), {k: float((got[k] - want[k]).abs().max()) for k in want}


@pytest.mark.long
@pytest.mark.slow
def test_a_ddp_explicit_api_loop_under_a_plain_torchrun_agrees_by_its_own_all_reduce(tmp_path, ddp_explicit_reference):
    """Outside `trainwise run` (no comm hook carrying the flags) maybe_save's two-element all-reduce agrees:
    the SIGTERM that reached rank 1 stops both ranks at the same step (this one), with both ranks' RNG
    states in the checkpoint, and the resumed weights equal an uninterrupted run's."""
    import subprocess

    ck, out = tmp_path / "ck", tmp_path / "w.pt"
    stopped = subprocess.run([*PLAIN_TORCHRUN, "--out", str(out), "--directory", str(ck), "--rank1-sigterm-at", "7"],
                             capture_output=True, text=True, timeout=120)
    output = stopped.stdout + stopped.stderr
    # both ranks exit 143 (plain torchrun reports that as its ChildFailedError); rank 0 does not fail in an all-reduce
    assert stopped.returncode != 0 and "Connection closed" not in output, output[-3000:]
    assert [p.name for p in ck.glob("ckpt-*.twckpt")] == ["ckpt-000000000007.twckpt"]
    subprocess.run([*PLAIN_TORCHRUN, "--out", str(out), "--directory", str(ck)], check=True, capture_output=True, timeout=120)
    got, want = torch.load(out), ddp_explicit_reference
    assert all(torch.equal(got[k], want[k]) for k in want)
