"""A loop bound by a step budget (`--max_steps`, nanoGPT's `max_iters`) and a script configured by
module-level settings (`EPOCHS = 10`): read without changing the script, turned into epochs by predict."""

from __future__ import annotations

import argparse
import json
import sys
import types

import pytest

from trainwise.core.profile import ScriptEpochs, ScriptIterations
from trainwise.plan.synthetic import synthetic_profile
from trainwise.predict.epochs import decide_epochs
from trainwise.profile.script_epochs import argparse_reading, globals_reading


@pytest.mark.parametrize("settings, epochs, iterations", [
    ({"EPOCHS": 10}, (10, "the script's module-level EPOCHS = 10"), None),
    ({"num_epochs": 4, "lr": 0.1}, (4, "the script's module-level num_epochs = 4"), None),
    ({"max_iters": 2000, "eval_interval": 250}, None, (2000, "the script's module-level max_iters = 2000")),
    ({"MAX_STEPS": 5e3}, None, (5000, "the script's module-level MAX_STEPS = 5000")),
    ({"epochs": True, "max_iters": [1, 2]}, None, None),  # a flag and a list are no counts
    ({"epochs": 0, "num_steps": -1}, None, None),
    ({"epochs": 2.5}, None, None),  # a fraction of an epoch
    ({"max_iter": 20}, None, None),  # LBFGS's closure evaluations a step, not the run's steps
    ({"n_steps": 2048, "steps": 100}, None, None),  # a rollout's length, a bare word: too general
    ({"torch": types.ModuleType("torch")}, None, None),
])
def test_module_level_settings(settings, epochs, iterations):
    assert globals_reading(settings) == (epochs, iterations)


def test_argparse_step_budget_the_user_gave_wins():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_steps", type=int, default=1000)
    parser.add_argument("--total-steps", type=int, default=50)
    parsed = parser.parse_args(["--total-steps", "300"])
    found = argparse_reading(parser, parsed, ["--total-steps", "300"], caller_file="/home/u/train.py",
                             argv=["--total-steps", "300"], iterations=True)
    assert found == (300, "the script's argparse argument total_steps=300", (True, True, True))
    library = argparse_reading(parser, parser.parse_args([]), None, caller_file="/usr/lib/python3/site-packages/lib.py",
                               argv=[], iterations=True)
    assert library == (1000, "the argparse argument max_steps=1000 parsed by lib.py (an installed package)",
                       (True, False, False))
    # an epoch reading of the same parse names no epochs
    assert argparse_reading(parser, parsed, None, caller_file="/home/u/train.py", argv=[]) is None


def _recorder():
    from trainwise.profile import _child

    return _child.Recorder({"out_path": ""})


def test_the_recorder_reads_the_scripts_globals_below_argparse(monkeypatch):
    main = types.ModuleType("__main__")
    main.max_iters, main.EPOCHS = 600, 3
    monkeypatch.setitem(sys.modules, "__main__", main)
    recorder = _recorder()
    recorder.read_module_settings()
    assert recorder.script_iterations == {"iterations": 600, "source": "the script's module-level max_iters = 600"}
    assert recorder.script_epochs == {"epochs": 3, "source": "the script's module-level EPOCHS = 3"}
    recorder = _recorder()
    recorder.note_script_epochs(7, "the script's argparse argument epochs=7", rank=(True, True, True))
    recorder.note_script_iterations(900, "the script's argparse argument max_steps=900", rank=(True, True, False))
    recorder.read_module_settings()  # argparse readings stay
    assert recorder.script_epochs["epochs"] == 7 and recorder.script_iterations["iterations"] == 900


def test_a_framework_step_limit_is_kept_as_the_scripts_steps():
    from trainwise.profile.framework_sink import FrameworkSession

    sink = FrameworkSession("huggingface")
    recorder = sink.recorder
    recorder.note_script_iterations(900, "argparse", rank=(True, True, True))
    sink.not_epoch_bound("Hugging Face TrainingArguments(max_steps=120)", steps=120)
    assert recorder.script_iterations == {"iterations": 120, "source": "Hugging Face TrainingArguments(max_steps=120)"}
    assert recorder.script_epochs is None
    assert "predict and plan take its 120 optimizer steps as epochs when they make whole ones" in recorder.notes[-1]
    recorder.note_script_iterations(5, "later argparse", rank=(True, True, True))
    assert recorder.script_iterations["iterations"] == 120  # the framework's statement is final


