"""The profile recorder's handling of agent events, fed synthetic streams in-process (milliseconds each):
epochs and validation of a loop without a DataLoader, a metric under no_grad inside a training pass, the
sampled profile waiting for the end of epoch 1."""

from __future__ import annotations

import pytest

from trainwise.profile._iteration_log import IterationLog
from trainwise.agent.events import IterationEnd, ModelForward
from trainwise.profile import _child


@pytest.fixture
def recorder(tmp_path):
    return _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full"})


def iterations_ended_at(end_s: float, count: int) -> IterationLog:
    log = IterationLog()
    for _ in range(count):
        log.append({"start_s": 0.0, "end_s": end_s})
    return log


def train_steps(recorder, start_s: float, count: int) -> float:
    """`count` training iterations, one time unit each (a forward of the model, then its end)."""
    t = start_s
    for _ in range(count):
        recorder.bus.emit(ModelForward(t, grad_enabled=True, training=True))
        t += 1
        recorder.iterations.append({"index": len(recorder.iterations), "epoch": len(recorder.epochs) - 1,
                                    "start_s": t - 1, "end_s": t, "data_wait_s": 0.0, "samples": 0, "batches": 0})
        recorder.epochs[-1]["iterations"] += 1
        recorder.bus.emit(IterationEnd(t, len(recorder.iterations) - 1, "autograd"))
    return t


def evaluate(recorder, start_s: float, calls: int) -> float:
    for k in range(calls):
        recorder.bus.emit(ModelForward(start_s + k, grad_enabled=False, training=False))
    return start_s + calls


def test_without_a_dataloader_validation_regions_delimit_epochs(recorder):
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    t = train_steps(recorder, 0.0, 3)
    t = evaluate(recorder, t, 2)
    assert recorder.epochs[0]["end_s"] == 3.0 and recorder.epochs[0]["batches_per_epoch"] == 3
    assert recorder.loaders["train"]["batches_per_pass"] == 3
    t = train_steps(recorder, t, 3)
    assert [e["start_s"] for e in recorder.epochs] == [0.0, 5.0]
    validation = recorder.validations[0]
    assert (validation["start_s"], validation["end_s"], validation["batches_total"]) == (3.0, 5.0, 2)
    assert recorder.loaders["val"]["batches_per_pass"] == 2
    evaluate(recorder, t, 2)
    assert len(recorder.validations) == 2 and recorder.epochs[1]["end_s"] == t


def test_a_metric_under_no_grad_inside_a_training_dataloader_pass_is_not_validation(recorder):
    recorder.current_train_state = object()  # a training DataLoader pass is running
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": 40}]
    t = train_steps(recorder, 0.0, 2)
    t = evaluate(recorder, t, 1)  # accuracy of the training batch, under no_grad
    t = train_steps(recorder, t, 2)
    assert recorder.validations == [] and recorder.epochs[0]["end_s"] is None
    recorder.epochs[0]["end_s"] = t  # the pass is exhausted: what follows is validation over tensors
    t = evaluate(recorder, t, 4)
    train_steps(recorder, t, 1)
    assert [v["batches_total"] for v in recorder.validations] == [4]


def test_once_a_dataloader_validation_was_seen_model_calls_add_nothing(recorder):
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    recorder._dataloader_validation = True
    t = train_steps(recorder, 0.0, 2)
    evaluate(recorder, t, 3)
    assert recorder.validations == [] and recorder.epochs[0]["end_s"] is None


def test_a_sampled_profile_without_a_dataloader_waits_for_the_end_of_epoch_1(tmp_path, monkeypatch):
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "epoch2_iterations": 2})
    finished = []
    monkeypatch.setattr(recorder, "_finish", lambda reason: finished.append(reason))
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    recorder._waiting_for_epoch_end = True  # the stop rule found the steady state mid-epoch
    t = train_steps(recorder, 0.0, 4)
    t = evaluate(recorder, t, 3)
    assert recorder.epoch1_truncated and not recorder._waiting_for_epoch_end and recorder._truncated_epoch == 0
    train_steps(recorder, t, 1)
    assert recorder.validation_done and finished == []  # epoch 2's start still to be timed
    recorder.epochs_hint = 1  # had the run been one epoch long, validation would end the profile
    recorder.validation_done = False
    evaluate(recorder, t + 1, 1)
    train_steps(recorder, t + 2, 1)
    assert finished == ["validation_timed"]


def test_waiting_for_the_end_of_epoch_1_is_bounded_by_max_epoch_wait_not_max_seconds(tmp_path, monkeypatch):
    # an epoch of a loop without a DataLoader may last minutes (a language model's 15,000 batches): its
    # length is known only at its end, so the wait has its own, longer bound
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled",
                                "max_profile_seconds": 60.0, "max_epoch_wait_s": 600.0})
    finished = []
    monkeypatch.setattr(recorder, "_finish", lambda reason: finished.append(reason))
    recorder._waiting_for_epoch_end = True
    recorder.marks["first_iteration_start"] = recorder.now() - 180.0
    recorder._check_stop(0)
    assert finished == []
    recorder.marks["first_iteration_start"] = recorder.now() - 601.0
    recorder._check_stop(0)
    assert finished == ["sampled_no_dataloader"] and "--max-epoch-wait 600 s" in recorder.notes[-1]


