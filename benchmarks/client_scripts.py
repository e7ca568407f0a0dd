"""Varied training loops nobody tuned trainwise for, profiled unmodified, then run for real.

The loops (tests/scripts/clients/): a language model updated by hand (no torch.optim, no DataLoader),
an LBFGS closure, a GAN with two optimizers, a checkpoint every epoch, validation over tensors without a
DataLoader, gradient accumulation; their epoch counts in --epochs, --n_epochs, --niter, --nEpochs,
--num-epochs and --max-epochs. For each: `trainwise profile` with the default options (the epoch count
read from the script's own flag), the same-machine prediction of the whole run, then the plain run
(`python script.py ARGS`, no trainwise) whose launch → exit wall time is the truth. Then interleaved
pairs of plain runs and runs under `trainwise profile --full` (the agent armed for the whole run): the
agent's overhead, the median of the per-pair ratios; with `--abba` each pair is a block of plain, agent, agent,
plain runs, so that a host whose level drifts over the block does not read as overhead.

Writes benchmarks/results/client_scripts.json; `summary`: profiled_fraction, median_abs_error,
max_abs_error, profiling_cost_fraction (median), agent_overhead.
Run: .venv/bin/python benchmarks/client_scripts.py [--scale 1.0] [--pairs 2] [--abba] [--only NAME ...]
`--abba-only --pairs N` runs N ABBA blocks and keeps them beside the headline (abba_blocks), each instrumented run
timed as the job's own process (the agent's cost to the job) and as the whole command (with trainwise's start-up and
its work after the job).
On a quiet many-core host, `--accuracy-only --parallel-loops` measures every loop at once, each loop (its profile,
then its plain run) pinned to `--cores-per-loop` cores of its own, so the rows take the time of the longest loop.
`--scale` multiplies each loop's size; 6 gave plain runs of 21-49 s on the quiet 2-core VM (start-up is ~4 s
of each); 100 gave 2.6-10.8 minutes (LBFGS converges after 54 steps: its later steps are cheap) and the whole
benchmark, with two pairs, took 74 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.agent import cpu_steal
from trainwise.errors import TrainwiseError
from trainwise.predict.epochs import decide_epochs
from trainwise.predict.same_machine import predict_total, relative_error
from trainwise.profile.runner import ProfileOptions, run_profile
from _machine import git_commit, machine

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = ROOT / "tests" / "scripts" / "clients"
RESULTS = Path(__file__).parent / "results"

# name: (script, fixed arguments, the size argument scaled by --scale and its value at scale 1)
LOOPS = {
    "manual_sgd_lm": ("manual_sgd_lm.py", ["--epochs", "4"], "--batches", 150),
    "lbfgs_closure": ("lbfgs_closure.py", [], "--n_epochs", 60),
    "gan_two_optimizers": ("gan_two_optimizers.py", ["--niter", "4"], "--samples", 12_800),
    "checkpoint_every_epoch": ("checkpoint_every_epoch.py", ["--nEpochs", "5"], "--samples", 16_000),
    "tensor_validation": ("tensor_validation.py", ["--num-epochs", "5"], "--samples", 16_000),
    "grad_accumulation": ("grad_accumulation.py", ["--max-epochs", "4"], "--samples", 24_000),
}


def command(name: str, scale: float, workdir: str) -> list[str]:
    script, fixed, size_flag, size = LOOPS[name]
    args = [str(CLIENTS / script), *fixed, size_flag, str(max(1, round(size * scale)))]
    if name == "checkpoint_every_epoch":
        args += ["--checkpoint", str(Path(workdir) / "model_epoch.pth")]
    return [sys.executable, *args]


def plain_run_s(argv: list[str], cwd: str | Path | None = None, preexec_fn=None) -> float:
    started = time.time()
    subprocess.run(argv, check=True, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=preexec_fn)
    return time.time() - started


def instrumented_run(argv: list[str]) -> tuple[float, float]:
    """(the whole `trainwise profile --full` command's seconds, the job's own: launch → exit of the process the agent
    was in, as the launcher saw it). The difference is trainwise's start-up and its work after the job (reading the
    record, building and checking the profile), which is profiling cost, not the agent's cost to the job."""
    started = time.time()
    # The agent alone: no launch setting that changes the job's arithmetic (denormals kept, as in the plain run)
    profile = run_profile(argv, ProfileOptions(mode="full", characterise=False, host_noise=False, flush_denormal=False),
                          quiet=True)
    return time.time() - started, profile.process_wall_s


