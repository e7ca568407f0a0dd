"""The source reader for training loops with no length in their header (trainwise.profile._loop_bound): each test runs
a real loop of that shape here and reads it at its step's line, as the recorder does at a step's end."""

from __future__ import annotations

import argparse
import itertools
import os
from itertools import count

from trainwise.profile._loop_bound import read_loop_bound


class _Done(Exception):
    """Leaves a test loop without a statement the reader would take as the loop's exit."""


def _stop_after(readings: list, passes: int = 2) -> None:
    if len(readings) >= passes:
        raise _Done


def _run(loop) -> list:
    readings: list = []
    try:
        loop(readings)
    except _Done:
        pass
    return readings


def test_a_count_loop_that_breaks_at_a_step_count_runs_that_many_steps():
    def loop(readings):
        budget = 60_000
        for step in itertools.count(1):
            readings.append(read_loop_bound(step, ()))
            if step >= budget:
                break
            _stop_after(readings)

    first, later = _run(loop)
    assert later.steps == 60_000 and first.steps == 60_000
    assert first.advanced_with(later) and later.counter == "step"
    assert "itertools.count(1)" in later.where and later.bound == "step >= budget" and not later.other_exits


def test_a_check_before_the_step_leaves_before_the_last_step_runs():
    def loop(readings):
        for step in count(1):
            if step > 500:
                break
            readings.append(read_loop_bound(step, ()))
            _stop_after(readings)

    assert _run(loop)[-1].steps == 500


def test_a_while_true_loop_with_its_own_counter_as_nanogpt_writes_it():
    settings = {"max_iters": 2000}

    def loop(readings):
        iter_num = 0
        while True:
            readings.append(read_loop_bound(iter_num + 1, ()))  # the step, at iter_num 0 on the first pass
            iter_num += 1
            if iter_num > settings_max:
                break
            _stop_after(readings)

    settings_max = settings["max_iters"]
    first, later = _run(loop)
    assert later.steps == 2001  # iter_num 0..2000 each run a step, as nanoGPT's loop does
    assert first.advanced_with(later) and later.counter == "iter_num"


def test_of_two_counters_the_one_an_exit_compares_is_the_loops():
    max_iters = 5_000

    def loop(readings):
        iter_num, local_iter_num = 0, 0
        while True:
            readings.append(read_loop_bound(local_iter_num + 1, ()))
            iter_num += 1
            local_iter_num += 1
            if iter_num % 250 == 0:
                pass  # nanoGPT's evaluation
            if iter_num > max_iters:
                break
            _stop_after(readings)

    first, later = _run(loop)
    assert later.counter == "iter_num" and later.steps == 5_001 and first.advanced_with(later)
    assert later.periodic and later.period == 250


def test_a_while_loop_whose_test_is_the_step_budget_read_from_argparse():
    args = argparse.Namespace(max_steps=300)

    def loop(readings):
        global_step = 0
        while global_step < args.max_steps:
            global_step += 1
            readings.append(read_loop_bound(global_step, ()))
            _stop_after(readings)

    first, later = _run(loop)
    assert later.steps == 300 and later.bound == "global_step >= args.max_steps"
    assert first.advanced_with(later)


def test_a_loop_that_ends_when_training_decides_has_no_step_budget_and_says_what_ends_it():
    threshold = 195.0

    def loop(readings):
        running_reward = 10.0
        for episode in count(1):
            running_reward = 0.05 * 20 + 0.95 * running_reward
            readings.append(read_loop_bound(episode, ()))
            if running_reward > threshold:
                break
            _stop_after(readings)

    reading = _run(loop)[-1]
    assert reading.steps is None and reading.other_exits == ("`running_reward > threshold`",)
    assert "has no length in its code: it ends when `running_reward > threshold`" in reading.describe()
    assert not reading.periodic


def test_a_step_count_or_a_loss_bounds_the_run_by_the_count_and_names_the_other_exit():
    def loop(readings):
        loss = 1.0
        for step in count(0):
            readings.append(read_loop_bound(step + 1, ()))
            loss *= 0.99
            if step + 1 >= 10_000 or loss < 1e-3:
                break
            if step >= 7_000:
                break
            _stop_after(readings)

    reading = _run(loop)[-1]
    # `step + 1 >= 10_000` is not a plain counter test; `step >= 7_000` is (passes 0..7000 run their step)
    assert reading.steps == 7_001 and reading.bound == "step >= 7000"
    assert "`loss < 0.001`" in reading.other_exits