class FakeLoader:
    """What the recorder reads of a DataLoader and its iterator (weakly referenced, sized)."""

    def __init__(self, batches: int, batch_size: int = 16) -> None:
        self.batches, self.batch_size = batches, batch_size


class FakeIterator:
    def __init__(self, loader: FakeLoader) -> None:
        import weakref

        self._trainwise_loader = weakref.ref(loader)
        self._dataset = [0] * (loader.batches * loader.batch_size)
        self._num_workers = 0
        self.loader = loader

    def __len__(self) -> int:
        return self.loader.batches


def run_pass(recorder, loader: FakeLoader, optimizer=None, batches: int | None = None, train_in_step: bool = False):
    """One pass over `loader` as the patched iterator reports it: each batch fetched, then (with an
    optimizer) one step; exhausted at the end. `train_in_step`: the step calls model.train() (the
    pass began in whatever mode the model was left in)."""
    import time

    import torch

    iterator = FakeIterator(loader)
    if recorder._undecided is not None:  # as the patched __next__ does when another pass begins
        recorder._settle_undecided()
    state = recorder._new_loader_state(iterator)
    if train_in_step:
        recorder.eval_mode = False  # what the patched Module.train reports
    for _ in range(loader.batches if batches is None else batches):
        start = time.perf_counter()
        recorder._on_batch(iterator, state, start, time.perf_counter(), torch.zeros(loader.batch_size, 4))
        recorder._last_batch_state = state
        state.grad_at_last_batch = torch.is_grad_enabled()
        if optimizer is not None:
            recorder._boundary(optimizer)
    if batches is None:
        recorder._on_exhausted(iterator, state, time.perf_counter())
    return state


def test_a_pass_that_ends_without_an_optimizer_step_is_validation_not_an_epoch(recorder):
    """The synthetic form of test_profile's validation loop without eval() or no_grad (2 epochs of 40
    training batches, 20 validation batches with gradients on and the model in train mode)."""
    import torch

    recorder._torch = torch
    parameter = torch.nn.Parameter(torch.zeros(3))
    optimizer = torch.optim.SGD([parameter], lr=0.1)
    train, val = FakeLoader(40), FakeLoader(20)
    for _ in range(2):
        run_pass(recorder, train, optimizer)
        run_pass(recorder, val)
    recorder._settle_undecided()
    assert [e["iterations"] for e in recorder.epochs] == [40, 40]
    assert [(v["epoch"], len(v["batch_starts_s"]), v["batches_total"]) for v in recorder.validations] == [(0, 20, 20),
                                                                                                          (1, 20, 20)]
    assert recorder.loaders["train"]["dataset_size"] == 640 and recorder.loaders["val"]["dataset_size"] == 320
    assert all(it["batches"] == 1 and it["samples"] == 16 for it in recorder.iterations)
    assert recorder.epochs[0]["end_s"] <= recorder.validations[0]["start_s"] < recorder.epochs[1]["start_s"]
    assert any("without model.eval() or torch.no_grad()" in note for note in recorder.notes)
    assert recorder.model["parameters"] == 3 and recorder.model["optimizer"] == "SGD"


def test_a_look_at_one_batch_before_training_is_neither_an_epoch_nor_validation(recorder):
    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train = FakeLoader(10)
    run_pass(recorder, train, batches=1)  # next(iter(loader)): abandoned
    run_pass(recorder, train, optimizer)
    run_pass(recorder, train, optimizer)
    assert [e["iterations"] for e in recorder.epochs] == [10, 10] and recorder.validations == []
    assert any("neither an epoch nor validation" in note for note in recorder.notes)


def test_a_training_pass_begun_in_eval_mode_is_training_not_validation(recorder):
    """The synthetic form of test_profile's --train-inside-step run: each epoch's validation leaves the
    model in eval mode, the next epoch's pass begins in it, and its first optimizer step makes it training."""
    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train, val = FakeLoader(40), FakeLoader(20)
    for _ in range(2):
        run_pass(recorder, train, optimizer, train_in_step=True)
        recorder.eval_mode = True  # model.eval() before validation
        run_pass(recorder, val)
    recorder._settle_undecided()
    assert [e["iterations"] for e in recorder.epochs] == [40, 40]
    assert [len(v["batch_starts_s"]) for v in recorder.validations] == [20, 20]
    assert all(it["batches"] == 1 and it["samples"] == 16 for it in recorder.iterations)
    assert any("eval mode" in note for note in recorder.notes)


class TrainPass:
    role = "train"


