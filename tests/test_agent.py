"""The in-process agent's parts, fed synthetic event streams (milliseconds each)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys
from dataclasses import replace

import pytest

from trainwise.agent import stop_rule
from trainwise.agent.autograd_steps import BACKWARDS_BEFORE_GIVING_UP_ON_OPTIMIZER, BackwardIterations
from trainwise.agent.events import (BackwardEnd, EventBus, IterationEnd, ModelForward, OptimizerBuilt,
                                    OptimizerStep)
from trainwise.agent.regions import EvalRegions
from trainwise.agent.watchdog import NoIterationWatchdog

AGENT_DIR = pathlib.Path(__file__).resolve().parents[1] / "src" / "trainwise" / "agent"


def test_bus_delivers_in_order_and_drops_a_failing_subscriber():
    bus, seen = EventBus(), []
    bus.subscribe(lambda e: seen.append(("a", e.t_s)))

    def broken(event):
        raise RuntimeError("boom")

    bus.subscribe(broken)
    bus.subscribe(lambda e: seen.append(("b", e.t_s)))
    bus.emit(ProcessExitLike(1.0))
    bus.emit(ProcessExitLike(2.0))
    assert seen == [("a", 1.0), ("b", 1.0), ("a", 2.0), ("b", 2.0)]
    assert len(bus.notes) == 1 and "boom" in bus.notes[0]


class ProcessExitLike:
    def __init__(self, t_s):
        self.t_s = t_s


class LateIterationEnd(IterationEnd):
    """A subclass: a subscriber taking IterationEnd takes it too."""


def test_bus_hands_a_typed_subscriber_only_its_event_types():
    bus, typed, everything = EventBus(), [], []
    regions = EvalRegions()
    bus.subscribe(regions)  # its event_types: IterationEnd and ModelForward
    bus.subscribe(lambda e: typed.append(type(e).__name__), events=(OptimizerStep,))
    bus.emit(OptimizerStep(1.0, 7))
    bus.emit(IterationEnd(1.1, 0, "hooks"))
    assert typed == ["OptimizerStep"] and regions.iterations == 1
    bus.subscribe(lambda e: everything.append(type(e).__name__))  # added after the first emits: cache rebuilt
    bus.emit(LateIterationEnd(2.0, 1, "hooks"))
    bus.emit(ModelForward(2.5, False, False))
    assert regions.iterations == 2 and regions.current is not None  # the subclass reached it; a region opened
    assert everything == ["LateIterationEnd", "ModelForward"] and typed == ["OptimizerStep"]
    bus.unsubscribe(regions)
    bus.emit(IterationEnd(3.0, 2, "hooks"))
    assert regions.iterations == 2 and everything[-1] == "IterationEnd"


def test_manual_sgd_backward_passes_are_iterations():
    ends: list[float] = []
    detector = BackwardIterations(ends.append)
    for k in range(5):
        detector(BackwardEnd(t_s=float(k), reaches_parameters=True))
    detector(BackwardEnd(t_s=9.0, reaches_parameters=False))  # e.g. a gradient penalty on inputs only
    assert ends == [0.0, 1.0, 2.0, 3.0, 4.0] and detector.active


def test_with_an_optimizer_its_steps_delimit_iterations_not_backward_passes():
    ends: list[float] = []
    detector = BackwardIterations(ends.append)
    detector(OptimizerBuilt(0.0, optimizer_id=1))
    # LBFGS: one step, many forward/backward passes inside its closure
    for k in range(20):
        detector(BackwardEnd(t_s=0.1 * k, reaches_parameters=True))
    detector(OptimizerStep(2.0, optimizer_id=1))
    for k in range(200):
        detector(BackwardEnd(t_s=3.0 + k, reaches_parameters=True))
    assert ends == [] and not detector.active


def test_the_backward_detector_leaves_the_bus_at_the_first_optimizer_step():
    bus, ends, seen = EventBus(), [], []
    detector = bus.subscribe(BackwardIterations(ends.append))
    bus.subscribe(lambda e: seen.append(type(e).__name__), events=(OptimizerStep,))
    bus.emit(OptimizerBuilt(0.0, optimizer_id=1))
    bus.emit(OptimizerStep(1.0, optimizer_id=1))  # from here it has nothing left to decide
    for k in range(3):
        bus.emit(OptimizerStep(2.0 + k, optimizer_id=1))
        bus.emit(BackwardEnd(t_s=2.5 + k, reaches_parameters=True))
    assert detector.optimizer_steps == 1 and ends == [] and not bus.notes  # off the bus, not dropped as failed
    assert seen == ["OptimizerStep"] * 4  # the others still hear every step


def test_an_optimizer_that_never_steps_is_not_the_loops():
    ends: list[float] = []
    detector = BackwardIterations(ends.append)
    detector(OptimizerBuilt(0.0, optimizer_id=1))
    for k in range(BACKWARDS_BEFORE_GIVING_UP_ON_OPTIMIZER + 3):
        detector(BackwardEnd(t_s=float(k), reaches_parameters=True))
    assert len(ends) == 4 and ends[0] == BACKWARDS_BEFORE_GIVING_UP_ON_OPTIMIZER - 1


def test_reaches_parameters_follows_the_graph():
    torch = pytest.importorskip("torch")
    from trainwise.agent.autograd_steps import reaches_parameters

    model = torch.nn.Linear(3, 1)
    assert reaches_parameters(model(torch.randn(2, 3)).sum())
    x = torch.randn(2, 3, requires_grad=True)
    assert not reaches_parameters((x * 2).sum())  # an input's gradient only
    assert reaches_parameters([model(torch.randn(2, 3)).sum()])


class _FreshNode:
    """An autograd node whose next_functions are new wrapper objects on every access (torch 2.11 on
    Python 3.12): freed wrappers' ids get reused while the graph is walked."""

    def __init__(self, depth: int, leaf: object | None) -> None:
        self.depth, self.leaf = depth, leaf

    @property
    def next_functions(self):
        if self.depth == 0:
            return ((_FreshLeaf(self.leaf), 0),) if self.leaf is not None else ()
        return tuple((_FreshNode(self.depth - 1, self.leaf if branch == 1 else None), 0) for branch in range(2))


