"""What a Hivemind run actually did, round by round, from its peers' records (all measured here).

A Hivemind throughput read over a whole run mixes phases that are not the configuration being
measured: the first peer trains alone until the others have started (its "rounds" have no partner
and cost no communication), a joining peer downloads the state and the swarm may stall on a round
that waits for its averaging timeout, and peers that fall behind catch up by loading state instead
of averaging (the epoch jumps). This module separates them, per peer:

- the *group phase*: the peer's epoch transitions made with the full configured group
  (`peers` seen by hivemind's progress tracker ≥ the configured number), the first of them left out
  as the join round;
- its *group rate*: target batch size × transitions ÷ seconds between the first and last of
  those transitions. Each transition is one optimizer step on (at least) a target batch of samples;
  hivemind's own samples/s (and Erben et al.) count epochs instead, which is the same while no epoch is
  skipped. Epochs are skipped when a peer finds the swarm's epoch ahead of its own and jumps to it
  (it catches up, or downloads the state and drops its accumulated gradients): no samples are
  trained for the epochs jumped. With parameter averaging every epoch (hivemind's default) that was
  rare here; with it off (`average_state_every` beyond the run), 2 peers leapfrogged each other by 3
  epochs every 5-6 rounds (2026-11-25), which read as 19-33 % more than the rounds trained. The
  epoch count is kept beside it (`epoch_rate_samples_per_s`);
- *failed averaging rounds*: group-phase gradient-averaging rounds after which the peer stepped on
  its local gradients (hivemind found no group, timed out or its all-reduce failed). On this host a
  pass of 2 peers sometimes falls into a state where the peers' averagers are a round out of step
  (hivemind logs BAD_GROUP_ID, "received 50 % of input tensors", "could not find a group") and every
  round then takes two matchmaking periods (10 s instead of 5 s, 2026-11-25; traced to hivemind's
  parameter averaging every epoch beside the gradient rounds: benchmarks/hivemind_state_averaging.py): the swarm is not
  training the configured group, so its steady group phase starts only after the last failed round
  of any peer (a run whose rounds keep failing has too few intervals left and is invalid);
- *solo transitions* (fewer peers than configured), *skipped epochs* (a transition that advanced
  the local epoch by more than one: the peer loaded state instead of averaging), *stalled rounds*
  (an averaging round or a blocked step lasting more than twice the matchmaking time: a group that
  failed and waited for a timeout), and the *final stall* (seconds between a peer's last step and
  the end of its record: it was blocked, not training).

The run measured the configuration only if every peer has at least `min_intervals` group-phase
intervals and no peer ended in a stall longer than twice the matchmaking time; otherwise
`invalid_reasons` says why, and the group rate is not a measurement of the configuration.

`noise_fraction` is how far the group rate can be trusted: the larger of the 95 % interval of the
mean round period (1.96 × standard error) and the difference between the rates of the window's two
halves, relative to the rate. It is within-run noise, a lower bound on the run-to-run noise.

Input: one `PeerRecord` per peer, built from the run agent's `run-rank<R>.json` (rounds, averaging)
and the recorder's `raw-rank<R>.json` (iterations, launch time, end of record) by `peer_record`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from trainwise.errors import TrainwiseError

MIN_GROUP_INTERVALS = 3
CONFIDENCE_Z = 1.96  # two-sided 95 % normal interval


class PeerRecord(BaseModel):
    """The part of one peer's records the round analysis needs (times: wall-clock seconds)."""

    rank: int
    launch_wall_s: float
    recorded_until_s: float = Field(description="end of the peer's record (stop signal or exit), seconds since launch")
    iterations: list[tuple[float, float, int]] = Field(
        description="(start, end, samples) per local step; start and end in seconds since launch_wall_s")
    rounds: list[dict[str, Any]] = Field(description="hivemind epoch transitions: epoch, start/end_wall_s, blocking_s, peers")
    averaging: list[dict[str, Any]] = Field(default_factory=list,
                                            description="gradient-averaging rounds: start/end_wall_s, seconds")


class PeerRounds(BaseModel):
    rank: int
    group_transitions: int = Field(description="transitions with the full group, join round included")
    group_intervals: int = Field(description="intervals between group transitions after the join round")
    group_rate_samples_per_s: float | None = None
    epoch_rate_samples_per_s: float | None = Field(default=None, description="TBS × epochs advanced ÷ s over the same "
                                                                             "window (hivemind's count: jumps included)")
    group_window_s: float | None = None
    solo_transitions: int
    skipped_epochs: int
    stalled_rounds: int
    final_stall_s: float
    group_averaging_rounds: int = Field(default=0, description="gradient-averaging rounds the peer ran in the group "
                                                               "phase (from the join round's end on)")
    failed_averaging_rounds: int = Field(default=0, description="of those, rounds that fell back to local gradients "
                                                                "(no group, timeout, failed all-reduce)")


