"""The command line as a package: `plan` takes one typed request, `plan save` and `plan history` are
commands of their own (the old --save/--history flags still work, with a note), and the epoch count
is decided in one place (trainwise.predict.epochs)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainwise.core.profile import ScriptEpochs
from trainwise.errors import TrainwiseError
from trainwise.plan.request import PlanRequest
from trainwise.plan.synthetic import synthetic_profile
from trainwise.predict.epochs import DEFAULT_EPOCH_OPTIONS, decide_epochs


def _with_epochs(epochs: int | None, command: list[str] | None = None):
    update = {"script_epochs": None if epochs is None else ScriptEpochs(epochs=epochs, source="test")}
    if command is not None:
        update["command"] = command
    return synthetic_profile().model_copy(update=update)


# ---------------------------------------------------------------- the epoch count: one place, in order

def test_the_users_epochs_come_first():
    decision = decide_epochs(epochs=3, epoch_options=(5, 10), epoch_options_given=True, profiles=[("p", _with_epochs(7))])
    assert decision.headline == 3 and decision.counts == [3] and decision.says is None


def test_the_training_commands_flag_comes_before_the_scripts_own_count():
    decision = decide_epochs(epochs=None, epoch_options=DEFAULT_EPOCH_OPTIONS, epoch_options_given=False,
                             profiles=[("p", _with_epochs(7))], command=["python", "t.py", "--epochs", "2"])
    assert decision.headline == 2 and decision.says == "headline: 2 epochs, the training command's --epochs"
    with pytest.raises(TrainwiseError, match="--epochs 4 but the training command trains --epochs 2"):
        decide_epochs(epochs=4, epoch_options=(), epoch_options_given=False, command=["python", "t.py", "--epochs", "2"])


def test_a_command_without_epochs_cannot_take_the_count_a_profiled_command_gave():
    profiled = _with_epochs(5, command=["python", "t.py", "--epochs", "5"])
    with pytest.raises(TrainwiseError, match="the training command gives no --epochs, but profile p.json read its 5"):
        decide_epochs(epochs=None, epoch_options=(), epoch_options_given=False, profiles=[("p.json", profiled)],
                      command=["python", "t.py"])
    assert decide_epochs(epochs=8, epoch_options=(), epoch_options_given=False, profiles=[("p.json", profiled)],
                         command=["python", "t.py"]).headline == 8


def test_the_scripts_own_count_unless_options_are_given():
    profiles = [("a", _with_epochs(7)), ("b", _with_epochs(7))]
    own = decide_epochs(epochs=None, epoch_options=DEFAULT_EPOCH_OPTIONS, epoch_options_given=False, profiles=profiles,
                        what="epochs")
    assert own.counts == [7] and own.says.startswith("epochs: 7, set by the script itself (test)")
    given = decide_epochs(epochs=None, epoch_options=(5, 10), epoch_options_given=True, profiles=profiles)
    assert given.headline is None and given.counts == [5, 10] and given.says is None


def test_scripts_that_disagree_fall_back_to_the_options_and_say_why():
    profiles = [("a", _with_epochs(8)), ("b", _with_epochs(9))]
    plan = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False, profiles=profiles)
    assert plan.headline is None and "headline: the largest --epoch-options; the profiles' scripts set 8, 9" in plan.says
    predict = decide_epochs(epochs=None, epoch_options=(5, 10, 20), epoch_options_given=False, profiles=profiles,
                            what="epochs")
    assert predict.counts == [5, 10, 20] and predict.says.startswith("epochs: 5,10,20 (--epoch-options)")


def test_epochs_from_a_full_run_and_its_conflicts():
    with pytest.raises(TrainwiseError, match="--epochs and --epochs-from both give the epoch count"):
        decide_epochs(epochs=2, epoch_options=(), epoch_options_given=False, epochs_from=_with_epochs(None))
    with pytest.raises(TrainwiseError, match="--epochs-from needs a profile recorded with --full"):
        decide_epochs(epochs=None, epoch_options=(), epoch_options_given=False, epochs_from=_with_epochs(None))
    with pytest.raises(TrainwiseError, match="--epochs must be a positive whole number"):
        decide_epochs(epochs=0, epoch_options=(), epoch_options_given=False)


# ---------------------------------------------------------------- the typed request

def test_the_request_is_checked_once_when_built():
    with pytest.raises(TrainwiseError, match="--all-plans only changes the --json output"):
        PlanRequest(all_plans=True)
    with pytest.raises(TrainwiseError, match="drop --single-machine"):
        PlanRequest(distributed=False, local_continent="eu")
    with pytest.raises(TrainwiseError, match="drop --single-machine"):
        PlanRequest(distributed=False, node_counts=(2, 3))
    with pytest.raises(ValueError):
        PlanRequest(no_such_option=1)  # a misspelt field is refused, not dropped
    request = PlanRequest(profile_paths=("a.json",), report=None, out_dir="o")
    assert str(request.report_dir) == "o/report" and [str(p) for p in request.input_paths()][:1] == ["a.json"]


def test_a_saved_plan_for_n_machines_ranks_n_machines_too():
    request = PlanRequest(node_counts=(2, 4), saved_nodes=3)
    assert request.distributed_options().node_counts == (2, 3, 4)


# ---------------------------------------------------------------- plan save / plan history

@pytest.fixture
def gpu_profile(tmp_path):
    return synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02).save(tmp_path / "v100.json")


@pytest.mark.long
def test_plan_save_and_the_old_flag_write_the_same_plan(tmp_path, capsys, gpu_profile):
    from trainwise.cli import main

    base = ["--profile", str(gpu_profile), "--catalog", "packaged", "--cloud", "aws", "--single-machine", "--no-spot",
            "--epoch-options", "10", "--json", "--out-dir", str(tmp_path / "out")]
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    assert main(["plan", "save", str(new), *base, "--", "python", "t.py", "--epochs", "3"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["primary_epochs"] == 3 and "note:" not in captured.err
    assert main(["plan", *base, "--save", str(old), "--", "python", "t.py", "--epochs", "3"]) == 0
    captured = capsys.readouterr()
    assert f"note: `trainwise plan --save {old}` still works; it is now `trainwise plan save {old}`" in captured.err
    written = [json.loads(path.read_text()) for path in (new, old)]
    for document in written:
        document.pop("created_at", None)
    assert written[0]["prediction"] == written[1]["prediction"] and written[0]["command"] == written[1]["command"]


def test_options_before_a_subcommand_are_refused(tmp_path, capsys, gpu_profile):
    from trainwise.cli import main

    code = main(["plan", "--profile", str(gpu_profile), "save", str(tmp_path / "x.json")])
    err = capsys.readouterr().err
    assert code == 2 and "options go after `trainwise plan save`, not before it: move --profile" in err
    assert not (tmp_path / "x.json").exists()


def test_plan_history_is_a_command_and_the_flag_still_works(tmp_path, capsys, monkeypatch):
    from trainwise.cli import main

    monkeypatch.setenv("TRAINWISE_HISTORY_DIR", str(tmp_path / "history"))
    assert main(["plan", "history"]) == 2  # no launched run yet: the one-line error of `launch`'s history
    assert "no past runs" in capsys.readouterr().err
    assert main(["plan", "--history"]) == 2
    assert "no past runs" in capsys.readouterr().err


def test_python_dash_m_trainwise_cli_is_the_same_entry_point():
    run = subprocess.run([sys.executable, "-m", "trainwise.cli", "profile", "--iterations", "3"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 2 and "missing `--` before the training command" in run.stderr