class _FreshLeaf:
    next_functions = ()

    def __init__(self, variable: object) -> None:
        self.variable = variable


class _Param:
    requires_grad = True


def test_graph_walk_survives_wrappers_made_fresh_on_each_access():
    from trainwise.agent.autograd_steps import graph_reaches_parameter

    # the parameter sits behind the second branch at every level: visited last, after many wrappers died
    assert graph_reaches_parameter([_FreshNode(8, _Param())], _Param)
    assert not graph_reaches_parameter([_FreshNode(8, None)], _Param)


def regions_stream(epochs: int, iterations: int, val_calls: int):
    """A no-DataLoader loop: `iterations` training steps (forward then backward), then `val_calls`
    no_grad eval calls, per epoch; one time unit per event."""
    t = 0.0
    index = 0
    for _ in range(epochs):
        for _ in range(iterations):
            yield ModelForward(t, grad_enabled=True, training=True)
            t += 1
            yield IterationEnd(t, index, "autograd")
            index += 1
            t += 1
        for _ in range(val_calls):
            yield ModelForward(t, grad_enabled=False, training=False)
            t += 1


def test_eval_regions_mark_validation_between_epochs():
    starts, ends = [], []
    regions = EvalRegions(starts.append, ends.append)
    for event in regions_stream(epochs=3, iterations=4, val_calls=5):
        regions(event)
    assert len(starts) == 3 and len(ends) == 2  # the last region is still open when the stream ends
    assert [len(r.batch_starts_s) for r in regions.regions] == [5, 5, 5]
    first = regions.regions[0]
    assert first.start_s == 8.0 and first.end_s == 13.0


def test_model_calls_before_training_are_not_validation():
    regions = EvalRegions()
    regions(ModelForward(0.0, grad_enabled=False, training=False))  # a look at the untrained model
    assert not regions.regions and regions.count == 0
    regions(IterationEnd(1.0, 0, "optimizer"))
    regions(ModelForward(2.0, grad_enabled=True, training=False))  # eval mode alone is validation too
    assert len(regions.regions) == 1


