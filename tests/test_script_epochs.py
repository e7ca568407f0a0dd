"""The epoch count a script sets for itself: read from argparse, a command line, or a framework."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwise.plan.synthetic import synthetic_profile
from trainwise.profile.schema import ScriptEpochs, script_epochs_disagreement, script_epochs_of
from trainwise.profile.script_epochs import epochs_in_command, epochs_in_namespace, whole_epochs


@pytest.mark.parametrize("command, expected", [
    (["python", "train.py", "--epochs", "30"], (30, "--epochs")),
    (["python", "train.py", "--lr", "0.1", "--epochs=7"], (7, "--epochs")),
    (["python", "train.py", "--num-epochs", "4"], (4, "--num-epochs")),
    (["python", "train.py", "--max_epochs", "12"], (12, "--max_epochs")),
    (["python", "train.py", "--num_train_epochs", "3.0"], (3, "--num_train_epochs")),
    (["python", "train.py", "--num_train_epochs", "2.5"], None),  # a fraction of an epoch is no epoch count
    (["python", "train.py", "--epochs", "0"], None),
    (["python", "train.py", "--epochs"], None),
    (["python", "train.py", "--epochs", "many"], None),
    (["python", "train.py", "--epoch-size", "100"], None),
    (["python", "train.py"], None),
    (["python", "dcgan.py", "--niter", "25"], (25, "--niter")),
    (["python", "super_resolution.py", "--nEpochs", "2"], (2, "--nEpochs")),
    (["python", "train.py", "--n_epochs", "6"], (6, "--n_epochs")),
    (["python", "train.py", "--n-epochs", "6"], (6, "--n-epochs")),
    (["python", "train.py", "--max-epochs", "8"], (8, "--max-epochs")),
    (["python", "train.py", "--num_epochs", "11"], (11, "--num_epochs")),
])
def test_epochs_in_command(command, expected):
    assert epochs_in_command(command) == expected


def test_epochs_in_namespace_reads_the_parsed_arguments():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-epochs", type=int, default=9)
    parser.add_argument("--batch-size", type=int, default=16)
    assert epochs_in_namespace(parser.parse_args([])) == (9, "the script's argparse argument num_epochs=9")
    assert epochs_in_namespace(parser.parse_args(["--num-epochs", "2"]))[0] == 2
    assert epochs_in_namespace(argparse.Namespace(epochs=True)) is None  # a flag, not a count
    assert epochs_in_namespace(argparse.Namespace(epochs=None, max_epochs=5)) == (5, "the script's argparse argument max_epochs=5")
    assert epochs_in_namespace(object()) is None


@given(st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=True), st.text(max_size=3), st.booleans(), st.none()))
def test_whole_epochs_is_a_positive_integer_or_none(value):
    epochs = whole_epochs(value)
    assert epochs is None or (isinstance(epochs, int) and epochs >= 1 and epochs == value)


def test_profiles_agree_on_the_scripts_epochs_or_give_none():
    def with_epochs(epochs):
        profile = synthetic_profile()
        if epochs is None:
            return profile
        return profile.model_copy(update={"script_epochs": ScriptEpochs(epochs=epochs, source="test")})

    assert script_epochs_of([with_epochs(8), with_epochs(8)]).epochs == 8
    assert script_epochs_of([with_epochs(8), with_epochs(9)]) is None
    assert script_epochs_of([with_epochs(8), with_epochs(None)]) is None
    assert script_epochs_of([]) is None
    # and why not, when some profile did read a count
    assert script_epochs_disagreement([with_epochs(8), with_epochs(8)]) is None
    assert script_epochs_disagreement([with_epochs(None), with_epochs(None)]) is None
    assert script_epochs_disagreement([with_epochs(9), with_epochs(8)]) == "the profiles' scripts set 8, 9 epochs: not one count to use"
    assert "(1 set none that could be read)" in script_epochs_disagreement([with_epochs(8), with_epochs(None)])


def test_predict_says_why_it_tabulates_the_epoch_options_when_the_scripts_disagree(tmp_path, capsys):
    """It fell back to 5,10,20 without a word when two profiles' scripts set different epoch counts."""
    import json

    from trainwise.cli import main

    paths = []
    for epochs in (8, 9):
        profile = synthetic_profile().model_copy(update={"script_epochs": ScriptEpochs(epochs=epochs, source="test")})
        paths.append(str(profile.save(tmp_path / f"p{epochs}.json")))
    out = tmp_path / "pred.json"
    assert main(["predict", *paths, "--json", str(out)]) == 0
    assert "the profiles' scripts set 8, 9 epochs: not one count to use: pass --epochs N" in " ".join(capsys.readouterr().out.split())
    assert {row["epochs"] for row in json.loads(out.read_text())} == {5, 10, 20}
    gpu = []
    for epochs in (8, 9):
        profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02, batch_size=16 * epochs)
        profile = profile.model_copy(update={"script_epochs": ScriptEpochs(epochs=epochs, source="test")})
        gpu += ["--profile", str(profile.save(tmp_path / f"gpu{epochs}.json"))]
    assert main(["plan", *gpu, "--catalog", "packaged", "--cloud", "aws", "--single-machine", "--json",
                 "--out-dir", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["primary_epochs"] == 20
    assert "headline: the largest --epoch-options; the profiles' scripts set 8, 9 epochs" in " ".join(captured.err.split())


def test_plan_from_a_profile_heads_with_the_scripts_epochs(tmp_path, capsys):
    from trainwise.cli import main

    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02)
    profile = profile.model_copy(update={"script_epochs": ScriptEpochs(epochs=7, source="the script's argparse argument epochs=7")})
    path = profile.save(tmp_path / "p.json")
    base = ["plan", "--profile", str(path), "--catalog", "packaged", "--cloud", "aws", "--single-machine", "--json",
            "--out-dir", str(tmp_path / "out")]
    import json

    assert main(base) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["primary_epochs"] == 7
    assert "headline: 7 epochs, set by the script itself" in captured.err
    assert main([*base, "--epochs", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["primary_epochs"] == 10
    assert main([*base, "--epoch-options", "5,10"]) == 0  # the options given: the largest heads, as before
    assert json.loads(capsys.readouterr().out)["primary_epochs"] == 10


@pytest.mark.parametrize("command, expected", [
    (["python", "train.py", "--epochs", "2", "--epochs", "4"], (4, "--epochs")),  # argparse takes the last
    (["python", "train.py", "--epochs", "2", "--epochs=0"], None),
])
def test_epochs_in_command_takes_the_last_flag_as_argparse_does(command, expected):
    assert epochs_in_command(command) == expected


def test_an_argument_without_type_reads_as_text():
    from trainwise.profile.script_epochs import argument_epochs

    assert [argument_epochs(v) for v in ("30", " 4 ", "3.0", "2.5", "0", "many", "")] == [30, 4, 3, None, None, None, None]
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", default=3)  # no type=: the command line's value is the string "5"
    assert epochs_in_namespace(parser.parse_args(["--epochs", "5"]))[0] == 5


@pytest.fixture
def watched_argparse(monkeypatch):
    """The profile child's argparse hook on a real Recorder, undone after the test."""
    from trainwise.profile import _child

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", argparse.ArgumentParser.parse_known_args)
    recorder = _child.Recorder({"out_path": ""})
    _child._watch_argparse(recorder)
    return recorder


def _import_library(tmp_path, name, source):
    """Run `source` as an installed package's module (its file in a site-packages folder)."""
    import importlib.util

    folder = tmp_path / "site-packages"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    spec.loader.exec_module(importlib.util.module_from_spec(spec))


LIBRARY_PARSER = """
import argparse
parser = argparse.ArgumentParser(add_help=False)
parser.add_argument("--epochs", type=int, default=100)
parser.parse_known_args()
"""


@pytest.mark.parametrize("argv, expected", [([], 3), (["--num-epochs", "2"], 2), (["--epochs", "12"], 3)])
def test_a_library_parser_does_not_give_the_scripts_epochs(tmp_path, monkeypatch, watched_argparse, argv, expected):
    """A library that parses the command line with its own `epochs` (100) before or after the script's
    parser: the script's `--num-epochs` is the run's count (the first reading was kept: the library's)."""
    monkeypatch.setattr("sys.argv", ["train.py", *argv])
    _import_library(tmp_path, "lib_before", LIBRARY_PARSER)
    parser = argparse.ArgumentParser()
    parser.add_argument("--num-epochs", type=int, default=3)
    parser.parse_known_args()
    _import_library(tmp_path, "lib_after", LIBRARY_PARSER)
    helper = argparse.ArgumentParser()  # a helper parsing a list of its own, not the command line
    helper.add_argument("--epochs", type=int, default=1)
    helper.parse_args(["--epochs", "9"])
    assert watched_argparse.script_epochs == {"epochs": expected,
                                              "source": f"the script's argparse argument num_epochs={expected}"}


def test_only_a_library_parser_names_epochs(tmp_path, monkeypatch, watched_argparse):
    monkeypatch.setattr("sys.argv", ["train.py"])
    _import_library(tmp_path, "lib_only", LIBRARY_PARSER)
    assert watched_argparse.script_epochs == {
        "epochs": 100, "source": "the argparse argument epochs=100 parsed by lib_only.py (an installed package)"}


@pytest.mark.parametrize("argv, expected", [(["train"], 4), (["train", "--epochs", "6"], 6), (["eval"], None)])
def test_subcommands_read_the_chosen_subparsers_epochs(monkeypatch, watched_argparse, argv, expected):
    monkeypatch.setattr("sys.argv", ["main.py", *argv])
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("train").add_argument("--epochs", type=int, default=4)
    commands.add_parser("eval").add_argument("--checkpoint", default="last.pt")
    parser.parse_args()
    assert (watched_argparse.script_epochs or {}).get("epochs") == expected


def test_a_framework_that_is_not_epoch_bound_drops_the_argparse_reading():
    from trainwise.profile import _child

    recorder = _child.Recorder({"out_path": ""})
    recorder.note_script_epochs(7, "the script's argparse argument epochs=7", rank=(True, True, True))
    recorder.note_not_epoch_bound("Trainer(max_steps=100)")
    assert recorder.script_epochs is None and recorder.planned_epochs is None
    assert recorder.notes == ["no epoch count read: the training loop is not bound by one (Trainer(max_steps=100)); the "
                              "script's argparse argument epochs=7 is not what it runs; give predict and plan --epochs N"]
    recorder.note_script_epochs(7, "the script's argparse argument epochs=7", rank=(True, True, True))
    recorder.note_script_epochs(5, "a second fit", framework=True)
    assert recorder.script_epochs is None  # the first framework statement is final


def test_a_saved_command_without_epochs_cannot_take_the_profiled_commands(tmp_path, capsys):
    """A profile of `train.py --epochs 5` read 5; `plan --save -- python train.py` trains the script's
    default, which nothing read: refused in one line, unless plan is given --epochs."""
    from trainwise.cli import main

    profile = synthetic_profile(host="gpubox", device_name="Tesla V100-SXM2-16GB", iteration_s=0.02)
    profile = profile.model_copy(update={"command": ["python", "train.py", "--epochs", "5"],
                                         "script_epochs": ScriptEpochs(epochs=5, source="the script's argparse argument epochs=5")})
    path = profile.save(tmp_path / "p.json")
    base = ["plan", "--profile", str(path), "--catalog", "packaged", "--cloud", "aws", "--single-machine", "--no-spot",
            "--json", "--out-dir", str(tmp_path / "out"), "--save", str(tmp_path / "plan.json")]
    assert main([*base, "--", "python", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "the training command gives no --epochs, but profile" in err and "Traceback" not in err
    assert main([*base, "--epochs", "8", "--", "python", "train.py"]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["primary_epochs"] == 8
    assert main([*base, "--", "python", "train.py", "--epochs", "2", "--epochs", "1"]) == 0
    captured = capsys.readouterr()
    assert __import__("json").loads(captured.out)["primary_epochs"] == 1
    assert "headline: 1 epoch, the training command's --epochs" in captured.err


def test_the_epoch_argument_the_user_gave_wins_over_a_defaulted_one():
    from trainwise.profile.script_epochs import argparse_reading

    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--niter", type=int, default=25)
    parser.add_argument("--nEpochs", type=int, default=3)
    argv = ["--niter", "4"]
    namespace = parser.parse_args(argv)
    assert epochs_in_namespace(namespace, parser) == (4, "the script's argparse argument niter=4")
    epochs, source, rank = argparse_reading(parser, namespace, None, caller_file="/home/u/train.py", argv=argv)
    assert (epochs, rank) == (4, (True, True, True))
    # Nothing given: the unambiguous name first.
    assert epochs_in_namespace(parser.parse_args([]), parser)[0] == 10
    assert epochs_in_namespace(parser.parse_args(["--nEpochs", "7"]), parser)[0] == 7