def instrumented_run_s(argv: list[str]) -> float:
    return instrumented_run(argv)[0]


def profile_then_run(row: dict, argv: list[str], options: ProfileOptions, workload: str, cwd: Path | None = None) -> dict:
    """`trainwise profile` of `argv`, the prediction of the whole run, then the plain run: `row` filled in."""
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)  # a script that reads and writes relative to its folder is profiled from there
    try:
        profile = run_profile(argv, options, workload=workload, quiet=True)
    except TrainwiseError as exc:
        row.update(profiled=False, error=str(exc))
        return row
    finally:
        os.chdir(here)
    # the epochs predict would take (the script's own count, or its step budget over the profile's epoch length)
    decision = decide_epochs(epochs=None, epoch_options=(), epoch_options_given=False, profiles=[("profile", profile)],
                             what="epochs")
    epochs, per_epoch = decision.headline, decision.iterations_per_epoch
    row.update(profiled=True, profile_stop=profile.stop_reason, profiled_iterations=len(profile.iterations),
               steady_iteration_s=profile.steady_state.iteration.mean_s, init_s=profile.init.total_s,
               profile_wall_s=profile.process_wall_s, epochs_read=epochs,
               epochs_source=profile.script_epochs.source if profile.script_epochs else None,
               steps_read=profile.script_iterations.iterations if profile.script_iterations else None,
               steps_source=profile.script_iterations.source if profile.script_iterations else None,
               epochs_decision=decision.says,
               iterations_per_epoch=profile.dataset.iterations_per_epoch,
               validation_passes_seen=len(profile.validations), optimizer=profile.model.optimizer, notes=profile.notes)
    predicted_s = uncorrected_s = None
    try:
        if epochs:
            prediction = predict_total(profile, epochs, iterations_per_epoch=per_epoch)
            predicted_s = prediction.total_s
            # the same profile without the host-level correction (`trainwise host-noise`): does it help here?
            uncorrected_s = predict_total(profile, epochs, iterations_per_epoch=per_epoch, level_correction=False).total_s
            row.update(prediction_breakdown_s=prediction.breakdown_s, prediction_note=prediction.note,
                       host_noise_measured=profile.host_noise is not None,
                       predicted_low_s=prediction.low_s, predicted_high_s=prediction.high_s)
    except TrainwiseError as exc:
        row["prediction_error"] = str(exc)
    steal_before = cpu_steal.read_counters()
    actual_s = plain_run_s(argv, cwd)
    # the hypervisor's share of this VM's CPUs over the sampled steps and over the plain run (/proc/stat steal):
    # a shared host's slow periods, measured beside each (None off Linux)
    row.update(sample_cpu_steal=profile.sample_cpu_steal,
               run_cpu_steal=cpu_steal.steal_fraction(steal_before, cpu_steal.read_counters()))
    row.update(predicted_s=predicted_s, actual_s=actual_s,
               abs_error=relative_error(actual_s, predicted_s) if predicted_s is not None else None,
               predicted_without_level_correction_s=uncorrected_s,
               abs_error_without_level_correction=relative_error(actual_s, uncorrected_s) if uncorrected_s else None,
               profiling_cost_fraction=profile.process_wall_s / actual_s,
               within_band=(row["predicted_low_s"] <= actual_s <= row["predicted_high_s"]) if "predicted_low_s" in row else None)
    if predicted_s is None:
        row["profiled"] = False
    return row


