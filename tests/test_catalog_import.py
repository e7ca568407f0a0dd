"""`trainwise catalog import`: accepts real SkyPilot files, rejects bad ones naming file, row, column."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from trainwise.catalog import CatalogDataError, import_skypilot, load_catalog, load_packaged
from trainwise.catalog.importer import catalog_from_skypilot
from trainwise.catalog.skypilot import FORMATS
from trainwise.errors import TrainwiseError

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "catalog"
AWS_HEADER = ",".join(FORMATS["aws"])
GPU_INFO = "\"{'Gpus': [{'Name': 'V100', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], 'TotalGpuMemoryInMiB': 16384}\""
GOOD_AWS = f"p3.2xlarge,V100,1.0,8.0,61.0,{GPU_INFO},3.06,0.9,us-east-1,use1-az1"


@pytest.fixture(autouse=True)
def data_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "data"
    monkeypatch.setenv("TRAINWISE_DATA_DIR", str(directory))
    return directory


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def problem_of(excinfo) -> tuple[str, int, str, str]:
    first = excinfo.value.problems[0]
    return Path(first.file).name, first.row, first.column, str(excinfo.value)


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared SkyPilot snapshot not present")
def test_import_accepts_the_shared_files_and_current_prefers_it(tmp_path, data_dir):
    files = []
    for name in ("aws_vms.csv", "gcp_vms.csv", "azure_vms.csv", "lambda_vms.csv"):
        files.append(shutil.copy(SHARED / name, tmp_path / name))
    result = import_skypilot(files)
    assert result.directory == data_dir / "catalog" / "current"
    assert set(result.clouds) == {"aws", "gcp", "azure", "lambda"}
    current = load_catalog()
    assert "user import" in current.origin and "user import" in current.caption
    packaged = load_packaged()
    same = ["offering_id", "price_per_hour", "spot_price_per_hour", "accelerator", "accelerator_count"]
    left = current.offerings[same].sort_values("offering_id").reset_index(drop=True)
    right = packaged.offerings[same].sort_values("offering_id").reset_index(drop=True)
    assert left.equals(right)  # the importer and the build apply the same quirk handling
    assert load_catalog("current", prefer_user=False).origin == "packaged snapshot"
    stored = sorted(p.name for p in result.directory.iterdir())
    assert stored[0] == "catalog.json" and len(stored) == 2 and not any(n.endswith(".tmp") for n in stored)


def test_import_one_cloud_keeps_the_others(tmp_path, data_dir):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS)
    result = import_skypilot([path])
    catalog = load_catalog()
    aws = catalog.search(cloud="aws")
    assert len(aws) == 1 and aws.iloc[0]["price_per_hour"] == 3.06
    assert len(catalog.search(cloud="gcp")) == len(load_packaged().search(cloud="gcp"))
    meta = json.loads((result.directory / "catalog.json").read_text())
    assert meta["clouds"]["aws"]["file"] == str(path)
    assert meta["clouds"]["gcp"]["file"] == "packaged snapshot"
    # a second import replaces the stored files atomically, leaving one offerings file
    write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace("3.06", "3.10"))
    import_skypilot([path])
    assert load_catalog().get("aws", "p3.2xlarge").price_per_hour == 3.10
    assert len(list(result.directory.glob("offerings-*.csv"))) == 1


def test_wrong_header(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER.replace("SpotPrice", "Spot"), GOOD_AWS)
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    file, row, column, message = problem_of(excinfo)
    assert (file, row, column) == ("aws_vms.csv", 1, "SpotPrice")
    assert "wrong header" in message and "aws_vms.csv: row 1, column SpotPrice" in message


def test_negative_price(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS, GOOD_AWS.replace("3.06", "-3.06").replace("use1-az1", "use1-az2"))
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    assert problem_of(excinfo)[:3] == ("aws_vms.csv", 3, "Price")
    assert "negative" in str(excinfo.value)


def test_non_numeric_price(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace("0.9,", "cheap,"))
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    assert problem_of(excinfo)[:3] == ("aws_vms.csv", 2, "SpotPrice")
    assert "'cheap' is not a number" in str(excinfo.value)


def test_missing_price_is_accepted_but_nan_is_not(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace("3.06", ""))
    catalog = catalog_from_skypilot([path])
    assert catalog.get("aws", "p3.2xlarge").price_per_hour is None
    bad = write(tmp_path, "aws2_vms.csv", AWS_HEADER, GOOD_AWS.replace("3.06", "nan"))
    with pytest.raises(CatalogDataError, match="row 2, column Price: 'nan' is not a finite number"):
        catalog_from_skypilot([bad], cloud="aws")


def test_duplicate_key(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS, GOOD_AWS.replace("3.06", "3.50"))
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    file, row, column, message = problem_of(excinfo)
    assert (file, row, column) == ("aws_vms.csv", 3, "Price")
    assert "duplicate key (InstanceType=p3.2xlarge, AvailabilityZone=use1-az1) already on row 2" in message
    # an exact duplicate is not an error: it is removed with a note
    ok = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS, GOOD_AWS)
    catalog = catalog_from_skypilot([ok])
    assert len(catalog) == 1 and "dup-removed" in catalog.offerings.iloc[0]["notes"]


def test_unknown_accelerator_suggests(tmp_path):
    path = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace(",V100,", ",V1000,"))
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    file, row, column, message = problem_of(excinfo)
    assert (file, row, column) == ("aws_vms.csv", 2, "AcceleratorName")
    assert "unknown accelerator 'V1000': did you mean V100" in message
    assert "--skip-unknown-accelerators" in message
    with pytest.raises(TrainwiseError, match="no GPU/TPU offerings"):
        import_skypilot([path], skip_unknown=True)


def test_every_problem_is_collected_and_nothing_is_stored(tmp_path, data_dir):
    path = write(tmp_path, "lambda_vms.csv", ",".join(FORMATS["lambda"]),
                 "gpu_1x_a10,A10,1.0,30.0,200.0,abc,us-east-1,,",
                 "gpu_1x_a100,A100,1.0,30.0,-200.0,1.29,us-east-1,,")
    with pytest.raises(CatalogDataError) as excinfo:
        import_skypilot([path])
    assert [(p.row, p.column) for p in excinfo.value.problems] == [(2, "Price"), (3, "MemoryGiB")]
    assert "(and 1 more problem)" in str(excinfo.value)
    assert not (data_dir / "catalog").exists()


def test_gcp_join_and_quirks_in_a_small_file(tmp_path):
    header = ",".join(FORMATS["gcp"])
    path = write(tmp_path, "gcp_vms.csv", header,
                 "g2-standard-4,4.0,16.0,,,,us-central1,us-central1-a,0.14679,0.05",
                 ",,,L4,1,{'Gpus': [{'MemoryInfo': {'SizeInMiB': 24576}}]},us-central1,us-central1-a,0.56004,0.2",
                 ",,,tpu-v6e-1,1,tpu-v6e-1,us-central2,us-central2-b,700.0,700.0",
                 ",,,tpu-v6e-1,1,tpu-v6e-1,us-central2,us-central2-b,700.0,700.0",
                 ",,,tpu-v3-8,1,tpu-v3-8,us-central1,us-central1-a,8.0,2.04")
    catalog = catalog_from_skypilot([path])
    g2 = catalog.get("gcp", "g2-standard-4")
    assert g2.price_per_hour == pytest.approx(0.14679 + 0.56004)  # README example: g2-standard-4 + L4 x1
    assert g2.spot_price_per_hour == pytest.approx(0.25)
    v6e = catalog.get("gcp", "tpu-v6e-1")
    assert v6e.price_per_hour is None and len(catalog.search(instance_type="tpu-v6e-1")) == 1
    assert catalog.get("gcp", "tpu-v3-8").accelerator_count == 4


def test_a_missing_catalog_file_says_where_skypilot_keeps_them(tmp_path):
    # The old message named only the path; the pinned SkyPilot (0.14) keeps its files under v8/.
    with pytest.raises(TrainwiseError, match=r"no such catalog file: .*missing.csv: pass a SkyPilot vms.csv .*"
                                             r"~/.sky/catalogs/v8/<cloud>/"):
        import_skypilot([tmp_path / "missing.csv"])


def test_file_problems(tmp_path):
    with pytest.raises(TrainwiseError, match="no such catalog file"):
        import_skypilot([tmp_path / "missing.csv"])
    empty = write(tmp_path, "aws_vms.csv", "")
    with pytest.raises(CatalogDataError, match="row 1"):
        import_skypilot([empty])
    ambiguous = write(tmp_path, "prices.csv", ",".join(FORMATS["gcp"][::-1]), "")
    with pytest.raises(TrainwiseError, match="pass --cloud"):
        import_skypilot([ambiguous])
    short = write(tmp_path, "aws_vms.csv", AWS_HEADER, "p3.2xlarge,V100,1.0")
    with pytest.raises(CatalogDataError, match="row 2: 3 cells, the header has 10"):
        import_skypilot([short])


def test_an_aws_file_without_availability_zone_is_not_taken_for_lambda(tmp_path, data_dir):
    """Its columns are exactly Lambda's: imported as Lambda it replaced every Lambda offering with one row."""
    header = ",".join(c for c in FORMATS["aws"] if c != "AvailabilityZone")
    row = GOOD_AWS.rsplit(",", 1)[0]
    named = write(tmp_path, "aws_vms.csv", header, row)
    with pytest.raises(CatalogDataError, match=r"aws_vms.csv: row 1, column AvailabilityZone: wrong header"):
        import_skypilot([named])
    (tmp_path / "x").mkdir()
    unnamed = write(tmp_path / "x", "vms.csv", header, row)
    with pytest.raises(TrainwiseError, match=r"cannot tell which cloud .* lambda's, but also .*pass --cloud"):
        import_skypilot([unnamed])
    assert not (data_dir / "catalog" / "current" / "catalog.json").exists()
    assert len(load_catalog().search(cloud="lambda")) == len(load_packaged().search(cloud="lambda"))


