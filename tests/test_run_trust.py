"""Hostile input to `trainwise run` and its neighbours (issue 37): forged, tampered and foreign
checkpoints are never deserialised; requests beyond the machine and NaN/inf options are refused before
any work; every process a job starts ends with it, also helpers that left its session."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from trainwise.cli import main
from trainwise.errors import TrainwiseError
from trainwise.run import checkpoint_key
from trainwise.run.checkpoint import (CheckpointStore, CorruptCheckpoint, UntrustedCheckpoint, checkpoint_name, decode,
                                      encode)
from trainwise.run.checkpoint_key import KEY_ENV, KEY_FILE_ENV, load_key

SCRIPTS = Path(__file__).parent / "scripts"


class _Payload:
    """Unpickling this runs `touch MARKER` (what a forged checkpoint's author would put there)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _evil_pickle(marker: Path) -> bytes:
    buffer = io.BytesIO()
    pickle.dump({"format": 1, "kind": "auto", "step": 999, "evil": _Payload(marker)}, buffer)
    return buffer.getvalue()


def _forged_v1(marker: Path) -> bytes:
    """The issue's forgery: the old unkeyed header, a valid sha256 of a pickle that runs a command."""
    payload = _evil_pickle(marker)
    return f"TRAINWISE-CKPT 1 {hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload


@pytest.fixture
def key_file(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "config" / "checkpoint.key"
    monkeypatch.setenv(KEY_FILE_ENV, str(path))
    monkeypatch.delenv(KEY_ENV, raising=False)
    path.parent.mkdir(mode=0o700)
    path.write_text(os.urandom(32).hex() + "\n")
    path.chmod(0o600)
    return path


# ---------------------------------------------------------------------------- forged, tampered, foreign


@pytest.mark.parametrize("forgery", ["v1-sha256", "v2-random-key", "v2-our-key-id"])
def test_a_forged_checkpoint_never_runs_and_the_refusal_names_it(tmp_path, key_file, capsys, forgery):
    ck = tmp_path / "ck"
    store = CheckpointStore(str(ck))
    store.write(3, {"step": 3})
    marker = tmp_path / "pwned"
    name = "ckpt-000000999999.twckpt"
    if forgery == "v1-sha256":
        blob = _forged_v1(marker)
    else:
        payload = _evil_pickle(marker)
        key_id = load_key().key_id if forgery == "v2-our-key-id" else "0123456789abcdef"
        blob = f"TRAINWISE-CKPT 2 {key_id} {hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload
    (ck / name).write_bytes(blob)
    found = store.load_newest()
    assert not marker.exists(), "the forged checkpoint's code ran"
    assert found is not None and found[0] == checkpoint_name(3) and found[1] == {"step": 3}
    err = capsys.readouterr().err
    assert f"refusing checkpoint {ck / name}" in err and len([l for l in err.splitlines() if name in l]) == 1
    assert (ck / f"{name}.untrusted").exists() and not (ck / name).exists()
    assert store.skipped and name in store.skipped[0]


def test_a_valid_hmac_over_a_code_running_pickle_still_does_not_run(tmp_path, key_file):
    """A stolen key: the HMAC verifies, but the weights-only load runs nothing."""
    from trainwise.run.checkpoint import FORMAT_VERSION, MAGIC, _mac

    marker = tmp_path / "pwned"
    payload = _evil_pickle(marker)
    key = load_key()
    name = checkpoint_name(7)
    blob = MAGIC + f" {FORMAT_VERSION} {key.key_id} {_mac(key.secret, name, payload)} {len(payload)}\n".encode() + payload
    with pytest.raises(CorruptCheckpoint, match="not a weights-only state"):
        decode(blob, name)
    assert not marker.exists()


def test_a_tampered_byte_or_a_renamed_file_is_refused(tmp_path, key_file):
    blob = encode({"w": torch.arange(8.0), "step": 4}, checkpoint_name(4))
    assert decode(blob, checkpoint_name(4))["step"] == 4
    for position in (len(blob) - 3, blob.index(b"\n") + 40):
        flipped = bytearray(blob)
        flipped[position] ^= 0x01
        with pytest.raises(UntrustedCheckpoint, match="authentication failed"):
            decode(bytes(flipped), checkpoint_name(4))
    # an older checkpoint renamed to look newer (a rollback) does not verify either
    with pytest.raises(UntrustedCheckpoint, match="authentication failed"):
        decode(blob, checkpoint_name(40))


def test_a_checkpoint_written_under_another_key_is_refused_naming_both_keys(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv(KEY_ENV, "a" * 64)
    store = CheckpointStore(str(tmp_path / "ck"))
    store.write(5, {"step": 5})
    theirs = load_key().key_id
    monkeypatch.setenv(KEY_ENV, "b" * 64)
    assert store.load_newest() is None
    err = capsys.readouterr().err
    assert f"signed with another key (id {theirs}" in err and load_key().key_id in err
    assert "ckpt-000000000005.twckpt" in err


def test_the_per_user_key_is_created_private_and_refused_when_open_to_others(tmp_path, monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    key = load_key()
    path = tmp_path / "xdg" / "trainwise" / "checkpoint.key"
    assert key.path == path and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_key().secret == key.secret  # created once, then read
    checkpoint_key._cache.clear()
    path.chmod(0o644)
    with pytest.raises(TrainwiseError, match=r"open to other users \(mode 0644\): run `chmod 600"):
        load_key()
    path.chmod(0o600)
    # the key never sits among the checkpoints it authenticates
    monkeypatch.setenv(KEY_FILE_ENV, str(tmp_path / "ck" / "my.key"))
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "my.key").write_text("c" * 64)
    (tmp_path / "ck" / "my.key").chmod(0o600)
    with pytest.raises(TrainwiseError, match="lies inside the checkpoint folder"):
        CheckpointStore(str(tmp_path / "ck"))
    monkeypatch.setenv(KEY_ENV, "short")
    with pytest.raises(TrainwiseError, match="too short"):
        load_key()


def test_state_a_weights_only_load_cannot_read_is_refused_when_written(tmp_path, key_file):
    import numpy as np

    class Custom:
        pass

    store = CheckpointStore(str(tmp_path / "ck"))
    with pytest.raises(TrainwiseError, match=r"state\['extra'\]\['thing'\] is a .*Custom: a checkpoint holds tensors"):
        store.write(1, {"extra": {"thing": Custom()}})
    assert store.names() == []
    # NumPy scalars (a metric) become Python numbers; RNG states round-trip
    from trainwise.run import _state

    np.random.seed(3)
    store.write(2, {"extra": {"acc": np.float64(0.5)}, "rng": _state.capture_rng()})
    expected = np.random.rand(3)
    name, state = store.load_newest()
    assert state["extra"]["acc"] == 0.5 and type(state["extra"]["acc"]) is float
    _state.apply_rng(state["rng"])
    assert np.array_equal(np.random.rand(3), expected)


# ---------------------------------------------------------------------------- bounds, before any work


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainwise.cli", *args], capture_output=True, text=True, timeout=timeout)


def test_ddp_nproc_4096_is_refused_at_once_in_one_line_and_starts_nothing(tmp_path, capsys):
    import resource

    marker = tmp_path / "started"
    command = ["run", "--engine", "ddp", "--nproc", "4096", "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    run = _cli(*command)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert run.returncode != 0 and not marker.exists()
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "--nproc 4096" in lines[0] and "the limit is" in lines[0], run.stderr
    assert "Traceback" not in run.stderr
    # CPU time of the whole command, interpreter start-up and imports included (wall time on a shared machine
    # is the neighbours'); the refusal itself, in a warm process, well under a second of wall time
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 3.0
    start = time.process_time()
    assert main(command) != 0
    assert time.process_time() - start < 1.0
    assert "--nproc 4096" in capsys.readouterr().err and not marker.exists()


def test_the_process_rule_uses_cores_gpus_and_memory(monkeypatch):
    from trainwise.bounds import MachineFacts, check_processes_per_node

    monkeypatch.delenv("TRAINWISE_MAX_PROCESSES", raising=False)
    check_processes_per_node(8, "--nproc", MachineFacts(cores=2, available_memory_bytes=64 << 30, gpus=8))
    with pytest.raises(TrainwiseError, match=r"the limit is 4 \(max\(GPUs 0, CPU cores 4\)"):
        check_processes_per_node(5, "--nproc", MachineFacts(cores=4, available_memory_bytes=64 << 30, gpus=0))
    with pytest.raises(TrainwiseError, match="do not fit in memory: 1.0 GiB available holds at most 4"):
        check_processes_per_node(8, "--nproc", MachineFacts(cores=64, available_memory_bytes=1 << 30, gpus=0))
    monkeypatch.setenv("TRAINWISE_MAX_PROCESSES", "16")
    check_processes_per_node(16, "--nproc", MachineFacts(cores=4, available_memory_bytes=64 << 30, gpus=0))


@pytest.mark.parametrize("args, message", [
    (["run", "--checkpoint-dir", "CK", "--checkpoint-every-s", "nan"], "--checkpoint-every-s must be a finite number"),
    (["run", "--checkpoint-dir", "CK", "--checkpoint-every-s", "inf"], "--checkpoint-every-s must be a finite number"),
    (["run", "--timeout", "nan"], "--timeout must be a finite number"),
    (["run", "--engine", "hivemind", "--peers", "100000", "--target-batch-size", "8"], "--peers 100000"),
    (["run", "--engine", "ddp", "--nproc", "1", "--nnodes", "100000000", "--master-port", "2950"], "--nnodes 100,000,000"),
    (["profile", "--timeout", "nan"], "--timeout must be a finite number"),
    (["profile", "--max-seconds", "inf"], "--max-seconds must be a finite number"),
])
def test_nan_inf_and_huge_run_options_are_refused_before_the_job(tmp_path, args, message, capsys):
    marker = tmp_path / "started"
    args = [str(tmp_path / "ck") if a == "CK" else a for a in args]
    code = main([*args, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    err = capsys.readouterr().err
    assert code != 0 and message in err.replace("\n", " "), err
    assert not marker.exists()


@pytest.mark.parametrize("args, message", [
    (["--weights", "nan,0,1"], "--weights must be finite numbers"),
    (["--weights", "-1,0,1"], "--weights must not be negative"),
    (["--weights", "0,0,0"], "--weights are all zero"),
    (["--required-sps", "-5"], "--required-sps must be positive"),
    (["--required-sps", "nan"], "--required-sps must be a finite number"),
    (["--workers", "0,100000"], "--workers 100000"),
    (["--size", "100000000000"], "--size 100,000,000,000 is beyond"),
    (["--shards", "1000000000"], "--shards 1,000,000,000 is beyond"),
])
def test_pipeline_profile_bad_numbers_are_refused_before_profiling(tmp_path, args, message, capsys):
    start = time.perf_counter()
    code = main(["pipeline", "profile", "cv", "--data-dir", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert code != 0 and message in err.replace("\n", " "), err
    assert time.perf_counter() - start < 5.0
    assert not (tmp_path / "data").exists()  # nothing generated


def test_pipeline_apply_size_is_bounded_before_generating(tmp_path, capsys):
    code = main(["pipeline", "apply", "nlp", "--strategy", "m0-npy-none-s4-w2p-app", "--size", "100000000000",
                 "--data-dir", str(tmp_path / "data"), "--output-dir", str(tmp_path / "out")])
    assert code != 0 and "--size 100,000,000,000 is beyond" in capsys.readouterr().err.replace("\n", " ")
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("args, message", [
    (["--node-counts", "100000000"], "--node-counts 100,000,000 is beyond trainwise's limit of 10,000 machines"),
    (["--epochs", "1000000000000"], "--epochs 1,000,000,000,000 is beyond trainwise's limit of 1,000,000 epochs"),
    (["--epoch-options", "5,1000000000000"], "--epoch-options 1,000,000,000,000 is beyond"),
])
def test_plan_counts_beyond_the_limits_are_refused_before_profiling(tmp_path, args, message, capsys):
    start = time.perf_counter()
    code = main(["plan", "--out-dir", str(tmp_path / "out"), *args])
    err = capsys.readouterr().err
    assert code != 0 and message in err.replace("\n", " "), err
    assert time.perf_counter() - start < 5.0
    assert not (tmp_path / "out").exists()


def test_a_hivemind_group_of_100000000_peers_is_refused(tmp_path):
    from trainwise.plan.distributed import load_groups

    groups = tmp_path / "groups.yaml"
    groups.write_text("- name: huge\n  peers:\n    - {offering: aws:us-east-1:g4dn.xlarge:ondemand, count: 100000000}\n")
    with pytest.raises(TrainwiseError, match="group huge: 100,000,000 peers is beyond"):
        load_groups(groups)


def test_more_devices_than_samples_is_refused():
    from types import SimpleNamespace

    from trainwise.plan.bounds import check_devices

    profile = SimpleNamespace(dataset=SimpleNamespace(n_train=640))
    check_devices(640, [profile])
    with pytest.raises(TrainwiseError, match="--count 100,000,000 devices is more than the training set's 640 samples"):
        check_devices(100_000_000, [profile])


# ---------------------------------------------------------------------------- processes end with the job

# A training script whose helper leaves the job's session (setsid) and keeps stdout open for 300 s.
DETACHING_SCRIPT = textwrap.dedent("""
    import os, subprocess, sys, time
    import torch
    subprocess.Popen([sys.executable, "-c", "import os, time; open(os.environ['PIDFILE'], 'w').write(str(os.getpid())); "
                      "time.sleep(300)"], start_new_session=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad(); model(torch.randn(8, 4)).sum().backward(); opt.step()
    while not os.path.exists(os.environ["PIDFILE"]):
        time.sleep(0.05)
""")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] if Path(f"/proc/{pid}").exists() else "X"
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds detached helpers through /proc")
@pytest.mark.parametrize("command", ["run", "profile"])
@pytest.mark.long
def test_a_helper_that_left_the_jobs_session_ends_with_it_and_does_not_hold_the_pipe(tmp_path, command):
    script = tmp_path / "detach.py"
    script.write_text(DETACHING_SCRIPT)
    pidfile = tmp_path / "helper.pid"
    extra = ["-o", str(tmp_path / "p.json")] if command == "profile" else []
    start = time.time()
    # stdout is a pipe read to its end, as `trainwise run ... | tee log` would: it must close when trainwise ends
    process = subprocess.Popen([sys.executable, "-m", "trainwise.cli", command, *extra, "--", sys.executable, str(script)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PIDFILE": str(pidfile)})
    out, _ = process.communicate(timeout=200)
    assert time.time() - start < 200
    helper = int(pidfile.read_text())
    deadline = time.time() + 5
    while _alive(helper) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(helper), f"helper {helper} outlived `trainwise {command}`: {out.decode()[-1500:]}"


# ---------------------------------------------------------------------------- end to end through `trainwise run`


def test_run_refuses_before_starting_when_no_checkpoint_is_under_this_users_key(tmp_path, monkeypatch, capsys):
    """Only unkeyed (format 1) or foreign-key checkpoints: the job would set them all aside and start over
    (a resume on another machine without the key), or run a planted payload (the old format): one line, no
    job started, no payload run."""
    ck = tmp_path / "ck"
    ck.mkdir()
    marker, started = tmp_path / "pwned", tmp_path / "started"
    (ck / "ckpt-000000999999.twckpt").write_bytes(_forged_v1(marker))
    command = ["run", "--checkpoint-dir", str(ck), "--", sys.executable, "-c", f"open({str(started)!r}, 'w')"]
    assert main(command) != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "ckpt-000000999999.twckpt: format 1, unkeyed" in err and "start afresh with another --checkpoint-dir" in err
    assert not marker.exists() and not started.exists()
    (ck / "ckpt-000000999999.twckpt").unlink()
    monkeypatch.setenv(KEY_ENV, "d" * 64)
    CheckpointStore(str(ck)).write(4, {"step": 4})
    monkeypatch.setenv(KEY_ENV, "e" * 64)
    assert main(command) != 0
    err = capsys.readouterr().err.replace("\n", " ")
    assert "ckpt-000000000004.twckpt: signed with key" in err and "TRAINWISE_CHECKPOINT_KEY_FILE" in err
    assert not started.exists()


# A resume run (the `long` marker's kind); forged and planted checkpoints are refused in-process above.
@pytest.mark.long
@pytest.mark.slow
def test_trainwise_run_resumes_past_a_planted_checkpoint_without_running_it(tmp_path):
    """The issue's attack end to end: a forged newest checkpoint beside real ones; `trainwise run` resumes from
    the newest real one, names and sets aside the forged one, and its payload never runs."""
    ck = tmp_path / "ck"
    script = [sys.executable, str(SCRIPTS / "chaos_train.py"), "--out", str(tmp_path / "w.pt"), "--epochs", "2",
              "--samples", "256", "--width", "16"]
    cli = [sys.executable, "-m", "trainwise.cli", "run", "--checkpoint-dir", str(ck), "--checkpoint-every-batches", "4", "--"]
    first = subprocess.run([*cli, *script], capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, (first.stdout + first.stderr)[-2000:]
    marker = tmp_path / "pwned"
    forged = ck / "ckpt-000000999999.twckpt"
    forged.write_bytes(_forged_v1(marker))
    again = subprocess.run([*cli, *script], capture_output=True, text=True, timeout=300)
    output = again.stdout + again.stderr
    assert again.returncode == 0, output[-2000:]
    assert not marker.exists(), "the planted checkpoint's payload ran"
    assert f"refusing checkpoint {forged}" in output and "resumed from ckpt-0000000000" in output, output[-2000:]
    assert (ck / f"{forged.name}.untrusted").exists()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds detached helpers through /proc")
def test_a_jobs_processes_are_found_by_token_or_session_and_ended(tmp_path):
    """A grandchild that left the session (keeps the token) and one that cleared its environment (stays in the
    session) are both the job's; an unrelated process is not touched."""
    from trainwise._proc import ProcessJob

    job = ProcessJob()
    code = ("import subprocess, sys, time\n"
            "a = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True)\n"
            "b = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env={})\n"
            "print(a.pid, b.pid, flush=True)\n")
    unrelated = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    root = subprocess.Popen([sys.executable, "-c", code], env=job.environment(dict(os.environ)), stdout=subprocess.PIPE,
                            text=True, **job.popen_options())
    job.started(root.pid)
    helpers = [int(p) for p in root.stdout.readline().split()]
    root.wait()
    try:
        assert sorted(job.members()) == sorted(helpers)
        assert sorted(job.end(grace_s=5)) == sorted(helpers)
        assert not any(_alive(pid) for pid in helpers) and job.members() == []
        assert unrelated.poll() is None
    finally:
        unrelated.kill()
        unrelated.wait()
        for pid in helpers:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
