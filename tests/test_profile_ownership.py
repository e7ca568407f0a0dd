"""A script that trains in processes it starts (torch.multiprocessing, torchrun's workers, a subprocess): the first
process of the job to train owns the profile, the others record nothing, and the launcher ends the job once the
owner's sampled record is written (trainwise.profile._ownership, trainwise.profile.runner._wait)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from trainwise._proc import ProcessJob
from trainwise.profile import _child, _ownership, runner


def recorder_for(tmp_path, **config):
    return _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full", "delegate": True, **config})


def test_the_first_process_to_train_owns_the_profile(tmp_path):
    recorder = recorder_for(tmp_path)
    recorder.end_iteration()
    recorder.end_iteration()
    assert recorder.owner and len(recorder.iterations) == 2
    assert _ownership.owner_pid(recorder.out_path) == os.getpid()
    assert not any("process the script started" in note for note in recorder.notes)  # the launched process itself
    recorder.on_process_exit()
    assert json.loads((tmp_path / "raw.json").read_text())["iterations"]


def test_a_process_that_trains_after_another_owns_the_profile_records_and_writes_nothing(tmp_path):
    recorder = recorder_for(tmp_path, spawned=True)
    with open(_ownership.owner_path(recorder.out_path), "w") as handle:
        handle.write(str(os.getpid() + 1))  # a Hogwild peer, a data-parallel rank that stepped first
    recorder.end_iteration()
    assert not recorder.owner and recorder.paused and recorder.finished
    recorder.on_process_exit()
    assert not (tmp_path / "raw.json").exists()


def test_the_launched_process_that_never_trained_writes_only_when_no_process_trained(tmp_path):
    quiet = recorder_for(tmp_path)
    quiet.on_process_exit()  # nothing trained anywhere: its record says so (predict's "no iteration" error)
    assert (tmp_path / "raw.json").exists()
    (tmp_path / "raw.json").unlink()
    parent = recorder_for(tmp_path)
    with open(_ownership.owner_path(parent.out_path), "w") as handle:
        handle.write(str(os.getpid() + 1))
    assert parent._iterations_seen_or_coming()  # its no-iteration watchdog must not end the job
    parent.on_process_exit()
    assert not (tmp_path / "raw.json").exists()


def test_a_spawned_process_inherits_the_epoch_count_and_runs_no_watchdog(tmp_path, monkeypatch):
    parent = recorder_for(tmp_path, no_iteration_limit_s=30)
    monkeypatch.setenv(_ownership.CONFIG_ENV, parent.child_environment_config())
    parent.note_script_epochs(3, "the script's argparse argument epochs=3")
    inherited = json.loads(os.environ[_ownership.CONFIG_ENV])
    assert inherited["spawned"] and inherited["script_epochs"]["epochs"] == 3
    child = _child.Recorder(inherited)
    assert child.script_epochs["epochs"] == 3 and "process that started this one" in child.script_epochs["source"]
    assert child.no_iteration_limit_s == 0.0 and parent.no_iteration_limit_s == 30.0
    child.end_iteration()
    assert child.owner and any("process the script started" in note for note in child.notes)
    child.note_script_epochs(5, "the script's argparse argument epochs=5")  # its own reading (torchrun's workers)
    assert child.script_epochs["epochs"] == 5


def test_trainwise_run_recorders_keep_no_owner_file(tmp_path):
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw-rank0.json"), "mode": "full"})
    assert recorder.child_environment_config() is None
    recorder.end_iteration()
    assert recorder.owner and not os.path.exists(_ownership.owner_path(recorder.out_path))


def _exited_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def test_the_launcher_ends_the_job_once_the_owner_wrote_its_sampled_record(tmp_path):
    raw = tmp_path / "raw.json"
    job = ProcessJob()
    waiting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=job.environment(dict(os.environ)),
                               **job.popen_options())
    job.started(waiting.pid)
    try:
        start = time.monotonic()
        with pytest.raises(subprocess.TimeoutExpired):  # no owner yet: it waits, up to --timeout
            runner._wait(waiting, raw, runner.ProfileOptions(timeout_s=0.5), job)
        raw.write_text("{}")
        with open(_ownership.owner_path(raw), "w") as handle:
            handle.write(str(_exited_pid()))
        assert runner._wait(waiting, raw, runner.ProfileOptions(), job) == (0, True)
        assert waiting.poll() is not None and time.monotonic() - start < 10
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()


def test_the_launcher_waits_for_a_full_run_and_for_its_own_process(tmp_path):
    raw = tmp_path / "raw.json"
    raw.write_text("{}")
    with open(_ownership.owner_path(raw), "w") as handle:
        handle.write(str(_exited_pid()))
    short = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
    assert runner._wait(short, raw, runner.ProfileOptions(mode="full"), ProcessJob()) == (0, False)  # a --full run ends by itself