class HivemindRounds(BaseModel):
    peers_configured: int
    target_batch_size: int
    matchmaking_time_s: float
    per_peer: list[PeerRounds]
    group_rate_samples_per_s: float | None = Field(default=None, description="median over peers of their group rate")
    group_round_period_s: float | None = Field(default=None, description="seconds per round (transition) in the group "
                                                                          "phase: TBS / group rate")
    epoch_rate_samples_per_s: float | None = Field(default=None, description="median over peers of TBS × epochs "
                                                                             "advanced ÷ s (skipped epochs counted)")
    local_samples_per_s: float | None = Field(
        default=None, description="samples the peers computed per second over the common group window "
                                  "(more than TBS per epoch: peers overshoot between progress refreshes)")
    noise_fraction: float | None = None
    solo_transitions: int
    skipped_epochs: int
    stalled_rounds: int
    failed_averaging_rounds: int = Field(default=0, description="group-phase gradient-averaging rounds, over all "
                                                                "peers, that fell back to local gradients")
    max_final_stall_s: float
    valid: bool
    invalid_reasons: list[str] = Field(default_factory=list)
    source: str = "measured here: trainwise run's per-peer round records"


def peer_record(run: dict[str, Any], raw: dict[str, Any]) -> PeerRecord:
    """A `PeerRecord` from one peer's `run-rank<R>.json` and `raw-rank<R>.json` contents."""
    base = float((raw.get("config") or {}).get("launch_wall_s") or 0.0)
    iterations = [(round(it["start_s"], 4), round(it["end_s"], 4), int(it["samples"])) for it in raw.get("iterations", [])]
    until = raw.get("recorded_until_s")
    until_s = float(until) if until is not None else (iterations[-1][1] if iterations else 0.0)
    return PeerRecord(rank=int(run.get("rank", 0)), launch_wall_s=base, recorded_until_s=until_s,
                      iterations=iterations, rounds=list(run.get("hivemind_rounds", [])),
                      averaging=list((run.get("hivemind") or {}).get("averaging", [])))


def _group_averaging(peer: PeerRecord, n: int) -> list[dict[str, Any]]:
    """The peer's gradient-averaging rounds from its first full-group transition on, those recorded
    with whether they averaged (older records do not say, and are not counted)."""
    group = sorted(float(e["end_wall_s"]) for e in peer.rounds if int(e["peers"]) >= n)
    if not group:
        return []
    return [a for a in peer.averaging if float(a["start_wall_s"]) >= group[0] and "averaged" in a]


def _peer_rounds(peer: PeerRecord, n: int, tbs: int, stall_s: float, group_rounds: list[dict[str, Any]],
                 settled_s: float) -> tuple[PeerRounds, list[tuple[float, int]]]:
    rounds = sorted(peer.rounds, key=lambda e: e["end_wall_s"])
    group = [(float(e["end_wall_s"]), int(e["epoch"])) for e in rounds if int(e["peers"]) >= n]
    # the first full-group transition is the join round; none before the swarm's last failed round
    steady = [g for g in group[1:] if g[0] > settled_s]
    rate = epoch_rate = window = None
    if len(steady) >= 2 and steady[-1][0] > steady[0][0]:
        window = steady[-1][0] - steady[0][0]
        rate = tbs * (len(steady) - 1) / window  # one optimizer step per transition
        epoch_rate = tbs * (steady[-1][1] - steady[0][1]) / window
    skipped = sum(max(0, b[1] - a[1] - 1) for a, b in zip(group, group[1:]))
    stalled = sum(1 for e in rounds if float(e.get("blocking_s", 0.0)) > stall_s)
    stalled += sum(1 for a in peer.averaging if float(a.get("seconds", 0.0)) > stall_s)
    last_step = peer.iterations[-1][1] if peer.iterations else 0.0
    summary = PeerRounds(rank=peer.rank, group_transitions=len(group), group_intervals=max(0, len(steady) - 1),
                         group_rate_samples_per_s=rate, epoch_rate_samples_per_s=epoch_rate, group_window_s=window,
                         solo_transitions=sum(1 for e in rounds if int(e["peers"]) < n), skipped_epochs=skipped,
                         stalled_rounds=stalled, final_stall_s=max(0.0, peer.recorded_until_s - last_step),
                         group_averaging_rounds=len(group_rounds),
                         failed_averaging_rounds=sum(1 for a in group_rounds if not a["averaged"]))
    return summary, steady


