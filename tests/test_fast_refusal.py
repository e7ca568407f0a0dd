"""`trainwise run --engine ddp --nproc 4096` is refused before any heavy library is imported and
before any process starts (issue 37: refused in under a second, one line naming the limit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
ARGV = ["run", "--engine", "ddp", "--nproc", "4096", "--", sys.executable, "-c", "pass"]
HEAVY = ("torch", "pandas", "numpy", "scipy", "matplotlib")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("TRAINWISE_MAX_PROCESSES", None)
    return env


def test_refusal_is_one_line_and_imports_nothing_heavy():
    # In-process: what sys.modules holds at the moment main() returns is what the refusal imported.
    probe = ("import json, sys\n"
             "from trainwise.cli import main\n"
             f"code = main({ARGV!r})\n"
             f"print(json.dumps({{'code': code, 'heavy': [m for m in {HEAVY!r} if m in sys.modules]}}))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(), timeout=120)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] != 0
    assert report["heavy"] == [], f"the refusal imported {report['heavy']}"
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "--nproc 4096" in lines[0] and "limit" in lines[0]
    assert "Traceback" not in done.stderr


def test_console_entry_point_refuses_without_starting_a_process(tmp_path):
    # The training command would leave a file behind if anything ran it.
    marker = tmp_path / "ran"
    argv = ARGV[:-2] + ["-c", f"open({str(marker)!r}, 'w').close()"]
    done = subprocess.run([sys.executable, "-m", "trainwise.cli", *argv], capture_output=True, text=True, env=_env(),
                          timeout=120)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if line.strip()]) == 1, done.stderr
    assert "TRAINWISE_MAX_PROCESSES" in done.stderr  # the fix is named
    assert not marker.exists()
