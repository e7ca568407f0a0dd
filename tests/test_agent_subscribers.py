"""The agent's subscribers fed synthetic event streams, in-process, no subprocess (milliseconds each): the profile
recorder's iterations from the torch patch's events, the stop rule, `trainwise run`'s checkpointer and SIGTERM
handling, DDP and Hivemind communication timing, and the public integration sink."""

from __future__ import annotations

from dataclasses import replace

import ast
import json
import math
import pathlib

import pytest
import torch

from trainwise.profile._iteration_log import with_iteration_rows
from trainwise.agent import stop_rule
from trainwise.agent.comm_timing import DdpCommTiming, HivemindTiming
from trainwise.agent.events import (BackwardEnd, BucketReady, BucketReduced, CheckpointSave, EventBus,
                                    HivemindAveraging, HivemindRound, IterationBoundary, IterationEnd, LoaderBuilt,
                                    ModelForward, ModuleBuilt, OptimizerBuilding, OptimizerBuilt, OptimizerStep, ProcessExit,
                                    SigtermReceived, TorchImported, TrainModeSet)
from trainwise.agent.sink import IntegrationSink, batch_length
from trainwise.agent.torch_patch import TorchPatch
from trainwise.errors import TrainwiseError
from trainwise.profile import _child, _torch_hooks
from trainwise.profile.runner import ProfileOptions
from trainwise.run._stop_rule import SIGTERM_EXIT, CheckpointAndStop

INTEGRATIONS = pathlib.Path(__file__).resolve().parents[1] / "src" / "trainwise" / "integrations"


# ---- the profile recorder, subscribed to a torch patch's bus (the patch itself not installed) ----------------
@pytest.fixture
def subscribed(tmp_path):
    patch = TorchPatch()
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full", "characterise": False},
                               bus=patch.bus)
    _torch_hooks.subscribe(recorder, patch)
    return recorder, patch.bus


