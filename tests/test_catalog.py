"""The packaged catalogs: loading, the SkyPilot quirks, the seed prices, the query API."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from trainwise.catalog import OFFERING_COLUMNS, Catalog, Offering, load_catalog, load_packaged
from trainwise.errors import TrainwiseError


@pytest.fixture(autouse=True)
def _no_user_import(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWISE_DATA_DIR", str(tmp_path / "data"))


@pytest.fixture(scope="module")
def current() -> Catalog:
    return load_packaged()


@pytest.fixture(scope="module")
def seed() -> Catalog:
    return load_catalog("seed-2021")


def row(catalog: Catalog, offering_id: str) -> pd.Series:
    rows = catalog.offerings[catalog.offerings["offering_id"] == offering_id]
    assert len(rows) == 1, offering_id
    return rows.iloc[0]


# --- loading -----------------------------------------------------------------------------------


def test_current_loads_from_package_with_sane_counts(current):
    assert current.name == "current"
    assert current.snapshot_date == "2026-11-21"
    assert "2026-11-21" in current.caption
    frame = current.offerings
    assert list(frame.columns) == list(OFFERING_COLUMNS)
    assert frame["offering_id"].is_unique
    counts = frame["cloud"].value_counts().to_dict()
    # AWS 1,255 rows - 5 same-key p4de rows; Lambda 306; Azure 195 - 28 MI25 - 1 ND40s_v3.
    assert counts == {"gcp": 2875, "aws": 1250, "lambda": 306, "azure": 166}
    assert current.clouds() == ["aws", "azure", "gcp", "lambda"]
    assert frame["price_per_hour"].dtype == "float64"
    priced = frame[frame["price_per_hour"].notna()]
    per_unit = priced["price_per_hour"] / priced["accelerator_count"]
    assert (per_unit > 0.05).all() and (per_unit < 20).all()  # USD/h per GPU/die/chip (largest slice: tpu-v5p-12288)
    # every offering's accelerator has a spec
    assert set(frame["accelerator"].dropna()) <= set(current.accelerators)


def test_packaged_data_is_what_build_produces(tmp_path, current):
    """The packaged files are read through importlib.resources and are exactly build.py's output."""
    from importlib import resources
    from pathlib import Path

    from trainwise.catalog import build

    data = resources.files("trainwise.catalog") / "data"
    assert all((data / name).is_file() for name in ("offerings-current.csv", "accelerators.csv", "current.json"))
    total = sum(len((data / name).read_bytes()) for name in ("offerings-current.csv", "accelerators.csv", "current.json"))
    assert total < 2_000_000  # keep the package small
    shared = Path(__file__).resolve().parents[1].parent / "shared" / "catalog"
    if not shared.is_dir():
        pytest.skip("shared SkyPilot snapshot not present")
    build.build(shared, tmp_path)
    for name in ("offerings-current.csv", "accelerators.csv", "current.json"):
        assert (tmp_path / name).read_text() == (data / name).read_text(), f"{name}: run python -m trainwise.catalog.build"
    assert current.report["gcp_vms.csv"]["counts"]["exact duplicate rows removed"] == 154


def test_seed_2021_loads(seed):
    assert seed.name == "seed-2021"
    assert "2021" in seed.caption
    assert seed.offerings["offering_id"].is_unique
    assert len(seed) == 18


# --- SkyPilot quirks ---------------------------------------------------------------------------


def test_gcp_price_is_host_plus_accelerator(current):
    # gcp_vms.csv line 12:  a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.29576
    # gcp_vms.csv line 900: ,,,A100,1,{...40960...},us-central1,us-central1-a,2.93391,1.1472
    # on-demand 0.73948 + 2.93391 = 3.67339; spot 0.29576 + 1.1472 = 1.44296
    a2 = current.get("gcp", "a2-highgpu-1g", zone="us-central1-a")
    assert a2.price_per_hour == pytest.approx(3.67339, abs=1e-9)
    assert a2.spot_price_per_hour == pytest.approx(1.44296, abs=1e-9)
    assert (a2.accelerator, a2.accelerator_count, a2.accelerator_memory_gib) == ("A100", 1.0, 40.0)
    assert (a2.vcpus, a2.memory_gib) == (12.0, 85.0)
    assert a2.source == "gcp_vms.csv:12+900"
    assert any("host VM row + accelerator row" in n for n in a2.notes)
    # line 236 a3-highgpu-8g 9.46006 / 2.17547 + line 1115 H100 x8 33.60609 / 18.024
    a3 = current.get("gcp", "a3-highgpu-8g", zone="us-central1-a")
    assert a3.price_per_hour == pytest.approx(9.46006 + 33.60609)
    assert a3.spot_price_per_hour == pytest.approx(2.17547 + 18.024)