def test_a_return_inside_a_function_ends_its_loop_and_a_nested_loops_break_does_not():
    def train(readings):
        step = 0
        while True:
            for micro in range(4):
                if micro >= 2:
                    break  # leaves the inner loop only
            step += 1
            readings.append(read_loop_bound(step, ()))
            if step == 1_000:
                return
            _stop_after(readings)

    first, later = _run(train)
    assert later.steps == 1_000 and first.advanced_with(later)


def test_an_episode_loop_as_reinforce_writes_it_ends_on_its_reward_not_its_rollouts_break():
    # pytorch/examples' reinforcement_learning/reinforce.py: the rollout's `break` leaves the inner loop only
    reward_threshold, log_interval = 475.0, 10

    def loop(readings):
        running_reward = 10.0
        for i_episode in count(1):
            for t in range(1, 10_000):
                terminated = t >= 3
                if terminated:
                    break
            running_reward = 0.05 * t + 0.95 * running_reward
            readings.append(read_loop_bound(i_episode, ()))
            if i_episode % log_interval == 0:
                pass
            if running_reward > reward_threshold:
                break
            _stop_after(readings)

    reading = _run(loop)[-1]
    assert reading.steps is None and reading.other_exits == ("`running_reward > reward_threshold`",)
    assert reading.periodic and reading.period == 10 and reading.passes_to_next_period() == 8


def test_a_test_every_k_passes_is_read_as_periodic_with_its_period():
    every = 250

    def loop(readings):
        for it in count(1):
            readings.append(read_loop_bound(it, ()))
            if it % every == 0:
                pass  # a validation or a log line
            if it >= 5_000:
                break
            _stop_after(readings)

    reading = _run(loop)[-1]
    assert reading.periodic and reading.period == 250 and reading.steps == 5_000
    assert reading.passes_to_next_period() == 248  # read at it == 2: the next multiple of 250 is 248 passes away


def test_a_counter_that_advances_more_than_once_an_iteration_is_not_taken_as_the_step_count():
    def loop(readings):
        micro = 0
        for step in count(1):
            micro += 4  # not an increment by one: the loop's own counter is `step`, read at iterations 1 and 3
            readings.append(read_loop_bound(1 + 2 * len(readings), ()))
            if step >= 100:
                break
            _stop_after(readings)

    first, later = _run(loop)
    assert not first.advanced_with(later)  # two passes, but two iterations recorded between them


def test_a_loop_with_a_length_in_its_header_or_a_count_that_is_not_itertools_is_left_to_the_range_reader():
    def ranged(readings):
        for step in range(100):
            readings.append(read_loop_bound(step + 1, ()))
            _stop_after(readings)

    def shadowed(readings):
        count = range  # noqa: F841 - a name `count` that is not itertools.count
        for step in count(100):
            readings.append(read_loop_bound(step + 1, ()))
            _stop_after(readings)

    assert _run(ranged) == [None, None]
    assert _run(shadowed) == [None, None]


def test_no_loop_around_the_step_reads_nothing():
    import _pytest
    import pluggy

    # pytest's own frames (its loops over hooks) are a library's, as torch's and trainwise's are in a profile
    assert read_loop_bound(1, (os.path.dirname(_pytest.__file__), os.path.dirname(pluggy.__file__))) is None


def test_a_count_loop_that_an_epoch_loop_runs_again_gives_an_epochs_length_not_the_runs():
    def loop(readings):
        for epoch in range(3):
            for step in count(1):
                readings.append(read_loop_bound(step, ()))
                if step >= 400:
                    break
                _stop_after(readings)

    first, later = _run(loop)
    assert later.steps == 400 and later.header_counter and later.enclosed and later.per_epoch
    assert "400 iterations each time it runs" in later.describe()


def test_a_global_counter_inside_an_epoch_loop_is_the_runs_budget():
    def loop(readings):
        step = 0
        for epoch in count():
            while True:
                step += 1
                readings.append(read_loop_bound(step, ()))
                if step >= 900:
                    return
                _stop_after(readings)

    reading = _run(loop)[-1]
    assert reading.steps == 900 and reading.enclosed and not reading.header_counter and not reading.per_epoch