def _profile(per_epoch=250, steps=None, epochs=None):
    profile = synthetic_profile()
    update = {"dataset": profile.dataset.model_copy(update={"train_batches_per_epoch": per_epoch, "batches_per_iteration": 1.0})}
    if steps is not None:
        update["script_iterations"] = ScriptIterations(iterations=steps, source="the script's module-level max_iters = "
                                                                                f"{steps}")
    if epochs is not None:
        update["script_epochs"] = ScriptEpochs(epochs=epochs, source="the script's argparse argument epochs=" f"{epochs}")
    return profile.model_copy(update=update)


def _decide(*profiles, **kwargs):
    return decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                         profiles=[(f"p{i}", p) for i, p in enumerate(profiles)], what="epochs", **kwargs)


def test_a_step_budget_makes_whole_epochs_of_the_profiles_epoch_length():
    decision = _decide(_profile(250, steps=2000))
    assert decision.headline == 8
    assert decision.says.startswith("epochs: 8 epochs, the script's 2,000 optimizer steps (the script's module-level "
                                    "max_iters = 2000) over 250 iterations an epoch")
    assert _decide(_profile(250, steps=2010)).headline == 8  # 0.5 % off: whole epochs, said so
    assert "2,000 steps" in _decide(_profile(250, steps=2010)).says
    short = _decide(_profile(250, steps=100))  # 0.4 epochs: one epoch of the 100 steps
    assert (short.headline, short.iterations_per_epoch) == (1, 100) and "0.40 epochs: predicted as 1 epoch of 100 iterations" in short.says
    odd = _decide(_profile(1000, steps=2500))  # 2.5 epochs: spread over the 3 it begins
    assert (odd.headline, odd.iterations_per_epoch, odd.counts) == (3, 833, [3])
    assert "2.50 epochs: predicted as 3 epochs of 833 iterations (2,499 steps" in odd.says
    assert _decide(_profile(1000, steps=2500), iterations_per_epoch=500).headline == 5  # --iterations-per-epoch
    # plan ranks whole epochs: it says how many the steps make and asks
    planned = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                            profiles=[("p", _profile(1000, steps=2500))])
    assert planned.headline is None and planned.iterations_per_epoch is None
    assert "2.50 epochs, not a whole number: pass --epochs 3 for an upper bound, or --epochs 2" in planned.says


def test_the_first_limit_reached_ends_the_run():
    assert _decide(_profile(250, steps=2000, epochs=3)).headline == 3  # 750 steps: the epochs end it first
    assert _decide(_profile(250, steps=500, epochs=30)).headline == 2  # the step budget ends it first
    assert _decide(_profile(None, steps=500, epochs=30)).headline == 30  # no epoch length: the epoch count
    unknown = _decide(_profile(None, steps=500))
    assert unknown.headline is None and "does not know one epoch's iterations" in unknown.says
    assert _decide(_profile(250, steps=2000), _profile(500, steps=2000)).headline is None  # a batch sweep: they differ
    given = decide_epochs(epochs=4, epoch_options=(5,), epoch_options_given=False, profiles=[("p", _profile(250, steps=2000))])
    assert given.headline == 4 and given.says is None  # --epochs wins