def test_the_recorder_ends_an_iteration_at_each_optimizer_step_event(subscribed):
    recorder, bus = subscribed
    model = torch.nn.Linear(4, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    bus.emit(TorchImported(0.5))
    bus.emit(ModuleBuilt(0.6, model))
    bus.emit(LoaderBuilt(0.7))
    bus.emit(OptimizerBuilding(0.8))
    bus.emit(OptimizerBuilt(0.9, id(optimizer), optimizer))
    assert [recorder.marks[name] for name in ("torch_imported", "first_module_init", "first_dataloader_init",
                                              "first_optimizer_init", "first_optimizer_ready")] == [0.5, 0.6, 0.7, 0.8, 0.9]
    for _ in range(4):
        bus.emit(OptimizerStep(recorder.now(), id(optimizer), optimizer))
    assert len(recorder.iterations) == 4
    assert recorder.model["parameters"] == 4 * 2 + 2 and recorder.model["optimizer"] == "SGD"
    starts = [it["start_s"] for it in recorder.iterations[1:]]
    ends = [it["end_s"] for it in recorder.iterations[:-1]]
    assert all(start >= end for start, end in zip(starts, ends))  # iterations follow one another


def test_a_grad_scaler_step_is_one_iteration_and_its_inner_step_is_not_counted(subscribed):
    recorder, bus = subscribed
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    bus.emit(OptimizerStep(1.0, id(optimizer), optimizer, in_scaler_step=True))
    assert recorder.iterations == []
    bus.emit(OptimizerStep(1.1, id(optimizer), optimizer, via_scaler=True))
    assert len(recorder.iterations) == 1


def test_a_second_optimizers_step_belongs_to_the_primarys_iteration(subscribed):
    recorder, bus = subscribed
    generator, discriminator = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
    opt_g = torch.optim.Adam(generator.parameters())
    opt_d = torch.optim.Adam(discriminator.parameters())
    for _ in range(3):
        bus.emit(OptimizerStep(recorder.now(), id(opt_d), opt_d))
        bus.emit(OptimizerStep(recorder.now(), id(opt_g), opt_g))
    assert len(recorder.iterations) == 3
    assert recorder.model["parameters"] == (2 * 2 + 2) + (2 + 1)  # both models' parameters


def test_without_an_optimizer_backward_passes_reaching_parameters_are_iterations(subscribed):
    recorder, bus = subscribed
    bus.emit(BackwardEnd(1.0, reaches_parameters=False))  # a backward through inputs only
    assert recorder.iterations == []
    for k in range(3):
        bus.emit(BackwardEnd(2.0 + k, reaches_parameters=True))
    assert len(recorder.iterations) == 3
    assert any("no optimizer step seen" in note for note in recorder.notes)


def test_eval_mode_follows_the_outermost_train_call(subscribed):
    recorder, bus = subscribed
    bus.emit(TrainModeSet(1.0, training=False))
    assert recorder.eval_mode is True
    bus.emit(TrainModeSet(2.0, training=True))
    assert recorder.eval_mode is False


def test_a_paused_recorder_counts_no_step(subscribed):
    recorder, bus = subscribed
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    recorder.paused = True  # `trainwise run` replaying a batch of an epoch finished before its checkpoint
    bus.emit(OptimizerStep(1.0, id(optimizer), optimizer))
    recorder.paused = False
    bus.emit(OptimizerStep(2.0, id(optimizer), optimizer))
    assert len(recorder.iterations) == 1


def test_a_sigterm_exit_event_makes_the_recorder_write_what_ran(subscribed, tmp_path):
    # `trainwise run` ending on SIGTERM emits ProcessExit: the recorder writes its record, not run calling into it
    recorder, bus = subscribed
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    bus.emit(OptimizerStep(1.0, id(optimizer), optimizer))
    bus.emit(ProcessExit(2.0, status="normal"))
    assert not (tmp_path / "raw.json").exists()
    bus.emit(ProcessExit(2.0, status="sigterm"))
    raw = with_iteration_rows(json.loads((tmp_path / "raw.json").read_text()))
    assert raw["stop_reason"] == "sigterm" and len(raw["iterations"]) == 1


def test_torch_global_module_hooks_are_registered_by_the_agents_patch():
    # the one module that patches torch registers the recorder's first-iteration forward hooks too
    patch = TorchPatch()
    patch.torch = torch
    calls = []
    handles = patch.module_forward_hooks(pre=lambda module, args: calls.append("pre"),
                                         post=lambda module, args, kwargs, output: calls.append(sorted(kwargs)))
    torch.nn.Linear(2, 1)(input=torch.ones(1, 2))
    for handle in handles:
        handle.remove()
    torch.nn.Linear(2, 1)(torch.ones(1, 2))
    assert calls == ["pre", ["input"]]


# ---- the stop rule ---------------------------------------------------------------------------------------
def test_the_cost_budget_never_lets_sampling_cross_its_share():
    # 2000 iterations of 5 ms after 10 s of start-up: a 20-s run whose start-up alone spent 2 % of it; sampling
    # gets half the budget (0.19 s), and never crosses it by the iteration that would.
    settings = stop_rule.StopSettings(min_iterations=10, validation_batches=0, epoch2_iterations=0)
    times: list[float] = []
    while True:
        times.append(0.005 if len(times) % 7 else 0.006)
        budget = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=2000, batches_per_iteration=1.0,
                                        init_s=10.0, now_s=10.0 + sum(times))
        if stop_rule.decide(times, sum(times), settings, budget).reason == "cost_budget":
            break
    share_s = stop_rule.SAMPLING_SHARE * (1 - stop_rule.BUDGET_MARGIN) * 0.02 * stop_rule.predicted_full_run_s(times, budget)
    assert sum(times) <= share_s < sum(times) + 2 * 0.006


