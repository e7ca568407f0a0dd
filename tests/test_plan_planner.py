"""plan(): provenance, objectives, constraints and their errors, robustness flags, purity."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from trainwise.catalog import load_catalog
from trainwise.errors import TrainwiseError
from trainwise.plan import Constraints, InfeasiblePlanError, Objective, PlanOptions, plan
from trainwise.plan.inputs import LOCAL_OFFERING_ID
from trainwise.plan.objectives import make_objective, parse_duration, parse_money, parse_weights
from trainwise.plan.planner import check_inputs
from trainwise.catalog.names import resolve_device_name as resolve_device
from trainwise.plan.runtime import NOT_PREDICTED
from trainwise.plan.synthetic import synthetic_profile

HERE = "this-host"
NO_BOOT = PlanOptions(this_host=HERE, provisioning_s=(0.0, 0.0, 0.0))


@pytest.fixture(scope="module")
def catalog():
    return load_catalog("packaged")


@pytest.fixture(scope="module")
def seed():
    return load_catalog("seed-2021")


def cpu_here(**kw):
    return synthetic_profile(host=HERE, iteration_s=kw.pop("iteration_s", 0.2), **kw)


def v100_elsewhere(**kw):
    return synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=kw.pop("iteration_s", 0.02), **kw)


def test_resolve_device_names(catalog):
    assert resolve_device("Tesla V100-SXM2-16GB", catalog) == "V100"
    assert resolve_device("NVIDIA A100-SXM4-80GB", catalog) == "A100-80GB"
    assert resolve_device("NVIDIA H100 80GB HBM3", catalog) == "H100"
    assert resolve_device("NVIDIA A10G", catalog) == "A10G"
    assert resolve_device("Tesla T4", catalog) == "T4"
    assert resolve_device(None, catalog) is None
    assert resolve_device("Imaginary Accelerator 9000", catalog) is None


def test_every_row_states_its_provenance(catalog):
    result = plan([cpu_here(), v100_elsewhere()], catalog, Objective(kind="cheapest"), options=PlanOptions(this_host=HERE))
    plans = result.plans
    local = plans[plans["offering_id"] == LOCAL_OFFERING_ID]
    assert len(local) == 3 and set(local["epochs"]) == {5, 10, 20}
    assert local["time_provenance"].str.startswith("measured here (this machine").all()
    assert local["price_provenance"].str.startswith("assumed").all()
    v100 = plans[plans["accelerator"] == "V100"]
    assert len(v100) > 0 and (v100["accelerator_count"] == 1).all()
    assert (v100["time_provenance"] == "measured on gpubox (imported) on V100").all()
    assert v100["price_provenance"].str.contains("2026-11-21 snapshot").all()
    assert set(plans["status"]) == {"predicted"}
    assert plans["time_provenance"].notna().all() and plans["price_provenance"].notna().all()
    assert (result.not_predicted["status"] == NOT_PREDICTED).all()
    assert "A100" in set(result.not_predicted["accelerator"])
    assert result.catalog_caption == catalog.caption
    assert any("assumed" in a and "workstation" in a for a in result.assumptions)
    assert len(result.inconsistencies) == 3
    assert {p["provenance"] for p in result.profiles} == {"measured here", "measured on gpubox (imported)"}


def test_costs_and_breakdown_add_up(catalog):
    options = PlanOptions(this_host=HERE, dataset_gb=10.0)
    result = plan([cpu_here(), v100_elsewhere()], catalog, Objective(kind="fastest"), options=options)
    plans = result.plans
    on_demand = plans[(plans["market"] == "on-demand") & (plans["accelerator"] == "V100")].iloc[0]
    # provisioning per cloud (trainwise.plan.provisioning): a single AWS VM, Mao & Humphrey / Erben et al.
    assert on_demand["cloud"] == "aws" and on_demand["provisioning_s"] == 180.0
    assert "Mao & Humphrey" in on_demand["provisioning_source"]
    assert on_demand["fixed_cost"] == pytest.approx((180.0 + on_demand["staging_s"]) / 3600 * on_demand["price_per_hour"]
                                                    + 0.10 + on_demand["storage_cost"])
    assert on_demand["staging_s"] == pytest.approx(10e9 / (932.2e6 / 106.51))
    assert on_demand["egress_cost"] == pytest.approx(0.10)  # 10 GB x 0.01 $/GB from object storage
    assert on_demand["storage_cost"] == pytest.approx(10 * 0.005 * on_demand["wall_s"] / (30 * 86400))
    assert on_demand["preemption_loss_s"] == 0 and on_demand["expected_interruptions"] == 0
    parts = sum(on_demand[c] for c in ("provisioning_s", "staging_s", "init_s", "first_epoch_s", "steady_s", "validation_s",
                                       "preemption_loss_s"))
    assert parts == pytest.approx(on_demand["wall_s"], rel=1e-9)
    billed = math.ceil(max(on_demand["wall_s"], on_demand["min_billed_seconds"]))
    assert on_demand["compute_cost"] == pytest.approx(billed / 3600 * on_demand["price_per_hour"])
    assert on_demand["total_cost"] == pytest.approx(on_demand["compute_cost"] + 0.10 + on_demand["storage_cost"])
    assert on_demand["usd_per_epoch"] == pytest.approx(on_demand["total_cost"] / on_demand["epochs"])
    samples = on_demand["epochs"] * 100 * 32
    assert on_demand["usd_per_1m_samples"] == pytest.approx(on_demand["total_cost"] / samples * 1e6)
    assert on_demand["low_s"] <= on_demand["wall_s"] <= on_demand["high_s"]
    assert on_demand["cost_low"] <= on_demand["total_cost"] <= on_demand["cost_high"]
    local = plans[(plans["offering_id"] == LOCAL_OFFERING_ID)].iloc[0]
    assert local["provisioning_s"] == 0 and local["staging_s"] == 0 and local["egress_cost"] == 0
    spot = plans[plans["market"] == "spot"]
    assert (spot["preemption_loss_s"] > 0).all() and (spot["expected_interruptions"] > 0).all()
    assert np.isfinite(spot["checkpoint_interval_s"]).all()


def test_reference_metrics_against_this_machine(catalog):
    result = plan([cpu_here(), v100_elsewhere()], catalog, Objective(kind="cheapest"), options=NO_BOOT)
    plans = result.plans
    assert result.reference == LOCAL_OFFERING_ID
    for epochs in (5, 10, 20):
        at = plans[plans["epochs"] == epochs]
        ref = at[at["offering_id"] == LOCAL_OFFERING_ID].iloc[0]
        row = at[at["accelerator"] == "V100"].iloc[0]
        assert row["speedup"] == pytest.approx(ref["training_s"] / row["training_s"])
        assert row["cost_efficiency"] == pytest.approx(1 - row["total_cost"] / ref["total_cost"])
        assert row["break_even_speedup"] == pytest.approx(row["price_per_hour"] / ref["price_per_hour"])
        assert ref["speedup"] == pytest.approx(1.0) and ref["cost_efficiency"] == pytest.approx(0.0)


def test_objectives_pick_the_right_plan(catalog):
    profiles = [cpu_here(), v100_elsewhere()]
    fastest = plan(profiles, catalog, Objective(kind="fastest"), options=NO_BOOT).primary
    assert fastest.iloc[0]["wall_s"] == fastest["wall_s"].min()
    cheapest = plan(profiles, catalog, Objective(kind="cheapest"), options=NO_BOOT).primary
    assert cheapest.iloc[0]["total_cost"] == cheapest["total_cost"].min()
    # deadline: cheapest among those meeting it
    cutoff = float(fastest["wall_s"].quantile(0.5))
    deadline = plan(profiles, catalog, Objective(kind="deadline", deadline_s=cutoff), options=NO_BOOT).primary
    assert (deadline["wall_s"] <= cutoff).all()
    assert deadline.iloc[0]["total_cost"] == fastest[fastest["wall_s"] <= cutoff]["total_cost"].min()
    # budget: fastest among those within it
    budget = float(cheapest["total_cost"].quantile(0.5))
    within = plan(profiles, catalog, Objective(kind="budget", budget_usd=budget), options=NO_BOOT).primary
    assert (within["total_cost"] <= budget).all()
    assert within.iloc[0]["wall_s"] == cheapest[cheapest["total_cost"] <= budget]["wall_s"].min()


def test_weighted_objective_follows_presto(catalog):
    profiles = [cpu_here(), v100_elsewhere(jitter=0.2)]
    weights = {"time": 1.0, "cost": 2.0}
    result = plan(profiles, catalog, Objective(kind="weighted", weights=weights), options=NO_BOOT)
    at = result.primary
    t, c = at["wall_s"], at["total_cost"]
    expected = 1.0 * (1 - (t - t.min()) / (t.max() - t.min())) + 2.0 * (1 - (c - c.min()) / (c.max() - c.min()))
    assert at["score"].to_numpy() == pytest.approx(expected.to_numpy())
    assert at.iloc[0]["score"] == at["score"].max()
    assert (np.diff(at["score"].to_numpy()) <= 1e-12).all()
    time_only = plan(profiles, catalog, Objective(kind="weighted", weights={"time": 1.0}), options=NO_BOOT).primary
    assert time_only.iloc[0]["wall_s"] == time_only["wall_s"].min()


def test_spot_filter_and_exclusion_counts(catalog):
    result = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), Constraints(allow_spot=False), options=NO_BOOT)
    assert (result.ranked["market"] == "on-demand").all()
    excluded = result.plans[~result.plans["feasible"]]
    assert set(excluded["excluded_by"]) == {"spot"} and (excluded["market"] == "spot").all()
    assert result.exclusions["spot"] == int(((excluded["epochs"] == 20)).sum())


def test_cloud_region_accelerator_filters(catalog):
    result = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), Constraints(clouds=("AWS",)), options=NO_BOOT)
    assert set(result.ranked["cloud"]) == {"aws"}
    assert set(result.not_predicted["cloud"]) <= {"aws"}
    region = result.ranked.iloc[0]["region"]
    narrowed = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), Constraints(regions=(region,)), options=NO_BOOT)
    assert set(narrowed.ranked["region"]) == {region}
    by_name = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), Constraints(accelerators=("Tesla V100",)),
                   options=NO_BOOT)
    assert set(by_name.ranked["accelerator"]) == {"V100"}


@pytest.mark.parametrize("constraints, message", [
    (Constraints(clouds=("awz",)), "did you mean aws"),
    (Constraints(regions=("us-east-9",)), "no such region"),
    (Constraints(accelerators=("V10",)), "unknown accelerator 'V10'"),
])
def test_unknown_names_are_named_with_suggestions(catalog, constraints, message):
    with pytest.raises(TrainwiseError, match=message):
        plan([v100_elsewhere()], catalog, Objective(), constraints, options=NO_BOOT)
    with pytest.raises(TrainwiseError, match=message):
        check_inputs(catalog, constraints)


def test_unknown_reference_offering(catalog):
    with pytest.raises(TrainwiseError, match="unknown reference offering 'aws/use1-az1/p3.2xlarg'.*did you mean"):
        plan([v100_elsewhere()], catalog, options=PlanOptions(this_host=HERE, reference="aws/use1-az1/p3.2xlarg"))


def test_impossible_deadline_names_the_constraint_and_the_best_infeasible_option(catalog):
    profiles = [cpu_here(), v100_elsewhere()]
    fastest = plan(profiles, catalog, Objective(kind="fastest"), options=NO_BOOT).primary.iloc[0]
    with pytest.raises(InfeasiblePlanError) as info:
        plan(profiles, catalog, Objective(kind="deadline", deadline_s=1.0), Constraints(clouds=("aws",)), options=NO_BOOT)
    error = info.value
    assert error.constraint == "deadline"
    message = str(error)
    assert "--deadline" in message and "excluded" in message and "best infeasible option" in message
    assert "relax the deadline" in message
    assert error.best_infeasible["wall_s"] > 1.0
    # the best infeasible option under a deadline is the fastest one the earlier filters let through
    aws = plan(profiles, catalog, Objective(kind="fastest"), Constraints(clouds=("aws",)), options=NO_BOOT).primary.iloc[0]
    assert error.best_infeasible["plan_id"] == aws["plan_id"]
    assert fastest["wall_s"] <= aws["wall_s"]


def test_impossible_budget_names_the_constraint(catalog):
    with pytest.raises(InfeasiblePlanError, match=r"--budget \$1e-06.*best infeasible option .*raise the budget") as info:
        plan([v100_elsewhere()], catalog, Objective(kind="budget", budget_usd=1e-6), options=NO_BOOT)
    assert info.value.constraint == "budget"
    # The option named is the cheapest (what the smallest raise of the budget admits), even though the
    # budget objective ranks by time, and the suggested budget, rounded up to the cent, does admit it.
    cheapest = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), options=NO_BOOT).primary.iloc[0]
    assert info.value.best_infeasible["plan_id"] == cheapest["plan_id"]
    suggested = float(str(info.value).rsplit("$", 1)[1])
    assert suggested >= cheapest["total_cost"]
    assert plan([v100_elsewhere()], catalog, Objective(kind="budget", budget_usd=suggested), options=NO_BOOT).best is not None


def test_min_gpu_memory_excluding_everything(catalog):
    with pytest.raises(InfeasiblePlanError, match="--min-gpu-memory 40") as info:
        plan([cpu_here(), v100_elsewhere()], catalog, Objective(), Constraints(min_gpu_memory_gib=40), options=NO_BOOT)
    assert info.value.constraint == "min-gpu-memory"


def test_only_unpredicted_offerings_left(catalog):
    with pytest.raises(InfeasiblePlanError, match="--accelerator A100 excluded.*best infeasible.*not predicted.*--profile"):
        plan([v100_elsewhere()], catalog, Objective(), Constraints(accelerators=("A100",)), options=NO_BOOT)
    with pytest.raises(InfeasiblePlanError, match="no offering could be predicted.*Imaginary"):
        plan([synthetic_profile(host="x", device_name="Imaginary GPU")], catalog, Objective(), options=NO_BOOT)


def test_bad_objectives_and_parsers():
    with pytest.raises(TrainwiseError, match="did you mean cheapest"):
        make_objective("cheapst")
    with pytest.raises(TrainwiseError, match="needs a deadline"):
        make_objective("deadline")
    with pytest.raises(TrainwiseError, match="unknown weight"):
        make_objective("weighted", weights={"speed": 1.0})
    assert parse_duration("2h") == 7200 and parse_duration("1h30m") == 5400 and parse_duration("45min") == 2700
    assert parse_duration("3600") == 3600
    with pytest.raises(TrainwiseError, match="cannot read the duration"):
        parse_duration("soon")
    for not_positive in ("-2h", "0s", "0"):
        with pytest.raises(TrainwiseError, match="duration must be positive"):
            parse_duration(not_positive)
    assert parse_money("$25.50") == 25.5
    for bad_money in ("-3", "nan", "inf"):
        with pytest.raises(TrainwiseError, match="positive amount"):
            parse_money(bad_money)
    for bad_weight in ("time=nan,cost=1", "time=inf", "cost=-1"):
        with pytest.raises(TrainwiseError, match="finite number >= 0"):
            parse_weights(bad_weight)
    with pytest.raises(TrainwiseError, match="finite numbers >= 0"):
        make_objective("weighted", weights={"time": float("nan"), "cost": 1.0})
    assert parse_weights("time=1, cost=2") == {"time": 1.0, "cost": 2.0}
    with pytest.raises(TrainwiseError, match="NAME=VALUE"):
        parse_weights("fast")


def test_flip_across_epoch_options_is_flagged(catalog):
    """Malta: a slow-starting fast machine wins only for long runs."""
    quick_start = synthetic_profile(host="a", device_name="Tesla V100-SXM2-16GB", init_s=1.0, iteration_s=0.05)
    slow_start = synthetic_profile(host="b", device_name="Tesla T4", init_s=400.0, iteration_s=0.005)
    result = plan([quick_start, slow_start], catalog, Objective(kind="fastest"), Constraints(allow_spot=False),
                  epoch_options=(5, 200), options=NO_BOOT)
    best = result.best_per_epochs().set_index("epochs")["accelerator"].to_dict()
    assert best == {5: "V100", 200: "T4"}
    assert any("changes with the epoch count" in flag for flag in result.flags)


def test_overlapping_band_is_flagged(catalog):
    noisy = v100_elsewhere(jitter=0.6, iterations=12)
    result = plan([noisy], catalog, Objective(kind="fastest"), Constraints(allow_spot=False), options=NO_BOOT)
    assert any("overlap within the time uncertainty band" in flag for flag in result.flags)


def test_local_offering_from_a_user_file(tmp_path, catalog):
    path = tmp_path / "lab.toml"
    path.write_text('[[offering]]\nname = "lab-node"\nkind = "on_premise"\ncapex_usd = 25000\nlifetime_years = 1\n')
    from trainwise.catalog import load_user_offerings

    result = plan([cpu_here()], catalog, Objective(), local_offering=load_user_offerings(path), options=NO_BOOT)
    row = result.primary.iloc[0]
    assert row["offering_id"] == "on-premise/-/lab-node"
    assert row["price_per_hour"] == 2.85
    assert row["price_provenance"].startswith("user file")
    assert row["time_provenance"].startswith("measured here")


def test_a_cloud_priced_local_offering_is_already_up_and_a_file_of_several_is_refused(tmp_path, catalog):
    from trainwise.catalog import load_user_offerings

    # the VM one is on, priced as cloud: no provisioning or staging for it (it is this machine)
    vm = tmp_path / "vm.toml"
    vm.write_text('[[offering]]\nname = "my-vm"\nprice_per_hour = 1.0\n')
    booting = PlanOptions(this_host=HERE, dataset_gb=10.0)
    result = plan([cpu_here()], catalog, Objective(), local_offering=load_user_offerings(vm), options=booting)
    row = result.plans[result.plans["offering_id"].astype(str).str.endswith("my-vm")].iloc[0]
    assert row["provisioning_s"] == 0 and row["staging_s"] == 0
    assert (result.plans[result.plans["cloud"].astype(str) == "aws"]["provisioning_s"] > 0).all()
    several = tmp_path / "lab.toml"
    several.write_text('[[offering]]\nname = "a"\nprice_per_hour = 1\n[[offering]]\nname = "b"\nprice_per_hour = 2\n')
    with pytest.raises(TrainwiseError, match="has 2 offerings \\(a, b\\).*keep only the one"):
        plan([cpu_here()], catalog, Objective(), local_offering=load_user_offerings(several), options=NO_BOOT)


def test_per_hour_billing_in_a_plan(seed):
    k80 = synthetic_profile(host="old", device_name="Tesla K80", iteration_s=0.01)
    result = plan([k80], seed, Objective(kind="cheapest"), Constraints(clouds=("azure",)), options=NO_BOOT)
    row = result.primary.iloc[0]
    assert row["offering_id"].endswith("Standard_NC6") and row["billing"] == "per_hour"
    assert row["wall_s"] < 3600 and row["compute_cost"] == pytest.approx(0.90)


def test_plan_is_pure(catalog):
    profiles = [cpu_here(), v100_elsewhere(jitter=0.1)]
    before_offerings = catalog.offerings.copy(deep=True)
    before_profiles = [p.model_dump() for p in profiles]
    objective, constraints = Objective(kind="weighted"), Constraints(clouds=("aws", "gcp"))
    first = plan(profiles, catalog, objective, constraints, options=NO_BOOT)
    second = plan(profiles, catalog, copy.deepcopy(objective), copy.deepcopy(constraints), options=NO_BOOT)
    pd.testing.assert_frame_equal(first.plans, second.plans)
    pd.testing.assert_frame_equal(first.not_predicted, second.not_predicted)
    assert first.flags == second.flags and first.assumptions == second.assumptions
    pd.testing.assert_frame_equal(catalog.offerings, before_offerings)
    assert [p.model_dump() for p in profiles] == before_profiles


def test_no_profiles_is_an_error(catalog):
    with pytest.raises(TrainwiseError, match="at least one profile"):
        plan([], catalog)


def test_pareto_members_are_not_dominated(catalog):
    result = plan([cpu_here(), v100_elsewhere(jitter=0.2)], catalog, Objective(), options=PlanOptions(this_host=HERE))
    for epochs in result.epoch_options:
        at = result.plans[(result.plans["epochs"] == epochs) & result.plans["feasible"]]
        front = at[at["pareto"]]
        assert len(front) >= 1
        for row in front.itertuples():
            better = at[(at["wall_s"] <= row.wall_s) & (at["total_cost"] <= row.total_cost)
                        & ((at["wall_s"] < row.wall_s) | (at["total_cost"] < row.total_cost))]
            assert better.empty
        best = result.best_per_epochs().set_index("epochs").loc[epochs]
        assert bool(best["pareto"])  # the cheapest plan is always on the front


def test_billing_override_rounds_every_offering_up_to_the_hour(catalog):
    options = PlanOptions(this_host=HERE, provisioning_s=(0.0, 0.0, 0.0), billing="per_hour")
    result = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), options=options)
    plans = result.plans
    assert (plans["wall_s"] < 3600).all()
    assert plans["compute_cost"].to_numpy() == pytest.approx(plans["price_per_hour"].to_numpy())
    assert any("per_hour granularity" in a and "user override" in a for a in result.assumptions)
    minimum = plan([v100_elsewhere()], catalog, Objective(), options=options.model_copy(update={"billing": None,
                                                                                                  "min_billed_seconds": 1800}))
    assert (minimum.plans["compute_cost"] >= minimum.plans["price_per_hour"] * 0.5 - 1e-12).all()


def test_reference_defaults_to_the_best_plan_without_this_machine(catalog):
    result = plan([v100_elsewhere()], catalog, Objective(kind="cheapest"), options=NO_BOOT)
    best = result.primary.iloc[0]
    assert result.reference.startswith(best["offering_id"])
    assert best["speedup"] == pytest.approx(1.0) and best["cost_efficiency"] == pytest.approx(0.0)
    explicit = plan([v100_elsewhere()], catalog, options=NO_BOOT.model_copy(update={"reference": best["offering_id"]}))
    assert explicit.reference == best["offering_id"]


def test_resolve_device_names_reads_board_memory_and_never_takes_a_variant_for_its_base(catalog):
    assert resolve_device("NVIDIA GH200 480GB", catalog) == "GH200"
    assert resolve_device("Tesla P100-PCIE-16GB", catalog) == "P100"
    assert resolve_device("NVIDIA A100 80GB PCIe", catalog) == "A100-80GB-PCIe"  # not the 40 GB PCIe card
    assert resolve_device("NVIDIA H100 NVL", catalog) is None  # not an H100 SXM