def test_predict_takes_the_step_budget(tmp_path, capsys):
    from trainwise.cli import main

    path = _profile(250, steps=2000).save(tmp_path / "p.json")
    out = tmp_path / "pred.json"
    assert main(["predict", str(path), "--json", str(out)]) == 0
    assert "epochs: 8 epochs, the script's 2,000 optimizer steps" in " ".join(capsys.readouterr().out.split())
    assert [row["epochs"] for row in json.loads(out.read_text())] == [8]
    path = _profile(1000, steps=2500).save(tmp_path / "odd.json")
    assert main(["predict", str(path), "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert (row["epochs"], row["iterations_per_epoch"]) == (3, 833)
    whole = _profile(1000).save(tmp_path / "whole.json")  # the same profile, 3 epochs of 1000: 501 more steps
    assert main(["predict", str(whole), "--epochs", "3", "--json", str(tmp_path / "w.json")]) == 0
    (longer,) = json.loads((tmp_path / "w.json").read_text())
    assert longer["predicted_s"] > row["predicted_s"] > longer["predicted_s"] * 2 / 3


class _Node:
    """A config node of the user's own code (minGPT's CfgNode keeps its settings as attributes)."""

    def __init__(self, **settings):
        self.__dict__.update(settings)


def test_settings_kept_by_a_config_object_the_script_holds():
    import torch

    config = _Node(system=_Node(seed=3407), trainer=_Node(max_iters=5000, batch_size=64), model=_Node(n_layer=6))
    assert globals_reading({"config": config, "os": types}) == (
        None, (5000, "the script's config.trainer.max_iters = 5000"))
    assert globals_reading({"args": argparse.Namespace(epochs=12)}) == ((12, "the script's args.epochs = 12"), None)
    # the shallowest wins: a module-level setting over a config's
    assert globals_reading({"max_iters": 300, "config": config})[1] == (300, "the script's module-level max_iters = 300")
    # two holders that disagree at one depth: not one budget to trust
    assert globals_reading({"a": _Node(max_steps=10), "b": _Node(max_steps=20)}) == (None, None)
    # deeper than two attributes, an installed package's object, a large dict: not looked into
    assert globals_reading({"c": _Node(d=_Node(e=_Node(max_steps=7)))}) == (None, None)
    layer = torch.nn.Linear(2, 2)
    layer.max_steps = 40
    assert globals_reading({"layer": layer}) == (None, None)
    vocabulary = {f"w{i}": i for i in range(5000)} | {"num_epochs": 3}
    assert globals_reading({"vocabulary": vocabulary}) == (None, None)
    assert globals_reading({"settings": {"num_epochs": 3}}) == ((3, "the script's settings.num_epochs = 3"), None)
    cycle = _Node()
    cycle.me = cycle
    cycle.num_steps = 9
    assert globals_reading({"cycle": cycle})[1] == (9, "the script's cycle.num_steps = 9")


def test_the_cost_budget_knows_a_run_from_its_step_budget():
    from trainwise.agent import stop_rule

    times = [0.1] * 20
    steps_only = stop_rule.BudgetInputs(planned_epochs=None, batches_per_epoch=312_500_000, batches_per_iteration=1.0,
                                        init_s=2.0, now_s=5.0, planned_iterations=1500)
    assert stop_rule.run_known(steps_only)
    assert stop_rule.predicted_full_run_s(times, steps_only) == pytest.approx(2.0 + 150.0)
    # epochs and steps: whichever ends the run first
    both = stop_rule.BudgetInputs(planned_epochs=2, batches_per_epoch=400, batches_per_iteration=2.0, init_s=2.0, now_s=5.0,
                                  planned_iterations=1500)
    assert stop_rule.predicted_full_run_s(times, both) == pytest.approx(2.0 + 0.1 * 400)
    neither = stop_rule.BudgetInputs(planned_epochs=None, batches_per_epoch=400, batches_per_iteration=1.0, init_s=2.0,
                                     now_s=5.0)
    assert not stop_rule.run_known(neither) and stop_rule.predicted_full_run_s(times, neither) is None


def test_a_saved_plans_command_sets_its_own_step_budget():
    from trainwise.profile.script_epochs import epochs_in_command

    assert epochs_in_command(["python", "train.py", "--max_iters=4000"], steps=True) == (4000, "--max_iters")
    assert epochs_in_command(["python", "train.py", "--max-steps", "90", "--epochs", "3"], steps=True) == (90, "--max-steps")
    assert epochs_in_command(["python", "train.py", "--max_iters=4000"]) is None
    decision = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False,
                             profiles=[("p", _profile(250, steps=2000))], command=["python", "train.py", "--max_iters=4000"])
    assert decision.headline == 16
    assert "4,000 optimizer steps (the training command's --max_iters 4000) over 250 iterations" in decision.says


def test_an_endless_sampler_without_a_step_budget_is_pointed_out():
    from trainwise.predict.same_machine import trainwise_estimate

    endless = _profile(312_500_000)
    note = trainwise_estimate(endless, 1).note
    assert "an epoch of 312,500,000 iterations" in note and "--epochs 1 --iterations-per-epoch STEPS" in note
    assert "endless sampler" not in trainwise_estimate(endless, 1, iterations_per_epoch=1500).note
    assert "endless sampler" not in trainwise_estimate(_profile(312_500_000, steps=1500), 1).note
    assert "endless sampler" not in trainwise_estimate(_profile(250), 1).note