def test_the_cost_budget_stops_before_the_check_that_would_cross_it():
    # Checks thin out as the sample grows (every 5 % more iterations): with 500 iterations of 1 ms to the next
    # check, the stop is taken now, 0.5 s before the cap, not at that check, 0.5 s past it.
    settings = stop_rule.StopSettings(min_iterations=10, validation_batches=0, epoch2_iterations=0,
                                      max_iterations=50_000, target_relative_ci=1e-9)  # the budget decides
    times = [0.0009, 0.0011] * 5_000
    cap_s = (1 - stop_rule.BUDGET_MARGIN) * 0.02 * (5.0 + 0.001 * 750_000)  # 14.345 s of a 755-s run
    budget = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=750_000, batches_per_iteration=1.0,
                                    init_s=5.0, now_s=cap_s - 0.3)
    assert not stop_rule.over_budget(times, 10.0, budget, settings)
    assert stop_rule.over_budget(times, 10.0, budget, settings, iterations_to_check=500)
    assert stop_rule.decide(times, 10.0, settings, budget, iterations_to_check=500).reason == "cost_budget"


def test_the_budget_keeps_back_the_next_epochs_start_and_the_closing_probe():
    # A loader whose workers take 0.4 s to start before each epoch: that start, measured on the way in, is
    # spent again when epoch 2's first iterations are timed, and so is the level probe after the sample
    settings = stop_rule.StopSettings(validation_batches=0, epoch2_iterations=5)
    times = [0.001] * 10_000
    cap_s = (1 - stop_rule.BUDGET_MARGIN) * 0.02 * (5.0 + 0.001 * 750_000)

    def budget(epochs: int | None, now_s: float, steps: int | None = None) -> stop_rule.BudgetInputs:
        return stop_rule.BudgetInputs(planned_epochs=epochs, batches_per_epoch=750_000 // (epochs or 1),
                                      batches_per_iteration=1.0, init_s=5.0, now_s=now_s, planned_iterations=steps,
                                      epoch_start_s=0.401, probe_after_s=0.1)

    # kept back: 0.4-s start + 5 ms of epoch 2 + 0.1-s probe + the profile's end (0.25 s), and the next step
    assert stop_rule.over_budget(times, 10.0, budget(5, cap_s - 0.75), settings)
    assert not stop_rule.over_budget(times, 10.0, budget(5, cap_s - 0.77), settings)
    # one epoch, or a step budget that ends within this one: no next epoch to time, the probe and the end are kept back
    assert not stop_rule.over_budget(times, 10.0, budget(1, cap_s - 0.45), settings)
    assert stop_rule.over_budget(times, 10.0, budget(1, cap_s - 0.34), settings)
    assert not stop_rule.over_budget(times, 10.0, budget(None, cap_s - 0.7, steps=740_000), settings)
    assert stop_rule.next_epoch_timed(budget(None, 1.0, steps=900_000), settings)
    assert not stop_rule.next_epoch_timed(budget(5, 1.0), stop_rule.StopSettings(epoch2_iterations=0))


def test_waiting_out_an_epoch_without_a_dataloader_is_kept_to_the_cost_budget():
    # a hand-written loop of 25,000 5-ms steps an epoch, four epochs, stopped 200 steps in: waiting out the other
    # 24,800 (124 s) to time the validation after the epoch would cost a quarter of the run, its budget 2 %
    settings = stop_rule.StopSettings(validation_batches=10, epoch2_iterations=5)
    times = [0.005] * 200
    budget = stop_rule.BudgetInputs(planned_epochs=4, batches_per_epoch=25_000, batches_per_iteration=1.0,
                                    init_s=2.0, now_s=3.5, probe_after_s=0.1)
    wait_s, needed = stop_rule.epoch_end_too_dear(times, budget, settings, 24_800)
    assert wait_s == pytest.approx(124.0 + 0.025 + 0.1 + 0.025) and needed == pytest.approx((3.5 + wait_s + 0.25) / 476.9)
    # an epoch of 1,000 steps of a 400-epoch run: the wait (4 s) fits the budget (0.95 x 2 % of 2,002 s); an epoch
    # of a 20-epoch run (6 % of it) is waited out too: past the budget, within the tenth a profile waits for an
    # epoch's end; one of a 5-epoch run (23 %) is not
    assert stop_rule.epoch_end_too_dear(times, replace(budget, planned_epochs=400, batches_per_epoch=1_000),
                                        settings, 800) is None
    twenty = replace(budget, planned_epochs=20, batches_per_epoch=5_000)
    assert stop_rule.epoch_end_too_dear(times, twenty, settings, 4_800) is None
    assert stop_rule.epoch_end_too_dear(times, replace(twenty, planned_epochs=5), settings, 4_800) is not None
    # a wait shorter than min_budget_seconds is always allowed (a test's few-second run); no planned run, no budget
    assert stop_rule.epoch_end_too_dear(times, budget, replace(settings, min_budget_seconds=200.0), 24_800) is None
    assert stop_rule.epoch_end_too_dear(times, replace(budget, planned_epochs=None), settings, 24_800) is None


