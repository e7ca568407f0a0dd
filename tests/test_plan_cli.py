"""`trainwise plan` end to end on saved profiles (no profiling run): tables, report files, JSON, errors."""

from __future__ import annotations

import json
import socket

import pandas as pd
import pytest

from trainwise.cli import main
from trainwise.plan.synthetic import synthetic_profile


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, fragment: str) -> None:
    assert code != 0
    lines = [line for line in err.strip().splitlines() if line.strip() and line.startswith("error:")]
    assert "Traceback" not in err
    assert len(lines) == 1 and fragment in lines[0], err


@pytest.fixture()
def profiles(tmp_path):
    here = synthetic_profile(host=socket.gethostname(), iteration_s=0.2, jitter=0.05).save(tmp_path / "here.json")
    gpu = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02, jitter=0.05).save(
        tmp_path / "v100.json")
    return here, gpu


def test_plan_writes_tables_and_every_report_file(capsys, tmp_path, profiles):
    report = tmp_path / "rep"
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--profile", str(profiles[1]),
                             "--catalog", "packaged", "--report", str(report), "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    assert "Best:" in out and "time: provisioning" in out and "The best plan of each other choice" in out
    assert "measured here" in out and "(imported)" in out
    assert len(out.splitlines()) <= 40
    for name in ("plan.html", "pareto.png", "plan.json", "plan.md"):
        assert (report / name).is_file(), name
    assert (report / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    payload = json.loads((report / "plan.json").read_text())
    assert payload["best"]["time_provenance"] and payload["best"]["price_provenance"]
    assert payload["catalog"].startswith("catalog current, prices as of 2026-11-21")
    assert payload["pareto"] and payload["top"] and payload["assumptions"]
    assert "plans" not in payload and payload["plans_file"] == "plans.csv.gz"
    plans = pd.read_csv(report / "plans.csv.gz")
    assert len(plans) == payload["plans_total"] > len(payload["top"])
    assert plans["time_provenance"].notna().all() and plans["price_provenance"].notna().all()
    assert payload["best"]["plan_id"] in set(plans["plan_id"])
    assert plans["rank"].dtype.kind == "i" and plans["rank"].iloc[0] == 1  # integers, not 1.0, 2.0, …
    assert len(payload["source_inconsistencies"]) == 3
    markdown = (report / "plan.md").read_text()
    assert "| rank | offering |" in markdown and "## Pareto set" in markdown
    html = (report / "plan.html").read_text()
    assert "data:image/png;base64," in html and 'id="plans-table"' in html
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--profile", str(profiles[1]),
                             "--catalog", "packaged", "--all", "--out-dir", str(tmp_path / "out"))
    assert code == 0, err
    assert "Top" in out and "Pareto set" in out and "Best plan per epoch option" in out
    assert "http://" not in html and "https://" not in html  # self-contained: no external resource
    assert "plan.html" in out.replace("\n", "")  # where the report went


def test_plan_default_report_dir_and_json_output(capsys, tmp_path, profiles):
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--profile", str(profiles[1]), "--catalog",
                             "packaged", "--out-dir", str(tmp_path), "--json", "--objective", "fastest", "--no-spot",
                             "--cloud", "aws,gcp", "--epoch-options", "5,10", "--all-plans")
    assert code == 0, err
    payload = json.loads(out)
    assert len(payload["plans"]) == payload["plans_total"]
    assert payload["objective"]["kind"] == "fastest" and payload["primary_epochs"] == 10
    assert {row["market"] for row in payload["plans"]} == {"on-demand"}
    assert {row["cloud"] for row in payload["plans"]} <= {"aws", "gcp", "local"}
    assert (tmp_path / "report" / "plan.html").is_file()


def test_plan_json_leaves_every_plan_to_all_plans(capsys, tmp_path, profiles):
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--profile", str(profiles[1]), "--catalog",
                             "packaged", "--out-dir", str(tmp_path), "--json", "--no-spot")
    assert code == 0, err
    payload = json.loads(out)
    assert "plans" not in payload and payload["plans_total"] > len(payload["top"]) > 0
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--all-plans", "--out-dir", str(tmp_path))
    assert code == 2 and "add --json" in err and "Traceback" not in err


