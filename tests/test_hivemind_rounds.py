"""Round analysis of Hivemind runs (trainwise.run.hivemind_rounds): which part of a run measured the
configured group, and whether any did. Records are built in the run agent's format."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainwise.errors import TrainwiseError
from trainwise.run.hivemind_rounds import PeerRecord, analyse_rounds, peer_record

LAUNCH = 1_000_000.0
TBS = 384


def record(rank: int, transitions: list[tuple[float, int, int]], *, step_s: float = 0.1, batch: int = 32,
           last_step_s: float | None = None, until_s: float | None = None, averaging_s: list[float] = ()) -> PeerRecord:
    """A peer that steps every `step_s` from 1 s after launch to its last transition (or `last_step_s`),
    with epoch transitions (seconds since launch, epoch, peers seen)."""
    end = last_step_s if last_step_s is not None else max(t for t, _, _ in transitions)
    iterations, t = [], 1.0
    while t + step_s <= end + 1e-9:
        iterations.append((round(t, 4), round(t + step_s, 4), batch))
        t += step_s
    rounds = [{"epoch": e, "start_wall_s": LAUNCH + t - 0.01, "end_wall_s": LAUNCH + t, "blocking_s": 0.01, "peers": p}
              for t, e, p in transitions]
    averaging = [{"start_wall_s": LAUNCH + 1, "end_wall_s": LAUNCH + 1 + s, "seconds": s, "group": True}
                 for s in averaging_s]
    return PeerRecord(rank=rank, launch_wall_s=LAUNCH, recorded_until_s=until_s if until_s is not None else end + 0.5,
                      iterations=iterations, rounds=rounds, averaging=averaging)


def steady_pair(period_s: float = 5.0, solo: int = 4, group: int = 6) -> list[PeerRecord]:
    """Peer 0 alone for `solo` fast epochs, then both peers transition together every `period_s`."""
    solo_rounds = [(2.0 + 1.1 * k, k, 1) for k in range(solo)]
    start = 2.0 + 1.1 * solo
    group_rounds = [(start + period_s * k, solo + k, 2) for k in range(group)]
    return [record(0, solo_rounds + group_rounds), record(1, [(t + 0.05, e, p) for t, e, p in group_rounds])]


def test_steady_group_phase_is_measured_and_the_solo_phase_left_out():
    rounds = analyse_rounds(steady_pair(), 2, TBS, 5.0)
    assert rounds.valid and rounds.invalid_reasons == []
    # the whole run's epoch progress would count the solo epochs at ~1.1 s each; the group made one per 5 s
    assert rounds.group_rate_samples_per_s == pytest.approx(TBS / 5.0)
    assert rounds.group_round_period_s == pytest.approx(5.0)
    assert rounds.solo_transitions == 4 and rounds.skipped_epochs == 0 and rounds.stalled_rounds == 0
    assert [p.group_intervals for p in rounds.per_peer] == [4, 4]  # 6 group transitions, join round left out
    assert rounds.noise_fraction == pytest.approx(0.0, abs=1e-6)
    # both peers step every 0.1 s with 32 samples in the common window
    assert rounds.local_samples_per_s == pytest.approx(2 * 32 / 0.1, rel=0.05)


def test_a_run_without_a_steady_group_is_invalid_and_says_why():
    # the second peer joins, one round completes, then both block until the stop 40 s later
    joined = [(3.0, 0, 1), (4.0, 1, 1), (5.0, 2, 2), (20.0, 3, 2)]
    peers = [record(0, joined, until_s=60.0), record(1, joined[2:], until_s=60.0, averaging_s=[14.0])]
    rounds = analyse_rounds(peers, 2, TBS, 5.0)
    assert not rounds.valid
    assert any("fewer than 3 epoch transitions" in r for r in rounds.invalid_reasons)
    assert any("took no step in the last 40 s" in r for r in rounds.invalid_reasons)
    assert rounds.group_rate_samples_per_s is None
    assert rounds.stalled_rounds == 1  # the 14 s averaging round, beyond twice the 5 s matchmaking
    assert rounds.max_final_stall_s == pytest.approx(40.0)


def test_missing_peers_make_the_run_invalid():
    rounds = analyse_rounds(steady_pair()[:1], 2, TBS, 5.0)
    assert not rounds.valid and "records of 1 of 2 peers" in rounds.invalid_reasons


def test_epochs_skipped_by_catching_up_are_counted_but_not_rated_as_trained():
    transitions = [(10.0 + 5 * k, e, 3) for k, e in enumerate([5, 6, 7, 10, 11, 12])]  # 7 -> 10: 2 epochs skipped
    peers = [record(r, transitions) for r in range(3)]
    rounds = analyse_rounds(peers, 3, TBS, 5.0)
    assert rounds.skipped_epochs == 3 * 2
    # 4 optimizer steps (transitions) in the 20 s after the join round: the jumped epochs trained nothing
    assert rounds.group_rate_samples_per_s == pytest.approx(TBS * 4 / 20.0)
    assert rounds.group_round_period_s == pytest.approx(5.0)
    # hivemind's own count (epochs 6 -> 12) is kept beside it
    assert rounds.epoch_rate_samples_per_s == pytest.approx(TBS * 6 / 20.0)
    assert rounds.noise_fraction == pytest.approx(0.0)  # a round every 5 s, jump or not: regular


def test_peer_record_reads_the_agent_and_recorder_formats():
    run = {"rank": 1, "hivemind_rounds": [{"epoch": 3, "start_wall_s": LAUNCH + 9.9, "end_wall_s": LAUNCH + 10.0,
                                           "blocking_s": 0.1, "peers": 2}],
           "hivemind": {"averaging": [{"start_wall_s": LAUNCH + 10, "end_wall_s": LAUNCH + 14, "seconds": 4.0,
                                       "group": True}]}}
    raw = {"config": {"launch_wall_s": LAUNCH}, "recorded_until_s": 30.0,
           "iterations": [{"start_s": 2.123456, "end_s": 2.2, "samples": 32}]}
    peer = peer_record(run, raw)
    assert peer.rank == 1 and peer.launch_wall_s == LAUNCH and peer.recorded_until_s == 30.0
    assert peer.iterations == [(2.1235, 2.2, 32)]
    assert peer.rounds[0]["epoch"] == 3 and peer.averaging[0]["seconds"] == 4.0


@pytest.mark.parametrize("n, tbs, matchmaking", [(0, TBS, 5.0), (2, 0, 5.0), (2, TBS, 0.0)])
def test_bad_parameters_are_refused(n, tbs, matchmaking):
    with pytest.raises(TrainwiseError):
        analyse_rounds(steady_pair(), n, tbs, matchmaking)


@settings(max_examples=40, deadline=None)
@given(period=st.floats(0.5, 20.0), solo=st.integers(0, 10), group=st.integers(5, 12))
def test_group_rate_is_tbs_over_the_group_period_whatever_came_before(period, solo, group):
    rounds = analyse_rounds(steady_pair(period, solo, group), 2, TBS, 5.0)
    assert rounds.valid
    assert rounds.group_rate_samples_per_s == pytest.approx(TBS / period, rel=1e-6)
    assert rounds.solo_transitions == solo


def test_the_steady_group_phase_starts_after_the_last_round_that_fell_back_to_local_gradients():
    peers = steady_pair(period_s=5.0, group=10)
    join_s = min(r["end_wall_s"] for r in peers[1].rounds)
    for peer in peers:
        # one round before the group formed (solo: hivemind skips averaging) and one per group epoch
        peer.averaging[:] = [{"start_wall_s": join_s - 3.0, "end_wall_s": join_s - 2.9, "seconds": 0.1, "group": True,
                              "averaged": False}]
        peer.averaging += [{"start_wall_s": join_s + 5.0 * k - 4.9, "end_wall_s": join_s + 5.0 * k - 0.1,
                            "seconds": 4.8, "group": True, "averaged": True} for k in range(1, 10)]
    healthy = analyse_rounds(peers, 2, TBS, 5.0)
    assert healthy.valid and healthy.failed_averaging_rounds == 0  # the round before the group is not counted
    assert [p.group_averaging_rounds for p in healthy.per_peer] == [9, 9]
    assert [p.group_intervals for p in healthy.per_peer] == [8, 8]
    # peer 0's third group round timed out: the steady phase starts at the next transition
    peers[0].averaging[3]["averaged"] = False
    settled = analyse_rounds(peers, 2, TBS, 5.0)
    assert settled.valid and settled.failed_averaging_rounds == 1
    assert [p.group_intervals for p in settled.per_peer] == [6, 6]  # transitions 3..9 of 0..9
    assert settled.group_rate_samples_per_s == pytest.approx(TBS / 5.0)
    # failing until the end leaves too few rounds: invalid, and the reason names the failures
    peers[1].averaging[8]["averaged"] = False
    broken = analyse_rounds(peers, 2, TBS, 5.0)
    assert not broken.valid and broken.failed_averaging_rounds == 2
    assert any("peer 0 1 of 9 rounds, peer 1 1 of 9 rounds" in reason for reason in broken.invalid_reasons)
    # records from before the agent told the two apart carry no "averaged": nothing is counted
    for peer in peers:
        for entry in peer.averaging:
            entry.pop("averaged")
    assert analyse_rounds(peers, 2, TBS, 5.0).valid