def test_watchdog_fires_once_after_its_limit_without_iterations():
    clock = [0.0]
    fired = []
    seen = [False]
    dog = NoIterationWatchdog(30.0, lambda: seen[0], lambda: fired.append(clock[0]), clock=lambda: clock[0])
    dog.started_s = 0.0  # started without its thread: checked by hand
    clock[0] = 29.9
    assert not dog.check()
    clock[0] = 30.0
    assert dog.check() and dog.check() and fired == [30.0]
    quiet = NoIterationWatchdog(30.0, lambda: True, lambda: fired.append("no"), clock=lambda: 100.0)
    quiet.started_s = 0.0
    assert not quiet.check() and fired == [30.0]


def test_watchdog_does_not_count_the_time_torch_compile_spends_compiling():
    # nanoGPT compiled on the 2-core VM with an empty inductor cache: over 30 s before its first step
    clock, compiling = [0.0], [False]
    fired = []
    dog = NoIterationWatchdog(30.0, lambda: False, lambda: fired.append(clock[0]), clock=lambda: clock[0],
                              compiling=lambda: compiling[0])
    dog.started_s = 0.0
    clock[0] = 10.0
    assert not dog.check()
    compiling[0], clock[0] = True, 50.0  # 40 s inside the compiler
    assert not dog.check() and dog.compiling_s == 40.0
    compiling[0], clock[0] = False, 69.9
    assert not dog.check()
    clock[0] = 70.0
    assert dog.check() and fired == [70.0]


def test_a_thread_inside_torch_compiles_compiler_is_seen_and_one_running_compiled_code_is_not(tmp_path):
    import os
    import threading

    from trainwise.agent.watchdog import a_thread_is_compiling

    def thread_in(path: str) -> tuple[threading.Thread, threading.Event]:
        namespace: dict = {}
        exec(compile("def wait(event):\n    event.wait(5)\n", path, "exec"), namespace)
        event = threading.Event()
        thread = threading.Thread(target=namespace["wait"], args=(event,), daemon=True)
        thread.start()
        return thread, event

    site = str(tmp_path / "site-packages" / "torch") + os.sep
    running, stop_running = thread_in(site + os.path.join("_dynamo", "eval_frame.py"))
    try:
        assert not a_thread_is_compiling()
        compiling, stop_compiling = thread_in(site + os.path.join("_dynamo", "convert_frame.py"))
        assert a_thread_is_compiling() and not a_thread_is_compiling(skip_ident=compiling.ident)
        stop_compiling.set()
        compiling.join()
        assert not a_thread_is_compiling()
    finally:
        stop_running.set()


def test_watchdog_thread_calls_back():
    import threading

    done = threading.Event()
    dog = NoIterationWatchdog(0.05, lambda: False, done.set, poll_s=0.01)
    dog.start()
    assert done.wait(2.0)


SETTINGS = stop_rule.StopSettings(min_iterations=20, max_iterations=5000, max_seconds=60.0, min_seconds=0.0,
                                  min_budget_seconds=1.0, budget_fraction=0.02, validation_batches=10,
                                  epoch2_iterations=5)


def test_stop_rule_stops_when_stable_or_capped():
    steady = [0.05] * 40
    assert stop_rule.decide(steady, 2.0, SETTINGS).reason == "stable"
    assert stop_rule.decide(steady[:10], 0.5, SETTINGS).reason is None
    noisy = [0.05 * (1 + 0.5 * ((k * 7919) % 13 - 6) / 6) for k in range(100)]
    assert stop_rule.decide(noisy, 61.0, SETTINGS).reason == "time_budget"
    assert stop_rule.decide(noisy, 5.0, stop_rule.StopSettings(min_iterations=20, max_iterations=100)).reason == \
        "max_iterations"