def print_row(row: dict) -> None:
    if row.get("abs_error") is not None:
        steal = (f", CPU steal {row['sample_cpu_steal']:.1%} in the sample, {row['run_cpu_steal']:.1%} in the run"
                 if row.get("sample_cpu_steal") is not None and row.get("run_cpu_steal") is not None else "")
        print(f"  predicted {row['predicted_s']:.1f} s, actual {row['actual_s']:.1f} s, error {row['abs_error']:.1%}, "
              f"profiling cost {row['profiling_cost_fraction']:.1%}{steal}", flush=True)
    else:
        print(f"  not profiled: {row.get('error') or row.get('prediction_error')}", flush=True)


# Scale 100 runs the loops 1-11 minutes on the 2-core VM (its speed varies ~3x between hosts); 2,000 bounds one run at a few hours.
MAX_SCALE = 2000.0
LONG_RUN_S = 600.0  # the profiling-cost target holds for runs of ten minutes or more


def with_new_accuracy_rows(previous: dict, rows: list[dict], **fields) -> dict:
    """`previous` (a results file) with `rows` measured anew: a loop's new row replaces its old one, the
    others stay (each row keeps its own `measured_at`); the overhead pairs and their summary keys stay as
    measured, with where and when."""
    by_loop = {r["loop"]: r for r in previous.get("rows", [])}
    by_loop.update({r["loop"]: r for r in rows})
    merged = [by_loop[name] for name in LOOPS if name in by_loop]
    result = {**previous, **fields, "rows": merged}
    result["summary"] = {**previous.get("summary", {}), **accuracy_summary(merged), "loops": len(merged),
                         "median_actual_s": statistics.median(r["actual_s"] for r in merged if "actual_s" in r)}
    result.setdefault("overhead_machine", previous.get("machine"))
    result.setdefault("overhead_measured_at", previous.get("created_at"))
    for stale in ("accuracy_rows_from", "accuracy_run_notes"):  # the rows are this run's now
        result.pop(stale, None)
    return result


def accuracy_summary(rows: list[dict]) -> dict:
    errors = [r["abs_error"] for r in rows if r.get("abs_error") is not None]
    costs = [r["profiling_cost_fraction"] for r in rows if r.get("profiling_cost_fraction") is not None]
    long_costs = [r["profiling_cost_fraction"] for r in rows
                  if r.get("profiling_cost_fraction") is not None and (r.get("actual_s") or 0) >= LONG_RUN_S]
    banded = [r for r in rows if r.get("within_band") is not None]
    return {"profiled_fraction": sum(1 for r in rows if r["profiled"]) / len(rows),
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "profiling_cost_fraction": statistics.median(costs) if costs else None,
            # the target's runs: what users train is longer than these; a 10-minute run is the shortest judged
            "profiling_cost_fraction_10min_runs": statistics.median(long_costs) if long_costs else None,
            # how many actual totals fell inside the predicted band (rows measured since the band was kept)
            "within_band": f"{sum(1 for r in banded if r['within_band'])} of {len(banded)}" if banded else None,
            "error_convention": "|predicted − actual| / actual; actual = launch → exit of the plain run (no trainwise)"}


def measure(name: str, scale: float, options: ProfileOptions) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainwise-clients-") as workdir:
        argv = command(name, scale, workdir)
        row: dict = {"loop": name, "scale": scale, "command": [Path(argv[1]).name, *argv[2:]], "measured_at":
                     datetime.now(timezone.utc).isoformat(timespec="seconds")}
        return profile_then_run(row, argv, options, name)


def abba_block(plain_s: list[float], instrumented_s: list[float]) -> float:
    """The agent's ratio of one plain, agent, agent, plain block: the sums of each side, whose mean times sit at the
    block's middle, so a host level drifting linearly over the block cancels (plain-first pairs alone read a drift as
    overhead: on the lent H200 host whatever ran second was 3-23 % slower)."""
    if len(plain_s) != 2 or len(instrumented_s) != 2 or min(plain_s + instrumented_s) <= 0:
        raise ValueError("an ABBA block has two plain and two instrumented run times, all > 0")
    return sum(instrumented_s) / sum(plain_s)