def test_the_next_epochs_start_is_measured_by_the_first_batchs_wait_not_the_first_steps_compute():
    from types import SimpleNamespace

    from trainwise.profile._iteration_log import IterationLog
    from trainwise.profile._sampling import Sampling

    log = IterationLog()
    # the loader started at 6.55 s; its first batch took 0.41 s (workers starting); the first step's compute, 2.5 s
    # (a GPU job's autotuning or compilation), is not spent again at the next epoch's start
    log.add(6.55, 9.46, 0.41, 0, 32, 1, 1)
    log.add(9.46, 9.461, 0.0002, 0, 32, 1, 1)
    recorder = SimpleNamespace(iterations=log, epochs=[{"index": 0, "start_s": 6.55}])
    assert Sampling._epoch_start_s(recorder) == pytest.approx(0.41)
    assert Sampling._epoch_start_s(SimpleNamespace(iterations=IterationLog(), epochs=[])) == 0.0


def test_steps_that_ran_every_closure_evaluation_allowed_are_no_reason_to_stop():
    # LBFGS steps at max_iter have not converged: steady times do not stop sampling, the caps still do
    settings = stop_rule.StopSettings(min_iterations=20, max_seconds=60.0)
    times = [0.1] * 40
    assert stop_rule.decide(times, 4.0, settings).reason == "stable"
    assert stop_rule.decide(times, 4.0, settings, closure_capped=True).reason is None
    assert stop_rule.decide(times, 61.0, settings, closure_capped=True).reason == "time_budget"


def test_capped_closure_steps_do_not_spend_the_cost_budget():
    # the budget's run estimate is made of the capped steps themselves: it would stop an LBFGS profile before
    # the optimizer converges (2,400 steps predicted at the capped 0.1 s; the real run converges after ~54)
    settings = stop_rule.StopSettings(min_iterations=10, max_seconds=60.0, validation_batches=0, epoch2_iterations=0)
    times = [0.1 + 0.01 * (k % 5) for k in range(30)]  # 3.4 s of steps that vary too much to be "stable"
    budget = stop_rule.BudgetInputs(planned_epochs=2400, batches_per_epoch=1, batches_per_iteration=1.0,
                                    init_s=2.0, now_s=2.0 + sum(times))
    assert stop_rule.decide(times, sum(times), settings, budget).reason == "cost_budget"
    assert stop_rule.decide(times, sum(times), settings, budget, closure_capped=True).reason is None
    assert stop_rule.decide(times, 61.0, settings, budget, closure_capped=True).reason == "time_budget"


def test_the_next_iteration_is_predicted_by_the_median_of_the_last_ones():
    assert stop_rule.next_iteration_s([0.01, 0.01, 0.5, 0.01, 0.01]) == 0.01  # one slow save does not count
    assert stop_rule.next_iteration_s([0.02, 0.04]) == pytest.approx(0.03)
    assert stop_rule.next_iteration_s([]) == 0.0


