"""The RunResult schema and how it is computed from the per-rank records (all measured here).

Per optimizer step of a DDP job, across ranks (one host clock; on several hosts, NTP-synchronised
clocks are assumed), with `ready_r` the moment rank r's last gradient bucket was ready (its backward
pass done), `first_r` its first bucket, `done_r` the moment its all-reduce completed:

- idle_r = max_q ready_q − ready_r: waiting for the slowest rank (straggling, not communication);
- all-reduce (communication) = Σ over gradient buckets b of (reduced_r,b − max_q ready_q,b): the
  time each bucket's all-reduce was in flight once every rank had it ready (overlapped with the
  rest of the backward pass for all but the last bucket);
- exposed communication = done_r − max_q ready_q: the part not hidden behind compute;
- compute = iteration wall − data wait − idle − exposed communication;
- measured granularity G = compute / all-reduce (seed: T_calc / T_comm).

Hivemind: per peer, the local steps (compute, data wait) and the averaging rounds (the time each
`hivemind.Optimizer` gradient-averaging round took, from its start to the averaged gradients being
loaded; with delayed parameter updates it runs in the background). T_calc = time the peers together
need to accumulate the target batch size at their compute-only rates; G = T_calc / T_comm.

Throughput = Σ over ranks of samples / seconds over the steady window (after warm-up).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from trainwise._io import atomic_write_text
from trainwise.errors import TrainwiseError
from trainwise.run.options import INTERRUPTED_EXIT, RunOptions

SCHEMA_VERSION = 1
PROVENANCE = "measured here: trainwise run's recorder in every training process (times are medians over steady-state steps)"


class StepBreakdown(BaseModel):
    """One optimizer step split into where its time went (medians over steady-state steps)."""

    iteration_s: Optional[float] = None
    data_wait_s: Optional[float] = None
    compute_s: Optional[float] = None
    allreduce_s: Optional[float] = None
    exposed_comm_s: Optional[float] = None
    idle_s: Optional[float] = None


class RankSummary(StepBreakdown):
    """One rank's (process's / peer's) step breakdown and what it processed."""

    rank: int
    iterations: int
    steady_iterations: int
    samples: int
    samples_per_s: Optional[float] = None
    gradient_bytes: Optional[int] = None


class HivemindSummary(BaseModel):
    target_batch_size: int
    rounds: int
    averaging_s: Optional[float] = None  # median gradient-averaging round with peers
    blocking_s: Optional[float] = None  # median time a step blocked at an epoch transition
    t_calc_s: Optional[float] = None
    peers_seen: list[int] = Field(default_factory=list)
    # The swarm's training progress: TBS × hivemind epochs advanced ÷ seconds between steady epoch
    # transitions (median over peers). Hivemind's own samples/s counts the same thing (Erben et al.);
    # it is steadier than summing local steps over a short common window, which peers that start,
    # block or leave at different moments distort.
    epoch_throughput_samples_per_s: Optional[float] = None
    # TBS × optimizer steps (epoch transitions) ÷ the same seconds: a peer that catches up jumps
    # several hivemind epochs in one transition without training them, which the epoch count above
    # includes and this one does not (trainwise.run.hivemind_rounds)
    step_throughput_samples_per_s: Optional[float] = None
    epoch_s: Optional[float] = None  # median seconds between a peer's consecutive epoch transitions
    # gradient-averaging rounds with a group (averaged, or fell back to local gradients), all peers
    averaging_rounds: int = 0
    failed_averaging_rounds: int = 0
    # parameter (state) averaging every this many epochs, as the peers' hivemind.Optimizer ran it
    average_state_every: Optional[int] = None


class CheckpointSummary(BaseModel):
    directory: str
    written: int
    last: Optional[str] = None
    median_write_s: Optional[float] = None
    resumed_from: Optional[str] = None
    skipped_corrupt: list[str] = Field(default_factory=list)


class RunResult(BaseModel):
    schema_version: int = SCHEMA_VERSION
    engine: str
    command: list[str]
    world_size: int
    exit_codes: list[int]
    wall_s: float
    launch_wall_s: float
    throughput_samples_per_s: Optional[float] = None
    step: StepBreakdown
    granularity: Optional[float] = None
    ranks: list[RankSummary]
    hivemind: Optional[HivemindSummary] = None
    checkpoint: Optional[CheckpointSummary] = None
    provenance: str = PROVENANCE
    notes: list[str] = Field(default_factory=list)

    def to_json(self) -> str:
        """As JSON without NaN/Infinity; command bytes that are not UTF-8 kept as \\udcXX escapes."""
        from trainwise.userfiles import json_text

        return json_text(self.model_dump(mode="python"), "the run result")

    def save(self, path: str | Path) -> Path:
        return atomic_write_text(path, self.to_json())


