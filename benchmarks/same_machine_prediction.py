"""Same-machine prediction accuracy: profile k iterations, predict the full run, run it, compare.

For each (workload, batch size):
  1. a pilot profile (not counted) measures the iteration time, to size the full run to
     --target-minutes on this machine;
  2. the measured profile: `trainwise profile` with the planned epoch count (sampling budget);
  3. predictions for the planned epochs: trainwise's estimator and the seed's equations;
  4. the full run, instrumented (`--full`), whose launch → end-of-training time is the truth.
Then: the noise floor (the first configuration's full run repeated), the instrumentation overhead
(interleaved A/B pairs of plain vs instrumented runs, median of per-pair ratios), and the
error-vs-k sweep that justifies the profiler's default minimum iteration count.

Writes benchmarks/results/same_machine_prediction.json (and profile_iterations.json) and prints a table.
Run: .venv/bin/python benchmarks/same_machine_prediction.py [--target-minutes 4] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainwise._io import atomic_write_text
from trainwise.allocator import launch_environment
from trainwise.predict.same_machine import host_stray_fraction, predict_total, relative_error, sampled_steps_s
from trainwise.core import stats
from trainwise.profile.runner import DEFAULT_MIN_ITERATIONS, ProfileOptions, run_profile
from trainwise.profile.schema import Profile
from trainwise.workloads import command_for, get_workload
from _machine import machine
from _parallel import parse_cpus, run_tasks, write_worker_result

RESULTS = Path(__file__).parent / "results"
console = Console()

# (workload, global batch size, planned epochs, validation samples). Training samples are sized
# from the pilot so that each full run takes about --target-minutes here.
# Batches are small enough that an iteration takes tens of milliseconds on this CPU, so that a
# 5-minute run has thousands of iterations (as real trainings do) and profiling stays a small share.
# (workload, batch, epochs, validation samples, training samples): one of epochs / training samples
# is fixed and the other sized to the target. NN-TWINS keeps the seed's 27,238 training samples and
# gets many short epochs (millisecond iterations), as in the seed (50 epochs).
CONFIGS = [
    ("mnist_cnn", 16, 4, 2000, None),
    ("mnist_cnn", 32, 4, 2000, None),
    ("seismic_fcn", 8, 3, 256, None),
    ("seismic_fcn", 16, 3, 256, None),
    ("nn_twins_mlp", 32, None, 2000, 27_238),
    ("nn_twins_mlp", 64, None, 2000, 27_238),
    ("rnn_sa_lstm", 8, 3, 512, None),
    ("rnn_sa_lstm", 16, 3, 512, None),
]
# One intra-op thread: on this shared 2-core machine a second torch thread stalls whenever anything
# else runs on the other core, which would make the benchmark measure the neighbours, not trainwise.
THREADS = 1
SEED_ESTIMATORS = ("eq5.4", "eq5.3", "averaged")



def size_run(workload: str, batch: int, epochs: int | None, val_samples: int, train_samples: int | None,
             target_s: float) -> tuple[int, int, float]:
    """(epochs, training samples, pilot seconds per iteration) for a full run of about target_s."""
    pilot = run_profile(command_for(workload, batch_size=batch, epochs=50, train_samples=train_samples or batch * 400,
                                    val_samples=val_samples, threads=THREADS),
                        ProfileOptions(min_iterations=20, max_iterations=60, validation_batches=3, epoch2_iterations=0),
                        quiet=True)
    iteration_s = pilot.steady_state.iteration.mean_s
    budget_s = target_s - pilot.init.total_s
    if train_samples is not None:
        iterations_per_epoch = -(-train_samples // batch)
        return max(2, round(budget_s / (iterations_per_epoch * iteration_s))), train_samples, iteration_s
    iterations = max(200, int(budget_s / epochs / iteration_s))
    return epochs, iterations * batch, iteration_s


def full_run(command: list[str]) -> Profile:
    return run_profile(command, ProfileOptions(mode="full"), quiet=True)


def plain_command(command: list[str]) -> list[str]:
    """`python -m MODULE ARGS` (a workload's command), uninstrumented. Its arithmetic is the job's own, as in the
    profile: trainwise flushes denormals only when asked (`--flush-denormal`, trainwise.denormals)."""
    python, flag, module, *rest = command
    if flag != "-m":
        raise ValueError(f"expected a `python -m MODULE` command, got {command[:3]}")
    return [python, "-m", module, *rest]


def plain_run_s(command: list[str]) -> float:
    start = time.time()
    # The same launch settings as the instrumented launch (allocator, denormals): the pair differs by
    # instrumentation only.
    subprocess.run(plain_command(command), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=launch_environment(os.environ))
    return time.time() - start


def k_sweep(full: Profile, epochs: int, ks: list[int]) -> list[dict]:
    """Error of the steady-state mean estimated from the first k iterations of epoch 1, against the
    full run's mean steady iteration (the term that dominates the total)."""
    epoch1 = [it.wall_s for it in full.iterations if it.epoch == 0]
    truth = full.steady_state.iteration.mean_s
    rows = []
    for k in ks:
        if k > len(epoch1):
            continue
        sample = epoch1[:k]
        warmup = stats.detect_warmup(sample)
        steady = sample[warmup:] or sample[-1:]
        estimate = statistics.fmean(steady)
        rows.append({"k": k, "iteration_error": abs(estimate - truth) / truth,
                     "cost_fraction": sum(sample) / full.full_run.training_end_s})
    return rows


def same_window_mean_iteration_s(full: Profile, profile: Profile) -> float:
    """The full run's own mean iteration over the steps the profile's estimate used (after its warm-up)."""
    window = full.iterations[max(1, profile.steady_state.warmup_iterations):len(profile.iterations)]
    return statistics.fmean([it.wall_s for it in window] or [0.0])


def measure(config: tuple, target_s: float) -> tuple[dict, list[str], Profile]:
    """Size, profile, predict and fully run one (workload, batch) configuration: its results row."""
    workload, batch, fixed_epochs, val_samples, fixed_train_samples = config
    epochs, train_samples, pilot_iteration_s = size_run(workload, batch, fixed_epochs, val_samples,
                                                        fixed_train_samples, target_s)
    return measure_sized(config, epochs, train_samples, pilot_iteration_s)


def sized_command(config: tuple, epochs: int, train_samples: int) -> list[str]:
    workload, batch, _, val_samples, _ = config
    return command_for(workload, batch_size=batch, epochs=epochs, train_samples=train_samples, val_samples=val_samples,
                       threads=THREADS)


def measure_sized(config: tuple, epochs: int, train_samples: int,
                  pilot_iteration_s: float) -> tuple[dict, list[str], Profile]:
    """Profile, predict and fully run one configuration whose run is already sized: its results row."""
    workload, batch, _, val_samples, _ = config
    command = sized_command(config, epochs, train_samples)
    console.print(f"[bold]{workload}[/bold] batch {batch}: {train_samples} samples × {epochs} epochs "
                  f"(pilot {pilot_iteration_s * 1000:.1f} ms/iteration)")
    profile = sampled_profile(config, command, epochs)
    full = full_run(command)
    return build_row(config, epochs, train_samples, profile, full), command, full


UNCORRECTED = "trainwise_without_level_correction"


def sampled_profile(config: tuple, command: list[str], epochs: int) -> Profile:
    """`trainwise profile` (sampled, the default options) of the sized command."""
    return run_profile(command, ProfileOptions(epochs_hint=epochs), workload=config[0], quiet=True)


def build_row(config: tuple, epochs: int, train_samples: int, profile: Profile, full: Profile) -> dict:
    """The results row of one configuration: the profile's predictions against its full run."""
    workload, batch, _, val_samples, _ = config
    predictions = {"trainwise": predict_total(profile, epochs),
                   # side by side: the same profile without the host-level correction
                   UNCORRECTED: predict_total(profile, epochs, level_correction=False)}
    for name in SEED_ESTIMATORS:
        predictions[name] = predict_total(profile, epochs, name)
    actual_s = full.full_run.training_end_s
    row = {
        "workload": workload, "data": get_workload(workload).data_kind, "batch_size": batch, "epochs": epochs,
        "train_samples": train_samples, "val_samples": val_samples,
        "iterations_per_epoch": profile.dataset.iterations_per_epoch,
        "profiled_iterations": len(profile.iterations), "profile_stop": profile.steady_state.stop_reason,
        "profile_sampling_stopped_by": profile.steady_state.sampling_stopped_by,
        "profile_wall_s": profile.process_wall_s, "full_run_wall_s": full.process_wall_s, "actual_s": actual_s,
        "profiling_cost_fraction": profile.process_wall_s / full.process_wall_s,
        "predicted_s": {name: p.total_s for name, p in predictions.items()},
        "band_s": [predictions["trainwise"].low_s, predictions["trainwise"].high_s],
        "abs_error": {name: relative_error(actual_s, p.total_s) for name, p in predictions.items()},
        "malta_error": {name: abs(actual_s - p.total_s) / p.total_s for name, p in predictions.items()},
        "steady_iteration_profile_s": profile.steady_state.iteration.mean_s,
        "steady_iteration_full_s": full.steady_state.iteration.mean_s,
        # Diagnostics: does the full run's iteration time change along the run, or between processes?
        "full_epoch_mean_iteration_s": [statistics.fmean([it.wall_s for it in full.iterations if it.epoch == e])
                                        for e in sorted({it.epoch for it in full.iterations})],
        "full_same_window_mean_iteration_s": same_window_mean_iteration_s(full, profile),
        "profile_warmup_iterations": profile.steady_state.warmup_iterations,
        "sampled_steps_s": sampled_steps_s(profile), "host_stray": host_stray_fraction(profile),
        "level_probes_s": [p.level_s for p in profile.level_probes],
        "host_mean_level_s": profile.host_noise.mean_level_s() if profile.host_noise is not None else None,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    console.print(f"  predicted {row['predicted_s']['trainwise']:.1f} s, actual {actual_s:.1f} s, "
                  f"error {row['abs_error']['trainwise']:.1%}, profiling cost {row['profiling_cost_fraction']:.2%}")
    return row


def same_steps_errors(rows: list[dict]) -> list[float]:
    """Per row: how far the full run's mean iteration is from the mean of its *own* iterations over
    the steps the profile sampled. An estimator fed a window of that length at the start of the run
    misses this much on the iteration term even with no process or time gap between window and run:
    the host's floor for a profile of this cost (the optimizer-state zeros model aside, which
    predicts a trend the window cannot show)."""
    return [abs(r["full_same_window_mean_iteration_s"] - r["steady_iteration_full_s"]) / r["steady_iteration_full_s"]
            for r in rows if r.get("full_same_window_mean_iteration_s") and r.get("steady_iteration_full_s")]


def band_coverage(rows: list[dict]) -> dict | None:
    """Share of rows whose actual total fell inside trainwise's band, and whether the profiles carried
    the host's measured speed wander (`trainwise host-noise`), which widens the band."""
    banded = [r for r in rows if r.get("band_s")]
    if not banded:
        return None
    inside = [r["band_s"][0] <= r["actual_s"] <= r["band_s"][1] for r in banded]
    return {"fraction": sum(inside) / len(inside), "rows": len(inside),
            "with_host_noise": sum(1 for r in banded if r.get("host_stray") is not None)}


def summarise(rows: list[dict], overhead: float, noise_floor: float) -> dict:
    errors = [r["abs_error"]["trainwise"] for r in rows]
    floor = same_steps_errors(rows)
    return {
        "median_abs_error": statistics.median(errors),
        "max_abs_error": max(errors),
        "profiling_cost_fraction": statistics.median(r["profiling_cost_fraction"] for r in rows),
        "max_profiling_cost_fraction": max(r["profiling_cost_fraction"] for r in rows),
        "instrumentation_overhead": overhead,
        "noise_floor": noise_floor,
        "same_steps_floor": {"median": statistics.median(floor), "max": max(floor),
                             "meaning": "|mean of the full run's own iterations over the profile's sampled steps − the "
                                        "full run's mean iteration| / the latter: what the profile's window misses on "
                                        "this host with no gap between window and run"} if floor else None,
        "band_coverage": band_coverage(rows),
        "seed_equations": {name: {"median_abs_error": statistics.median(r["abs_error"][name] for r in rows),
                                  "max_abs_error": max(r["abs_error"][name] for r in rows)} for name in SEED_ESTIMATORS},
        "without_level_correction": ({"median_abs_error": statistics.median(r["abs_error"][UNCORRECTED] for r in rows),
                                      "max_abs_error": max(r["abs_error"][UNCORRECTED] for r in rows),
                                      "rows_corrected": sum(1 for r in rows if r.get("host_mean_level_s") and r.get("level_probes_s"))}
                                     if all(UNCORRECTED in r["abs_error"] for r in rows) else None),
        "configurations": len(rows),
        "workloads": sorted({r["workload"] for r in rows}),
        "error_convention": "|predicted − actual| / actual; actual = launch → end of the last iteration/validation of the --full run",
    }


def rerun(specs: list[str], reason: str, target_s: float) -> None:
    """Measure some configurations again and replace their rows in the committed results, keeping
    the replaced rows (and why) in the file: for a run that other work on the machine disturbed."""
    path = RESULTS / "same_machine_prediction.json"
    result = json.loads(path.read_text())
    wanted = []
    for spec in specs:
        workload, _, batch = spec.partition(":")
        match = [c for c in CONFIGS if c[0] == workload and str(c[1]) == batch]
        if not match:
            raise SystemExit(f"error: no configuration {spec!r}: use WORKLOAD:BATCH, one of "
                             + ", ".join(f"{c[0]}:{c[1]}" for c in CONFIGS))
        wanted.append(match[0])
    for config in wanted:
        row, _, _ = measure(config, target_s)
        index = next(i for i, r in enumerate(result["rows"]) if (r["workload"], r["batch_size"]) == config[:2])
        old = result["rows"][index]
        result.setdefault("replaced_rows", []).append({"reason": reason, "row": old})
        result["rows"][index] = row
        result["summary"] = summarise(result["rows"], result["summary"]["instrumentation_overhead"],
                                      result["summary"]["noise_floor"])
        result.setdefault("reruns", []).append({"configuration": f"{config[0]}:{config[1]}", "target_full_run_s": target_s,
                                                "measured_at": row["measured_at"], "machine": machine()})
        atomic_write_text(path, json.dumps(result, indent=1))  # after each: a cut-short rerun keeps what it measured


def write_partial(rows: list[dict], target_s: float) -> None:
    """Results so far, in case the run is cut short (the final file replaces it)."""
    errors = [r["abs_error"]["trainwise"] for r in rows]
    atomic_write_text(RESULTS / "same_machine_prediction_partial.json", json.dumps({
        "benchmark": "same_machine_prediction (partial)", "machine": machine(), "target_full_run_s": target_s,
        "summary": {"median_abs_error": statistics.median(errors), "max_abs_error": max(errors),
                    "profiling_cost_fraction": statistics.median(r["profiling_cost_fraction"] for r in rows),
                    "configurations": len(rows)},
        "rows": rows}, indent=1))


def worker(task: dict) -> dict:
    """One measurement of a parallel run (`_parallel.run_tasks`), in this process pinned to its CPU."""
    config = CONFIGS[task["config"]]
    if task["task"] == "size":
        epochs, train_samples, pilot_iteration_s = size_run(*config, task["target_s"])
        return {"epochs": epochs, "train_samples": train_samples, "pilot_iteration_s": pilot_iteration_s}
    command = sized_command(config, task.get("epochs", 1), task.get("train_samples", 1))
    if task["task"] == "profile":
        return {"profile": sampled_profile(config, command, task["epochs"]).model_dump_json()}
    if task["task"] == "full":
        full = full_run(command)
        return {"actual_s": full.full_run.training_end_s, "process_wall_s": full.process_wall_s,
                "profile": full.model_dump_json() if task.get("keep") else None}
    if task["task"] == "overhead":
        workload, batch, _, val_samples, _ = config
        command = command_for(workload, batch_size=batch, epochs=2, train_samples=batch * task["batches"],
                              val_samples=val_samples, threads=THREADS)
        if task["plain_first"]:
            plain = plain_run_s(command)
            instrumented = full_run(command).process_wall_s
        else:
            instrumented = full_run(command).process_wall_s
            plain = plain_run_s(command)
        return {"plain_s": plain, "instrumented_s": instrumented}
    raise ValueError(f"unknown worker task {task['task']!r}")


def parallel_main(args: argparse.Namespace, target_s: float) -> None:
    """The benchmark with its configurations measured side by side, one pinned CPU each (a dedicated
    many-core machine): pilots; profiles; full runs, with the same full run repeated on the repeat CPUs
    at the same time (the noise floor of each configuration); then one interleaved overhead pair per CPU."""
    cpus = parse_cpus(args.parallel_cpus)
    repeat_cpus = parse_cpus(args.repeat_cpus) if args.repeat_cpus else []
    if set(cpus) & set(repeat_cpus):
        raise SystemExit("error: --parallel-cpus and --repeat-cpus overlap: give the repeats their own CPUs")
    indices = [0, 4] if args.quick else list(range(len(CONFIGS)))
    script = str(Path(__file__).resolve())
    started = time.time()
    console.print(f"[bold]parallel[/bold]: {len(indices)} configurations on CPUs {cpus}, repeats on {repeat_cpus or cpus}")
    # The pilots run on the repeat CPUs too (results unused there), so that they size the full runs
    # under the load the full runs will have.
    size_tasks = [(cpu_list[n % len(cpu_list)], {"task": "size", "config": i, "target_s": target_s})
                  for cpu_list in [cpus, repeat_cpus] if cpu_list for n, i in enumerate(indices)]
    sizes = run_tasks(script, size_tasks, label="pilot")[:len(indices)]
    # Then every sampled profile at once (and, as load, the same profiles on the repeat CPUs); then every
    # full run at once, with its repeat on the repeat CPUs: each profile's steps and each full run
    # see the same neighbours' phase (start-up, then steady training).
    def sized(i: int, size: dict, **more) -> dict:
        return {"config": i, "epochs": size["epochs"], "train_samples": size["train_samples"], **more}

    profile_tasks = [(cpu_list[n % len(cpu_list)], {"task": "profile", **sized(i, size)})
                     for cpu_list in [cpus, repeat_cpus] if cpu_list for n, (i, size) in enumerate(zip(indices, sizes))]
    profiles = [Profile.model_validate_json(p["profile"])
                for p in run_tasks(script, profile_tasks, label="profile")[:len(indices)]]
    full_tasks = [(cpus[n % len(cpus)], {"task": "full", **sized(i, size, keep=True)})
                  for n, (i, size) in enumerate(zip(indices, sizes))]
    repeat_tasks = [(cpu_list[n % len(cpu_list)], {"task": "full", **sized(i, size)})
                    for cpu_list in [repeat_cpus or cpus] for n, (i, size) in enumerate(zip(indices, sizes))]
    if repeat_cpus:
        results = run_tasks(script, full_tasks + repeat_tasks, label="full run / repeat")
        fulls, repeats = results[:len(indices)], results[len(indices):]
    else:
        fulls = run_tasks(script, full_tasks, label="full run")
        repeats = run_tasks(script, repeat_tasks, label="repeat")
    rows = []
    sweeps: dict[int, list[float]] = {}
    sweep_costs: dict[int, list[float]] = {}
    for i, size, profile, full_result, repeat in zip(indices, sizes, profiles, fulls, repeats):
        full = Profile.model_validate_json(full_result["profile"])
        row = build_row(CONFIGS[i], size["epochs"], size["train_samples"], profile, full)
        a, b = row["actual_s"], repeat["actual_s"]
        row["repeat_actual_s"] = b
        row["noise_floor"] = abs(a - b) / ((a + b) / 2)
        rows.append(row)
        for entry in k_sweep(full, row["epochs"], [3, 5, 10, 20, 40, 80, 160]):
            sweeps.setdefault(entry["k"], []).append(entry["iteration_error"])
            sweep_costs.setdefault(entry["k"], []).append(entry["cost_fraction"])
    pair_cpus = cpus + repeat_cpus
    # One interleaved pair per CPU at once (order alternated), at least --overhead-pairs in all.
    pairs = run_tasks(script, [(pair_cpus[n % len(pair_cpus)],
                                {"task": "overhead", "config": indices[0], "plain_first": n % 2 == 0,
                                 "batches": 60 if args.quick else 300})
                               for n in range(max(args.overhead_pairs, len(pair_cpus)))], label="overhead pair")
    ratios = [p["instrumented_s"] / p["plain_s"] for p in pairs]
    noise = [r["noise_floor"] for r in rows]
    summary = summarise(rows, statistics.median(ratios) - 1, statistics.median(noise))
    summary["noise_floor_max"] = max(noise)
    summary["noise_floor_meaning"] = ("median over the configurations of |full run − the same full run repeated at the "
                                      "same time on another CPU| / their mean")
    finish(args, rows, summary, sweeps, sweep_costs, started, target_s,
           extra={"overhead_pairs": ratios, "noise_floor_runs_s": [[r["actual_s"], r["repeat_actual_s"]] for r in rows],
                  "parallel": {"cpus": cpus, "repeat_cpus": repeat_cpus,
                               "how": "each configuration in its own process pinned to one CPU, all at once"}})


def finish(args: argparse.Namespace, rows: list[dict], summary: dict, sweeps: dict[int, list[float]],
           sweep_costs: dict[int, list[float]], started: float, target_s: float, extra: dict) -> None:
    """Write the results (and the k sweep) and print the table."""
    k_rows = [{"k": k, "median_iteration_error": statistics.median(v), "max_iteration_error": max(v),
               "median_cost_fraction": statistics.median(sweep_costs[k]), "configurations": len(v)}
              for k, v in sorted(sweeps.items())]
    result = {
        "benchmark": "same_machine_prediction", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(), "summary": summary, "rows": rows, **extra, "k_sweep": k_rows,
        "default_min_iterations": DEFAULT_MIN_ITERATIONS, "target_full_run_s": target_s,
        "benchmark_wall_s": time.time() - started, "quick": args.quick,
        "pinned_cpu": args.cpu, "threads_per_run": THREADS,
    }
    name = args.output or ("same_machine_prediction_quick.json" if args.quick else "same_machine_prediction.json")
    atomic_write_text(RESULTS / name, json.dumps(result, indent=1))
    if not args.output:
        atomic_write_text(RESULTS / ("profile_iterations_quick.json" if args.quick else "profile_iterations.json"),
                          json.dumps({"benchmark": "profile_iterations", "machine": result["machine"],
                                      "summary": {"default_min_iterations": DEFAULT_MIN_ITERATIONS,
                                                  "k_sweep": k_rows}, "source": name}, indent=1))

    table = Table(title="Same-machine prediction (trainwise estimator vs seed equations)")
    for column in ("workload", "batch", "epochs", "actual", "trainwise", "err", "eq5.4 err", "eq5.3 err", "avg err", "profile cost"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["workload"], str(r["batch_size"]), str(r["epochs"]), f"{r['actual_s']:.1f} s",
                      f"{r['predicted_s']['trainwise']:.1f} s", f"{r['abs_error']['trainwise']:.1%}",
                      f"{r['abs_error']['eq5.4']:.1%}", f"{r['abs_error']['eq5.3']:.1%}", f"{r['abs_error']['averaged']:.1%}",
                      f"{r['profiling_cost_fraction']:.2%}")
    console.print(table)
    console.print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in summary.items()})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target-minutes", type=float, default=6.0)
    parser.add_argument("--quick", action="store_true", help="tiny runs to check the script works (results not committed)")
    parser.add_argument("--overhead-pairs", type=int, default=3)
    parser.add_argument("--cpu", type=int, default=None,
                        help="pin this benchmark and its runs to one CPU (keep other work off it for clean timings)")
    parser.add_argument("--rerun", action="append", metavar="WORKLOAD:BATCH",
                        help="measure only this configuration again and replace its row in the results (repeatable)")
    parser.add_argument("--reason", default="", help="why the rerun replaces the first measurement (kept in the JSON)")
    parser.add_argument("--resummarise", action="store_true",
                        help="recompute the summary of the committed results from their rows (no runs)")
    parser.add_argument("--parallel-cpus", metavar="CPUS",
                        help="measure the configurations side by side, one process pinned per CPU (e.g. 0-7): for a "
                             "dedicated many-core machine")
    parser.add_argument("--repeat-cpus", metavar="CPUS",
                        help="with --parallel-cpus: run each full run's repeat (noise floor) at the same time on these CPUs")
    parser.add_argument("--output", help="results file name under benchmarks/results (default: same_machine_prediction.json)")
    parser.add_argument("--worker-task", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker_task:
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        write_worker_result(args.worker_out, worker(json.loads(args.worker_task)))
        return
    if args.parallel_cpus:
        parallel_main(args, 20.0 if args.quick else args.target_minutes * 60)
        return
    if args.resummarise:
        path = RESULTS / "same_machine_prediction.json"
        result = json.loads(path.read_text())
        result["summary"] = summarise(result["rows"], result["summary"]["instrumentation_overhead"],
                                      result["summary"]["noise_floor"])
        atomic_write_text(path, json.dumps(result, indent=1))
        console.print(result["summary"])
        return
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    target_s = 20.0 if args.quick else args.target_minutes * 60
    if args.rerun:
        if not args.reason:
            raise SystemExit("error: --rerun replaces measured rows: say why with --reason")
        rerun(args.rerun, args.reason, target_s)
        return
    configs = [CONFIGS[0], CONFIGS[4]] if args.quick else CONFIGS
    rows = []
    sweeps: dict[int, list[float]] = {}
    sweep_costs: dict[int, list[float]] = {}
    first_full_command = None
    started = time.time()
    for config in configs:
        row, command, full = measure(config, target_s)
        if first_full_command is None:
            first_full_command = (command, full)
        rows.append(row)
        for entry in k_sweep(full, row["epochs"], [3, 5, 10, 20, 40, 80, 160]):
            sweeps.setdefault(entry["k"], []).append(entry["iteration_error"])
            sweep_costs.setdefault(entry["k"], []).append(entry["cost_fraction"])
        write_partial(rows, target_s)

    # Noise floor: the same full run again.
    command, first = first_full_command
    repeat = full_run(command)
    a, b = first.full_run.training_end_s, repeat.full_run.training_end_s
    noise_floor = abs(a - b) / ((a + b) / 2)
    console.print(f"noise floor: {a:.1f} s vs {b:.1f} s → {noise_floor:.1%}")

    # Instrumentation overhead: interleaved pairs, order alternated, median of per-pair ratios.
    workload, batch, _, val_samples, _ = configs[0]
    overhead_command = command_for(workload, batch_size=batch, epochs=2, train_samples=batch * (60 if args.quick else 300),
                                   val_samples=val_samples, threads=THREADS)
    ratios = []
    for pair in range(args.overhead_pairs):
        if pair % 2 == 0:
            plain = plain_run_s(overhead_command)
            instrumented = full_run(overhead_command).process_wall_s
        else:
            instrumented = full_run(overhead_command).process_wall_s
            plain = plain_run_s(overhead_command)
        ratios.append(instrumented / plain)
        console.print(f"  overhead pair {pair}: plain {plain:.2f} s, instrumented {instrumented:.2f} s")
    overhead = statistics.median(ratios) - 1

    summary = summarise(rows, overhead, noise_floor)
    finish(args, rows, summary, sweeps, sweep_costs, started, target_s,
           extra={"overhead_pairs": ratios, "noise_floor_runs_s": [a, b]})


if __name__ == "__main__":
    main()