def abba_blocks(names: list[str], scale: float, blocks: int) -> list[dict]:
    """`blocks` blocks of four runs of the same command, plain, agent, agent, plain (`abba_block`), one loop each in turn."""
    rows = []
    for k in range(blocks):
        name = names[k % len(names)]
        with tempfile.TemporaryDirectory(prefix="trainwise-clients-") as workdir:
            argv = command(name, scale, workdir)
            first = plain_run_s(argv)
            runs = [instrumented_run(argv), instrumented_run(argv)]
            second = plain_run_s(argv)
        instrumented, jobs = [run[0] for run in runs], [run[1] for run in runs]
        ratio = abba_block([first, second], instrumented)
        job_ratio = abba_block([first, second], jobs)
        rows.append({"loop": name, "order": "abba", "plain_s": (first + second) / 2,
                     "instrumented_s": sum(instrumented) / 2, "plain_runs_s": [first, second],
                     "instrumented_runs_s": instrumented, "ratio": ratio,
                     "instrumented_job_runs_s": jobs, "job_ratio": job_ratio})
        print(f"  block {k + 1}: {name} plain {first:.1f} / {second:.1f} s, under the agent "
              f"{instrumented[0]:.1f} / {instrumented[1]:.1f} s (the job {jobs[0]:.1f} / {jobs[1]:.1f} s): ratio "
              f"{ratio:.3f}, the job's {job_ratio:.3f}", flush=True)
    return rows


def overhead_pairs(names: list[str], scale: float, pairs: int, abba: bool = False) -> list[dict]:
    """Plain and instrumented runs of the same command, alternating which goes first; with `abba`, each pair is a
    block of four runs instead (`abba_blocks`)."""
    if abba:
        return abba_blocks(names, scale, pairs)
    rows = []
    for k in range(pairs):
        name = names[k % len(names)]
        with tempfile.TemporaryDirectory(prefix="trainwise-clients-") as workdir:
            argv = command(name, scale, workdir)
            if k % 2 == 0:
                plain, instrumented = plain_run_s(argv), instrumented_run_s(argv)
            else:
                instrumented, plain = instrumented_run_s(argv), plain_run_s(argv)
        rows.append({"loop": name, "plain_s": plain, "instrumented_s": instrumented, "ratio": instrumented / plain})
        print(f"  pair {k + 1}: {name} plain {plain:.1f} s, under the agent {instrumented:.1f} s", flush=True)
    return rows


# The instrumented side of a concurrent pair: this module (and trainwise) imported first, untimed, then "ready";
# on "go" it runs `instrumented_run_s`.
_INSTRUMENTED_SNIPPET = """
import json, sys
sys.path.insert(0, sys.argv[2])
from client_scripts import instrumented_run_s, plain_run_s
run_s = plain_run_s if sys.argv[3] == "null" else instrumented_run_s
print("ready", flush=True)
sys.stdin.readline()
print(run_s(json.loads(sys.argv[1])), flush=True)
"""


def _pinned_to(core: int):
    return lambda: os.sched_setaffinity(0, {core})