# ---- `trainwise run`'s checkpointer and SIGTERM handling ----------------------------------------------------
class Job:
    """What the subscriber acts on: a real counter of trained batches, saved checkpoints and exit codes."""

    def __init__(self, *, started=True, due_every=None, writes=True, coordinated=False):
        self.batches = 0
        self.saved_at = 0
        self.saves: list[tuple[str, int]] = []
        self.exits: list[int] = []
        self.ddp_boundaries = 0
        self.stop = CheckpointAndStop(
            due=lambda: due_every is not None and self.batches - self.saved_at >= due_every,
            save=self.save, exit=self.exits.append, started=lambda: started,
            new_batches=lambda: self.batches > self.saved_at, writes=writes, coordinated=lambda: coordinated,
            ddp_boundary=self.ddp_boundary)
        self.bus = EventBus()
        self.bus.subscribe(self.stop, strict=True)

    def save(self, reason):
        self.saves.append((reason, self.batches))
        self.saved_at = self.batches

    def ddp_boundary(self):
        self.ddp_boundaries += 1

    def train(self, batches):
        for _ in range(batches):
            self.bus.emit(IterationBoundary(float(self.batches), self.batches))
            self.batches += 1


def test_interval_checkpoints_are_written_at_boundaries_when_due():
    job = Job(due_every=4)
    job.train(10)
    assert job.saves == [("interval", 4), ("interval", 8)] and job.exits == []


def test_sigterm_checkpoints_at_the_next_boundary_then_exits_143():
    job = Job()
    job.train(3)
    job.bus.emit(SigtermReceived(3.0))
    assert job.exits == []  # not inside the step: at its boundary
    job.train(1)
    assert job.saves == [("sigterm", 3)] and job.exits == [SIGTERM_EXIT]


def test_sigterm_with_nothing_new_to_save_exits_without_a_checkpoint():
    job = Job(due_every=2)
    job.train(3)  # saved at 2; the boundary at 2 batches is the last
    job.saved_at = job.batches
    job.bus.emit(SigtermReceived(3.0))
    job.train(1)
    assert job.saves == [("interval", 2)] and job.exits == [SIGTERM_EXIT]


def test_sigterm_before_training_exits_at_once_and_a_non_writer_rank_never_saves():
    early = Job(started=False)
    early.bus.emit(SigtermReceived(0.0))
    assert early.exits == [SIGTERM_EXIT] and early.saves == []
    follower = Job(writes=False, due_every=1)
    follower.train(3)
    follower.bus.emit(SigtermReceived(3.0))
    follower.train(1)
    assert follower.saves == [] and follower.exits == [SIGTERM_EXIT]


def test_under_ddp_the_agreed_boundary_decides_and_a_failed_save_fails_the_job():
    ranked = Job(coordinated=True, due_every=1)
    ranked.train(3)
    assert ranked.ddp_boundaries == 3 and ranked.saves == []
    broken = Job(due_every=1)

    def cannot_write(reason):
        raise OSError("disk full")

    broken.stop.save = cannot_write
    with pytest.raises(OSError, match="disk full"):  # strict: not swallowed by the bus
        broken.train(2)


# ---- DDP and Hivemind communication timing -----------------------------------------------------------------
def test_ddp_buckets_are_grouped_per_primary_optimizer_step():
    iteration = [0]
    timing = DdpCommTiming(lambda: iteration[0], wall_clock=lambda: 10.5)
    primary, other = 1, 2
    timing(BucketReady(10.0, 0, 400))
    timing(BucketReady(10.1, 1, 600, last=True))
    timing(BucketReduced(10.2, 0))
    timing(OptimizerStep(1.0, primary))
    timing(BucketReduced(10.3, 1))  # finished on the communication thread after the step closed the record
    assert len(timing.steps) == 1
    step = timing.steps[0]
    assert (step["first_ready_wall_s"], step["last_ready_wall_s"], step["done_wall_s"]) == (10.0, 10.1, 10.3)
    assert step["bytes"] == 1000 and step["buckets"] == {"0": [10.0, 10.2, 400], "1": [10.1, 10.3, 600]}
    assert (step["step_end_wall_s"], step["iteration"]) == (10.5, 0)
    iteration[0] = 1
    timing(BucketReady(11.0, 0, 400))
    timing(OptimizerStep(2.0, other))  # a second optimizer: not the primary's step
    timing(OptimizerStep(2.1, primary, in_scaler_step=True))  # GradScaler's inner step: its own event follows
    assert len(timing.steps) == 1
    timing(OptimizerStep(2.2, primary, via_scaler=True))
    assert len(timing.steps) == 2 and timing.steps[1]["iteration"] == 1


