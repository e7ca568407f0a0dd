"""User-defined offerings (TOML/YAML): on-premise amortisation, reserved prices, other providers."""

from __future__ import annotations

import pytest

from trainwise.catalog import load_catalog, load_user_offerings, on_premise_price_per_hour, reserved_price_per_hour
from trainwise.errors import TrainwiseError

LAB_TOML = """
[catalog]
name = "lab"
price_date = "2025-01"

[[accelerator]]
name = "RTX3090"
vendor = "NVIDIA"
memory_gib = 24
fp32_tflops = 35.6

[[offering]]
name = "local-cluster"
kind = "on_premise"
region = "porto-alegre"
accelerator = "P100-SXM2"
accelerator_count = 1
vcpus = 44
memory_gib = 256
capex_usd = 25000
lifetime_years = 1

[[offering]]
name = "gpu-box-1of4"
kind = "on_premise"
accelerator = "A100"
accelerator_count = 1
capex_usd = 100000
lifetime_hours = 26280
power_kw = 3.2
usd_per_kwh = 0.25
utilisation = 0.5
share_of_node = 0.25

[[offering]]
name = "p3.2xlarge-1y"
kind = "reserved"
provider = "aws"
region = "us-east-1"
accelerator = "V100"
accelerator_count = 1
upfront_usd = 8760
term_years = 1
hourly_usd = 0.5

[[offering]]
name = "1x-3090"
provider = "vast"
accelerator = "rtx3090"
accelerator_count = 1
price_per_hour = 0.30
spot_price_per_hour = 0.15
"""


@pytest.fixture(autouse=True)
def _no_user_import(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWISE_DATA_DIR", str(tmp_path / "data"))


def test_on_premise_formula_reproduces_the_seed():
    # Künas 2023 (thesis) Table 4.1: 25,000 $ / (1 x 365 x 24 h) = 2.8539 -> 2.85 $/h
    assert on_premise_price_per_hour(25_000, lifetime_years=1) == 2.85
    assert on_premise_price_per_hour(25_000, lifetime_hours=8760, round_cents=False) == pytest.approx(2.853881, abs=1e-6)
    # power is paid while running, capex is spread over the used hours, then the node share
    price = on_premise_price_per_hour(100_000, lifetime_hours=26_280, power_kw=3.2, usd_per_kwh=0.25, utilisation=0.5,
                                      share_of_node=0.25, round_cents=False)
    assert price == pytest.approx((100_000 / (26_280 * 0.5) + 3.2 * 0.25) * 0.25)
    with pytest.raises(TrainwiseError, match="exactly one of lifetime_years or lifetime_hours"):
        on_premise_price_per_hour(1000)
    assert reserved_price_per_hour(upfront_usd=8760, term_years=1, hourly_usd=0.5) == pytest.approx(1.5)


def test_toml_offerings(tmp_path):
    path = tmp_path / "lab.toml"
    path.write_text(LAB_TOML)
    lab = load_user_offerings(path)
    assert lab.name == "lab" and lab.snapshot_date == "2025-01"
    local = lab.get("on-premise", "local-cluster")
    assert local.price_per_hour == 2.85 and local.kind == "on_premise"
    assert local.accelerator_memory_gib == 16 and local.min_billed_seconds == 0
    assert any("25000 $" in n and "2.85 $/h" in n for n in local.notes)
    box = lab.get("on-premise", "gpu-box-1of4")
    assert box.price_per_hour == round((100_000 / (26_280 * 0.5) + 3.2 * 0.25) * 0.25, 2)
    reserved = lab.get("aws", "p3.2xlarge-1y")
    assert reserved.kind == "reserved" and reserved.price_per_hour == pytest.approx(1.5)
    vast = lab.get("vast", "1x-3090")
    assert (vast.accelerator, vast.spot_price_per_hour, vast.accelerator_memory_gib) == ("RTX3090", 0.15, 24)
    merged = load_catalog().merged_with(lab)
    assert "on-premise" in merged.clouds() and merged.accelerator("RTX3090").fp32_tflops == 35.6
    assert len(merged.search(max_price=0.5, cloud="vast")) == 1


def test_yaml_offerings(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("offerings:\n"
                    "  - name: local-cluster\n    kind: on_premise\n    accelerator: V100-32GB\n    accelerator_count: 1\n"
                    "    capex_usd: 25000\n    lifetime_years: 1\n")
    lab = load_user_offerings(path)
    assert lab.get("on-premise", "local-cluster").price_per_hour == 2.85
    assert load_catalog(path).name == "user:lab"


@pytest.mark.parametrize("body,fragment", [
    ('[[offering]]\nname = "x"\nkind = "on_premise"\ncapex_usd = 1000\n', "offering 1 (x): give exactly one of lifetime_years"),
    ('[[offering]]\nname = "x"\nprice_per_hour = -1\n', "offering 1 (x), field price_per_hour: Input should be greater than or equal to 0"),
    ('[[offering]]\nname = "x"\nprice_per_hour = "cheap"\n', "field price_per_hour: Input should be a valid number"),
    ('[[offering]]\nname = "x"\nprice_per_hour = 1\ncolour = "red"\n', "field colour: unknown field"),
    ('[[offering]]\nname = "x"\nprice_per_hour = 1\naccelerator = "V10"\naccelerator_count = 1\n',
     "offering 1 (x), field accelerator: unknown accelerator 'V10': did you mean V100"),
    ('[[offering]]\nname = "x"\nprice_per_hour = 1\n[[offering]]\nname = "x"\nprice_per_hour = 2\n', "duplicate offering"),
    ('offering = [', "not valid TOML"),
    ('[catalog]\nname = "empty"\n', "no offerings found"),
    # inf and nan are TOML floats: an infinite price would rank as a real one
    ('[[offering]]\nname = "x"\nprice_per_hour = inf\n', "offering 1 (x), field price_per_hour: Input should be a finite number"),
    ('[[offering]]\nname = "x"\nprice_per_hour = nan\n', "offering 1 (x), field price_per_hour: Input should be a finite number"),
    ('[[offering]]\nname = "x"\nprice_per_hour = 1\nspot_price_per_hour = -inf\n', "field spot_price_per_hour: Input should be"),
    ('[[offering]]\nname = "x"\nkind = "on_premise"\ncapex_usd = inf\nlifetime_years = 1\n', "field capex_usd: Input should be a finite"),
    # 1e308 is finite but no capex: refused by its bound before any arithmetic overflows
    ('[[offering]]\nname = "x"\nkind = "on_premise"\ncapex_usd = 1e308\nlifetime_hours = 1e-10\n',
     "offering 1 (x), field capex_usd: Input should be less than or equal to"),
    ('[[offering]]\nname = "x"\nprice_per_hour = 1e308\n', "field price_per_hour: Input should be less than or equal to"),
    ('[[offering]]\nname = "p3.2xlarge;$(touch x)"\nprice_per_hour = 1\n', "field name: instance type (name)"),
    ('[[offering]]\nname = "x"\nregion = "us east"\nprice_per_hour = 1\n', "field region: region 'us east' has characters"),
    ('[[accelerator]]\nname = "Z"\nfp32_tflops = 0\n[[offering]]\nname = "x"\nprice_per_hour = 1\n',
     "accelerator 1 (Z), field fp32_tflops: Input should be greater than 0"),
    ('offering = 5\n', "field offering: expected a list of tables"),
    ('[[offering]]\nname = "x"\nprice_per_hour = ' + "9" * 5000 + '\n', "over the 20-digit limit"),
    ('a = ' + "[" * 200 + "]" * 200 + '\n', "nested deeper than 64 levels"),
])
def test_bad_user_files_name_file_entry_and_field(tmp_path, body, fragment):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(TrainwiseError) as excinfo:
        load_user_offerings(path)
    assert fragment in str(excinfo.value)
    assert str(path) in str(excinfo.value)


def test_unsupported_suffix(tmp_path):
    path = tmp_path / "lab.json"
    path.write_text("{}")
    with pytest.raises(TrainwiseError, match=r"\.toml, \.yaml, \.yml"):
        load_user_offerings(path)


def test_a_missing_user_file_says_how_to_write_one(tmp_path):
    # the old message ended at "No such file or directory"
    with pytest.raises(TrainwiseError, match=r"lab.toml does not exist: write one, e.g. \[\[offering\]\] .*capex_usd"):
        load_user_offerings(tmp_path / "lab.toml")


def test_yaml_alias_bomb_is_refused_before_it_expands(tmp_path):
    # "billion laughs": nine aliases per level, nine levels: 387 million names if expanded
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, 9):
        prev, name = chr(96 + level), chr(97 + level)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * 9)}]")
    lines.append("offering:\n- name: *i\n  price_per_hour: 1")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TrainwiseError, match=r"bomb.yaml: its aliases expand to over 200,000 values"):
        load_user_offerings(path)