def _median(values: list[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def warmup_count(n: int) -> int:
    """Steps left out as warm-up: the first two, or the first 10 % for long runs."""
    return min(max(2, n // 10), max(0, n - 1))


def _iteration_walls(raw: dict) -> list[dict]:
    base = float(raw["config"].get("launch_wall_s") or 0.0)
    out = []
    for it in raw["iterations"]:
        out.append({"start": base + it["start_s"], "end": base + it["end_s"], "data_wait": it["data_wait_s"],
                    "samples": it["samples"]})
    return out


def _rank_rate(iterations: list[dict], skip: int) -> tuple[int, Optional[float]]:
    steady = iterations[skip:]
    if not steady:
        return 0, None
    seconds = steady[-1]["end"] - steady[0]["start"]
    samples = sum(it["samples"] for it in steady)
    return len(steady), (samples / seconds if seconds > 0 else None)


def _ddp_breakdown(raws: dict[int, dict], runs: dict[int, dict]) -> dict[int, dict[str, list[float]]]:
    ranks = sorted(set(raws) & set(runs))
    per_rank: dict[int, dict[str, list[float]]] = {r: {k: [] for k in ("iteration", "data_wait", "compute", "allreduce", "exposed", "idle")} for r in ranks}
    if not ranks:
        return per_rank
    steps = min(len(runs[r]["comm_steps"]) for r in ranks)
    skip = warmup_count(steps)
    walls = {r: _iteration_walls(raws[r]) for r in ranks}
    for k in range(skip, steps):
        records = {r: runs[r]["comm_steps"][k] for r in ranks}
        all_ready = max(rec["last_ready_wall_s"] for rec in records.values())
        for r, rec in records.items():
            index = rec.get("iteration")
            if index is None or index >= len(walls[r]) or index < 0:
                continue
            it = walls[r][index]
            iteration = it["end"] - it["start"]
            idle = all_ready - rec["last_ready_wall_s"]
            exposed = max(0.0, rec["done_wall_s"] - all_ready)
            # Each bucket's all-reduce runs from the moment every rank has it ready until it is
            # reduced here; their sum is the communication time (overlapped with backward or not).
            allreduce = 0.0
            for key, (ready_r, done_r, _) in rec["buckets"].items():
                if done_r is None:
                    continue
                ready_all = max(records[q]["buckets"].get(key, [ready_r])[0] for q in records)
                allreduce += max(0.0, done_r - ready_all)
            compute = max(0.0, iteration - it["data_wait"] - idle - exposed)
            values = per_rank[r]
            values["iteration"].append(iteration)
            values["data_wait"].append(it["data_wait"])
            values["compute"].append(compute)
            values["allreduce"].append(allreduce)
            values["exposed"].append(exposed)
            values["idle"].append(idle)
    return per_rank


def build_result(options: RunOptions, command: list[str], codes: list[int], launch_wall_s: float, wall_s: float,
                 raws: dict[int, dict], runs: dict[int, dict], failed_logs: dict[int, str] | None = None) -> RunResult:
    from trainwise.run._child import CHECKPOINT_WRITE_EXIT, RESUME_MISMATCH_EXIT, RESUME_SKIP_FAILED_EXIT

    where = options.checkpoint.directory if options.checkpoint else "the checkpoint folder"
    if CHECKPOINT_WRITE_EXIT in codes or 128 + CHECKPOINT_WRITE_EXIT in codes:
        raise TrainwiseError(f"the job stopped: a checkpoint could not be written to {where} (the line above says why): "
                             "free some space or choose another --checkpoint-dir; the same command resumes from the "
                             "newest checkpoint written before")
    if RESUME_SKIP_FAILED_EXIT in codes:
        raise TrainwiseError(f"the job failed right after resuming from the checkpoint in {where}, in code that uses an "
                             "epoch finished before the checkpoint (not run again on resume; the line above says what): "
                             f"change that code as it says, or start afresh with another --checkpoint-dir (or delete {where})")
    if RESUME_MISMATCH_EXIT in codes or 128 + RESUME_MISMATCH_EXIT in codes:
        raise TrainwiseError(f"the checkpoint in {where} does not match this job (the line above says how): resume with "
                             "the engine, --nproc and script that wrote it, or start afresh with another --checkpoint-dir "
                             f"(or delete {where})")
    killed = [code for code in codes if code < 0]
    if killed and not any(raw.get("iterations") for raw in raws.values()):
        import signal

        name = signal.Signals(-killed[0]).name if -killed[0] in signal.Signals._value2member_map_ else f"signal {-killed[0]}"
        where = f"; the checkpoints in {options.checkpoint.directory} let the same command resume" if options.checkpoint else ""
        raise TrainwiseError(f"the training process was killed by {name} before it could record its run (it keeps its "
                             f"record in memory until it exits){where}")
    if not raws or not any(raw.get("iterations") for raw in raws.values()):
        stopped = next((code for code in codes if code in (INTERRUPTED_EXIT, 143, -15)), None)
        if stopped is not None:
            # Stopped from outside during start-up: not the script's error, and a rerun simply starts afresh.
            how = "interrupted (Ctrl-C)" if stopped == INTERRUPTED_EXIT else "stopped by SIGTERM (a preemption notice)"
            error = TrainwiseError(f"{how} before the job's first optimizer step: nothing was trained or checkpointed; "
                                   "run the same command again to start it")
            error.exit_code = INTERRUPTED_EXIT if stopped == INTERRUPTED_EXIT else 143
            raise error
        resumed = next((run["checkpoint"]["resumed_from"] for run in runs.values()
                        if (run.get("checkpoint") or {}).get("resumed_from")), None)
        if any(codes) and resumed:
            # The script ran fine before: what differs is the state it resumed from.
            raise TrainwiseError(f"the training command exited with code {max(codes, key=abs)} after resuming from "
                                 f"{resumed} in {where}, before its first optimizer step: its error above may come from "
                                 "the resume (the checkpoint's state, or the epochs before it, which are not run again); "
                                 f"start afresh with another --checkpoint-dir (or delete {where}) to tell")
        if any(codes):
            raise TrainwiseError(f"the training command exited with code {max(codes, key=abs)} before its first optimizer "
                                 "step: run it without trainwise to see its error")
        if not raws:
            raise TrainwiseError("the command did not start a Python training process that imports torch: check the command")
    notes: list[str] = []
    for run in runs.values():
        for note in run.get("notes", []):
            if note not in notes:
                notes.append(note)
    ddp = _ddp_breakdown(raws, runs) if options.engine == "ddp" else {}
    ranks: list[RankSummary] = []
    rates: list[float] = []
    for r in sorted(raws):
        raw = raws[r]
        walls = _iteration_walls(raw)
        skip = warmup_count(len(walls))
        steady_n, rate = _rank_rate(walls, skip)
        if rate is not None:
            rates.append(rate)
        steady = walls[skip:]
        summary = RankSummary(rank=r, iterations=len(walls), steady_iterations=steady_n,
                              samples=sum(it["samples"] for it in walls), samples_per_s=rate,
                              gradient_bytes=(raw.get("model") or {}).get("gradient_bytes"),
                              iteration_s=_median([it["end"] - it["start"] for it in steady]),
                              data_wait_s=_median([it["data_wait"] for it in steady]))
        if r in ddp and ddp[r]["iteration"]:
            values = ddp[r]
            summary.iteration_s = _median(values["iteration"])
            summary.data_wait_s = _median(values["data_wait"])
            summary.compute_s = _median(values["compute"])
            summary.allreduce_s = _median(values["allreduce"])
            summary.exposed_comm_s = _median(values["exposed"])
            summary.idle_s = _median(values["idle"])
        elif summary.iteration_s is not None:
            summary.compute_s = summary.iteration_s - (summary.data_wait_s or 0.0)
        ranks.append(summary)

    def across(field: str) -> Optional[float]:
        return _median([getattr(s, field) for s in ranks if getattr(s, field) is not None])

    step = StepBreakdown(**{name: across(name) for name in StepBreakdown.model_fields})
    granularity = None
    if step.compute_s is not None and step.allreduce_s:
        granularity = step.compute_s / step.allreduce_s
    hivemind = None
    if options.engine == "hivemind":
        hivemind = _hivemind_summary(options, ranks, runs)
        if hivemind.t_calc_s is not None and hivemind.averaging_s:
            granularity = hivemind.t_calc_s / hivemind.averaging_s
        if hivemind.failed_averaging_rounds:
            notes.append(f"hivemind: {hivemind.failed_averaging_rounds} of {hivemind.averaging_rounds} gradient-averaging "
                         "rounds with a group fell back to local gradients (no group formed, a timeout or a failed "
                         "all-reduce; a join round may fail once): the peers did not average those steps")
    checkpoint = _checkpoint_summary(runs)
    if options.engine == "ddp" and options.nnodes > 1:
        notes.append(f"node {options.node_rank} of {options.nnodes}: this result holds this node's ranks only")
    throughput = common_window_throughput(raws)
    if throughput is None and rates:
        throughput = sum(rates)
        notes.append("the ranks' steady windows do not overlap: throughput is the sum of their own rates")
    if ranks and not any(summary.samples for summary in ranks):
        # No DataLoader batch and no samples= marker: the batch size is unknown, so is the rate (not 0 samples/s).
        throughput = None
        for summary in ranks:
            summary.samples_per_s = None
        notes.append("samples per iteration unknown (no DataLoader batch seen): throughput not measured; a loop "
                     "without a DataLoader can say it with trainwise.profile.step(samples=N) or iteration(samples=N)")
    for rank, tail in sorted((failed_logs or {}).items()):
        # its output went to a log in the run's temporary folder, gone once the run ends
        hint = (" — it could not reach the peers it joins through: they had left (a job shorter than a peer's "
                "start-up) or are unreachable from it" if "bootstrap peers" in tail else "")
        notes.append(f"peer {rank} exited with code {codes[rank]}{hint}; the end of its output: {tail}")
    return RunResult(engine=options.engine, command=list(command), world_size=options.world_size, exit_codes=codes,
                     wall_s=wall_s, launch_wall_s=launch_wall_s,
                     throughput_samples_per_s=throughput, step=step, granularity=granularity,
                     ranks=ranks, hivemind=hivemind, checkpoint=checkpoint, notes=notes)


def common_window_throughput(raws: dict[int, dict]) -> Optional[float]:
    """Samples per second of all ranks together, over the window in which every rank was past its
    warm-up and still training (peers that start late or leave early do not distort it)."""
    walls = {r: _iteration_walls(raw) for r, raw in raws.items()}
    walls = {r: w for r, w in walls.items() if len(w) > warmup_count(len(w))}
    if not walls:
        return None
    start = max(w[warmup_count(len(w))]["start"] for w in walls.values())
    end = min(w[-1]["end"] for w in walls.values())
    if end <= start:
        return None
    samples = 0.0
    for w in walls.values():
        for it in w:
            inside = min(it["end"], end) - max(it["start"], start)
            duration = it["end"] - it["start"]
            if inside > 0 and duration > 0:
                samples += it["samples"] * inside / duration  # iterations cut by the window count pro rata
    return samples / (end - start)


def _hivemind_summary(options: RunOptions, ranks: list[RankSummary], runs: dict[int, dict]) -> HivemindSummary:
    averaging: list[float] = []
    blocking: list[float] = []
    peers_seen: set[int] = set()
    rounds = attempted = failed = 0
    for run in runs.values():
        rounds = max(rounds, len(run.get("hivemind_rounds", [])))
        for entry in run.get("hivemind_rounds", []):
            blocking.append(entry["blocking_s"])
            peers_seen.add(int(entry["peers"]))
        for entry in (run.get("hivemind") or {}).get("averaging", []):
            if entry.get("group"):
                averaging.append(entry["seconds"])
                attempted += 1
                failed += 0 if entry.get("averaged", True) else 1
    compute_rate = 0.0
    for summary in ranks:
        if summary.compute_s and summary.iterations and summary.samples:
            compute_rate += (summary.samples / summary.iterations) / summary.compute_s
    t_calc = options.target_batch_size / compute_rate if compute_rate > 0 else None
    progress_rates: list[float] = []
    step_rates: list[float] = []
    gaps: list[float] = []
    for run in runs.values():
        # the first transition is warm-up (start-up, first matchmaking); a peer needs two more
        transitions = sorted(run.get("hivemind_rounds", []), key=lambda e: e["end_wall_s"])[1:]
        if len(transitions) >= 2:
            epochs = transitions[-1]["epoch"] - transitions[0]["epoch"]
            seconds = transitions[-1]["end_wall_s"] - transitions[0]["end_wall_s"]
            if epochs > 0 and seconds > 0:
                progress_rates.append(options.target_batch_size * epochs / seconds)
                step_rates.append(options.target_batch_size * (len(transitions) - 1) / seconds)
            gaps += [b["end_wall_s"] - a["end_wall_s"] for a, b in zip(transitions, transitions[1:])]
    reported = [(run.get("hivemind") or {}).get("average_state_every") for run in runs.values()]
    state_every = next((int(v) for v in reported if v is not None), None)
    return HivemindSummary(target_batch_size=int(options.target_batch_size), rounds=rounds,
                           averaging_s=_median(averaging), blocking_s=_median(blocking), t_calc_s=t_calc,
                           peers_seen=sorted(peers_seen), epoch_throughput_samples_per_s=_median(progress_rates),
                           step_throughput_samples_per_s=_median(step_rates),
                           epoch_s=_median(gaps), averaging_rounds=attempted, failed_averaging_rounds=failed,
                           average_state_every=state_every)


def _checkpoint_summary(runs: dict[int, dict]) -> Optional[CheckpointSummary]:
    writer = next((run["checkpoint"] for run in runs.values() if run.get("checkpoint") and run["checkpoint"].get("writer")), None)
    if writer is None:
        return None
    events = writer["events"]
    return CheckpointSummary(directory=writer["dir"], written=len(events), last=events[-1]["name"] if events else None,
                             median_write_s=_median([e["write_s"] for e in events]),
                             resumed_from=writer.get("resumed_from"), skipped_corrupt=writer.get("skipped_corrupt", []))
