"""trainwise run's resume and the script around its training loop: a checkpoint of another model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).parent / "scripts"
CHAOS_SCRIPT = SCRIPTS / "chaos_train.py"


def _run_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainwise.cli", "run", *args]


@pytest.mark.slow
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