def test_ddp_timing_discards_a_replayed_batchs_buckets():
    replaying = [True]
    timing = DdpCommTiming(skip_step=lambda: replaying[0])
    timing(BucketReady(1.0, 0, 8))
    timing(OptimizerStep(1.1, 7))
    replaying[0] = False
    timing(OptimizerStep(1.2, 7))
    assert timing.steps == []


def test_hivemind_rounds_and_averaging_are_recorded():
    info: dict = {"inner_optimizer": "SGD"}
    timing = HivemindTiming(info)
    assert timing.averaged_fraction() is None
    timing(HivemindRound(epoch=3, start_wall_s=5.0, end_wall_s=5.25, peers=2))
    timing(HivemindAveraging(5.0, 6.0, group=True, averaged=True))
    timing(HivemindAveraging(7.0, 7.5, group=False, averaged=False))
    assert timing.rounds == [{"epoch": 3, "start_wall_s": 5.0, "end_wall_s": 5.25, "blocking_s": 0.25, "peers": 2}]
    assert [a["seconds"] for a in info["averaging"]] == [1.0, 0.5]
    assert timing.averaged_fraction() == 0.5


# ---- the public integration sink ---------------------------------------------------------------------------
def test_a_stand_alone_sink_builds_the_profile_from_a_framework_loop(tmp_path):
    from trainwise.profile.framework_sink import open_sink

    sink = open_sink("keras", options=ProfileOptions(mode="full", host_noise=False))
    assert isinstance(sink, IntegrationSink)
    saved: list = []
    sink.recorder.bus.subscribe(lambda event: saved.append(event) if isinstance(event, CheckpointSave) else None)
    sink.train_begin(batches_per_epoch=4, dataset_size=None)
    sink.epochs(2, "a test loop of 2 epochs")
    for _ in range(2):
        sink.epoch_begin()
        for _ in range(4):
            sink.batch_begin()
            assert sink.batch_end(8) is False
        sink.fill_dataset_size("train", 8)
        sink.validation_begin(2)
        for _ in range(2):
            sink.validation_batch_begin()
            assert sink.validation_batch_end(8) is False
        sink.validation_end()
        sink.epoch_end()
        sink.checkpoint_save(str(tmp_path / "model.ckpt"))
    profile = sink.train_end()
    assert sink.profile is profile and len(profile.iterations) == 8 and len(profile.epochs) == 2
    assert profile.script_epochs is not None and profile.script_epochs.epochs == 2
    assert [event.path for event in saved] == [str(tmp_path / "model.ckpt")] * 2
    assert sink.recorder.loaders["train"]["dataset_size"] == 32


def test_the_integrations_use_the_public_sink_only():
    for path in INTEGRATIONS.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr != "recorder", f"{path.name}: private recorder state instead of the sink"
            if isinstance(node, ast.ImportFrom) and node.module:
                assert "_child" not in node.module, f"{path.name} imports the recorder's module {node.module}"


def test_batch_length_reads_the_leading_dimension():
    assert batch_length((torch.zeros(5, 3), torch.zeros(5))) == 5
    assert batch_length({"input_ids": torch.zeros(7, 2)}) == 7
    assert batch_length("text") is None