def test_sys_exit_in_the_middle_of_an_epoch_is_noted_and_the_record_kept(recorder):
    recorder.iterations = iterations_ended_at(1.0, 12)
    recorder.current_train_state = TrainPass()
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 12, "truncated": False,
                        "batches_per_epoch": 40}]
    recorder.on_sys_exit(0)
    assert recorder.exit_mid_training == ("the script called sys.exit(0) after 12 iterations, in the middle of epoch 1 "
                                          "(its training DataLoader pass unfinished)")
    recorder.on_process_exit()
    assert recorder.stop_reason == "script_exited_mid_training" and recorder.written
    assert any("sys.exit(0) after 12 iterations" in note for note in recorder.notes)


def test_sys_exit_after_training_is_an_ordinary_end(recorder):
    recorder.iterations = iterations_ended_at(1.0, 80)
    recorder.current_train_state = TrainPass()
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": 5.0, "iterations": 80, "truncated": False,
                        "batches_per_epoch": 80}]
    recorder.on_sys_exit(None, call="exit")
    assert recorder.exit_mid_training is None


def test_sys_exit_before_sampling_stopped_says_so(tmp_path):
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled"})
    recorder.iterations = iterations_ended_at(1.0, 7)
    recorder.on_sys_exit(3, call="exit")
    assert "exit(3) after 7 iterations" in recorder.exit_mid_training
    assert "before sampling had stopped" in recorder.exit_mid_training


def test_a_save_after_sampling_waits_for_epoch_2_unless_the_sampled_epoch_is_the_last(tmp_path):
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "epoch2_iterations": 3})
    assert not recorder.epoch2_still_to_come()  # sampling has not stopped
    recorder.epoch1_truncated, recorder._truncated_epoch = True, 0
    assert recorder.epoch2_still_to_come()  # epochs unknown: an end-of-epoch checkpoint goes to a scratch file
    recorder.epochs_hint = 1
    assert not recorder.epoch2_still_to_come()  # the sampled epoch is the last: the save ends the profile
    recorder.epochs_hint = 5
    assert recorder.epoch2_still_to_come()
    recorder._later_epoch_iterations = 3
    assert not recorder.epoch2_still_to_come()
    assert not _child.Recorder({"out_path": str(tmp_path / "r.json"), "epoch2_iterations": 0}).epoch2_still_to_come()


def test_the_models_hook_is_neither_pickled_with_the_model_nor_fired_by_a_copy(tmp_path):
    import copy
    import io
    import pickle
    import weakref

    import torch

    from trainwise.profile import _torch_hooks

    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "full"})
    recorder._torch = torch
    model = torch.nn.Sequential(torch.nn.Linear(4, 4))
    recorder._model_ref = weakref.ref(model)
    recorder._watch_model_calls(0.0)
    seen = []
    recorder.bus.subscribe(lambda event: seen.append(event) if isinstance(event, ModelForward) else None)
    model(torch.zeros(1, 4))
    assert len(seen) == 1
    with pytest.raises((AttributeError, pickle.PicklingError)):
        pickle.dumps(model)  # what `torch.save(model)` met while the recorder's closure was on the model
    buffer = io.BytesIO()
    _torch_hooks.save(recorder, torch.save, model, buffer)  # the recorder's interceptor of torch.save
    restored = torch.load(io.BytesIO(buffer.getvalue()), weights_only=False)
    assert len(restored._forward_pre_hooks) == 0
    model(torch.zeros(1, 4))  # the hook is back after the save
    copy.deepcopy(model)(torch.zeros(1, 4))  # a copy (an EMA model) keeps the hook but is not the model
    assert len(seen) == 2


def test_a_cpu_job_never_asks_whether_cuda_is_available(recorder):
    """torch.cuda.is_available() initialises the CUDA driver: on a GPU host a CPU job under the recorder would
    run with a driver it never loaded itself. Iterations and the record ask is_initialized() only."""
    import types

    import torch

    class CudaProbe:
        def is_initialized(self):
            return False

        def is_available(self):
            raise AssertionError("is_available() called: it initialises the CUDA driver")

    recorder._torch = types.SimpleNamespace(cuda=CudaProbe(), __version__=torch.__version__,
                                            get_num_threads=torch.get_num_threads, is_grad_enabled=torch.is_grad_enabled)
    for _ in range(3):
        recorder.end_iteration()
    assert len(recorder.iterations) == 3
    record = recorder.raw_record()
    assert record["environment"]["device_name"] is None and record["memory"]["peak_device_bytes"] is None


def test_one_short_closure_step_does_not_end_the_converging_phase(recorder):
    recorder.model = {"closure_evaluation_cap": 6}
    steps = lambda passes: [{"backward_passes": b} for b in passes]  # noqa: E731
    recorder.iterations = steps([6, 6, 6, 6, 2, 6, 6])
    assert recorder._closure_capped()  # an LBFGS step that converged early, among capped ones
    recorder.iterations = steps([6, 6, 6, 1, 1, 2, 1])
    assert not recorder._closure_capped()  # converged: short steps from now on
    recorder.iterations = steps([6, 6, 6])
    assert not recorder._closure_capped()  # too few steps to say
    recorder.model = {}
    recorder.iterations = steps([6] * 7)
    assert not recorder._closure_capped()  # no closure optimizer