def test_a_stable_verdict_waits_for_the_minimum_sampling_time():
    settings = stop_rule.StopSettings(min_iterations=10, min_seconds=1.5, target_relative_ci=0.5)
    times = [0.002] * 50  # millisecond iterations are "stable" after a handful
    assert stop_rule.decide(times, 0.1, settings).reason is None
    assert stop_rule.decide(times, 1.5, settings).reason == "stable"
    assert stop_rule.decide(times[:9], 2.0, settings).reason is None  # and for at least min_iterations


def test_the_budget_is_not_checked_before_its_floor_of_sampled_seconds():
    settings = stop_rule.StopSettings(min_iterations=10, min_budget_seconds=0.8, target_relative_ci=1e-9)
    times = [0.001 * (1 + (k % 3)) for k in range(40)]
    budget = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=2000, batches_per_iteration=1.0,
                                    init_s=5.0, now_s=5.2)
    assert stop_rule.decide(times, 0.2, settings, budget).reason is None
    assert stop_rule.decide(times, 0.8, settings, budget).reason == "cost_budget"


def test_steps_of_seconds_stop_for_the_budget_after_five_steady_ones_not_twenty():
    # The PyTorch examples' graph attention network: 300 full-batch epochs of ~3-s steps (and 1 s of validation);
    # 2 % of its ~20-minute run is ~24 s, which twenty steps would overrun three times over
    times = [2.8, 2.4, 2.3, 2.5, 2.2, 2.4]  # a warm-up step, then five steady ones (11.8 s)
    budget = stop_rule.BudgetInputs(planned_epochs=300, batches_per_epoch=1, batches_per_iteration=1.0,
                                    init_s=8.5, now_s=8.5 + sum(times) + 5 * 1.0)
    assert stop_rule.decide(times[:5], sum(times[:5]), SETTINGS, budget).reason is None  # four steady ones
    assert stop_rule.decide(times, sum(times), SETTINGS, budget).reason == "cost_budget"
    # the user's floor: --min-budget-iterations 20 waits for twenty as before
    assert stop_rule.decide(times, sum(times), replace(SETTINGS, min_budget_iterations=20), budget).reason is None
    # five 0.3-s steps (1.5 s) would see one level of a wandering host: such steps keep the twenty
    short = [0.4] + [0.25, 0.35] * 5
    short_budget = replace(budget, planned_epochs=1, batches_per_epoch=938, now_s=3.0 + sum(short))
    assert stop_rule.decide(short, sum(short), SETTINGS, short_budget).reason is None
    assert stop_rule.decide(short + [0.25, 0.35] * 5, sum(short) + 3.0, SETTINGS, short_budget).reason == "cost_budget"
    assert stop_rule.first_check_iterations(SETTINGS) == 6
    assert stop_rule.first_check_iterations(replace(SETTINGS, min_iterations=3)) == 3


def test_an_lbfgs_loop_that_spent_its_budget_converging_samples_twenty_steps_past_it():
    # LBFGS (max_iter 6) over a small LSTM: 54 steps of six closure evaluations (~90 ms), then one evaluation
    # (~14 ms) a step for the rest of 7,200 steps; converging took more than the 2 % budget on its own
    evaluations = [6] * 54 + [1] * 7
    times = [0.090] * 54 + [0.014] * 7
    assert stop_rule.closure_converging_steps(evaluations) == 54
    assert stop_rule.closure_converging_steps([6] * 10) == 0  # still converging: nothing settled yet
    assert stop_rule.closure_converging_steps([1, 1, 2, 1, 1, 1]) == 0  # one longer line search is no phase
    assert stop_rule.closure_converging_steps([6, None, 1, 1, 1]) == 0  # steps without counts
    budget = stop_rule.BudgetInputs(planned_epochs=7200, batches_per_epoch=1, batches_per_iteration=1.0,
                                    init_s=8.5, now_s=8.5 + sum(times))
    # seven steady steps were enough for the old count (61 steps in all); they are not past the converging phase
    assert stop_rule.decide(times, sum(times), SETTINGS, budget, converging_steps=54).reason is None
    more = times + [0.014] * 13
    done = replace(budget, now_s=8.5 + sum(more))
    assert stop_rule.decide(more, sum(more), SETTINGS, done, converging_steps=54).reason == "cost_budget"


