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
    code, _, err = run_cli(capsys, "profile", "-o", str(out), "python", "train.py", "--epochs", "3")
    assert_one_line_error(code, err, "missing `--`")
    assert not out.exists()


def test_profile_mistyped_option_is_named_not_a_missing_double_dash(capsys, tmp_path):
    code, _, err = run_cli(capsys, "profile", "--iteration", "30", "-o", str(tmp_path / "p.json"), "--", "python", "t.py")
    assert_one_line_error(code, err, "no such option --iteration for `trainwise profile`: did you mean --iterations?")
    code, _, err = run_cli(capsys, "profile", "--bogus", "--", "python", "t.py")
    assert_one_line_error(code, err, "no such option --bogus")


def test_a_usage_error_points_at_the_help_of_the_command_that_was_mistyped(capsys):
    # `trainwise plan job.json` (the profile belongs after --profile): the top-level help lists only
    # the commands, so the hint must name `trainwise plan --help`, which lists --profile.
    code, _, err = run_cli(capsys, "plan", "job.json")
    assert_one_line_error(code, err, "unexpected extra argument(s) (job.json): a profile goes after --profile "
                                     "(trainwise plan --profile job.json); see `trainwise plan --help`")
    code, _, err = run_cli(capsys, "plan", "fastest")
    assert_one_line_error(code, err, "unexpected extra argument(s) (fastest); see `trainwise plan --help`")
    code, _, err = run_cli(capsys, "device", "predict", "--bogus", "1")
    assert_one_line_error(code, err, "see `trainwise device predict --help`")
    code, _, err = run_cli(capsys, "nosuchcommand")
    assert_one_line_error(code, err, "No such command 'nosuchcommand'; see `trainwise --help`")


def test_profile_budget_options_without_epochs_are_refused_before_the_job_runs(capsys, tmp_path):
    # the budget is a share of the planned run (--epochs); without it they were ignored without a word
    out = tmp_path / "p.json"
    code, _, err = run_cli(capsys, "profile", "--budget", "0.05", "-o", str(out), "--", "python", "train.py")
    assert_one_line_error(code, err, "--budget needs --epochs E")
    code, _, err = run_cli(capsys, "profile", "--min-budget-seconds", "2", "--budget", "0.05", "--", "python", "train.py")
    assert_one_line_error(code, err, "--budget, --min-budget-seconds need --epochs E")
    assert not out.exists()