def _one_open_epoch(recorder):
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]


def test_a_loop_without_epochs_that_ends_by_itself_is_its_own_whole_run(recorder):
    # e.g. "train until the loss is small": no DataLoader, no validation, the script exits during the profile
    _one_open_epoch(recorder)
    t = train_steps(recorder, 0.0, 7)
    recorder._close_whole_run()
    assert recorder.epochs[0]["end_s"] == t and recorder.epochs[0]["batches_per_epoch"] == 7
    assert recorder.loaders["train"]["batches_per_pass"] == 7
    assert recorder.script_epochs["epochs"] == 1 and "ran to its end" in recorder.script_epochs["source"]
    assert any("7 iterations are the whole training" in note for note in recorder.notes)


def test_the_scripts_own_epoch_count_splits_a_run_without_boundaries_or_leaves_it_unknown(recorder):
    _one_open_epoch(recorder)
    recorder.script_epochs = {"epochs": 3, "source": "the script's argparse argument epochs=3"}
    train_steps(recorder, 0.0, 12)
    recorder._close_whole_run()
    assert recorder.loaders["train"]["batches_per_pass"] == 4 and recorder.script_epochs["epochs"] == 3
    other = _child.Recorder({"out_path": recorder.out_path + ".b", "mode": "full"})
    _one_open_epoch(other)
    other.script_epochs = {"epochs": 5, "source": "the script's argparse argument epochs=5"}
    train_steps(other, 0.0, 12)  # 12 iterations are not 5 equal epochs: the epoch length stays unknown
    other._close_whole_run()
    assert "train" not in other.loaders and other.epochs[0]["end_s"] is None


def test_a_loader_the_script_stopped_iterating_by_itself_does_not_set_the_epoch(recorder):
    # a script that takes one batch (next(iter(loader))) and steps on it 400 times, its --epochs counting
    # something else than passes over the loader: 12 loader batches x 200 "epochs" is not the run
    _one_open_epoch(recorder)
    recorder.current_train_state = object()
    recorder.loaders["train"] = {"batches_per_pass": 12, "dataset_size": 60_000, "drop_last": False, "num_workers": 0}
    recorder.script_epochs = {"epochs": 200, "source": "the script's argparse argument epochs=200"}
    train_steps(recorder, 0.0, 400)
    assert recorder._close_whole_run()
    assert recorder.loaders["train"]["batches_per_pass"] == 2 and recorder.loaders["train"]["dataset_size"] == 60_000
    assert any("never ended (the script stopped iterating it by itself)" in note for note in recorder.notes)


def test_an_epoch_that_ended_is_left_as_recorded(recorder):
    _one_open_epoch(recorder)
    train_steps(recorder, 0.0, 3)
    recorder.epochs[0]["truncated"] = True  # sampling ended the pass (or the loader was exhausted: end_s set)
    assert not recorder._close_whole_run() and "train" not in recorder.loaders
    recorder.epochs[0]["truncated"], recorder.epochs[0]["end_s"] = False, 3.0
    assert not recorder._close_whole_run() and "train" not in recorder.loaders


def test_training_after_the_last_iteration_keeps_the_run_open(recorder):
    # backward passes after the last iteration that no step ended (a second optimizer that stepped once, gradients
    # taken for a saliency map): the iterations may not hold the whole training
    _one_open_epoch(recorder)
    train_steps(recorder, 0.0, 20)
    recorder.iter_backwards = 20
    assert not recorder._close_whole_run() and recorder.epochs[0]["end_s"] is None


def test_a_second_optimizer_stepping_alone_takes_over_the_iterations(recorder):
    # Forward-Forward: layer 0's optimizer steps 5 times, then layer 1's 5 times; a GAN's two alternate and the
    # first to step keeps delimiting iterations
    import torch

    recorder._torch = torch
    first, second = (torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))]) for _ in range(2))
    _one_open_epoch(recorder)
    for optimizer in [first] * 5 + [second] * 5:
        recorder._boundary(optimizer)
    assert len(recorder.iterations) == 10 and recorder.primary_optimizer_id == id(second)
    # the takeover's first step alone ended an iteration, the next one starting there
    assert recorder.iterations[6]["start_s"] == recorder.iterations[5]["end_s"] > recorder.iterations[5]["start_s"]
    assert any("stepped alone from iteration 6" in note for note in recorder.notes)
    recorder.script_epochs = {"epochs": 5, "source": "the script's argparse argument epochs=5"}
    assert recorder._close_whole_run() and recorder.loaders["train"]["batches_per_pass"] == 2
    gan = _child.Recorder({"out_path": recorder.out_path + ".gan", "mode": "full"})
    gan._torch = torch
    for optimizer in [first, second] * 6:
        gan._boundary(optimizer)
    assert len(gan.iterations) == 6 and gan.primary_optimizer_id == id(first)
    critic = _child.Recorder({"out_path": recorder.out_path + ".critic", "mode": "full"})
    critic._torch = torch
    for optimizer in ([first] * 5 + [second]) * 3:  # a WGAN: 5 critic steps per generator step
        critic._boundary(optimizer)
    assert len(critic.iterations) == 15 and critic.primary_optimizer_id == id(first)