def test_a_file_named_for_one_cloud_with_another_clouds_exact_header_is_refused(tmp_path):
    path = write(tmp_path, "gcp_vms.csv", AWS_HEADER, GOOD_AWS)
    with pytest.raises(TrainwiseError, match="its name says gcp but its header is exactly a aws catalog's"):
        catalog_from_skypilot([path])


def test_a_stored_catalog_is_verified_against_its_content_hash(tmp_path, data_dir):
    result = import_skypilot([write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS)])
    meta = json.loads((result.directory / "catalog.json").read_text())
    stored = result.directory / meta["offerings_file"]
    assert meta["offerings"] == len(load_catalog().offerings)
    text = stored.read_text()
    stored.write_text(text[: len(text) // 3])  # truncated: once it loaded as a smaller catalog
    with pytest.raises(TrainwiseError, match=r"is damaged \(offerings-[0-9a-f]{12}.csv does not match the content hash"):
        load_catalog()
    stored.write_text(text.replace("3.06", "0.06"))  # edited
    with pytest.raises(TrainwiseError, match="does not match the content hash"):
        load_catalog()
    stored.write_text(text)
    assert len(load_catalog().offerings) == meta["offerings"]


def test_hostile_and_huge_cells_are_refused(tmp_path):
    bad_name = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace("p3.2xlarge", "p3.2xlarge;$(touch x)", 1))
    with pytest.raises(CatalogDataError, match=r"column InstanceType: .* has characters a cloud name cannot have"):
        catalog_from_skypilot([bad_name])
    huge = write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS.replace("3.06", "1e308", 1))
    with pytest.raises(CatalogDataError, match=r"column Price: 1e308 is over the 1e\+06 limit"):
        catalog_from_skypilot([huge])


def test_a_non_utf8_price_file_names_the_byte_offset(tmp_path):
    path = tmp_path / "aws_vms.csv"
    path.write_bytes((AWS_HEADER + "\n").encode() + b"p3.2xlarge\xff")
    with pytest.raises(TrainwiseError, match=rf"not UTF-8 text \(byte 0xff at byte offset {len(AWS_HEADER) + 11}, line 2\)"):
        catalog_from_skypilot([path])


def test_an_unwritable_data_dir_is_one_line_and_keeps_the_catalog(tmp_path, monkeypatch):
    import os

    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the data folder would be")
    monkeypatch.setenv("TRAINWISE_DATA_DIR", str(blocked))
    with pytest.raises(TrainwiseError, match=r"cannot store the imported catalog in .*set TRAINWISE_DATA_DIR to a writable"):
        import_skypilot([write(tmp_path, "aws_vms.csv", AWS_HEADER, GOOD_AWS)])
    assert os.path.isfile(blocked)
