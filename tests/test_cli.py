"""The command line: one-line errors, exit codes, nothing half-written."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainwise.cli import main

SCRIPTS = Path(__file__).parent / "scripts"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, fragment: str) -> None:
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err
    assert fragment in " ".join(lines), err
    assert lines[0].startswith("error:")


def test_profile_without_double_dash(capsys, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "profile", "-o", str(out), "python", "train.py")
    assert_one_line_error(code, err, "missing `--`")
    assert not out.exists()


@pytest.mark.slow
def test_profile_of_a_crashing_script_writes_nothing(capsys, tmp_path):
    out = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "profile", "-o", str(out), "--", sys.executable, str(SCRIPTS / "crash_early.py"))
    assert_one_line_error(code, err, "exited with code 1 before its first iteration")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_profile_then_predict(capsys, tmp_path):
    out = tmp_path / "p.json"
    code, stdout, err = run_cli(capsys, "profile", "-o", str(out), "--iterations", "5", "--max-iterations", "6",
                                "--val-batches", "2", "--epoch2-iterations", "2",
                                "--", sys.executable, str(SCRIPTS / "mlp_train.py"), "--epochs", "20")
    assert code == 0, err
    assert json.loads(out.read_text())["schema_version"] == 1
    assert "steady iteration" in stdout
    predictions = tmp_path / "pred.json"
    code, stdout, err = run_cli(capsys, "predict", str(out), "--estimator", "all", "--json", str(predictions))
    assert code == 0, err
    rows = json.loads(predictions.read_text())
    assert {row["estimator"] for row in rows} == {"trainwise", "eq5.4", "eq5.3", "averaged"}
    assert {row["epochs"] for row in rows} == {5, 10, 20}
    assert "skipped eq5.1" in stdout
    code, _, err = run_cli(capsys, "predict", str(out), "--epochs", "0")
    assert_one_line_error(code, err, "positive")
    code, _, err = run_cli(capsys, "predict", str(out), "--epoch-options", "5,x")
    assert_one_line_error(code, err, "comma-separated")


def test_predict_rejects_bad_profiles(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli(capsys, "predict", str(bad), "--epochs", "3")
    assert_one_line_error(code, err, "not valid JSON")
    code, _, err = run_cli(capsys, "predict", str(tmp_path / "nope.json"), "--epochs", "3")
    assert_one_line_error(code, err, "does not exist")


def test_unknown_workload(capsys, tmp_path):
    code, _, err = run_cli(capsys, "plan", "--workload", "mnist_cnm", "--out-dir", str(tmp_path))
    assert_one_line_error(code, err, "mnist_cnn")
    assert list(tmp_path.iterdir()) == []


def test_help(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "profile" in out and "predict" in out
