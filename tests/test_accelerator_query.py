"""Whether a profiled command would use an accelerator (trainwise.agent.accelerator_queries): one that never asks
torch for one runs on the CPU of any machine, so no GPU plan may be ranked for it (PyTorch's REINFORCE example,
dcgan without --accel); trainwise's reference workloads get `--device cuda` in a saved GPU plan."""

from __future__ import annotations

import socket
import textwrap

import pytest
import torch

from trainwise.agent.accelerator_queries import AcceleratorQueries
from trainwise.agent.trace.characterisation import characterise_model
from trainwise.catalog import load_catalog
from trainwise.core.profile import AcceleratorQuery
from trainwise.launch.plan_document import on_the_gpu
from trainwise.plan import InfeasiblePlanError, Objective, PlanOptions, plan
from trainwise.plan.runtime import REASON_CPU_ONLY, REASON_NO_XLA, xla_kind
from trainwise.plan.synthetic import synthetic_profile
from trainwise.profile.runner import ProfileOptions, run_profile


def test_the_first_query_from_outside_torch_is_reported_once_and_the_wrappers_come_off():
    original = torch.cuda.is_available
    seen: list[tuple[str, str]] = []
    queries = AcceleratorQueries(lambda query, caller: seen.append((query, caller)))
    queries.install(torch)
    try:
        assert torch.cuda.is_available is not original
        # torch's own calls do not count: a DataLoader pinning memory asks from inside torch
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(4, 2)), batch_size=2,
                                             pin_memory=True)
        with pytest.warns(UserWarning):  # torch's "no accelerator is found" for pinned memory on a CPU machine
            list(loader)
        assert seen == []
        assert torch.cuda.is_available() == original()  # what torch answers, unchanged
        assert seen and seen[0][0] == "torch.cuda.is_available"
        assert seen[0][1].startswith("test_accelerator_query.py:")
        assert torch.cuda.is_available is original  # taken off after the first
        torch.cuda.device_count()
        assert len(seen) == 1
    finally:
        queries.uninstall()
    assert torch.cuda.is_available is original


def _script(tmp_path, name: str, asks: bool) -> list[str]:
    path = tmp_path / name
    device = ('device = "cuda" if torch.cuda.is_available() else "cpu"\n' if asks else 'device = "cpu"\n')
    path.write_text("import torch\n" + device + textwrap.dedent("""
        model = torch.nn.Linear(8, 2).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,))),
                                           batch_size=8, pin_memory=True)
        for epoch in range(2):
            for x, y in data:
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device)).backward()
                opt.step()
        """))
    return ["python", str(path)]


@pytest.mark.long
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_profile_says_whether_its_command_asks_for_an_accelerator(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = ProfileOptions(mode="full", characterise=False, host_noise=False)
    asks = run_profile(_script(tmp_path, "asks.py", True), options, quiet=True)
    assert asks.accelerator_query.asked and asks.accelerator_query.query == "torch.cuda.is_available"
    assert asks.accelerator_query.caller == "asks.py:2" and not asks.cpu_only_command
    silent = run_profile(_script(tmp_path, "silent.py", False), options, quiet=True)
    assert silent.accelerator_query.asked is False and silent.cpu_only_command


def _cpu_profile(asked: bool | None, host: str, query: str | None = None, xla: bool = False):
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    char = characterise_model(model, torch.randn(32, 64), None, "sgd_momentum", model_name="mlp")
    profile = synthetic_profile(host=host, iteration_s=0.05, workload="mlp")
    return profile.model_copy(update={
        "workload": None, "characterisation": char,
        "accelerator_query": None if asked is None else AcceleratorQuery(asked=asked, query=query, xla=xla)})


def _xla_rows(result, catalog) -> int:
    return sum(xla_kind(catalog, a) for a in result.plans["accelerator"].dropna().unique())


def test_no_accelerator_plan_for_a_command_that_never_asks_unless_assumed():
    catalog = load_catalog("packaged")
    here = socket.gethostname()
    asked = plan([_cpu_profile(True, here, "torch.cuda.is_available")], catalog, Objective(kind="cheapest"))
    assert (asked.plans["time_source"].astype(str) == "device model").any() and REASON_CPU_ONLY not in asked.idle
    # GPUs, yes; TPUs and Trainium only for a command that imports torch_xla
    assert asked.idle.get(REASON_NO_XLA, 0) > 100 and not _xla_rows(asked, catalog)
    xla = plan([_cpu_profile(True, here, "torch.cuda.is_available", xla=True)], catalog, Objective(kind="cheapest"))
    assert _xla_rows(xla, catalog) and not xla.idle
    silent = plan([_cpu_profile(False, here)], catalog, Objective(kind="cheapest"))
    sources = set(silent.plans["time_source"].astype(str))
    assert sources == {"this machine"}, sources
    assert silent.idle.get(REASON_CPU_ONLY, 0) > 100
    assert any("never asks torch" in flag and "--assume-accelerator" in flag for flag in silent.flags)
    assumed = plan([_cpu_profile(False, here)], catalog, Objective(kind="cheapest"),
                   options=PlanOptions(assume_accelerator=True))
    assert (assumed.plans["time_source"].astype(str) == "device model").any() and not assumed.idle
    assert _xla_rows(assumed, catalog)
    # profiles from before trainwise looked (None) keep their accelerator plans, TPUs too
    old = plan([_cpu_profile(None, here)], catalog, Objective(kind="cheapest"))
    assert (old.plans["time_source"].astype(str) == "device model").any() and _xla_rows(old, catalog)
    # taken elsewhere: no offering is left, and the error says why and what to do
    with pytest.raises(InfeasiblePlanError, match=r"never asks torch for an accelerator.*--assume-accelerator"):
        plan([_cpu_profile(False, "another-host")], catalog, Objective(kind="cheapest"))


def test_a_saved_gpu_plan_of_a_reference_workload_runs_it_on_the_gpu():
    command = ["python", "-m", "trainwise.workloads.resnet50_imagenet", "--epochs", "90"]
    moved, note = on_the_gpu(command, "A100", 1.0)
    assert moved == [*command, "--device", "cuda"] and "--device cuda" in note
    assert on_the_gpu([*command, "--device", "cuda:1"], "A100", 1.0) == ([*command, "--device", "cuda:1"], None)
    assert on_the_gpu(command, None, 0.0) == (command, None)  # this machine's CPU
    assert on_the_gpu(command, "TPU-v5e", 4.0) == (command, None)
    assert on_the_gpu(["python", "train.py"], "A100", 1.0) == (["python", "train.py"], None)  # the user's own


def test_a_compile_before_any_query_leaves_the_answer_unknown_and_the_queries_torchs_own():
    """dynamo would trace a wrapper called inside compiled code as a graph break the plain job has not: at the job's
    first compile the wrappers come off, and a job that had not asked yet is "unknown", not "CPU only"."""
    original = torch.cuda.is_available
    queries = AcceleratorQueries(lambda query, caller: None)
    queries.install(torch)
    try:
        queries.watch_compiles()
        assert torch.cuda.is_available is not original
        compiled = torch.compile(lambda x: x * 2 + 1, backend="eager")
        assert float(compiled(torch.ones(1))) == 3.0
        assert queries.gave_up and not queries.asked and torch.cuda.is_available is original
    finally:
        queries.uninstall()