def _hooked_model_and_optimizer(recorder):
    import weakref

    import torch

    recorder._torch = torch
    model = torch.nn.Linear(4, 2)
    recorder._model_ref = weakref.ref(model)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_the_models_hook_is_off_inside_a_training_pass_and_back_for_validation_over_tensors(recorder):
    """A hooked model call costs ~2 µs, a share of a sub-millisecond step: inside a training DataLoader pass,
    where the model's calls decide nothing, the hook comes off after the pass's first iteration; when the pass
    ends it is back, so that validation over tensors after the pass is still seen, and a new pass's first
    iteration takes it off again."""
    import time

    import torch

    model, optimizer = _hooked_model_and_optimizer(recorder)
    train = FakeLoader(8)
    state = run_pass(recorder, train, optimizer, batches=1)
    assert recorder._model_hook_parked and len(model._forward_pre_hooks) == 0
    for _ in range(3):  # the pass goes on: nothing put back
        recorder._on_batch(None, state, time.perf_counter(), time.perf_counter(), torch.zeros(16, 4))
        recorder._boundary(optimizer)
    assert len(model._forward_pre_hooks) == 0
    recorder._on_exhausted(None, state, time.perf_counter())
    assert not recorder._model_hook_parked and len(model._forward_pre_hooks) == 1
    model.eval()
    with torch.no_grad():
        for _ in range(3):
            model(torch.zeros(2, 4))
    model.train()
    model(torch.zeros(2, 4))  # training resumes: the region ends
    assert [v["batches_total"] for v in recorder.validations] == [3]
    run_pass(recorder, train, optimizer, batches=2)
    assert recorder._model_hook_parked and len(model._forward_pre_hooks) == 0
    assert [e["iterations"] for e in recorder.epochs] == [4, 2]


def test_the_models_hook_stays_on_in_a_pass_that_may_be_validation_or_once_torch_compile_ran(recorder, monkeypatch):
    """An undecided pass (no optimizer step yet) may still turn out to be validation; and once torch.compile has
    compiled a frame, adding or removing a module hook would recompile the model: the hook is left on."""
    import sys
    import time
    import types

    import torch

    model, optimizer = _hooked_model_and_optimizer(recorder)
    train = FakeLoader(8)
    run_pass(recorder, train, optimizer)  # epoch 1: the hook goes on at its first iteration, off at its second
    state = run_pass(recorder, train, batches=2)  # epoch 2 begins: hook back on, no step yet
    assert state.undecided and len(model._forward_pre_hooks) == 1
    compiled = types.SimpleNamespace(counters={"frames": {"total": 1}, "stats": {}})
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", compiled)
    recorder._boundary(optimizer)
    recorder._on_batch(None, state, time.perf_counter(), time.perf_counter(), torch.zeros(16, 4))
    recorder._boundary(optimizer)
    assert not state.undecided and not recorder._model_hook_parked and len(model._forward_pre_hooks) == 1


def test_a_loop_without_a_dataloader_whose_length_was_read_stops_within_its_budget(tmp_path, monkeypatch):
    """The loop's length read from its source (trainwise.profile._loop_length): when waiting out the epoch to time
    the validation after it would exceed the cost budget, the epoch is taken at that length and sampling ends;
    when the wait fits, the profile waits for the epoch's end as before."""
    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "epochs_hint": 4})
    finished = []
    monkeypatch.setattr(recorder, "_finish", lambda reason: finished.append(reason))
    recorder.marks["first_iteration_start"] = recorder.now() - 1.0
    recorder.epochs = [{"index": 0, "start_s": 0.0, "end_s": None, "iterations": 0, "truncated": False,
                        "batches_per_epoch": None}]
    for _ in range(200):
        recorder.iterations.add(0.0, 0.005, 0.0, 0, 16, 0, 1)
    recorder.epochs[0]["iterations"] = 200
    recorder.epochs_hint = 400  # epochs of 1,000 steps: the other 800 (4 s) fit 2 % of a 2,000-s run
    recorder._loop_passes = (1_000, "the training loop's range (lm.py:44: range(1000))")
    assert not recorder._loop_epoch_too_dear(0) and finished == []
    recorder.epochs_hint = 4  # epochs of 25,000: the other 24,800 (124 s) do not fit 2 % of a 500-s run
    recorder._loop_passes = (25_000, "the training loop's range (lm.py:44: range(25000))")
    assert recorder._loop_epoch_too_dear(0) and finished == ["sampled"]
    assert recorder.epochs[0]["truncated"] and recorder.epochs[0]["batches_per_epoch"] == 25_000
    assert recorder.loaders["train"]["batches_per_pass"] == 25_000 and recorder.epoch1_truncated
    assert "validation (if the script runs any after the epoch) is not timed" in recorder.notes[-1]