def test_plan_local_offering_and_weighted(capsys, tmp_path, profiles):
    lab = tmp_path / "lab.yaml"
    lab.write_text("offerings:\n  - name: lab-node\n    kind: on_premise\n    capex_usd: 25000\n    lifetime_years: 1\n")
    code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged", "--local-offering",
                             str(lab), "--objective", "weighted", "--weights", "time=1,cost=3", "--json",
                             "--out-dir", str(tmp_path))
    assert code == 0, err
    payload = json.loads(out)
    assert payload["best"]["offering_id"] == "on-premise/-/lab-node"
    assert payload["best"]["price_per_hour"] == 2.85
    assert payload["best"]["price_provenance"].startswith("user file")


@pytest.mark.parametrize("args, fragment", [
    (["--cloud", "awz"], "did you mean aws"),
    (["--accelerator", "V10"], "unknown accelerator"),
    (["--objective", "cheapst"], "did you mean cheapest"),
    (["--deadline", "soon"], "cannot read the duration"),
    (["--objective", "deadline", "--deadline", "1s"], "--deadline 1 s excluded"),
    (["--budget", "0.000001"], "best infeasible option"),
    (["--budget", "nan"], "positive amount"),
    (["--deadline", "-2h"], "duration must be positive"),
    (["--objective", "weighted", "--weights", "time=nan,cost=1"], "finite number"),
    (["--objective", "weighted", "--weights", "time=inf", "--json"], "finite number"),
    (["--epochs", "-1"], "--epochs must be a positive"),
    (["--top", "0"], "--top must be at least 1"),
    (["--max-global-batch", "0"], "--max-global-batch must be at least 1"),
    (["--weights", "speed=1"], "NAME=VALUE"),
    (["--interruption-rate", "0.1", "--interruption-frequency-30d", "0.05"], "not both"),
    (["--reference", "aws/nowhere/p9"], "unknown reference offering"),
    (["--catalog", "seed-2012"], "did you mean seed-2021"),
    # NaN passes every `x < 0` check and inf (or a finite value past any real setup) turns times and
    # costs into inf/NaN: each numeric option is a finite number in its range
    (["--min-gpu-memory", "nan"], "--min-gpu-memory must be a finite number >= 0 GiB"),
    (["--dataset-gb", "nan"], "--dataset-gb must be a finite number"),
    (["--dataset-gb", "inf"], "--dataset-gb must be a finite number >= 0 and <= 10,000,000 GB"),
    (["--dataset-gb", "1e300"], "--dataset-gb must be a finite number >= 0 and <= 10,000,000 GB"),
    (["--bandwidth-mbps", "nan"], "--bandwidth-mbps must be a finite number >= 0.001 Mb/s"),
    (["--bandwidth-mbps", "0"], "--bandwidth-mbps must be a finite number >= 0.001 Mb/s"),
    (["--provisioning-minutes", "inf"], "--provisioning-minutes must be a finite number"),
    (["--interruption-rate", "nan"], "--interruption-rate must be a finite number"),
    (["--interruption-rate", "inf"], "--interruption-rate must be a finite number"),
    (["--checkpoint-write-s", "nan"], "--checkpoint-write-s must be a finite number"),
    (["--checkpoint-write-s", "inf"], "--checkpoint-write-s must be a finite number"),
    (["--min-billed-seconds", "nan"], "--min-billed-seconds must be a finite number"),
    (["--min-billed-seconds", "inf"], "--min-billed-seconds must be a finite number"),
    (["--min-billed-seconds", "-1"], "--min-billed-seconds must be a finite number >= 0"),
    (["--bytes-per-sample", "nan"], "--bytes-per-sample must be a finite number"),
    (["--bytes-per-sample", "inf"], "--bytes-per-sample must be a finite number"),
    (["--local-continent", "mars"], "--local-continent mars: no such continent: use one of us, eu, asia, oce"),
])
def test_plan_bad_input_is_one_line_and_writes_no_report(capsys, tmp_path, profiles, args, fragment):
    report = tmp_path / "rep"
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--profile", str(profiles[1]), "--catalog",
                           "packaged", "--report", str(report), *args)
    assert_one_line_error(code, err, fragment)
    assert not report.exists()