# ---- the no-iteration limit's option ------------------------------------------------------------------------
@pytest.mark.parametrize("limit_s", [0.0, -1.0, math.nan, math.inf])
def test_the_no_iteration_limit_must_be_finite_and_positive(limit_s):
    with pytest.raises(TrainwiseError, match="--no-iteration-limit-s"):
        ProfileOptions(no_iteration_limit_s=limit_s).validate()
    ProfileOptions(no_iteration_limit_s=5.0).validate()


@pytest.mark.parametrize("seconds", [-1.0, math.nan, math.inf])
def test_the_averaging_window_must_be_finite_and_not_negative(seconds):
    with pytest.raises(TrainwiseError, match="--averaging-seconds"):
        ProfileOptions(averaging_seconds=seconds).validate()
    ProfileOptions(averaging_seconds=0.0).validate()
    ProfileOptions(averaging_seconds=30.0, max_profile_seconds=3.0).validate()  # the cap is the window then


def test_iteration_end_events_reach_other_subscribers_after_the_recorder(subscribed):
    recorder, bus = subscribed
    seen: list[tuple[int, int]] = []
    bus.subscribe(lambda event: seen.append((event.index, len(recorder.iterations)))
                  if isinstance(event, IterationEnd) else None)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    bus.emit(OptimizerStep(1.0, id(optimizer), optimizer))
    bus.emit(OptimizerStep(2.0, id(optimizer), optimizer))
    assert seen == [(0, 1), (1, 2)]


def test_iteration_end_is_built_only_while_a_subscriber_takes_it(subscribed):
    # The validation regions need only the first iteration (training began): they leave IterationEnd's subscribers
    # then, and the recorder's later steps build no event nobody takes; one subscribed later gets them again.
    recorder, bus = subscribed
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    bus.emit(OptimizerStep(1.0, id(optimizer), optimizer))
    assert recorder._regions.iterations == 1 and bus.targets.get(IterationEnd, ()) == ()
    bus.emit(OptimizerStep(2.0, id(optimizer), optimizer))
    assert recorder._regions.iterations == 1 and len(recorder.iterations) == 2
    bus.emit(ModelForward(2.5, grad_enabled=False, training=False))  # the regions still see the model's calls
    assert recorder._regions.current is not None
    seen: list[int] = []
    bus.subscribe(lambda event: seen.append(event.index), events=(IterationEnd,))
    bus.emit(OptimizerStep(3.0, id(optimizer), optimizer))
    assert seen == [2]


def test_the_patch_clock_is_a_shift_of_perf_counter_or_a_call():
    patch = TorchPatch()
    patch.set_clock(lambda: 5.0, 100.0)
    assert patch.now() == 5.0 and patch.perf_counter_shift_s == 100.0
    patch.now = lambda: 7.0  # a clock set alone: no shift the hooks would read in its place
    assert patch.now() == 7.0 and patch.perf_counter_shift_s is None


def test_the_recorder_clock_handed_to_the_patch_agrees_with_its_now(tmp_path):
    import time

    patch = TorchPatch()
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full", "characterise": False,
                                "launch_wall_s": time.time() - 3.0}, bus=patch.bus)
    patch.set_clock(recorder.now, recorder.offset_s - recorder.perf0)
    before = recorder.now()
    shifted = time.perf_counter() + patch.perf_counter_shift_s
    assert before <= shifted <= recorder.now() and shifted > 2.9


def test_interceptors_run_the_last_registered_outermost():
    # As stacked monkey-patches did: `trainwise run`'s (registered after the recorder's) sees a batch request first.
    patch, calls = TorchPatch(), []
    patch._set_original("save", lambda obj, f: calls.append(("torch.save", f)) or f)
    patch.intercept("save", lambda proceed, obj, f: calls.append("recorder") or proceed(obj, f + ".scratch"))
    patch.intercept("save", lambda proceed, obj, f: calls.append("run") or proceed(obj, f))
    assert patch._chains["save"]({}, "model.pt") == "model.pt.scratch"
    assert calls == ["run", "recorder", ("torch.save", "model.pt.scratch")]
    with pytest.raises(ValueError, match="no interception point"):
        patch.intercept("forward", lambda proceed: proceed())
