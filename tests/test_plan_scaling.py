"""Plans keep the user's global batch: scale-out splits it over the devices; a split below the
per-device floor, or one that does not divide, is not ranked, and the plan says how many and why.
Provisioning comes per cloud and kind of machine; fixed costs are kept apart from training."""

from __future__ import annotations

import io

import numpy as np
import pytest
from rich.console import Console

from trainwise.catalog import load_catalog
from trainwise.plan import Objective, PlanOptions, plan
from trainwise.plan.distributed import DistributedOptions, single_machine_options
from trainwise.plan.scaling import (FULL_SIZE_NOTE, MIN_PER_DEVICE_BATCH, REASON_FLOOR, REASON_INDIVISIBLE, REASON_SLICE,
                                    job_global_batch, rebatch, split_batch)
from trainwise.plan.synthetic import synthetic_profile
from trainwise.predict.characterise import characterise_named

IMAGENET_TRAIN = 1_281_167


def _imagenet_profile(model: str, batch: int):
    profile = synthetic_profile(batch_size=batch, batches_per_epoch=-(-IMAGENET_TRAIN // batch), host="elsewhere",
                                workload=f"{model}-imagenet", iteration_s=0.5)
    return profile.model_copy(update={"characterisation": characterise_named(model, per_device_batch=batch)})


def test_split_batch_keeps_the_global_batch_or_says_why_not():
    assert split_batch(256, 1) == (256, "")
    assert split_batch(256, 8) == (32, "")
    assert split_batch(256, 3) == (None, REASON_INDIVISIBLE)
    assert split_batch(256, 64) == (None, REASON_FLOOR)  # 4 per device
    assert split_batch(16, 6144) == (None, REASON_FLOOR)
    assert split_batch(4, 1) == (4, "")  # one device runs the job's batch whatever it is


def test_rebatch_scales_the_batch_sized_work_only():
    char = characterise_named("resnet18", per_device_batch=32)
    half = rebatch(char, 16)
    assert half.per_device_batch == 16
    forward = lambda c: sum(r.total_flops for r in c.records if r.phase == "forward")  # noqa: E731
    optimizer = lambda c: sum(r.total_flops for r in c.records if r.phase == "optimizer")  # noqa: E731
    assert forward(half) == pytest.approx(forward(char) / 2)
    assert optimizer(half) == pytest.approx(optimizer(char))
    assert half.parameter_bytes == char.parameter_bytes and half.activation_bytes < char.activation_bytes
    assert rebatch(char, 32) is char


@pytest.fixture(scope="module")
def pod_case():
    """ResNet-18 on ImageNet at the batch it was profiled with, 16, ranked for the fastest plan: the
    planner used to keep 16 per chip and pick a 6,144-chip TPU-v5p pod (global batch 98,304)."""
    profile = _imagenet_profile("resnet18", 16)
    return plan([profile], load_catalog(), Objective(kind="fastest"), epoch_options=[90],
                options=PlanOptions(this_host="here", distributed=single_machine_options()))


def test_tpu_pod_is_pruned_with_the_reason(pod_case):
    ranked = pod_case.primary
    assert not ((ranked["accelerator"].astype(str) == "TPU-v5p") & (ranked["accelerator_count"] >= 6144)).any()
    assert ranked["accelerator_count"].max() <= 16 // MIN_PER_DEVICE_BATCH
    assert pod_case.pruned.get(REASON_FLOOR, 0) > 1000  # the TPU slices and the larger GPU machines
    from trainwise.report.terminal import print_answer

    buffer = io.StringIO()
    print_answer(Console(file=buffer, width=80), pod_case)
    text = " ".join(buffer.getvalue().split())
    assert "not ranked" in text and "per-device batch below 8" in text and "global batch 16" in text


def test_no_ranked_plan_changes_the_global_batch():
    profile = _imagenet_profile("resnet50", 256)
    result = plan([profile], load_catalog(), Objective(kind="fastest"), epoch_options=[90],
                  options=PlanOptions(this_host="here", distributed=DistributedOptions()))
    from trainwise.plan.feasibility import global_batch_sizes

    assert set(global_batch_sizes(result.ranked).tolist()) == {256.0}
    assert result.primary["accelerator_count"].max() > 1  # scale-out is still ranked, at 256 in all
    best = result.primary.iloc[0]
    assert best["accelerator_count"] <= 256 // MIN_PER_DEVICE_BATCH
    groups = result.primary[result.primary["parallelism"].astype(str) != ""]
    assert len(groups) and (groups["workers"] <= 256 // MIN_PER_DEVICE_BATCH).all()


def test_provisioning_depends_on_the_cloud_and_the_machine(pod_case):
    rows = pod_case.plans
    by_cloud = rows.groupby(rows["cloud"].astype(str))["provisioning_s"].median()
    assert by_cloud["azure"] > by_cloud["gcp"] and by_cloud["aws"] != by_cloud["azure"]
    sources = set(rows["provisioning_source"].astype(str))
    assert any("Mao & Humphrey" in s for s in sources) and any("Erben" in s for s in sources)
    assert any("provisioning of a cloud machine, per cloud" in a for a in pod_case.assumptions)


def test_fixed_costs_are_apart_from_training(pod_case):
    rows = pod_case.primary
    cloud = rows[rows["provisioning_s"] > 0]
    expected = cloud["provisioning_s"] / 3600 * cloud["price_per_hour"]
    assert np.allclose(cloud["fixed_cost"], np.minimum(expected + cloud["egress_cost"] + cloud["storage_cost"],
                                                       cloud["total_cost"]))
    assert (cloud["fixed_cost"] < cloud["total_cost"]).all()


def test_a_slice_profile_plans_the_full_size_job():
    from trainwise.plan.same_machine import with_full_size_characterisation
    from trainwise.workloads import get_workload

    spec = get_workload("resnet50_imagenet")
    sliced = synthetic_profile(batch_size=4, batches_per_epoch=-(-IMAGENET_TRAIN // 4), host="here",
                               workload=spec.name, iteration_s=1.5)
    profile = with_full_size_characterisation(sliced, spec)
    assert job_global_batch(profile) == 256 and job_global_batch(sliced) == 4
    assert any(n.startswith(FULL_SIZE_NOTE) for n in profile.characterisation.notes)
    assert any(n.startswith("profiled on a slice") for n in profile.notes)
    result = plan([profile], load_catalog(), Objective(kind="cheapest"), epoch_options=[90],
                  options=PlanOptions(this_host="here"))
    best = result.primary.iloc[0]
    assert best["wall_s"] > 3600 and best["total_cost"] > 10  # hours and dollars: a real job
    # this machine measured only the slice (batch 4): it is not ranked for the batch-256 job
    assert not (result.primary["offering_id"].astype(str) == "local/this-machine").any()
    assert result.pruned.get(REASON_SLICE, 0) >= 1
    assert any("measured a slice here" in a for a in result.assumptions)


def test_the_default_jobs_slice_command_is_valid():
    """`trainwise plan` with no profile profiles the default job on a slice: the slice's batch must be
    one the script accepts with the full training set (its last batch not a single sample)."""
    from trainwise.plan.same_machine import SLICE_PROFILES
    from trainwise.workloads import command_for, get_workload

    for name, sliced in SLICE_PROFILES.items():
        spec = get_workload(name)
        assert spec.default_train_samples % sliced["batch_size"] != 1
        command = command_for(name, batch_size=sliced["batch_size"])
        assert command[command.index("--batch-size") + 1] == str(sliced["batch_size"])
        assert command[command.index("--train-samples") + 1] == str(spec.default_train_samples)
    from trainwise.cli.plan import RANKING
    from trainwise.plan.request import PlanRequest

    assert next(p for p in RANKING if p.name == "workload").default == "resnet50_imagenet"
    assert PlanRequest().workload == "resnet50_imagenet"


def test_a_slice_profiles_plan_is_compared_with_its_best_plan_not_an_unranked_machine():
    from trainwise.plan.same_machine import with_full_size_characterisation
    from trainwise.workloads import get_workload

    spec = get_workload("resnet50_imagenet")
    sliced = synthetic_profile(batch_size=3, batches_per_epoch=-(-IMAGENET_TRAIN // 3), host="here",
                               workload=spec.name, iteration_s=1.5)
    result = plan([with_full_size_characterisation(sliced, spec)], load_catalog(), Objective(kind="cheapest"),
                  epoch_options=[90], options=PlanOptions(this_host="here", distributed=single_machine_options()))
    assert "not predicted" not in str(result.reference)
    assert result.primary.iloc[0]["cost_efficiency"] == pytest.approx(0.0)