def _stream_loader():
    import torch

    class Stream(torch.utils.data.IterableDataset):  # no __len__: a stream
        def __iter__(self):
            while True:
                yield torch.zeros(2)

    return torch.utils.data.DataLoader(Stream(), batch_size=4)


def test_a_loop_over_a_stream_is_read_only_when_asked_and_its_enumerate_index_is_an_epochs_length():
    loader = _stream_loader()

    def loop(readings, loaders):
        for i, batch in enumerate(loader):
            readings.append(read_loop_bound(i + 1, (), loaders=loaders))
            if i >= 1_000:
                break
            _stop_after(readings)

    assert _run(lambda readings: loop(readings, False)) == [None, None]
    first, later = _run(lambda readings: loop(readings, True))
    assert later.loader == "stream" and later.steps == 1_001 and later.per_epoch and first.advanced_with(later)


def test_a_global_step_over_a_stream_or_a_sized_loader_is_the_runs_budget():
    import torch

    stream, sized = _stream_loader(), torch.utils.data.DataLoader(torch.zeros(64, 2), batch_size=4)

    def loop(readings, loader):
        global_step = 0
        for batch in loader:
            global_step += 1
            readings.append(read_loop_bound(global_step, (), loaders=True))
            if global_step == 5_000:
                break
            _stop_after(readings)

    reading = _run(lambda readings: loop(readings, stream))[-1]
    assert reading.loader == "stream" and reading.steps == 5_000 and not reading.per_epoch
    reading = _run(lambda readings: loop(readings, sized))[-1]
    assert reading.loader == "sized" and reading.steps == 5_000 and not reading.per_epoch


def test_an_index_that_leaves_a_sized_loaders_pass_early_is_an_epochs_length():
    import torch

    loader = torch.utils.data.DataLoader(torch.zeros(400, 2), batch_size=4)  # 100 batches

    def loop(readings):
        for batch_idx, batch in enumerate(loader):
            readings.append(read_loop_bound(batch_idx + 1, (), loaders=True))
            if batch_idx >= 24:  # a --limit-batches flag
                break
            _stop_after(readings)

    reading = _run(loop)[-1]
    assert reading.loader == "sized" and reading.steps == 25 and reading.per_epoch


def _cycle(loader):
    while True:
        for data in loader:
            yield data


def test_a_range_loop_that_draws_batches_with_next_runs_its_range_whatever_the_loaders_passes():
    """lucidrains' `for i in tqdm.tqdm(range(NUM_BATCHES)): loss = model(next(train_loader))` over an endless cycle:
    read only beside a DataLoader (`loaders`), its range is the run's when no loop runs it again, and a loader whose
    passes restart under it (a small dataset) leaves the run's own count to match."""
    import torch
    import tqdm

    train_loader = _cycle(torch.utils.data.DataLoader(torch.zeros(16, 2), batch_size=4))  # 4 batches a pass
    num_batches = 20_000

    def loop(readings, loaders, epoch_iterations):
        for i in tqdm.tqdm(range(num_batches), mininterval=10.0, desc="training", disable=True):
            next(train_loader)
            readings.append(read_loop_bound(epoch_iterations(i), (), loaders=loaders, run_iterations=i + 1))
            _stop_after(readings)

    assert _run(lambda readings: loop(readings, False, lambda i: i + 1)) == [None, None]
    first, later = _run(lambda readings: loop(readings, True, lambda i: i + 1))
    assert later.range_header and later.steps == 20_000 and later.bound is None and not later.per_epoch
    assert first.advanced_with(later) and later.source.startswith("the training loop's range (")
    assert "runs 20,000 iterations" in later.describe()

    def restarted(readings):
        for i in tqdm.tqdm(range(num_batches), disable=True):
            next(train_loader)
            if i >= 5:  # the loader's passes are 4 batches: at the run's 6th and 7th iterations its epoch's 2nd and 3rd
                readings.append(read_loop_bound(i % 4 + 1, (), loaders=True, run_iterations=i + 1))
                _stop_after(readings)

    first, later = _run(restarted)
    assert later.steps == 20_000 and not later.header_counter and not later.per_epoch and first.advanced_with(later)