def test_a_script_as_the_command_and_a_script_without_torch(capsys, tmp_path, monkeypatch):
    script = tmp_path / "train.py"
    script.write_text("print('no torch here')\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(capsys, "profile", "-o", str(tmp_path / "p.json"), "--", "train.py")
    assert_one_line_error(code, err, "train.py is a Python script, not a command: start with python")
    code, _, err = run_cli(capsys, "profile", "-o", str(tmp_path / "p.json"), "--", sys.executable, "train.py")
    assert_one_line_error(code, err, "finished without importing torch")
    assert not (tmp_path / "p.json").exists()


def test_outputs_that_cannot_be_written_fail_before_anything_runs(capsys, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    (tmp_path / "a_folder").mkdir()
    cases = [
        (["-o", str(script)], "would overwrite the input"),
        (["-o", str(tmp_path / "a_folder")], "is a folder"),
        (["-o", str(script / "p.json")], "is a file, not a folder"),
        (["--target-ci", "0"], "--target-ci must be a fraction"),
    ]
    for options, fragment in cases:
        code, _, err = run_cli(capsys, "profile", *options, "--", sys.executable, str(script))
        assert_one_line_error(code, err, fragment)
    assert script.read_text() == "raise SystemExit('must not run')\n"
    profile = tmp_path / "p.json"
    profile.write_text("{}")
    code, _, err = run_cli(capsys, "predict", str(profile), "--epochs", "3", "--json", str(profile))
    assert_one_line_error(code, err, "would overwrite the input")
    assert profile.read_text() == "{}"


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
    assert json.loads(out.read_text())["schema_version"] == 2
    assert "steady iteration" in stdout
    predictions = tmp_path / "pred.json"
    code, stdout, err = run_cli(capsys, "predict", str(out), "--estimator", "all", "--json", str(predictions))
    assert code == 0, err
    rows = json.loads(predictions.read_text())
    assert {row["estimator"] for row in rows} == {"trainwise", "eq5.4", "eq5.3", "averaged"}
    # no --epochs: the script's own `--epochs 20`, which the profile read from its arguments
    assert {row["epochs"] for row in rows} == {20}
    assert "epochs: 20, set by the script itself" in stdout
    assert "skipped eq5.1" in stdout
    code, stdout, err = run_cli(capsys, "predict", str(out), "--epoch-options", "5,10", "--json", str(predictions))
    assert code == 0, err
    assert {row["epochs"] for row in json.loads(predictions.read_text())} == {5, 10}
    code, _, err = run_cli(capsys, "predict", str(out), "--epochs", "0")
    assert_one_line_error(code, err, "positive")
    code, _, err = run_cli(capsys, "predict", str(out), "--epoch-options", "5,x")
    assert_one_line_error(code, err, "comma-separated")


def test_predict_on_an_accelerator_gives_the_whole_run_the_planner_prices(capsys, tmp_path):
    from trainwise.catalog import load_catalog
    from trainwise.plan import Objective, PlanOptions, plan
    from trainwise.plan.synthetic import synthetic_profile

    profile = synthetic_profile(workload="nn_twins_mlp", batch_size=32, batches_per_epoch=400, iteration_s=0.004,
                                val_batch_s=0.002, val_batches_total=50)
    path = profile.save(tmp_path / "twins.json")
    out = tmp_path / "v100.json"
    code, stdout, err = run_cli(capsys, "predict", str(path), "-a", "V100", "-n", "2", "--epoch-options", "5,10",
                                "--json", str(out))
    assert code == 0, err
    assert "whole run on 2 × V100" in stdout.replace("\n", " ")
    [record] = json.loads(out.read_text())
    assert record["count"] == 2 and [r["epochs"] for r in record["runs"]] == [5, 10]
    step_s = record["iteration"]["iteration_s"]
    for run in record["runs"]:
        assert run["iterations_per_epoch"] == 200  # 400 batches of 32 over 2 devices
        parts = run["breakdown_s"]
        assert parts["iterations_s"] == pytest.approx(run["epochs"] * 200 * step_s)
        assert run["predicted_s"] == pytest.approx(sum(parts.values()))
        assert run["low_s"] < run["predicted_s"] < run["high_s"]
    # the planner's device-model row for one V100 machine is the same prediction as `predict -a V100`
    code, _, err = run_cli(capsys, "predict", str(path), "-a", "V100", "--epochs", "10", "--json", str(out))
    assert code == 0, err
    single = json.loads(out.read_text())[0]["runs"][0]
    result = plan([profile], load_catalog("packaged"), Objective(kind="fastest"), epoch_options=(10,),
                  options=PlanOptions(this_host="elsewhere", provisioning_s=(0.0, 0.0, 0.0)))
    rows = result.plans[(result.plans["accelerator"].astype(str) == "V100") & (result.plans["accelerator_count"] == 1)]
    assert rows["wall_s"].min() == pytest.approx(single["predicted_s"], rel=1e-6)
    # options that only mean something with --accelerator, or only without it
    code, _, err = run_cli(capsys, "predict", str(path), "-n", "2")
    assert_one_line_error(code, err, "add --accelerator")
    code, _, err = run_cli(capsys, "predict", str(path), "-a", "V100", "--estimator", "eq5.3")
    assert_one_line_error(code, err, "drop --estimator")
    code, stdout, err = run_cli(capsys, "predict", str(path), "-a", "V100", "--epochs", "0")
    assert_one_line_error(code, err, "positive")
    assert stdout == ""  # refused before any table
    code, stdout, err = run_cli(capsys, "predict", str(path), "-a", "V100", "-a", "L4")  # not the last one silently
    assert_one_line_error(code, err, "trainwise device predict --from PROFILE -a A100 -a L4")
    assert stdout == ""


def test_predict_rejects_bad_profiles(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    code, _, err = run_cli(capsys, "predict", str(bad), "--epochs", "3")
    assert_one_line_error(code, err, "not valid JSON")
    code, _, err = run_cli(capsys, "predict", str(tmp_path / "nope.json"), "--epochs", "3")
    assert_one_line_error(code, err, "does not exist")
    # a saved plan or a run result was "malformed at `mode`: re-run `trainwise profile`"
    plan_doc = tmp_path / "plan.json"
    plan_doc.write_text(json.dumps({"schema_version": 1, "offering": {}, "prediction": {}, "profile_path": "job.json"}))
    code, _, err = run_cli(capsys, "predict", str(plan_doc), "--epochs", "3")
    assert_one_line_error(code, err, "is a saved plan, not a profile: pass the profile it was made from (job.json)")
    run_result = tmp_path / "run.json"
    run_result.write_text(json.dumps({"schema_version": 1, "engine": "local", "world_size": 1, "ranks": []}))
    code, _, err = run_cli(capsys, "predict", str(run_result), "--epochs", "3")
    assert_one_line_error(code, err, "is a `trainwise run` result, not a profile")


def test_predict_epochs_from_a_missing_file_asks_for_a_full_run_and_conflicts_with_epochs(capsys, tmp_path):
    from trainwise.plan.synthetic import synthetic_profile

    path = synthetic_profile().save(tmp_path / "job.json")
    # methodology 1 needs a complete run: the hint must say --full (the generic one recorded a sampled profile)
    code, out, err = run_cli(capsys, "predict", str(path), "--epochs-from", str(tmp_path / "full.json"))
    assert_one_line_error(code, err, "record the complete run with `trainwise profile --full -o")
    assert out == ""
    # both give the epoch count; --epochs-from used to be ignored without a word
    code, out, err = run_cli(capsys, "predict", str(path), "--epochs", "3", "--epochs-from", str(path))
    assert_one_line_error(code, err, "--epochs and --epochs-from both give the epoch count")
    assert out == ""


def test_unknown_workload(capsys, tmp_path):
    code, _, err = run_cli(capsys, "plan", "--workload", "mnist_cnm", "--out-dir", str(tmp_path))
    assert_one_line_error(code, err, "mnist_cnn")
    assert list(tmp_path.iterdir()) == []


def test_help(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0 and "profile" in out and "predict" in out


def test_an_output_that_is_a_device_or_a_link_is_written_through_not_replaced(capsys, tmp_path):
    import os
    import stat

    from trainwise._io import atomic_write_text
    from trainwise.plan.synthetic import synthetic_profile

    # `predict --json /dev/stdout` renamed a temporary file over the name /dev/stdout: the device
    # link became a regular file for every later process. A link to /dev/null stands in for it here.
    to_device = tmp_path / "stdout"
    to_device.symlink_to(os.devnull)
    profile = synthetic_profile().save(tmp_path / "job.json")
    code, _, err = run_cli(capsys, "predict", str(profile), "--epochs", "3", "--json", str(to_device))
    assert code == 0, err
    assert to_device.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)
    # a link to a regular file stays a link; its target gets the new content, atomically
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_output_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    from trainwise._io import atomic_write_text

    mask = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "out.json", "{}")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's private 0600


def test_predict_says_when_a_profile_is_the_slice_plan_profiles_and_writes_long_runs_in_whole_hours(capsys, tmp_path):
    """`make run` leaves the ResNet-50 slice's profile (batch 3): `predict` on it times that slice trained in full on
    this CPU (thousands of hours), and says so rather than letting it pass for the job `plan` ranked."""
    from trainwise.core.units import format_duration
    from trainwise.plan.synthetic import synthetic_profile

    assert format_duration(7397.58 * 3600) == "7,398 h" and format_duration(36.5 * 3600) == "36.50 h"
    profile = synthetic_profile(workload="resnet50_imagenet", batch_size=3, batches_per_epoch=427_056, iteration_s=0.8,
                                val_batch_s=0.2, val_batches_total=16_667)
    path = profile.model_copy(update={"notes": ["profiled on a slice (batch 3, 43 timed step(s)); the full-size step "
                                                "(batch 256) is modelled"]}).save(tmp_path / "slice.json")
    code, stdout, err = run_cli(capsys, "predict", str(path), "--epochs", "90")
    assert code == 0, err
    flat = " ".join(stdout.split())
    assert "is the small slice `trainwise plan` profiles a reference workload on (batch 3)" in flat
    assert "not the full-size job" in flat
    plain = profile.save(tmp_path / "plain.json")  # an ordinary profile: no such warning
    code, stdout, err = run_cli(capsys, "predict", str(plain), "--epochs", "90")
    assert code == 0 and "small slice" not in " ".join(stdout.split()), err


def test_the_profile_table_says_when_epoch_one_was_cut_short():
    """The job prints its own `epoch 1 ... time=` for the epoch trainwise ended early: the table says so."""
    from rich.console import Console

    from trainwise.plan.synthetic import synthetic_profile
    from trainwise.report.terminal import profile_table

    profile = synthetic_profile(workload="mnist_cnn", batch_size=32, batches_per_epoch=400, iteration_s=0.004,
                                val_batch_s=0.002, val_batches_total=50)
    console = Console(width=400, record=True)
    console.print(profile_table(profile))
    text = " ".join(console.export_text().split())
    assert "epoch 1 ended early after 30 iterations (a whole one: 400 batches)" in text
    whole = profile.model_copy(update={"epochs": [e.model_copy(update={"truncated": False}) for e in profile.epochs]})
    console = Console(width=400, record=True)
    console.print(profile_table(whole))
    assert "ended early" not in console.export_text()