def _noise(steady_by_peer: list[list[tuple[float, int]]], rate: float | None) -> float | None:
    """Relative 95 % interval of the mean period, or the halves' rate difference, whichever is larger."""
    timed = sorted((b[0], b[0] - a[0]) for steady in steady_by_peer for a, b in zip(steady, steady[1:]))
    periods = [period for _, period in timed]  # in time order, so the halves are the window's halves
    if rate is None or len(periods) < 2:
        return None
    mean = statistics.fmean(periods)
    standard_error = statistics.stdev(periods) / math.sqrt(len(periods))
    half = len(periods) // 2
    first, second = statistics.fmean(periods[:half]), statistics.fmean(periods[half:])
    halves = abs(1.0 / first - 1.0 / second) / (1.0 / mean)
    return max(CONFIDENCE_Z * standard_error / mean, halves)


def analyse_rounds(peers: Sequence[PeerRecord], peers_configured: int, target_batch_size: int,
                   matchmaking_time_s: float, *, min_intervals: int = MIN_GROUP_INTERVALS) -> HivemindRounds:
    """Split a Hivemind run into its phases and say whether it measured the configured group
    (see the module docstring)."""
    if peers_configured < 1 or target_batch_size < 1 or matchmaking_time_s <= 0:
        raise TrainwiseError("round analysis needs at least 1 peer, a positive target batch size and matchmaking time")
    stall_s = 2.0 * matchmaking_time_s
    # A failed round means the averagers were out of step: the steady group phase starts after the
    # swarm's last one (as it starts after the join round)
    group_rounds = [_group_averaging(peer, peers_configured) for peer in peers]
    settled_s = max((float(a["end_wall_s"]) for rounds in group_rounds for a in rounds if not a["averaged"]),
                    default=-math.inf)
    summaries, steadies = [], []
    for peer, rounds in zip(peers, group_rounds):
        summary, steady = _peer_rounds(peer, peers_configured, target_batch_size, stall_s, rounds, settled_s)
        summaries.append(summary)
        steadies.append(steady)
    rates = [s.group_rate_samples_per_s for s in summaries if s.group_rate_samples_per_s is not None]
    rate = statistics.median(rates) if rates else None
    epoch_rates = [s.epoch_rate_samples_per_s for s in summaries if s.epoch_rate_samples_per_s is not None]
    reasons = []
    if len(peers) < peers_configured:
        reasons.append(f"records of {len(peers)} of {peers_configured} peers")
    short = [s.rank for s in summaries if s.group_intervals < min_intervals]
    if short:
        reasons.append(f"peer(s) {short} made fewer than {min_intervals} epoch transitions with all "
                       f"{peers_configured} peers after the join round: no steady group phase in the window")
    stalled_end = [s.rank for s in summaries if s.final_stall_s > stall_s]
    if stalled_end:
        reasons.append(f"peer(s) {stalled_end} took no step in the last "
                       f"{max(s.final_stall_s for s in summaries):.0f} s of the run (blocked on a round)")
    failed = [s for s in summaries if s.failed_averaging_rounds]
    if failed and short:
        reasons.append("gradient averaging kept failing in the group phase (the peer stepped on its local gradients: "
                       + ", ".join(f"peer {s.rank} {s.failed_averaging_rounds} of {s.group_averaging_rounds} rounds"
                                   for s in failed)
                       + "): the peers' averagers fell out of step and too few rounds followed the last failure")
    local = None
    windows = [(st[0][0], st[-1][0]) for st in steadies if len(st) >= 2]
    if len(windows) == len(peers) and peers:
        start, end = max(w[0] for w in windows), min(w[1] for w in windows)
        if end > start:
            samples = 0.0
            for peer in peers:
                for begin_s, finish_s, n_samples in peer.iterations:
                    begin, finish = peer.launch_wall_s + begin_s, peer.launch_wall_s + finish_s
                    inside = min(finish, end) - max(begin, start)
                    if inside > 0 and finish > begin:
                        samples += n_samples * inside / (finish - begin)
            local = samples / (end - start)
    return HivemindRounds(
        peers_configured=peers_configured, target_batch_size=target_batch_size, matchmaking_time_s=matchmaking_time_s,
        per_peer=summaries, group_rate_samples_per_s=rate,
        group_round_period_s=target_batch_size / rate if rate else None, local_samples_per_s=local,
        epoch_rate_samples_per_s=statistics.median(epoch_rates) if epoch_rates else None,
        noise_fraction=_noise(steadies, rate), solo_transitions=sum(s.solo_transitions for s in summaries),
        skipped_epochs=sum(s.skipped_epochs for s in summaries), stalled_rounds=sum(s.stalled_rounds for s in summaries),
        failed_averaging_rounds=sum(s.failed_averaging_rounds for s in summaries),
        max_final_stall_s=max((s.final_stall_s for s in summaries), default=0.0), valid=not reasons,
        invalid_reasons=reasons)