def test_plain_yaml_aliases_still_work(tmp_path):
    path = tmp_path / "lab.yaml"
    path.write_text("offering:\n- &first {name: a, provider: vast, price_per_hour: 0.3}\n- {<<: *first, name: b}\n")
    assert sorted(load_user_offerings(path).offerings["instance_type"]) == ["a", "b"]


@pytest.mark.parametrize("suffix", [".toml", ".yaml"])
def test_a_non_utf8_user_file_names_the_byte_offset(tmp_path, suffix):
    path = tmp_path / f"lab{suffix}"
    path.write_bytes(b"# caf\xe9\n")
    with pytest.raises(TrainwiseError, match=r"not UTF-8 text \(byte 0xe9 at byte offset 5, line 1\): save the file as UTF-8"):
        load_user_offerings(path)


def test_an_oversized_user_file_is_refused_before_reading(tmp_path, monkeypatch):
    from trainwise import userfiles

    path = tmp_path / "big.toml"
    path.write_text("# " + "x" * 2000 + "\n")
    monkeypatch.setattr(userfiles, "MAX_FILE_BYTES", 1000)
    with pytest.raises(TrainwiseError, match=r"big.toml is 2003 bytes, over the 1000 bytes limit"):
        load_user_offerings(path)


def test_the_documented_example_plans_with_an_offering_without_a_region(tmp_path):
    """The module docstring's example: its `1x-rtx3090` has no region (NaN in the catalog frame), which
    crashed continent_of with `'float' object has no attribute 'strip'`."""
    import trainwise.catalog.user as user
    from trainwise.predict.topology import continent_of

    doc = user.__doc__
    body = "\n".join(line[4:] for line in doc[doc.index("    [catalog]"):doc.index("YAML: the same keys")].splitlines())
    path = tmp_path / "example.toml"
    path.write_text(body)
    catalog = load_user_offerings(path)
    assert len(catalog.offerings) == 3
    regions = catalog.offerings["region"].tolist()
    assert [continent_of(r) for r in regions] == [None, "us", None]
