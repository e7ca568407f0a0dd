"""The epoch loop's own exits (trainwise.profile._epoch_exits): each test runs a real loop of that shape here and reads
it at its step, as the recorder does while sampling."""

from __future__ import annotations

from itertools import count

from trainwise.profile._epoch_exits import read_epoch_loop_exits


def test_early_stopping_in_the_loop_around_the_steps_loop_is_read():
    readings, bad_epochs, patience, best = [], 0, 3, 0.0
    for epoch in range(100):
        for batch in range(2):
            readings.append(read_epoch_loop_exits(()))
        validation_loss = 1.0
        if validation_loss < best:
            best, bad_epochs = validation_loss, 0
        else:
            bad_epochs += 1  # a count kept only when training does not improve: no count of the loop's passes
        if bad_epochs >= patience:
            break
    exits = readings[0]
    assert exits.tests == ("bad_epochs >= patience",)
    assert exits.where.startswith("test_epoch_exits.py:") and exits.where.endswith("for epoch in range(100)")


def _train_one_epoch(readings):
    for batch in range(2):
        readings.append(read_epoch_loop_exits(()))


def test_an_epoch_loop_in_the_caller_is_read_through_the_call_and_its_count_is_no_exit():
    readings, accuracy = [], 0.0
    for epoch in count():
        _train_one_epoch(readings)
        accuracy += 0.5
        if epoch >= 10:  # its own count: not an exit training decides
            break
        if accuracy > 0.99:
            break
    assert readings[0].tests == ("accuracy > 0.99",)


def test_a_loop_that_leaves_only_at_its_count_or_has_no_epoch_loop_reads_nothing():
    readings = []
    for epoch in count():
        for batch in range(2):
            readings.append(read_epoch_loop_exits(()))
            if batch > 5:  # the step's own loop: not the epoch loop's exit
                break
        if epoch >= 1:
            break
    assert readings == [None] * 4
    assert [read_epoch_loop_exits(()) for _ in range(1)] == [None]