def test_the_next_epoch_is_timed_for_at_most_one_epoch():
    one_step_epochs = stop_rule.BudgetInputs(planned_epochs=300, batches_per_epoch=1, batches_per_iteration=1.0,
                                             init_s=8.5, now_s=30.0)
    assert stop_rule.epoch2_iterations_to_time(one_step_epochs, SETTINGS) == 1
    # gradient accumulation: 10 batches, 4 per step, are 3 steps (the last one partial)
    assert stop_rule.epoch2_iterations_to_time(replace(one_step_epochs, batches_per_epoch=10,
                                                       batches_per_iteration=4.0), SETTINGS) == 3
    assert stop_rule.epoch2_iterations_to_time(replace(one_step_epochs, batches_per_epoch=500), SETTINGS) == 5
    assert stop_rule.epoch2_iterations_to_time(None, SETTINGS) == 5  # the epoch's length unknown
    # and the budget keeps back only that much of it
    times = [3.0] * 8
    short = stop_rule._after_sampling_s(times, one_step_epochs, SETTINGS)
    long = stop_rule._after_sampling_s(times, replace(one_step_epochs, batches_per_epoch=500), SETTINGS)
    assert long - short == pytest.approx(4 * 3.0)


def warming_up(n: int) -> list[float]:
    """A step time that settles slowly: 62 ms falling to 43 ms over ~200 iterations (rnn_sa_lstm on the
    16-core host), with a little noise so that the stability test does not pass early."""
    return [0.043 + 0.019 * max(0.0, 1 - k / 200) + 0.012 * ((k * 7919) % 11 - 5) / 5 for k in range(n)]


def test_start_up_that_exceeds_the_budget_alone_does_not_cut_sampling_to_the_minimum():
    # A 4-minute run (1325 iterations/epoch x 3 epochs at ~45 ms) whose start-up took 10 s: 2 % of the
    # run is ~4.6 s, already spent by the start-up. The old rule stopped at the first check (25
    # iterations, all warm-up); sampling now gets its own share of the budget.
    times = warming_up(25)
    budget = stop_rule.BudgetInputs(planned_epochs=3, batches_per_epoch=1325, batches_per_iteration=1.0,
                                    init_s=10.0, now_s=10.0 + sum(times))
    assert stop_rule.decide(times, sum(times), SETTINGS, budget).reason is None
    first_stop = None
    for n in range(20, 400):
        times = warming_up(n)
        budget = stop_rule.BudgetInputs(planned_epochs=3, batches_per_epoch=1325, batches_per_iteration=1.0,
                                        init_s=10.0, now_s=10.0 + sum(times))
        decision = stop_rule.decide(times, sum(times), SETTINGS, budget)
        if decision.reason is not None:
            first_stop = (n, decision.reason, sum(times), stop_rule.predicted_full_run_s(times, budget))
            break
    n, reason, sampling_s, predicted_s = first_stop
    assert reason == "cost_budget" and n > 25  # past the old rule's stop at 25
    # the sampling costs at most its share of the budget
    assert sampling_s <= stop_rule.SAMPLING_SHARE * SETTINGS.budget_fraction * predicted_s


def test_the_budget_aims_under_its_cap_by_the_margin():
    # A planned run of 1000 iterations of 10 ms after 0.02 s of start-up: 10.02 s; a 2 % budget is
    # 0.2004 s, aimed at 0.95 × 0.2004 = 0.19038 s (the full run it divides by is a prediction itself).
    settings = stop_rule.StopSettings(budget_fraction=0.02, validation_batches=0, epoch2_iterations=0, end_reserve_s=0.0)
    # It stops before the iteration (10 ms) that would cross that aim.
    times = [0.01] * 20
    for now_s, over in ((0.180, False), (0.1825, True)):
        budget = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=1000, batches_per_iteration=1.0,
                                        init_s=0.02, now_s=now_s)
        assert stop_rule.over_budget(times, now_s - 0.02, budget, settings) is over
    assert stop_rule.BUDGET_MARGIN == pytest.approx(0.05)
    # A start-up of 0.5 s spent the budget alone: sampling still gets its share of the (now 10.5-s) run's.
    cap_s = 0.95 * 0.02 * 10.5
    share_s = stop_rule.SAMPLING_SHARE * cap_s - 0.01  # less the next iteration
    for sampling_s, over in ((0.99 * share_s, False), (1.01 * share_s, True)):
        budget = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=1000, batches_per_iteration=1.0,
                                        init_s=0.5, now_s=0.5 + sampling_s)
        assert stop_rule.over_budget(times, sampling_s, budget, settings) is over


