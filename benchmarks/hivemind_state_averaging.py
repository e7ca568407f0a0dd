"""Hivemind's parameter (state) averaging period vs its gradient-round period, on this host.

hivemind.Optimizer averages the gradients every epoch and, by default, the parameters too
(`average_state_every=1`), in a second averager with its own matchmaking. trainwise's model
(`trainwise.predict.data_parallel.predict_hivemind`) predicts the gradient rounds only: at the 5 s
matchmaking floor here, one round every ~5 s. This benchmark runs the same 2-peer job on loopback
(nn_twins_mlp, TBS 16384, matchmaking 5 s, 100 s windows, `trainwise run --engine hivemind`, the
script unmodified) with state averaging every 1, 10 and 1000 epochs (1000: never within a window),
interleaved, `--repeats` times each, and reports per run the group phase's median round period
(`trainwise.run.hivemind_rounds`: each peer's epoch transitions with the whole group after the join
round and after the swarm's last failed round, median over peers) and the share of group-phase
rounds that took more than 1.5 matchmaking periods.

Why it exists: the data-parallel benchmark's Hivemind passes fell, some of the time, into rounds
every ~10 s, and debug logs put it on the two averagers' concurrent matchmaking (a gradient step
still looking for a group when the next is scheduled, steps of different epochs grouped together,
BAD_GROUP_ID replies, all-reduces finishing on half their inputs after the 5 s sender timeout).
benchmarks/data_parallel.py runs its peers with state averaging every 1000 epochs on the strength of
this measurement, and says so.

Writes benchmarks/results/hivemind_state_averaging.json; summary: the median round period per setting
(`round_period_s_every_<k>`), the ratio of the default's to never's (`default_vs_never_period_ratio`),
and the runs' periods.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import data_parallel as dp  # noqa: E402 - the benchmarks folder is not a package
from _machine import machine  # noqa: E402

from trainwise._io import atomic_write_text  # noqa: E402
from trainwise.run.hivemind_rounds import PeerRecord, analyse_rounds  # noqa: E402

WORKLOAD = "nn_twins_mlp"
SLOW_ROUND_FACTOR = 1.5


def summarise_run(run: dict, every: int) -> dict:
    tbs = int(run["result"]["hivemind"]["target_batch_size"])
    peers = [PeerRecord.model_validate(r) for r in run["records"]]
    rounds = analyse_rounds(peers, run["workers"], tbs, dp.MATCHMAKING_S)
    intervals = []
    for peer in peers:
        # the group phase's transitions: made with every configured peer, after the join round
        group = [r for r in peer.rounds if int(r["peers"]) >= run["workers"]][1:]
        intervals += [b["end_wall_s"] - a["end_wall_s"] for a, b in zip(group, group[1:])]
    slow = sum(1 for s in intervals if s > SLOW_ROUND_FACTOR * dp.MATCHMAKING_S)
    return {"average_state_every": every, "valid": rounds.valid, "invalid_reasons": rounds.invalid_reasons,
            "round_period_s": rounds.group_round_period_s, "group_rate_samples_per_s": rounds.group_rate_samples_per_s,
            "group_intervals": len(intervals), "slow_intervals": slow,
            "slow_interval_share": slow / len(intervals) if intervals else None,
            "failed_averaging_rounds": rounds.failed_averaging_rounds, "wall_s": run["wall_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window-s", type=float, default=100.0)
    parser.add_argument("--settings", default="1,10,1000", help="average_state_every values, comma-separated")
    parser.add_argument("--output", type=Path, default=dp.RESULTS / "hivemind_state_averaging.json")
    args = parser.parse_args()
    settings = [int(s) for s in args.settings.split(",")]
    start = time.time()
    runs: list[dict] = []
    for repeat in range(args.repeats):
        for every in settings:  # interleaved, so that the host's drift falls on every setting alike
            run = dp.run_config(f"{WORKLOAD}/hm2-loopback/state-every-{every}", WORKLOAD, "hivemind", 2, args.window_s,
                                None, average_state_every=every)
            row = {"repeat": repeat, **summarise_run(run, every)}
            runs.append(row)
            print(f"state every {every:>5}: round period {row['round_period_s']} s, "
                  f"{row['slow_intervals']}/{row['group_intervals']} slow", file=sys.stderr, flush=True)
    summary: dict = {}
    for every in settings:
        periods = [r["round_period_s"] for r in runs if r["average_state_every"] == every and r["round_period_s"]]
        summary[f"round_period_s_every_{every}"] = statistics.median(periods) if periods else None
        summary[f"runs_round_period_s_every_{every}"] = periods
        shares = [r["slow_interval_share"] for r in runs if r["average_state_every"] == every
                  and r["slow_interval_share"] is not None]
        summary[f"slow_interval_share_every_{every}"] = statistics.median(shares) if shares else None
    if summary.get("round_period_s_every_1") and summary.get(f"round_period_s_every_{max(settings)}"):
        summary["default_vs_never_period_ratio"] = (summary["round_period_s_every_1"]
                                                    / summary[f"round_period_s_every_{max(settings)}"])
    summary["matchmaking_time_s"] = dp.MATCHMAKING_S
    summary["predicted_round_period_s"] = "the matchmaking floor: 5 s plus the slowest RTT (predict_hivemind)"
    document = {"benchmark": "hivemind_state_averaging", "written": datetime.now(timezone.utc).isoformat(),
                "seconds": time.time() - start, "machine": machine(), "summary": summary,
                "workload": WORKLOAD, "peers": 2, "link": "loopback", "window_s": args.window_s,
                "source": "measured here", "runs": runs}
    atomic_write_text(args.output, json.dumps(document, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
