"""The training loop's length read from its source (trainwise.profile._loop_length): a loop without a DataLoader
otherwise shows its epoch's length only at the epoch's end."""

from __future__ import annotations

import argparse
import os

import pytest
import torch

import trainwise
from trainwise.profile._loop_length import read_loop_length

SKIPPED = (os.path.dirname(torch.__file__), os.path.dirname(trainwise.__file__))
args = argparse.Namespace(bptt=20)
train_data = torch.zeros(2001, 4)


def step(iterations_done: int):
    """The training step, in a helper the loop calls (as `loss.backward()` is, further down the stack)."""
    return read_loop_length(iterations_done, SKIPPED)


def test_a_range_loop_over_tensor_slices_is_read_with_its_position_checked():
    seen = []
    for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
        seen.append(step(batch + 1))
        if batch == 2:
            break
    passes, source = seen[0]
    assert passes == 100 and seen == [seen[0]] * 3
    assert "range(0, train_data.size(0) - 1, args.bptt)" in source and "test_loop_length.py" in source
    for i in range(0, len(train_data) - 1, 20):
        if i == 40:
            assert read_loop_length(3, SKIPPED)[0] == 100
            # two training iterations per pass (the loop's counter says pass 3, the recorder 7): not this loop's length
            assert read_loop_length(7, SKIPPED) is None
            break


def _loop_over_own_range():
    def range(*bounds):  # noqa: A001 - a script's own `range`
        return [0, 1, 2]

    for _ in range(3):
        return read_loop_length(1, SKIPPED)


def test_what_runs_the_scripts_code_is_not_evaluated():
    calls = []

    class Config:
        @property
        def steps(self):
            calls.append(1)
            return 5

    config = Config()
    for _ in range(config.steps):
        assert read_loop_length(1, SKIPPED) is None  # a property: not read
        break
    assert calls == [1]  # only the loop's own evaluation

    assert _loop_over_own_range() is None
    for _ in [0, 1, 2]:  # not a range: its length is not read
        assert read_loop_length(1, SKIPPED) is None
        break


@pytest.mark.parametrize("steps", [1, 7])
def test_a_closure_inside_the_loop_finds_the_loop_around_its_call(steps):
    # an LBFGS closure runs the backward pass: its own frame has no loop; the frame that calls the step has one
    def closure():
        return read_loop_length(k + 1, SKIPPED)

    for k in range(steps):
        found = closure()
    assert found[0] == steps


def _loop_in_own_tqdm():
    def tqdm(iterable, **options):  # a script's own `tqdm`: not tqdm's, so not read through
        return list(iterable)

    for _ in tqdm(range(30)):
        return read_loop_length(1, SKIPPED)


def test_a_range_in_a_tqdm_progress_bar_is_the_loops_range():
    import tqdm
    from tqdm.auto import trange

    for step in tqdm.tqdm(range(args.bptt * 3), desc="training", disable=True):
        assert read_loop_length(step + 1, SKIPPED)[0] == 60
        break
    for step in trange(5, 45, disable=True):
        passes, source = read_loop_length(step - 4, SKIPPED)
        assert passes == 40 and "trange(5, 45" in source
        break
    for i, step in enumerate(tqdm.tqdm(range(12), disable=True)):
        assert read_loop_length(i + 1, SKIPPED)[0] == 12
        break
    assert _loop_in_own_tqdm() is None