def test_gcp_n1_host_carries_attachable_gpus(current):
    # line 868 n1-standard-8 us-central1-a 0.38 / 0.0963 + line 1447 T4 x1 0.35 / 0.14
    with pytest.raises(TrainwiseError, match="several accelerator options"):
        current.get("gcp", "n1-standard-8", zone="us-central1-a")
    t4 = current.get("gcp", "n1-standard-8", zone="us-central1-a", accelerator="T4", accelerator_count=1)
    assert t4.offering_id == "gcp/us-central1-a/n1-standard-8+1xT4"
    assert t4.price_per_hour == pytest.approx(0.73)
    assert t4.spot_price_per_hour == pytest.approx(0.2363)


def test_gcp_accelerator_rows_without_host_are_dropped(current):
    frame = current.offerings
    assert "B200" not in set(frame["accelerator"].dropna())  # 9 B200 rows, no a4 host rows
    counts = current.report["gcp_vms.csv"]["counts"]
    assert counts["dropped: GCP B200 accelerator rows without a host VM row"] == 9
    # every GCP GPU offering has both a host and an accelerator line
    gpu = frame[(frame["cloud"] == "gcp") & ~frame["instance_type"].str.startswith("tpu-")]
    assert gpu["source"].str.contains(r"^gcp_vms\.csv:\d+\+\d+$").all()


def test_exact_duplicates_removed(current):
    frame = current.offerings
    gcp = frame[frame["cloud"] == "gcp"]
    # tpu-v4 in us-central2-b appears twice per size in the source: once here.
    v4 = gcp[(gcp["zone"] == "us-central2-b") & (gcp["instance_type"] == "tpu-v4-8")]
    assert len(v4) == 1
    assert "dup-removed" in v4.iloc[0]["notes"]
    assert int(gcp["notes"].str.contains("dup-removed").sum()) == 154


def test_aws_p4de_same_key_rows_keep_the_spot_price(current):
    # aws_vms.csv lines 1177/1178: same AZ, same on-demand 40.96575, one with spot 7.8074
    p4de = row(current, "aws/use1-az4/p4de.24xlarge")
    assert p4de["price_per_hour"] == pytest.approx(40.96575)
    assert p4de["spot_price_per_hour"] == pytest.approx(7.8074)
    assert p4de["accelerator"] == "A100-80GB"
    assert "dup-key-kept-spot" in p4de["notes"]


def test_placeholder_prices_dropped_with_a_note(current):
    # gcp_vms.csv lines 3073/3074: tpu-v6e-8 us-central2-b 700.0,700.0 (twice)
    v6e = current.get("gcp", "tpu-v6e-8", zone="us-central2-b")
    assert v6e.price_per_hour is None and v6e.spot_price_per_hour is None
    assert any("placeholder" in n for n in v6e.notes)
    frame = current.offerings
    assert not (frame["price_per_hour"] == 700.0).any()
    assert int(frame["notes"].str.contains("placeholder-700").sum()) == 32  # 40 rows, 8 of them duplicates
    # a real price above 700 is kept (line 3169: tpu-v6e-256 asia-northeast1-b 829.44 = 256 chips x 3.24)
    big = current.get("gcp", "tpu-v6e-256", zone="asia-northeast1-b")
    assert big.price_per_hour == pytest.approx(829.44)


def test_missing_prices_are_none_not_zero(current):
    p5e = current.search(cloud="aws", instance_type="p5e.48xlarge")
    assert len(p5e) == 7 and p5e["price_per_hour"].isna().all()
    assert p5e["spot_price_per_hour"].notna().sum() == 4
    # gcp_vms.csv line 1622: tpu-v3-8 us-east1-d 8.0 with no spot price
    tpu = current.get("gcp", "tpu-v3-8", zone="us-east1-d")
    assert tpu.price_per_hour == 8.0 and tpu.spot_price_per_hour is None
    assert not (current.offerings["price_per_hour"] == 0).any()


def test_tpu_slices_count_chips(current):
    v3 = current.get("gcp", "tpu-v3-8", zone="us-central1-a")
    assert (v3.accelerator, v3.accelerator_count, v3.accelerator_memory_gib) == ("TPU-v3", 4.0, 32.0)
    assert v3.price_per_hour == 8.0
    v5e = current.get("gcp", "tpu-v5litepod-8", zone="asia-east1-a")
    assert (v5e.accelerator, v5e.accelerator_count) == ("TPU-v5e", 8.0)
    spec = current.accelerator("tpu-v3")
    assert spec.granularity == "per_chip" and spec.memory_gib == 32
    board = current.accelerator("TPUv3-8")
    assert board.granularity == "per_board" and board.memory_gib == 128