def test_a_range_loop_an_epoch_loop_runs_again_is_an_epochs_length_and_a_counter_off_by_one_reads_nothing():
    import torch

    loader = torch.utils.data.DataLoader(torch.zeros(4_000, 2), batch_size=4)

    def loop(readings, offset):
        iterator = iter(loader)
        for epoch in range(3):
            for step in range(250):
                next(iterator)
                readings.append(read_loop_bound(step + 1 + offset, (), loaders=True, run_iterations=step + 1 + offset))
                _stop_after(readings)

    later = _run(lambda readings: loop(readings, 0))[-1]
    assert later.range_header and later.steps == 250 and later.per_epoch
    assert _run(lambda readings: loop(readings, 1)) == [None, None]  # its counter is not the iterations'


def test_a_range_loop_an_epoch_loop_runs_over_loaders_it_restarts_is_an_epochs_length():
    """FixMatch's loop: `for batch_idx in range(args.eval_step)` inside its epoch loop, drawing with next() from an
    iterator it begins again when it runs out: the loader's passes (here 4 batches) are not its epochs, so the range's
    position matches the run's count, not the pass's, and it is still an epoch's length."""
    import torch

    loader = torch.utils.data.DataLoader(torch.zeros(16, 2), batch_size=4)

    def loop(readings, at_runs):
        iterator = iter(loader)
        for epoch in range(3):
            for batch_idx in range(10):
                try:
                    next(iterator)
                except StopIteration:
                    iterator = iter(loader)
                    next(iterator)
                run = epoch * 10 + batch_idx + 1
                if run in at_runs:  # read as the recorder does: the pass's count, the run's
                    readings.append(read_loop_bound((run - 1) % 4 + 1, (), loaders=True, run_iterations=run))
                    _stop_after(readings)

    # the run's 6th and 7th iterations (the pass's 2nd and 3rd); then readings in the range's first and second runs
    # (sampling that goes on past the first)
    for at_runs in ((6, 7), (6, 13)):
        first, later = _run(lambda readings: loop(readings, at_runs))
        assert later.range_header and later.steps == 10 and later.per_epoch and first.advanced_with(later)


def test_a_trainers_own_attribute_counter_bounds_its_while_loop():
    """lucidrains' denoising-diffusion-pytorch Trainer: `while self.step < self.train_num_steps:` with `self.step += 1`
    after the optimizer step (a count kept on the object, resumable from a checkpoint), and a sample every
    `self.step % self.save_every` steps."""

    class Trainer:
        def __init__(self):
            self.step, self.train_num_steps, self.save_every = 0, 70_000, 1_000

        def train(self, readings):
            while self.step < self.train_num_steps:
                readings.append(read_loop_bound(len(readings) + 1, (), loaders=True))  # the run's iterations
                self.step += 1
                if self.step % self.save_every == 0:
                    pass  # sample and save
                _stop_after(readings)

    first, later = _run(Trainer().train)
    assert later.counter == "self.step" and later.steps == 70_000 and first.advanced_with(later)
    assert later.bound == "self.step >= self.train_num_steps" and later.period == 1_000 and not later.per_epoch
    resumed = Trainer()
    resumed.step = 20_000  # from a checkpoint: 50,000 steps left, the run's iterations counted from here
    assert _run(lambda readings: Trainer.train(resumed, readings))[-1].steps == 50_000


def test_a_count_the_body_keeps_is_read_against_the_runs_iterations_not_a_loader_pass():
    """denoising-diffusion-pytorch's Trainer over 200 images in batches of 8: its cycle starts the loader's pass every
    12.5 steps, so the epoch's iteration count restarts while `self.step` goes on: the run's count is the one that
    matches it."""

    class Trainer:
        def __init__(self):
            self.step, self.train_num_steps = 0, 700

        def train(self, readings):
            while self.step < self.train_num_steps:
                if self.step >= 30:
                    run = self.step + 1
                    readings.append(read_loop_bound(run % 12 + 1, (), loaders=True, run_iterations=run))
                    _stop_after(readings)
                self.step += 1

    first, later = _run(Trainer().train)
    assert later.steps == 700 and first.advanced_with(later) and later.iterations_done == 32