def test_a_closure_optimizer_leaving_its_capped_phase_is_not_settled(recorder):
    # LBFGS (max_iter 6) over a small LSTM, as recorded in a --full run: 43 capped steps, 26 mixed, then one
    # evaluation a step; a sampled profile that stopped at step 67 predicted the run 5x too long
    recorder.model = {"closure_evaluation_cap": 6}
    counts = [6] * 43 + [4] + [6] * 12 + [5, 2, 6, 6, 2, 3, 2, 2, 6, 6, 6, 6, 6, 2] + [1] * 10
    steps = lambda passes: [{"backward_passes": b} for b in passes]  # noqa: E731
    leaving = []
    for n in range(5, len(counts) + 1):
        recorder.iterations = steps(counts[:n])
        leaving.append(recorder._closure_capped() or recorder._closure_leaving_cap())
    assert all(leaving[:73 - 5 + 1])  # capped, then leaving the cap (to step 73): sampling goes on
    assert not any(leaving[74 - 5:])  # no capped step among the latest five: settled
    recorder.iterations = steps([5, 3] * 10)  # mini-batch LBFGS fluctuating below its cap: never capped
    assert not recorder._closure_leaving_cap() and not recorder._closure_capped()
    recorder.model = {}
    recorder.iterations = steps(counts)
    assert not recorder._closure_leaving_cap()  # no closure optimizer


def test_a_validation_batch_drawn_every_few_steps_from_a_kept_iterator_is_one_small_validation_each(recorder):
    """lucidrains' loop (tests/scripts/clients/cycled_loader.py) in synthetic form: batches drawn with next() from
    endless cycles over loaders, one validation batch under no_grad after every third step. Each is a validation of
    one batch ended where training resumed, taken out of the iteration it interrupted, not a pass of the whole
    loader's 50 batches whose batch times span three training steps."""
    import time

    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train_it, val_it = FakeIterator(FakeLoader(1000)), FakeIterator(FakeLoader(50))
    train, val = recorder._new_loader_state(train_it), None

    def fetch(iterator, state):
        start = time.perf_counter()
        recorder._on_batch(iterator, state, start, time.perf_counter(), torch.zeros(16, 4))
        recorder._last_batch_state = state
        state.grad_at_last_batch = torch.is_grad_enabled()

    for step in range(9):
        fetch(train_it, train)
        recorder._boundary(optimizer)
        if step % 3 == 0:
            with torch.no_grad():
                val = val or recorder._new_loader_state(val_it)
                fetch(val_it, val)
                time.sleep(0.03)  # the evaluation of that batch
    fetch(train_it, train)
    recorder._boundary(optimizer)
    shapes = [(len(v["batch_starts_s"]), v["batches_total"], v.get("continues", False)) for v in recorder.validations]
    assert shapes == [(1, 1, False), (1, 1, True), (1, 1, True)]
    assert all(v["end_s"] - v["start_s"] >= 0.03 for v in recorder.validations)
    walls = [it["end_s"] - it["start_s"] for it in recorder.iterations]
    assert len(walls) == 10 and max(walls[1:]) < 0.02  # the validations are in no iteration
    assert [e["iterations"] for e in recorder.epochs] == [10]  # one training pass: the validations end no epoch


def test_a_validation_pass_the_script_reads_to_its_end_is_one_pass(recorder):
    """The usual loop beside it: the whole validation loader after the epoch, then the next epoch's pass; the first
    training batch after it changes nothing."""
    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train, val = FakeLoader(8), FakeLoader(4)
    for _ in range(2):
        run_pass(recorder, train, optimizer)
        with torch.no_grad():
            run_pass(recorder, val)
    assert [(len(v["batch_starts_s"]), v["batches_total"]) for v in recorder.validations] == [(4, 4), (4, 4)]
    assert not any(v.get("continues") for v in recorder.validations)


