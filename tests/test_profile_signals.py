"""SIGTERM or Ctrl-C to `trainwise profile` ends the job with every process it started (also a helper
in its own session) and removes trainwise's temporary files, then exits non-zero in one line (issue 37)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")

JOB = """
import os, subprocess, sys, time
# a helper that leaves the job's process group and session, as a data server or logger might
helper = subprocess.Popen([sys.executable, "-c", "import time\\nwhile True: time.sleep(0.1)"], start_new_session=True)
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(f"{os.getpid()} {helper.pid}\\n")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
while True:
    time.sleep(0.1)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_profile_ends_the_job_and_its_helpers_and_leaves_no_temp_files(tmp_path, signum):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB)
    pids_file = tmp_path / "pids"
    output = tmp_path / "profile.json"
    env = dict(os.environ, TMPDIR=str(scratch), PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    trainwise = subprocess.Popen([sys.executable, "-m", "trainwise.cli", "profile", "--timeout", "300", "-o", str(output),
                                  "--", sys.executable, str(script), str(pids_file)],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not pids_file.exists():
            assert trainwise.poll() is None, trainwise.communicate()
            assert time.monotonic() < deadline, "the job never started"
            time.sleep(0.1)
        job_pid, helper_pid = map(int, pids_file.read_text().split())
        assert _running(job_pid) and _running(helper_pid)
        assert any(scratch.iterdir())  # trainwise's own temporary folder, while the job runs
        trainwise.send_signal(signum)
        _, stderr = trainwise.communicate(timeout=60)
    finally:
        if trainwise.poll() is None:
            trainwise.kill()
    assert trainwise.returncode != 0
    assert "Traceback" not in stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert ("SIGTERM" in lines[0]) if signum == signal.SIGTERM else ("interrupted" in lines[0])
    deadline = time.monotonic() + 5
    while (_running(job_pid) or _running(helper_pid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [pid for pid in (job_pid, helper_pid) if _running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after trainwise exited: {left}"
    assert list(scratch.iterdir()) == []
    assert not output.exists()
