"""The epoch count a script sets for itself: read from argparse, a command line, or a framework."""

from __future__ import annotations

import argparse

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainwise.plan.synthetic import synthetic_profile
from trainwise.profile.schema import ScriptEpochs, script_epochs_of
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