def test_azure_quirks(current):
    nd = current.search(cloud="azure", instance_type="Standard_ND96isr_H100_v5")
    assert (nd["accelerator_count"] == 8).all()
    assert nd["spot_price_per_hour"].isna().all()  # spot = on-demand placeholders dropped
    assert "azure-count-fix" in nd.iloc[0]["notes"]
    nc = current.search(cloud="azure", instance_type="Standard_NC8ads_A10_v4")
    assert (nc["accelerator"] == "A10").all()
    assert nc["accelerator_count"].iloc[0] == pytest.approx(1 / 3)
    assert "Radeon MI25" not in set(current.offerings["source_accelerator"].dropna())
    k80 = current.search(accelerator="K80")
    assert set(k80["cloud"]) == {"azure"}  # no p2 in the snapshot


def test_lambda_h100_pcie_and_no_spot(current):
    pcie = current.get("lambda", "gpu_1x_h100_pcie", "us-east-1")
    assert pcie.accelerator == "H100-PCIe" and pcie.price_per_hour == 2.49
    assert current.search(cloud="lambda", spot=True).empty


# --- seed-2021 ---------------------------------------------------------------------------------


@pytest.mark.parametrize("instance_type,accelerator,count,price", [
    ("p2.xlarge", "K80", 1, 0.90), ("p2.8xlarge", "K80", 8, 7.20), ("p2.16xlarge", "K80", 16, 14.40),
    ("p3.2xlarge", "V100", 1, 3.06), ("p3.8xlarge", "V100", 4, 12.24), ("p3.16xlarge", "V100", 8, 24.48)])
def test_seed_aws_feb_2021(seed, instance_type, accelerator, count, price):
    offering = seed.get("aws", instance_type)
    assert (offering.accelerator, offering.accelerator_count, offering.price_per_hour) == (accelerator, count, price)
    assert offering.price_date == "2021-02"
    assert "Malta 2021" in offering.source and "Table 3.1" in offering.source


def test_seed_tpu_and_local_cluster(seed):
    v3 = seed.get("gcp", "tpu-v3-8")
    assert (v3.price_per_hour, v3.spot_price_per_hour, v3.accelerator, v3.accelerator_count) == (8.00, 2.40, "TPU-v3", 4)
    v2 = seed.get("gcp", "tpu-v2-8")
    assert v2.price_per_hour == 6.00
    assert any(n.startswith("derived") for n in v2.notes)
    for name in ("local-cluster-p100", "local-cluster-v100"):
        local = seed.get("on-premise", name)
        assert local.price_per_hour == 2.85 and local.kind == "on_premise"
    # break-even speedup TPUv3-8 vs the local cluster (Künas 2023): 8.00 / 2.85 = 2.807
    assert v3.price_per_hour / seed.get("on-premise", "local-cluster-p100").price_per_hour == pytest.approx(2.807, abs=5e-4)


def test_seed_april_2023_prices_and_per_million_sample_checks(seed):
    t4 = {c: seed.search(cloud=c, accelerator="T4").iloc[0] for c in ("gcp", "aws", "azure")}
    assert [t4[c]["spot_price_per_hour"] for c in ("gcp", "aws", "azure")] == [0.180, 0.395, 0.134]
    assert [t4[c]["price_per_hour"] for c in ("gcp", "aws", "azure")] == [0.572, 0.802, 0.489]

    def per_million(price: float, samples_per_s: float) -> float:
        return price / (samples_per_s * 3600) * 1e6

    dgx2 = seed.search(instance_type="DGX-2 (8xV100)").iloc[0]
    assert dgx2["spot_price_per_hour"] == 6.30 and dgx2["price_per_hour"] == 14.60
    assert round(per_million(dgx2["spot_price_per_hour"], 413), 2) == 4.24
    assert round(per_million(t4["gcp"]["spot_price_per_hour"], 80), 2) == 0.62
    a10 = seed.get("lambda", "gpu_1x_a10")
    assert a10.price_per_hour == 0.60
    assert round(per_million(a10.price_per_hour, 185), 2) == 0.90
    assert round(per_million(8 * a10.price_per_hour, 621), 2) == 2.15


def test_seed_egress_table(seed, current):
    assert seed.egress_price("gcp", "any_to_oce") == 0.15
    assert seed.egress_price("aws", "inter_continent") == 0.02
    assert seed.egress_price("azure", "inter_zone") == 0.00
    assert seed.egress_price("lambda", "inter_continent") == 0.0
    assert seed.egress_price("object-storage", "object_storage") == 0.01
    assert (seed.egress["price_date"] == "2023-04").all()
    # the current snapshot has no egress prices: it ships the same table, labelled with its date
    assert current.egress_price("gcp", "inter_region_asia") == 0.05
    assert current.egress["source"].str.contains("April 2023").all()
    with pytest.raises(TrainwiseError, match="unknown egress scope"):
        seed.egress_price("gcp", "moon")