def test_with_a_cheap_start_up_the_whole_profile_stays_within_the_budget():
    times = warming_up(60)
    budget = stop_rule.BudgetInputs(planned_epochs=30, batches_per_epoch=1325, batches_per_iteration=1.0,
                                    init_s=2.0, now_s=2.0 + sum(times))
    # 2 % of a ~30-minute run is ~36 s: 60 iterations (~3 s) go on sampling
    assert stop_rule.decide(times, sum(times), SETTINGS, budget).reason is None
    short = stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=100, batches_per_iteration=1.0,
                                   init_s=2.0, now_s=2.0 + sum(times))
    assert stop_rule.decide(times, sum(times), SETTINGS, short).reason == "cost_budget"


def test_with_the_run_known_a_steady_sample_goes_on_to_average_the_hosts_wander():
    # 4-ms steps, steady after 3 s. A 2-hour run (2 % = 144 s) samples 30 s before stopping; a 5-minute
    # run's budget (6 s) stops it first; without the planned run it stops at the first steady verdict.
    settings = stop_rule.StopSettings(min_iterations=20, min_seconds=3.0, averaging_seconds=30.0, target_relative_ci=0.5)
    times = [0.004] * 1000

    def run_of(seconds: float, sampled_s: float) -> stop_rule.BudgetInputs:
        return stop_rule.BudgetInputs(planned_epochs=1, batches_per_epoch=round(seconds / 0.004),
                                      batches_per_iteration=1.0, init_s=3.0, now_s=3.0 + sampled_s)

    assert stop_rule.decide(times, 4.0, settings, run_of(7200, 4.0)).reason is None
    assert stop_rule.decide(times, 30.0, settings, run_of(7200, 30.0)).reason == "stable"
    assert stop_rule.decide(times, 4.0, settings, run_of(300, 4.0)).reason == "cost_budget"
    assert stop_rule.decide(times, 4.0, settings).reason == "stable"
    unknown = stop_rule.BudgetInputs(planned_epochs=None, batches_per_epoch=None, batches_per_iteration=1.0,
                                     init_s=3.0, now_s=7.0)
    assert stop_rule.decide(times, 4.0, settings, unknown).reason == "stable"
    off = stop_rule.StopSettings(min_iterations=20, min_seconds=3.0, averaging_seconds=0.0, target_relative_ci=0.5)
    assert stop_rule.decide(times, 4.0, off, run_of(7200, 4.0)).reason == "stable"
    capped = stop_rule.StopSettings(min_iterations=20, min_seconds=3.0, averaging_seconds=30.0, max_seconds=5.0,
                                    target_relative_ci=0.5)
    assert stop_rule.decide(times, 5.0, capped, run_of(7200, 5.0)).reason == "stable"  # --max-seconds is the window