def test_plan_outputs_that_cannot_be_written_fail_before_planning(capsys, tmp_path, profiles):
    lab = tmp_path / "lab.yaml"
    lab_text = "offerings:\n  - name: lab-node\n    kind: on_premise\n    capex_usd: 25000\n    lifetime_years: 1\n"
    lab.write_text(lab_text)
    profile_text = profiles[0].read_text()
    a_file = tmp_path / "a-file"
    a_file.write_text("keep")
    report = tmp_path / "rep"
    cases = [
        (["--save", str(profiles[0])], "--save", "would overwrite the input"),
        (["--local-offering", str(lab), "--save", str(lab)], "--save", "would overwrite the input"),
        (["--save", str(tmp_path)], "--save", "is a folder"),
        (["--save", str(report / "plan.json")], "--save", "is the report's plan.json"),
        (["--report", str(a_file)], "--report", "is a file, not a folder"),
        (["--report", str(a_file / "rep")], "--report", "is a file, not a folder"),
        # /proc takes no new entries, whatever the permission bits say (root bypasses them)
        (["--report", "/proc/trainwise-nope"], "--report", "cannot write in /proc"),
        (["--save", "/proc/trainwise-nope.json"], "--save", "cannot write in /proc"),
    ]
    for args, option, fragment in cases:
        code, out, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged",
                                 "--single-machine", "--report", str(report), *args)
        assert_one_line_error(code, err, fragment)
        assert f"error: {option} " in err, err
        assert not report.exists() and out == "", args  # refused before planning: no report, no tables
    assert profiles[0].read_text() == profile_text and lab.read_text() == lab_text and a_file.read_text() == "keep"
    (report / "plan.html").mkdir(parents=True)
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged", "--single-machine",
                           "--report", str(report))
    assert_one_line_error(code, err, "its plan.html would be a file but is a folder")
    assert sorted(p.name for p in report.iterdir()) == ["plan.html"]


def test_plan_save_that_fails_while_writing_is_one_line(capsys, tmp_path, profiles, monkeypatch):
    from trainwise.launch import plan_document

    def disk_full(path, text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(plan_document, "atomic_write_text", disk_full)
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged", "--single-machine",
                           "--report", str(tmp_path / "rep"), "--save", str(tmp_path / "best.json"))
    assert_one_line_error(code, err, "cannot write --save")
    assert "No space left on device" in err and not (tmp_path / "best.json").exists()


def test_plan_report_that_fails_while_writing_is_one_line(capsys, tmp_path, profiles, monkeypatch):
    from trainwise.report import bundle

    def disk_full(path, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bundle, "atomic_write_bytes", disk_full)
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged", "--single-machine",
                           "--report", str(tmp_path / "rep"))
    assert_one_line_error(code, err, "cannot write the report to --report")
    assert "No space left on device" in err


@pytest.mark.parametrize("price", ["inf", "nan", "-1"])
def test_plan_refuses_a_local_offering_without_a_finite_price(capsys, tmp_path, profiles, price):
    lab = tmp_path / "lab.toml"
    lab.write_text(f'[[offering]]\nname = "lab"\nkind = "on_premise"\nprice_per_hour = {price}\n')
    report = tmp_path / "rep"
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--catalog", "packaged", "--local-offering",
                           str(lab), "--report", str(report))
    assert_one_line_error(code, err, "offering 1 (lab), field price_per_hour: Input should be")
    assert not report.exists()


def test_plan_with_a_missing_device_params_file_is_one_line_not_every_offering_unpredicted(
        capsys, tmp_path, profiles, monkeypatch):
    # A typo in TRAINWISE_DEVICE_PARAMS used to leave every cloud offering "not predicted" and rank
    # this machine alone, exit 0; the fit the user asked for must be there or the plan must stop.
    monkeypatch.setenv("TRAINWISE_DEVICE_PARAMS", str(tmp_path / "my-fit-typo.json"))
    report = tmp_path / "rep"
    code, _, err = run_cli(capsys, "plan", "--profile", str(profiles[0]), "--single-machine",
                           "--report", str(report), "--out-dir", str(tmp_path / "out"))
    assert_one_line_error(code, err, "my-fit-typo.json do not exist")
    assert not report.exists()