# --- query API ---------------------------------------------------------------------------------


def test_unknown_accelerator_suggests_nearest(current):
    with pytest.raises(TrainwiseError, match=r"unknown accelerator 'V10'.*did you mean V100"):
        current.accelerator("V10")
    with pytest.raises(TrainwiseError, match=r"did you mean A100-80GB"):
        current.search(accelerator="A100-80")
    assert current.accelerator("h100-mega").name == "H100"
    assert current.accelerator("tesla k80").granularity == "per_die"


def test_search_filters(current):
    cheap = current.search(cloud="aws", accelerator="V100", max_price=4)
    assert len(cheap) > 0
    assert set(cheap["instance_type"]) == {"p3.2xlarge"}
    assert (cheap["price_per_hour"] <= 4).all()
    assert cheap["price_per_hour"].is_monotonic_increasing
    spot = current.search(accelerator="T4", spot=True, max_price=0.2)
    assert len(spot) > 0 and (spot["spot_price_per_hour"] <= 0.2).all()
    assert spot["spot_price_per_hour"].is_monotonic_increasing
    us = current.search(region="us-", cloud="GCP")
    assert us["region"].str.startswith("us-").all()
    zone = current.search(region="us-central1-a", cloud="gcp")
    assert (zone["zone"] == "us-central1-a").all()
    big = current.search(min_accelerator_memory_gib=80)
    assert (big["accelerator_memory_gib"] >= 80).all() and "H100" in set(big["accelerator"])
    with pytest.raises(TrainwiseError, match="did you mean aws"):
        current.search(cloud="awz")


def test_get_errors_name_the_fix(current):
    with pytest.raises(TrainwiseError, match="did you mean p3.2xlarge"):
        current.get("aws", "p3.2xlarg")
    with pytest.raises(TrainwiseError, match="not offered in 'mars-1'"):
        current.get("aws", "p3.2xlarge", "mars-1")
    cheapest = current.get("aws", "p3.2xlarge")
    assert cheapest.price_per_hour == current.search(cloud="aws", instance_type="p3.2xlarge")["price_per_hour"].min()


def test_regions_iter_offerings_and_per_region(current):
    assert "us-east-1" in current.regions("aws")
    first = next(current.iter_offerings())
    assert isinstance(first, Offering)
    models = list(current.iter_offerings(current.search(cloud="lambda", region="us-east-1")))
    assert len(models) == 18 and all(m.zone is None for m in models)
    per_region = current.cheapest_per_region()
    keys = ["cloud", "region", "instance_type", "accelerator", "accelerator_count"]
    assert not per_region.duplicated(keys).any()
    assert len(per_region) < len(current)


def test_region_summary_counts_each_region_once(current):
    summary = current.region_summary()
    assert not summary.duplicated(["cloud", "region"]).any()
    assert summary["offerings"].sum() == current.offerings["region"].notna().sum()
    aws = current.region_summary("aws")
    assert list(aws["region"]) == current.regions("aws") and set(aws["cloud"]) == {"aws"}
    east = aws.set_index("region").loc["us-east-1"]
    assert east["continent"] == "us" and east["zones"] >= 1 and "V100" in east["accelerators"]
    assert set(summary["continent"]) <= {"us", "eu", "asia", "oce", "sa", "af", ""}


def test_merged_with_and_billing(current, seed):
    merged = current.merged_with(seed)
    assert len(merged) == len(current) + len(seed)
    assert "K80" in set(merged.search(cloud="aws")["accelerator"])
    assert merged.offerings["offering_id"].is_unique
    assert "seed-2021" in merged.snapshot_date
    p2 = merged.get("aws", "p2.xlarge")
    assert p2.catalog == "seed-2021"
    assert p2.billed_hours(30) == pytest.approx(60 / 3600)  # 60 s minimum
    assert p2.billed_hours(3600.4) == pytest.approx(3601 / 3600)
    assert math.isclose(seed.get("azure", "Standard_NC6").billed_hours(61), 1.0)  # billed per hour in 2021


def test_planner_scale_vectorised_rank(current):
    import time

    frame = pd.concat([current.offerings] * 22, ignore_index=True)  # ~100,000 rows
    start = time.perf_counter()
    hours = 3.0
    cost = frame["price_per_hour"] * hours
    order = cost.sort_values(na_position="last").index[:10]
    assert len(order) == 10
    assert time.perf_counter() - start < 1.0