def _imports_of(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_agent_imports_only_the_standard_library_torch_and_itself():
    # trainwise.core.stats: standard library only, enforced by .importlinter's agent-side-stdlib contract
    allowed_trainwise = {"trainwise.agent", "trainwise.core", "trainwise.core.stats", "trainwise.core.precisions",
                         "trainwise.errors"}
    # trace/characterisation.py turns the traced fields into core's pydantic model in trainwise's own process;
    # the job's side (trace/step.py) keeps plain fields, so a profile in an environment without pydantic has them
    allowed_outside_the_job = {"trainwise.core.workload"}
    for path in AGENT_DIR.rglob("*.py"):
        for name in _imports_of(path):
            top = name.split(".")[0]
            if top == "trainwise":
                allowed = allowed_trainwise | (allowed_outside_the_job if path.name == "characterisation.py" else set())
                assert name in allowed or name.startswith("trainwise.agent."), (path.name, name)
            else:
                assert top == "torch" or top in sys.stdlib_module_names or top == "__future__", (path.name, name)


def test_the_in_process_recorder_runs_without_trainwises_dependencies(tmp_path):
    """What the profiled interpreter loads (the bootstrap, the recorder, the agent) needs the standard
    library and torch only: with pydantic, typer, rich, numpy... hidden, it imports."""
    blocker = tmp_path / "block.py"
    blocker.write_text(
        "import sys, importlib.abc\n"
        "BLOCKED = {'pydantic', 'typer', 'rich', 'numpy', 'pandas', 'jinja2', 'matplotlib', 'sklearn', 'fsspec'}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError('blocked ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import trainwise.profile._child, trainwise.agent.autograd_steps, trainwise.agent.regions\n"
        "import trainwise.agent.stop_rule, trainwise.agent.watchdog, trainwise.agent.torch_patch\n"
        "import trainwise.agent.comm_timing, trainwise.agent.sink, trainwise.run._stop_rule\n"
        "import trainwise.agent.trace.step\n"
        "print('ok', sorted(m for m in sys.modules if m.split('.')[0] in BLOCKED))\n")
    out = subprocess.run([sys.executable, str(blocker)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok []"


def test_import_watcher_runs_around_the_first_import_only(tmp_path, monkeypatch):
    from trainwise.agent.import_watch import watch_import

    (tmp_path / "tw_watched_module.py").write_text("import builtins\nbuiltins.tw_watched_seen.append('body')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    seen = []
    monkeypatch.setattr(builtins, "tw_watched_seen", seen, raising=False)
    watch_import("tw_watched_module", lambda: seen.append("after"), before=lambda: seen.append("before"))
    watch_import("tw_never_imported_module", lambda: seen.append("wrong"))
    import tw_watched_module  # noqa: F401

    assert seen == ["before", "body", "after"]
    del sys.modules["tw_watched_module"]
    import tw_watched_module  # noqa: F401,F811 - a second import: the watcher has stepped aside

    assert seen == ["before", "body", "after", "body"]
    sys.modules.pop("tw_watched_module", None)
    sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "name", None) != "tw_never_imported_module"]


def test_a_muted_bus_hands_nothing_on_and_keeps_its_subscribers():
    bus, seen = EventBus(), []
    bus.subscribe(lambda e: seen.append(e.t_s))
    with bus.muted():
        bus.emit(ProcessExitLike(1.0))
        bus.subscribe(lambda e: seen.append(-e.t_s))  # one added meanwhile is kept too
    bus.emit(ProcessExitLike(2.0))
    assert seen == [2.0, -2.0]


def test_the_agent_makes_few_python_calls_on_each_training_step(tmp_path):
    """On a 0.45-ms CPU step each of trainwise's Python calls cost ~1-3 us (docs/accuracy.md, client scripts): the
    per-step bookkeeping is counted here, deterministically, so that it cannot grow unnoticed."""
    pytest.importorskip("torch")
    from trainwise.profile.runner import ProfileOptions, run_profile

    script = pathlib.Path(__file__).parent / "scripts" / "count_step_calls.py"
    plain_counts, agent_counts = tmp_path / "plain.json", tmp_path / "agent.json"
    subprocess.run([sys.executable, str(script), str(plain_counts)], check=True)
    run_profile([sys.executable, str(script), str(agent_counts)],
                ProfileOptions(mode="full", characterise=False, host_noise=False), quiet=True)
    import json

    plain, agent = json.loads(plain_counts.read_text()), json.loads(agent_counts.read_text())
    assert plain["trainwise_calls"] == 0
    # batch request 2 (the recorder's entry itself, its batch bookkeeping), backward 1 (its entry), optimizer step 5
    # (the hook, the bus, the recorder's step handler, the iteration's end, its log)
    assert 1 <= agent["trainwise_calls"] <= 8, agent  # 0 would mean the count missed trainwise's code
    assert agent["python_calls"] - plain["python_calls"] <= 9, (plain, agent)  # 9 now: the step's event built too
