"""`trainwise catalog show/search/import/accelerators` (the typer sub-app, run directly)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainwise.catalog.cli import catalog_app
from trainwise.catalog.skypilot import CatalogDataError, FORMATS
from trainwise.errors import TrainwiseError

runner = CliRunner()


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("TRAINWISE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("COLUMNS", "200")
    return tmp_path / "data"


def invoke(*args: str):
    return runner.invoke(catalog_app, list(args))


def test_show_states_the_snapshot_date_and_quirks():
    result = invoke("show")
    assert result.exit_code == 0, result.output
    assert "prices as of 2026-11-21" in result.output
    assert "packaged snapshot" in result.output
    assert "placeholder" in result.output and "host VM row + accelerator row" in result.output


def test_search_filters_and_caption():
    result = invoke("search", "--catalog", "seed-2021", "--accelerator", "K80", "--cloud", "aws")
    assert result.exit_code == 0, result.output
    assert "p2.16xlarge" in result.output and "14.40" in result.output
    assert "3 offerings" in result.output
    assert "catalog seed-2021, prices as of 2021-02" in " ".join(result.output.split())
    spot = invoke("search", "-a", "T4", "--spot", "--max-price", "0.1", "--limit", "3")
    assert spot.exit_code == 0 and "15 more (--limit 0 shows all)" in " ".join(spot.output.split())


def test_search_unknown_accelerator_is_a_one_line_error():
    result = invoke("search", "--accelerator", "A100-8OGB")
    assert isinstance(result.exception, TrainwiseError)
    assert "did you mean A100-80GB" in str(result.exception)


@pytest.mark.parametrize("args, fragment", [
    (["--region", "mars-1"], "no such region, zone or region prefix"),
    (["--region", "us-centrall1"], "did you mean us-central1"),
    (["--max-price", "-1"], "--max-price must be a price >= 0"),
    (["--min-memory", "-4"], "--min-memory must be >= 0"),
    (["--limit", "-1"], "--limit must be >= 0"),
])
def test_search_bad_filters_are_one_line_errors(args, fragment):
    result = invoke("search", *args)
    assert isinstance(result.exception, TrainwiseError), result.output
    assert fragment in str(result.exception)


def test_search_region_prefix_still_matches():
    result = invoke("search", "--region", "us-", "--limit", "1")
    assert result.exit_code == 0, result.output


def test_search_merges_user_offerings(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text('[[offering]]\nname = "local"\nkind = "on_premise"\naccelerator = "P100-SXM2"\n'
                    'accelerator_count = 1\ncapex_usd = 25000\nlifetime_years = 1\n')
    result = invoke("search", "--user", str(path), "--cloud", "on-premise")
    assert result.exit_code == 0, result.output
    assert "local" in result.output and "2.85" in result.output


def test_import_command(tmp_path, data_dir):
    gpu_info = "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 16384}}]}\""
    path = tmp_path / "aws_vms.csv"
    path.write_text(",".join(FORMATS["aws"]) + f"\np3.2xlarge,V100,1.0,8.0,61.0,{gpu_info},3.06,0.9,us-east-1,use1-az1\n")
    result = invoke("import", str(path))
    assert result.exit_code == 0, result.output
    assert "aws: 1 offerings" in result.output and str(data_dir) in result.output.replace("\n", "")
    shown = invoke("show")
    assert "user import" in shown.output
    path.write_text(",".join(FORMATS["aws"]) + "\np3.2xlarge,V100,1.0,8.0,61.0,,-1,,us-east-1,use1-az1\n")
    bad = invoke("import", str(path))
    assert isinstance(bad.exception, CatalogDataError)
    assert "aws_vms.csv: row 2, column Price: negative value -1" in str(bad.exception)


def test_accelerators_command():
    result = invoke("accelerators")
    assert result.exit_code == 0, result.output
    for name in ("K80", "V100", "TPU-v3", "TPU-v3-8", "A100-80GB"):
        assert name in result.output
    assert "per die" in result.output and "per board" in result.output


def test_regions_lists_each_clouds_regions_with_their_continent():
    result = invoke("regions", "--cloud", "lambda")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("│")]
    assert "17 regions" in result.output and len(lines) == 17
    assert all(line.split("│")[1].strip() == "lambda" for line in lines)
    cells = {line.split("│")[2].strip(): line.split("│")[3].strip() for line in lines}
    assert cells["us-east-1"] == "us" and cells["australia-east-1"] == "oce" and cells["europe-central-1"] == "eu"
    every = invoke("regions")
    assert every.exit_code == 0 and {"aws", "gcp", "azure", "lambda"} <= {
        line.split("│")[1].strip() for line in every.output.splitlines() if line.startswith("│")}
    seed = invoke("regions", "--catalog", "seed-2021", "--cloud", "aws")
    assert seed.exit_code == 0 and "us-east-1" in seed.output and "seed-2021" in seed.output
    bad = invoke("regions", "--cloud", "awz")
    assert isinstance(bad.exception, TrainwiseError) and "did you mean aws" in str(bad.exception)


@pytest.mark.parametrize("catalog_name", ["current", "seed-2021"])
def test_an_unknown_region_points_at_a_command_that_lists_the_regions(catalog_name):
    import re

    result = invoke("search", "--region", "zz-", "--catalog", catalog_name)
    assert isinstance(result.exception, TrainwiseError)
    command = re.search(r"`trainwise catalog ([^`]+)`", str(result.exception)).group(1).split()
    listed = invoke(*command)
    assert listed.exit_code == 0, listed.output
    assert "us-east-1" in listed.output and f"catalog {catalog_name}" in " ".join(listed.output.split())