def concurrent_pair(plain_argv: list[str], agent_argv: list[str], plain_core: int, instrumented_core: int,
                    null: bool = False) -> tuple[float, float]:
    """A plain run and a run under the agent started together, each pinned to its own core: both see the same
    host level (a 2-core VM's level wanders ±12 % over 30 s, more than the overhead being measured). Pinning
    gives the agent's own threads no spare core, so the overhead is, if anything, overstated."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT / "src"), os.environ.get("PYTHONPATH", "")] if p)}
    # `null`: the second side runs the plain command too, through the same harness (the pairing's own noise floor)
    instrumented = subprocess.Popen([sys.executable, "-c", _INSTRUMENTED_SNIPPET, json.dumps(agent_argv), str(Path(__file__).parent),
                                     "null" if null else "agent"], env=env,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                    preexec_fn=_pinned_to(instrumented_core))
    if instrumented.stdout.readline().strip() != "ready":
        instrumented.kill()
        raise RuntimeError("the instrumented side of a concurrent pair did not start")
    plain: list[float] = []

    thread = threading.Thread(target=lambda: plain.append(plain_run_s(plain_argv, preexec_fn=_pinned_to(plain_core))))
    instrumented.stdin.write("go\n")
    instrumented.stdin.flush()
    thread.start()
    out, _ = instrumented.communicate()
    thread.join()
    if instrumented.returncode != 0 or not plain:
        raise RuntimeError(f"a concurrent pair failed (instrumented exit {instrumented.returncode})")
    return plain[0], float(out.strip().splitlines()[-1])


def loop_pairs(name: str, scale: float, pairs: int, cores: tuple[int, int], null: bool = False) -> list[dict]:
    """`pairs` concurrent pairs of one loop on `cores`, the cores swapped between its pairs."""
    rows = []
    for k in range(pairs):
        plain_core, instrumented_core = cores if k % 2 == 0 else (cores[1], cores[0])
        with tempfile.TemporaryDirectory(prefix="trainwise-clients-") as plain_dir, \
                tempfile.TemporaryDirectory(prefix="trainwise-clients-") as agent_dir:
            # each side its own scratch directory (the checkpoint loop writes there)
            plain_s, instrumented_s = concurrent_pair(command(name, scale, plain_dir), command(name, scale, agent_dir),
                                                      plain_core, instrumented_core, null)
        rows.append({"loop": name, "null": null, "plain_s": plain_s, "instrumented_s": instrumented_s,
                     "ratio": instrumented_s / plain_s, "plain_core": plain_core, "instrumented_core": instrumented_core})
        print(f"  concurrent pair {name} #{k + 1}: plain {plain_s:.1f} s (core {plain_core}), "
              f"{'plain again' if null else 'under the agent'} {instrumented_s:.1f} s (core {instrumented_core})", flush=True)
    return rows


def core_pairs(available: list[int], loops: int, parallel: bool) -> list[tuple[int, int]]:
    """The two cores of each loop's pairs: the first two for every loop, or with `parallel` a pair of its own
    per loop (a many-core host measures all loops at once)."""
    cores = sorted(available)
    needed = 2 * loops if parallel else 2
    if len(cores) < needed:
        sys.exit(f"error: --concurrent-pairs needs {needed} cores here, this process may use {len(cores)}; "
                 + ("drop --parallel-loops" if parallel else "use --pairs (interleaved) on one core"))
    return [(cores[2 * i], cores[2 * i + 1]) if parallel else (cores[0], cores[1]) for i in range(loops)]


def loop_cores(available: list[int], loops: int, per_loop: int) -> list[list[int]]:
    """`per_loop` cores of its own for each of `loops` loops measured at once, or a one-line exit naming the fix."""
    cores = sorted(available)
    if len(cores) < loops * per_loop:
        sys.exit(f"error: --parallel-loops with --accuracy-only needs {loops * per_loop} cores here ({per_loop} per loop), "
                 f"this process may use {len(cores)}; measure fewer loops (--only), lower --cores-per-loop, "
                 "or drop --parallel-loops")
    return [cores[i * per_loop:(i + 1) * per_loop] for i in range(loops)]


def _pinned_to_cores(cores: list[int]):
    def pin() -> None:
        os.setsid()  # its own process group: a loop past the time limit is stopped with its profile's job
        os.sched_setaffinity(0, set(cores))
    return pin


def parallel_accuracy(args: argparse.Namespace, names: list[str], assigned: list[list[int]]) -> tuple[list[dict], list[str]]:
    """Every loop's accuracy row at once, each loop (its profile, then its plain run) in a process of its own pinned
    to its own cores: a quiet many-core host measures all loops in the time of the longest. Loops not done by
    --time-limit-s are stopped; returns the finished rows (each with its cores) and the names of the others."""
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    deadline = time.monotonic() + args.time_limit_s if args.time_limit_s else None
    with tempfile.TemporaryDirectory(prefix="trainwise-parallel-") as parts:
        children = {}
        for name, cores in zip(names, assigned):
            part = Path(parts) / f"{name}.json"
            part.write_text(args.results.read_text(encoding="utf-8"), encoding="utf-8")  # --accuracy-only keeps it
            log = open(Path(parts) / f"{name}.log", "w", encoding="utf-8")
            children[name] = (subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), "--accuracy-only", "--only", name, "--scale", str(args.scale),
                 "--results", str(part)] + (["--flush-denormals"] if args.flush_denormals else []),
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_pinned_to_cores(cores)), part, log, cores)
        for name, (child, _, log, _) in children.items():
            try:
                child.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(child.pid, 9)
                child.wait()
            log.close()
        rows, unfinished = [], []
        for name, (child, part, log, cores) in children.items():
            new = [r for r in json.loads(part.read_text(encoding="utf-8")).get("rows", [])
                   if r["loop"] == name and r.get("measured_at", "") >= started]
            if child.returncode != 0 or not new:
                unfinished.append(name)
                tail = (Path(parts) / f"{name}.log").read_text(encoding="utf-8").strip().splitlines()[-3:]
                print(f"{name}: not finished (exit {child.returncode}): {' | '.join(tail)}", flush=True)
                continue
            rows.append({**new[0], "cores": cores})
            print(name, flush=True)
            print_row(new[0])
    return rows, unfinished


def concurrent_pairs(names: list[str], scale: float, pairs: int, assigned: list[tuple[int, int]], parallel: bool = False,
                     null: bool = False) -> list[dict]:
    """`pairs` concurrent pairs per loop on its `assigned` cores (`core_pairs`); with `parallel`, every loop at once."""
    if not parallel:
        return [row for name, cores in zip(names, assigned) for row in loop_pairs(name, scale, pairs, cores, null)]
    with ThreadPoolExecutor(max_workers=len(names)) as pool:  # threads wait on processes pinned to their cores
        results = list(pool.map(lambda job: loop_pairs(job[0], scale, pairs, job[1], null), zip(names, assigned)))
    return [row for rows in results for row in rows]


def write_null_pairs(args: argparse.Namespace, previous: dict, null: list[dict]) -> None:
    """The results file as it was, plus the null pairs and their median/range in the summary."""
    ratios = [p["ratio"] for p in null]
    previous["null_pairs"] = null
    previous["null_pairs_machine"] = machine()
    previous["null_pairs_measured_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    previous["summary"].update(pairing_null_median=statistics.median(ratios) - 1,
                               pairing_null_range=[min(ratios) - 1, max(ratios) - 1])
    atomic_write_text(args.results, json.dumps(previous, indent=2) + "\n")
    print(json.dumps({k: previous["summary"][k] for k in ("pairing_null_median", "pairing_null_range")}))


def write_abba_blocks(args: argparse.Namespace, names: list[str]) -> None:
    """--abba-only: ABBA blocks into the --results file beside what it holds; the summary's interleaved figures are
    theirs: the agent's cost to the job (launch → exit of its process) and the whole command's (with trainwise's
    start-up and its work after the job)."""
    try:
        previous = json.loads(args.results.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"error: --abba-only adds to {args.results}, which cannot be read ({exc}); run without it first")
    if args.pairs < 1:
        sys.exit("error: --abba-only needs --pairs 1 or more (the blocks to run)")
    blocks = abba_blocks(names, args.scale, args.pairs)
    previous.update(abba_blocks=blocks, abba_blocks_machine=machine(),
                    abba_blocks_measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    abba_blocks_commit=git_commit(ROOT, short=True, mark_changes=True),
                    abba_blocks_note=f"{args.note} (--scale {args.scale:g}, {len(blocks)} blocks)".strip())
    previous["summary"].update(
        agent_overhead_interleaved=statistics.median(b["job_ratio"] for b in blocks) - 1,
        agent_overhead_interleaved_method=(
            "ABBA blocks (plain, agent, agent, plain; median ratio − 1) of the job's own wall time, launch → exit of "
            "the process the agent was in (--abba-only)"),
        command_overhead_interleaved=statistics.median(b["ratio"] for b in blocks) - 1)
    atomic_write_text(args.results, json.dumps(previous, indent=2) + "\n")
    print(json.dumps({k: previous["summary"][k] for k in ("agent_overhead_interleaved", "command_overhead_interleaved")}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies each loop's size (its run time)")
    parser.add_argument("--pairs", type=int, default=2, help="interleaved plain/instrumented pairs for the overhead")
    parser.add_argument("--abba", action="store_true",
                        help="each interleaved pair a block of four runs (plain, agent, agent, plain): a linear drift of "
                             "the host's level cancels")
    parser.add_argument("--only", nargs="*", choices=sorted(LOOPS), help="these loops only")
    parser.add_argument("--note", default="", help="a sentence kept in the results (how and where it ran)")
    parser.add_argument("--flush-denormals", action="store_true",
                        help="profile with --flush-denormal (changes the job's arithmetic; the default keeps the plain run's)")
    parser.add_argument("--results", type=Path, default=RESULTS / "client_scripts.json", help="where to write the JSON")
    parser.add_argument("--concurrent-pairs", type=int, default=0,
                        help="per loop: plain and instrumented runs started together, one per core (the agent_overhead "
                             "headline when given: both sides see the same host level)")
    parser.add_argument("--parallel-loops", action="store_true",
                        help="with --concurrent-pairs: every loop's pairs at once, each loop on two cores of its own "
                             "(a quiet many-core host; needs two cores per loop); with --accuracy-only: every loop's "
                             "profile and plain run at once, each loop pinned to --cores-per-loop cores of its own")
    parser.add_argument("--cores-per-loop", type=int, default=2, help="with --accuracy-only --parallel-loops (1-8)")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="with --accuracy-only --parallel-loops: loops not finished by then are stopped and left out")
    parser.add_argument("--null-pairs", action="store_true",
                        help="with --overhead-only --concurrent-pairs: both sides run the plain command (the pairing's "
                             "noise floor); kept as null_pairs, the agent_overhead rows untouched")
    parser.add_argument("--abba-only", action="store_true",
                        help="--pairs ABBA blocks only, kept as abba_blocks beside the headline (the concurrent pairs and "
                             "the accuracy rows stay): the agent's cost to the job and the whole command's, interleaved")
    parser.add_argument("--overhead-only", action="store_true",
                        help="measure the overhead pairs only; the accuracy rows are kept from the --results file")
    parser.add_argument("--accuracy-only", action="store_true",
                        help="measure the accuracy rows only (those of --only, the others kept); the overhead pairs "
                             "are kept from the --results file")
    args = parser.parse_args()
    if args.accuracy_only and args.overhead_only:
        sys.exit("error: --accuracy-only and --overhead-only exclude each other")
    if not 0 < args.scale <= MAX_SCALE or not 0 <= args.pairs <= 20 or not 0 <= args.concurrent_pairs <= 10:
        sys.exit(f"error: --scale must be in (0, {MAX_SCALE:g}], --pairs in [0, 20] and --concurrent-pairs in [0, 10]")
    if not 1 <= args.cores_per_loop <= 8 or (args.time_limit_s is not None and not 0 < args.time_limit_s <= 86_400):
        sys.exit("error: --cores-per-loop must be in [1, 8] and --time-limit-s in (0, 86400]")
    parallel_accuracy_run = args.accuracy_only and args.parallel_loops
    if args.null_pairs and not (args.overhead_only and args.concurrent_pairs):
        sys.exit("error: --null-pairs needs --overhead-only and --concurrent-pairs N")
    names = args.only or list(LOOPS)
    # enough cores, checked before any run
    if parallel_accuracy_run:
        assigned = loop_cores(list(os.sched_getaffinity(0)), len(names), args.cores_per_loop)
    else:
        assigned = core_pairs(list(os.sched_getaffinity(0)), len(names), args.parallel_loops) if args.concurrent_pairs else []
    started = time.time()
    rows = []
    previous: dict = {}
    if args.abba_only:
        write_abba_blocks(args, names)
        return
    if args.overhead_only or args.accuracy_only:
        flag, kept = ("--overhead-only", "accuracy rows") if args.overhead_only else ("--accuracy-only", "overhead pairs")
        try:
            previous = json.loads(args.results.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            sys.exit(f"error: {flag} keeps the {kept} of {args.results}, which cannot be read ({exc}); "
                     f"run without {flag} first")
        rows = [] if args.accuracy_only else previous["rows"]
    if args.null_pairs:
        write_null_pairs(args, previous, concurrent_pairs(names, args.scale, args.concurrent_pairs, assigned,
                                                          args.parallel_loops, null=True))
        return
    unfinished: list[str] = []
    if parallel_accuracy_run:
        rows, unfinished = parallel_accuracy(args, names, assigned)
    for name in [] if args.overhead_only or parallel_accuracy_run else names:
        print(f"{name} ...", flush=True)
        row = measure(name, args.scale, ProfileOptions(flush_denormal=args.flush_denormals))
        row.update(run_note=args.note, commit=git_commit(ROOT, short=True, mark_changes=True))  # rows of several runs share one file
        rows.append(row)
        print_row(row)
    if args.accuracy_only:
        result = with_new_accuracy_rows(previous, rows, created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                        machine=machine(), scale=args.scale, benchmark_wall_s=time.time() - started,
                                        run_notes=args.note, flush_denormal_in_profile=args.flush_denormals,
                                        parallel_loops=parallel_accuracy_run,
                                        cores_per_loop=args.cores_per_loop if parallel_accuracy_run else None)
        if unfinished:  # the summary would mix this run's rows with older ones: the file stays, the rows go beside it
            beside = args.results.with_suffix(".unfinished.json")
            atomic_write_text(beside, json.dumps({**result, "unfinished_loops": unfinished}, indent=2) + "\n")
            sys.exit(f"error: {', '.join(unfinished)} did not finish within --time-limit-s or failed; {args.results} "
                     f"is unchanged, this run's finished rows are in {beside}")
        atomic_write_text(args.results, json.dumps(result, indent=2) + "\n")
        print(json.dumps(result["summary"], indent=2))
        return
    pairs = overhead_pairs(names, args.scale, args.pairs, args.abba)
    concurrent = (concurrent_pairs(names, args.scale, args.concurrent_pairs, assigned, args.parallel_loops)
                  if args.concurrent_pairs else [])
    interleaved = statistics.median(p["ratio"] for p in pairs) - 1 if pairs else None
    side_by_side = statistics.median(p["ratio"] for p in concurrent) - 1 if concurrent else None
    summary = {
        **accuracy_summary(rows),
        "agent_overhead": side_by_side if concurrent else interleaved,
        "agent_overhead_method": "concurrent pairs (median ratio − 1)" if concurrent else (
            "interleaved ABBA blocks (plain, agent, agent, plain; median ratio − 1)" if args.abba
            else "interleaved pairs (median ratio − 1)"),
        "agent_overhead_interleaved": interleaved,
        "agent_overhead_concurrent": side_by_side,
        "agent_overhead_concurrent_range": [min(p["ratio"] for p in concurrent) - 1, max(p["ratio"] for p in concurrent) - 1]
        if concurrent else None,
        "loops": len(rows), "median_actual_s": statistics.median(r["actual_s"] for r in rows if "actual_s" in r),
    }
    result = {"benchmark": "client_scripts", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "summary": summary, "rows": rows, "overhead_pairs": pairs,
              "concurrent_pairs": concurrent, "scale": previous.get("scale", args.scale), "overhead_scale": args.scale,
              "benchmark_wall_s": time.time() - started, "run_notes": args.note,
              "flush_denormal_in_profile": args.flush_denormals}
    if args.overhead_only:
        result.update(accuracy_rows_from=previous.get("created_at"), accuracy_run_notes=previous.get("run_notes"),
                      benchmark_wall_s=previous.get("benchmark_wall_s"), overhead_wall_s=time.time() - started)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.results, json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
