"""The client-script and public-example benchmarks refuse bad input in one line, before any run starts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=120)


def test_public_examples_without_a_checkout_names_what_is_missing(tmp_path):
    (tmp_path / "dcgan").mkdir()
    out = run("public_examples.py", "--examples", str(tmp_path), "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert "lacks word_language_model/main.py" in out.stderr and "dcgan/main.py" in out.stderr
    assert not (tmp_path / "r.json").exists()


def test_client_scripts_bounds_its_pairs_and_needs_a_previous_result_for_overhead_only(tmp_path):
    out = run("client_scripts.py", "--concurrent-pairs", "11", "--results", str(tmp_path / "r.json"))
    assert out.returncode != 0 and "--concurrent-pairs in [0, 10]" in out.stderr and "Traceback" not in out.stderr
    out = run("client_scripts.py", "--overhead-only", "--pairs", "0", "--results", str(tmp_path / "none.json"))
    assert out.returncode != 0 and "run without --overhead-only first" in out.stderr and "Traceback" not in out.stderr
