"""plan() with data-parallel candidates: multi-GPU, multi-node, Hivemind, hybrid, and why they lose."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from trainwise.catalog import load_catalog
from trainwise.cli import main
from trainwise.errors import TrainwiseError
from trainwise.plan import Constraints, Objective, PlanOptions, plan
from trainwise.plan.distributed import DistributedOptions, GroupSpec, PeerSpec, options_from_cli
from trainwise.plan.synthetic import synthetic_profile

HERE = "this-host"


@pytest.fixture(scope="module")
def catalog():
    return load_catalog("packaged")


def v100(**kw):
    # a global batch of 256: groups of up to 32 devices split it at 8 or more samples each
    kw.setdefault("batch_size", 256)
    return synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", workload="job", **kw)


def cpu_here(**kw):
    kw.setdefault("batch_size", 256)
    return synthetic_profile(host=HERE, iteration_s=kw.pop("iteration_s", 0.4), workload="job", **kw)


def options(**kw):
    return PlanOptions(this_host=HERE, distributed=DistributedOptions(**kw))


def test_single_machine_plans_are_unchanged_without_the_option(catalog):
    result = plan([cpu_here(), v100(iteration_s=0.02)], catalog, Objective(kind="fastest"), options=PlanOptions(this_host=HERE))
    assert "parallelism" not in result.plans.columns and "why" not in result.plans.columns


def test_plan_ranks_data_parallel_groups_and_says_why(catalog):
    # a long job (2 s per step, 10,000 steps per epoch) that a V100 was measured on
    profiles = [cpu_here(batches_per_epoch=10_000), v100(iteration_s=2.0, batches_per_epoch=10_000)]
    before = catalog.offerings.copy()
    result = plan(profiles, catalog, Objective(kind="fastest"), options=options())
    assert catalog.offerings.equals(before)  # plan() stays pure
    again = plan(profiles, catalog, Objective(kind="fastest"), options=options())
    assert again.plans["offering_id"].astype(str).tolist() == result.plans["offering_id"].astype(str).tolist()
    plans = result.plans
    kinds = set(plans["parallelism"].astype(str))
    assert {"", "ddp-node", "ddp-multi-node", "hivemind"} <= kinds
    offering_ids = plans["offering_id"].astype(str)
    assert offering_ids.str.startswith("multi-node/").any() and offering_ids.str.startswith("hybrid/local+").any()
    assert offering_ids.str.startswith("hivemind-geo/").any()
    distributed = plans[plans["parallelism"].astype(str) != ""]
    assert (distributed["why"].astype(str) != "").all()  # every data-parallel row says why it wins or loses
    assert distributed["time_provenance"].astype(str).str.startswith("modelled ±").all()
    # 8 V100s in one machine beat one V100 on a long job: the winner is data parallel and says so
    best = result.primary.iloc[0]
    assert best["parallelism"] != "" and best["workers"] > 1 and str(best["why"]).startswith("wins")
    # the group's network cost is part of its total
    row = distributed[distributed["network_usd_per_hour"] > 0].iloc[0]
    assert row["total_cost"] == pytest.approx(row["compute_cost"] + row["egress_cost"] + row["storage_cost"]
                                              + row["network_egress_cost"])
    assert any("Hivemind rows" in a for a in result.assumptions)


def test_group_validation_is_split_over_its_workers_at_their_speed(catalog):
    # measured on a V100: 2 s steps, 400 validation batches of 0.5 s (200 s of validation per epoch)
    profiles = [v100(iteration_s=2.0, batches_per_epoch=10_000, val_batch_s=0.5, val_batches_total=400)]
    result = plan(profiles, catalog, Objective(kind="fastest"), epoch_options=(1,), options=options())
    plans = result.plans.astype({"offering_id": str, "parallelism": str, "accelerator": str})
    single = plans[(plans["accelerator"] == "V100") & (plans["accelerator_count"] == 1) & (plans["parallelism"] == "")
                   & (plans["time_source"].astype(str) == "measured")]
    assert single["validation_s"].iloc[0] == pytest.approx(200.0, rel=0.01)
    for kind in ("ddp-node", "ddp-multi-node", "hivemind"):
        rows = plans[(plans["parallelism"] == kind) & (plans["accelerator"] == "V100")]
        assert len(rows), kind
        for row in rows.itertuples():
            # V100 workers validate as fast as the profiled V100, no communication: 200 s / workers
            assert row.validation_s == pytest.approx(200.0 / row.workers, rel=0.01), (kind, row.offering_id)


@pytest.mark.long
def test_a_multi_accelerator_machine_has_one_model_whatever_the_mode(catalog):
    from trainwise.plan.distributed import single_machine_options

    def eight_gpu_rows(profiles, distributed):
        result = plan(profiles, catalog, Objective(kind="fastest"), epoch_options=(5,),
                      options=PlanOptions(this_host=HERE, distributed=distributed))
        rows = result.plans[(result.plans["accelerator"].astype(str) == "V100") & (result.plans["accelerator_count"] == 8)
                            & result.plans["offering_id"].isin(catalog.offerings["offering_id"])]  # machines, not groups
        rows = rows.assign(key=rows["offering_id"].astype(str) + "|" + rows["market"].astype(str))
        return rows.set_index("key")[["wall_s", "time_source"]].astype({"time_source": str}).sort_index()

    # not measured on a V100: the device model predicts 8 × V100 (its all-reduce is fitted), in both modes
    twins = [synthetic_profile(host=HERE, workload="nn_twins_mlp", batch_size=256, batches_per_epoch=50)]
    default, single = eight_gpu_rows(twins, DistributedOptions()), eight_gpu_rows(twins, single_machine_options())
    assert len(default) and default.equals(single)
    assert set(default["time_source"].astype(str)) == {"device model"}
    # measured on one V100: DDP extrapolates the measured step inside the machine, in both modes
    measured = [v100(iteration_s=2.0, batches_per_epoch=10_000)]
    default, single = eight_gpu_rows(measured, DistributedOptions()), eight_gpu_rows(measured, single_machine_options())
    assert len(default) and default.equals(single)
    assert set(default["time_source"].astype(str)) == {"data-parallel model"}


def test_small_tbs_is_communication_bound(catalog):
    result = plan([v100(iteration_s=0.02)], catalog, Objective(kind="cheapest"), options=options(target_batch_size=64))
    hivemind = result.plans[result.plans["parallelism"].astype(str) == "hivemind"]
    assert len(hivemind) and (hivemind["granularity"] < 1).all()
    assert hivemind["why"].astype(str).str.contains("communication-bound: G = ").all()


def gcp_v100_by_continent(catalog) -> dict[str, str]:
    """One single-V100 GCP offering per region prefix (us, europe, asia, ...)."""
    v100_offerings = catalog.offerings[(catalog.offerings["accelerator"] == "V100")
                                       & (catalog.offerings["accelerator_count"] == 1) & (catalog.offerings["cloud"] == "gcp")]
    regions: dict[str, str] = {}
    for offering_id, region in zip(v100_offerings["offering_id"], v100_offerings["region"]):
        regions.setdefault(region.split("-")[0], offering_id)
    return regions


def test_geo_group_of_a_large_model_is_egress_bound(catalog):
    regions = gcp_v100_by_continent(catalog)
    assert {"us", "europe", "asia"} <= set(regions)
    group = GroupSpec(name="geo", peers=tuple(PeerSpec(offering=regions[k], count=2) for k in ("us", "europe", "asia")))
    profile = v100(iteration_s=0.05, parameters=500_000_000, batches_per_epoch=5000)  # TBS 8192 < N_train
    result = plan([profile], catalog, Objective(kind="cheapest"),
                  options=options(groups=(group,), target_batch_size=8192, hivemind=False, node_counts=(2,)))
    row = result.plans[result.plans["offering_id"] == "hivemind/geo"].iloc[0]
    assert row["network_usd_per_hour"] > row["price_per_hour"]
    assert "egress-bound" in row["why"]


def test_memory_reason(catalog):
    # the job needs 20 GiB on the device: no 16 GiB V100 holds it, in any group
    profiles = [cpu_here(), v100(iteration_s=0.02, peak_device_bytes=20 * 2**30)]
    result = plan(profiles, catalog, Objective(kind="fastest"), options=options(node_counts=(2,)))
    v100_groups = result.plans[(result.plans["accelerator"] == "V100") & (result.plans["parallelism"].astype(str) != "")
                               & (result.plans["accelerator_memory_gib"] < 20)]
    assert len(v100_groups) and not v100_groups["feasible"].any()
    assert v100_groups["why"].astype(str).str.contains("excluded by model-fit").all()


def test_user_groups_and_cli_errors(catalog, tmp_path):
    bad = tmp_path / "groups.yaml"
    bad.write_text(yaml.safe_dump([{"name": "g", "peers": [{"offering": "no/such/offering", "count": 2}]}]))
    with pytest.raises(TrainwiseError, match="no offering"):
        plan([v100(iteration_s=0.02)], catalog, options=PlanOptions(this_host=HERE,
                                                                   distributed=options_from_cli(groups_path=bad)))
    with pytest.raises(TrainwiseError, match="--nodes must be"):
        options_from_cli(nodes=[1])
    bad.write_text(yaml.safe_dump([{"name": "g", "peers": [{"offering": "local", "continent": "mars"}]}]))
    with pytest.raises(TrainwiseError, match="group g: continent 'mars' is not one of us, eu"):
        options_from_cli(groups_path=bad)
    # a continent the network model does not know placed this machine nowhere: every hybrid row vanished
    assert options_from_cli(local_continent=" EU ").local_continent == "eu"
    assert options_from_cli(local_continent="sa").local_continent == "sa"  # sa-east-1 etc. have spot GPUs
    with pytest.raises(TrainwiseError, match=r"--local-continent mars: no such continent: use one of us, eu, asia, oce"):
        options_from_cli(local_continent="mars")
    with pytest.raises(TrainwiseError, match=r"--local-continent asai: .*did you mean asia\?"):
        options_from_cli(local_continent="asai")


def test_plan_cli_distributed(tmp_path, capsys):
    path = tmp_path / "v100.json"
    v100(iteration_s=2.0, batches_per_epoch=5000).save(path)
    report = tmp_path / "report"
    code = main(["plan", "--profile", str(path), "--distributed", "--node-counts", "2", "--objective", "fastest",
                 "--cloud", "lambda", "--report", str(report), "--target-batch-size", "4096", "--out-dir", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    payload = json.loads((report / "plan.json").read_text())
    plans = pd.read_csv(report / "plans.csv.gz")
    rows = plans[plans["parallelism"].notna()]
    assert len(rows) and rows["why"].notna().all() and "granularity" in plans.columns
    assert any("Hivemind rows: TBS 4096" in a for a in payload["assumptions"])
    code = main(["plan", "--profile", str(path), "--single-machine", "--network", str(tmp_path / "x.json")])
    assert code == 2 and "drop --single-machine" in capsys.readouterr().err
    # --node-counts was the one distributed option --single-machine dropped without a word
    code = main(["plan", "--profile", str(path), "--single-machine", "--node-counts", "2,16"])
    assert code == 2 and "--node-counts" in (err := capsys.readouterr().err) and "drop --single-machine" in err
    # and a malformed list's example is a node count, not the epoch options' 5,10,20
    code = main(["plan", "--profile", str(path), "--node-counts", "2,x"])
    assert code == 2 and "e.g. 2,4,8" in capsys.readouterr().err


def test_seed_replay_hivemind_beats_synchronous_ddp_across_nodes():
    """Seed 003's point on the seed-2021 catalog: a ConvNeXt-Large-sized job measured on one T4
    (80 samples/s), TBS 32K — Hivemind over 8 spot T4 VMs is several times faster than one T4, while
    synchronous DDP over the same 8 VMs all-reduces 0.8 GB of fp32 gradients every step and is
    communication-bound."""
    # 8 × the per-T4 batch 32 as the job's global batch: DDP over 8 VMs runs 32 per T4, as the seed's peers
    t4 = synthetic_profile(host="t4box", device_name="Tesla T4", workload="convnext", iteration_s=3.2, batch_size=256,
                           batches_per_epoch=5_000, parameters=197_800_000)
    result = plan([t4], load_catalog("seed-2021"), Objective(kind="fastest"),
                  options=PlanOptions(this_host=HERE, distributed=DistributedOptions(target_batch_size=32768,
                                                                                     node_counts=(8,))))
    plans = result.plans[(result.plans["epochs"] == 20) & (result.plans["market"] == "spot")]
    kind = plans["parallelism"].astype(str)
    hivemind = plans[kind == "hivemind"].sort_values("wall_s").iloc[0]
    ddp = plans[kind == "ddp-multi-node"].sort_values("wall_s").iloc[0]
    single = plans[kind == ""].sort_values("wall_s").iloc[0]
    assert hivemind["wall_s"] < ddp["wall_s"] < single["wall_s"]
    assert single["wall_s"] / hivemind["wall_s"] > 3
    assert hivemind["granularity"] > 1 and ddp["granularity"] < 1
    assert "communication-bound" in ddp["why"] and "communication-bound" not in hivemind["why"]


def test_parameter_averaging_is_counted_in_a_hivemind_groups_egress_when_asked(catalog):
    regions = gcp_v100_by_continent(catalog)
    group = GroupSpec(name="geo", peers=tuple(PeerSpec(offering=regions[k], count=1) for k in ("us", "europe")))
    profile = v100(iteration_s=0.05, parameters=100_000_000, batches_per_epoch=5000)

    def geo_row(**kw):
        result = plan([profile], catalog, Objective(kind="cheapest"),
                      options=options(groups=(group,), target_batch_size=8192, hivemind=False, node_counts=(2,), **kw))
        row = result.plans[result.plans["offering_id"] == "hivemind/geo"].iloc[0]
        return row, result.assumptions

    gradients_only, assumptions = geo_row()
    every_epoch, every_assumptions = geo_row(hivemind_average_state_every=1)
    # hivemind's default doubles the averaging traffic, so its egress; the time is the same
    assert every_epoch["network_usd_per_hour"] == pytest.approx(2 * gradients_only["network_usd_per_hour"])
    assert every_epoch["training_s"] == pytest.approx(gradients_only["training_s"])
    assert any("gradient rounds only" in a for a in assumptions)
    assert any("parameter averaging every 1 epoch" in a for a in every_assumptions)
    assert options_from_cli(average_state_every=10).hivemind_average_state_every == 10
    with pytest.raises(TrainwiseError, match="hivemind_average_state_every"):
        options_from_cli(average_state_every=0)


def test_groups_split_the_global_batch_and_prune_what_cannot(catalog):
    """Scale-out keeps the job's global batch (strong scaling): DDP splits it over the workers, Hivemind
    rounds hold it; groups whose share per device falls below the floor are not ranked, and counted."""
    from trainwise.plan.feasibility import global_batch_sizes
    from trainwise.plan.scaling import REASON_FLOOR

    profiles = [v100(iteration_s=2.0, batches_per_epoch=40, batch_size=32)]
    result = plan(profiles, catalog, Objective(kind="fastest"), options=options())
    assert set(global_batch_sizes(result.ranked).tolist()) == {32.0}
    assert result.primary["workers"].max() <= 4  # 32 / 4 = 8 per worker, the floor
    assert result.pruned.get(REASON_FLOOR, 0) > 0  # the 8-machine groups, the 8-GPU machines
    assert not any("global batch of" in flag for flag in result.flags)
    hivemind = result.ranked[result.ranked["parallelism"].astype(str) == "hivemind"]
    assert len(hivemind) and (global_batch_sizes(hivemind) == 32).all()
    # a cap below the job's batch excludes every plan and names itself
    with pytest.raises(TrainwiseError, match="--max-global-batch 1 excluded"):
        plan(profiles, catalog, Objective(kind="fastest"), Constraints(max_global_batch=1), options=options())