def test_an_evaluation_loop_that_breaks_early_is_as_long_as_it_read_and_fresh_loaders_over_one_dataset_are_one(recorder):
    """makemore's evaluate(): a new DataLoader over the training set, then one over the test set, each left after 11
    batches (`if i >= max_batches: break`), every 500 steps. Each pass ends where the next begins or training resumes,
    as long as the batches it read, not its loader's 300; the loaders built anew over one dataset get one number,
    the two datasets two, and a number is not given again once its loader is gone."""
    import gc

    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train_set, test_set = object.__new__(FakeLoader), object.__new__(FakeLoader)  # two datasets (weakly referable)
    train = FakeLoader(1000)
    run_pass(recorder, train, optimizer, batches=3)
    for _ in range(2):
        for dataset in (train_set, test_set):
            loader = FakeLoader(300, batch_size=100)
            loader.dataset = dataset
            with torch.no_grad():
                run_pass(recorder, loader, batches=11)
            del loader
            gc.collect()
        run_pass(recorder, train, optimizer, batches=2)
    shapes = [(v["loader"], len(v["batch_starts_s"]), v["batches_total"]) for v in recorder.validations]
    assert shapes == [(1, 11, 11), (2, 11, 11), (1, 11, 11), (2, 11, 11)]
    assert all(v["end_s"] is not None for v in recorder.validations)


class StreamIterator(FakeIterator):
    """A DataLoader iterator over an IterableDataset without a length: len() raises, as torch's does."""

    def __len__(self) -> int:
        raise TypeError("IterableDataset has no len()")


def test_a_training_pass_over_a_stream_runs_to_its_end_to_count_the_epoch_then_validation_to_its_end(tmp_path, monkeypatch):
    """A loader over a stream (webdataset, a streaming dataset) has no length: sampling stopped inside its pass waits
    for the pass's end and counts its batches as the epoch's (cut short, predict could not scale the sample to a run);
    a validation pass over a stream is read to its end too, not cut after the batches to time."""
    import time

    import torch

    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "validation_batches": 2,
                                "epoch2_iterations": 2})
    recorder._torch = torch
    finished = []
    monkeypatch.setattr(recorder, "_finish", lambda reason: finished.append(reason))
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)

    def fetch(iterator, state):
        start = time.perf_counter()
        recorder._on_batch(iterator, state, start, time.perf_counter(), torch.zeros(16, 4))
        recorder._last_batch_state = state
        state.grad_at_last_batch = torch.is_grad_enabled()
        return state.truncate

    train_it = StreamIterator(FakeLoader(30))
    train = recorder._new_loader_state(train_it)
    for step in range(30):
        fetch(train_it, train)
        recorder._boundary(optimizer)
        if step == 9:  # the stop rule found the steady state here (_check_stop's loader path)
            assert recorder._stream_pass_to_wait_out()
            assert recorder._waiting_for_epoch_end and not recorder.epoch1_truncated and not train.truncate
    recorder._on_exhausted(train_it, train, time.perf_counter())
    assert recorder.epochs[0]["batches_per_epoch"] == 30 and recorder.loaders["train"]["batches_per_pass"] == 30
    assert recorder.epoch1_truncated and not recorder._waiting_for_epoch_end and recorder._truncated_epoch == 0
    assert not recorder.epochs[0]["truncated"]  # the whole pass ran
    val_it = StreamIterator(FakeLoader(7))
    with torch.no_grad():
        val = recorder._new_loader_state(val_it)
        assert not any(fetch(val_it, val) for _ in range(7))  # past the 2 batches to time: the pass's length unknown
        recorder._on_exhausted(val_it, val, time.perf_counter())
    assert [(len(v["batch_starts_s"]), v["batches_total"]) for v in recorder.validations] == [(7, 7)]


def test_a_stream_pass_that_outlasts_max_epoch_wait_is_cut_and_says_what_predict_needs(tmp_path):
    import time

    import torch

    recorder = _child.Recorder({"out_path": str(tmp_path / "raw.json"), "mode": "sampled", "max_epoch_wait_s": 30.0,
                                "max_profile_seconds": 10.0})
    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    train_it = StreamIterator(FakeLoader(10))
    train = recorder._new_loader_state(train_it)
    for _ in range(3):
        recorder._on_batch(train_it, train, time.perf_counter(), time.perf_counter(), torch.zeros(16, 4))
        recorder._last_batch_state = train
        recorder._boundary(optimizer)
    assert recorder._stream_pass_to_wait_out()
    recorder.marks["first_iteration_start"] = recorder.now() - 31.0
    recorder._check_stop(0)
    assert train.truncate and recorder.epoch1_truncated and not recorder._waiting_for_epoch_end
    assert "--iterations-per-epoch" in recorder.notes[-1]
    from trainwise.profile._loop_bound import LoopBound

    recorder._loop_bound = LoopBound("train.py:9: for x, y in loader", None, None, 3, None, None, ("loss < 0.01",),
                                     False, loader="stream")
    assert not recorder._stream_pass_to_wait_out()  # it leaves on its own test: no pass end to wait for
    recorder._loop_bound = None
    sized = FakeIterator(FakeLoader(10))  # a sized loader is cut as ever
    recorder.current_train_state = recorder._new_loader_state(sized)
    assert not recorder._stream_pass_to_wait_out()


def _zip_epoch(recorder, optimizer, first, second, steps=None):
    """One epoch of `for a, b in zip(first, second)` as the patched iterators report it: a batch of each, a step;
    the shorter pass's StopIteration ends it (`steps`: the script leaves after that many, as sampling's cut would)."""
    import time

    import torch

    iterators = [FakeIterator(first), FakeIterator(second)]
    states = [None, None]
    for step in range(min(first.batches, second.batches) if steps is None else steps):
        for k, iterator in enumerate(iterators):
            if states[k] is None:  # the patched __next__: a new pass settles an undecided one
                if recorder._undecided is not None:
                    recorder._settle_undecided()
                states[k] = recorder._new_loader_state(iterator)
            start = time.perf_counter()
            recorder._on_batch(iterator, states[k], start, time.perf_counter(), torch.zeros(16, 4))
            recorder._last_batch_state = states[k]
            states[k].grad_at_last_batch = True
        recorder._boundary(optimizer)
    if steps is None:
        shorter = 0 if first.batches <= second.batches else 1
        if shorter == 1:  # zip asks the first for its batch before the second runs out
            recorder._on_batch(iterators[0], states[0], time.perf_counter(), time.perf_counter(), torch.zeros(16, 4))
        recorder._on_exhausted(iterators[shorter], states[shorter], time.perf_counter())
    return states


@pytest.mark.parametrize("shorter_first", [True, False])
def test_two_training_loaders_zipped_are_one_pass_that_ends_with_the_shorter(recorder, shorter_first):
    """Domain adaptation's `zip(source_loader, target_loader)`: the first step looks like a look at a batch followed by
    the training loop; the first loader's second batch, one step later with gradients on, makes it the training pass's
    companion. Epochs end with the shorter loader (6 batches, not the other's 9), nothing is validation, and the
    companion's data wait is in the iterations."""
    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    short, long = FakeLoader(6), FakeLoader(9)
    first, second = (short, long) if shorter_first else (long, short)
    for _ in range(2):
        _zip_epoch(recorder, optimizer, first, second)
    assert [e["batches_per_epoch"] for e in recorder.epochs] == [6, 6]
    assert [e["iterations"] for e in recorder.epochs] == [6, 6] and all(e["end_s"] is not None for e in recorder.epochs)
    assert recorder.validations == [] and "val" not in recorder.loaders
    assert recorder.loaders["train"]["batches_per_pass"] == 6
    assert any(note.startswith("a second training DataLoader drawn in lockstep") for note in recorder.notes)
    assert not any("look at a batch" in note or "timed as validation" in note for note in recorder.notes)
    assert all(it["batches"] == 1 for it in recorder.iterations)  # the epoch counted in one loader's batches


def test_a_look_at_another_loaders_batch_before_training_stays_a_look(recorder):
    """`fixed, _ = next(iter(val_loader))` (a batch to plot), then the training loop: the val pass never draws again, so
    it is no companion."""
    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    run_pass(recorder, FakeLoader(4), batches=1)  # the look
    run_pass(recorder, FakeLoader(8), optimizer)
    assert [e["batches_per_epoch"] for e in recorder.epochs] == [8] and recorder.validations == []
    assert any("look at a batch" in note for note in recorder.notes)
    assert not any("lockstep" in note for note in recorder.notes)


def test_a_lockstep_loader_begun_again_when_it_runs_out_does_not_end_the_epoch(recorder):
    """FixMatch's two iterators: a labelled one (4 batches a pass) begun again at its StopIteration, an unlabelled one
    (10) drawn on; a step after each pair. The labelled pass running out ends nothing: the restarted pass is the
    companion at once, the epoch stays open and is the unlabelled pass's 10 batches."""
    import time

    import torch

    recorder._torch = torch
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    labelled, unlabelled = FakeLoader(4), FakeLoader(10)
    iterators = {"l": FakeIterator(labelled), "u": FakeIterator(unlabelled)}
    states: dict = {}

    def draw(name):
        if name not in states:
            if recorder._undecided is not None:
                recorder._settle_undecided()
            states[name] = recorder._new_loader_state(iterators[name])
        if name == "l" and states[name].batches == labelled.batches:  # runs out: begun again
            recorder._on_exhausted(iterators[name], states[name], time.perf_counter())
            iterators[name] = FakeIterator(labelled)
            del states[name]
            return draw(name)
        start = time.perf_counter()
        recorder._on_batch(iterators[name], states[name], start, time.perf_counter(), torch.zeros(16, 4))
        recorder._last_batch_state = states[name]

    for _ in range(9):
        draw("l")
        draw("u")
        recorder._boundary(optimizer)
    assert len(recorder.epochs) == 1 and recorder.epochs[0]["end_s"] is None
    assert recorder.epochs[0]["iterations"] == 9 and recorder.epochs[0]["batches_per_epoch"] == 10
    assert recorder.loaders["train"]["batches_per_pass"] == 10 and recorder.validations == []
    assert any(note.startswith("the lockstep loader is begun again") for note in recorder.notes)
