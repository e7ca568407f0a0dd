"""Same-machine prediction accuracy through the framework integrations (Keras 3, Lightning, HF Trainer).

The same-machine benchmark (`same_machine_prediction.py`), extended with one workload per integration.
For each framework:
  1. a pilot profile (not counted) measures the iteration time, to size the full run to
     --target-minutes on this machine;
  2. the measured profile: `trainwise profile` (sampled) on the unmodified framework script — the
     profiler attaches the framework's callback by itself (`trainwise.integrations`);
  3. the prediction for the planned epochs with trainwise's estimator (`trainwise.predict.same_machine`);
  4. the full run, instrumented the same way (`--full`), whose launch → end-of-training time is the truth;
  5. the same full run again: the noise floor of this machine for that job.

Writes benchmarks/results/integrations_prediction.json and prints a table.
Run: .venv/bin/python benchmarks/integrations_prediction.py [--target-minutes 1.5] [--cpu N] [--quick]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.table import Table

from trainwise._io import atomic_write_text
from trainwise.predict.same_machine import host_stray_fraction, predict_total, relative_error, sampled_steps_s
from trainwise.profile.runner import ProfileOptions, run_profile
from trainwise.profile.schema import Profile
from _machine import machine
from _parallel import parse_cpus, run_tasks, write_worker_result
from same_machine_prediction import band_coverage, same_steps_errors, same_window_mean_iteration_s

RESULTS = Path(__file__).parent / "results"
console = Console()
THREADS = 1  # as the core benchmark: one intra-op thread, so a neighbour on the other core stalls less


@dataclasses.dataclass(frozen=True)
class Config:
    integration: str
    module: str
    batch_size: int
    epochs: int
    val_samples: int
    accumulate: int | None  # gradient accumulation (Lightning / HF); None: the script has no such option
    extra: tuple[str, ...] = ()

    def command(self, train_samples: int) -> list[str]:
        argv = [sys.executable, "-m", self.module, "--batch-size", str(self.batch_size), "--epochs", str(self.epochs),
                "--train-samples", str(train_samples), "--val-samples", str(self.val_samples),
                "--threads", str(THREADS), *self.extra]
        if self.accumulate is not None:
            argv += ["--accumulate", str(self.accumulate)]
        return argv


CONFIGS = [
    # Keras 3 (torch backend): the seed's NN-TWINS MLP as Künas wrote it, batch 32 (§6.2.1).
    Config("keras", "trainwise.workloads.keras_nn_twins", 32, 3, 2048, None, ("--verbose", "0")),
    # Lightning: RNN-SA LSTM, 2 batches of 8 per optimizer step.
    Config("lightning", "trainwise.workloads.lightning_rnn_sa", 8, 3, 256, 2),
    # HF Trainer: tiny BERT from a config, 2 batches of 16 per optimizer step, eval every epoch.
    Config("huggingface", "trainwise.workloads.hf_tiny_bert", 16, 3, 256, 2, ("--seq-len", "64")),
    # Ignite: Malta's MNIST CNN, batch 64, evaluated on the training and validation sets (batch 1,000) every epoch.
    Config("ignite", "trainwise.workloads.ignite_mnist", 64, 3, 2048, None),
]



def options(**kwargs) -> ProfileOptions:
    # The meta-device characterisation (device model) is not what this benchmark measures: skip it.
    if "characterise" in {f.name for f in dataclasses.fields(ProfileOptions)}:
        kwargs.setdefault("characterise", False)
    return ProfileOptions(**kwargs)


def size_run(config: Config, target_s: float) -> tuple[int, Profile]:
    """Training samples for a full run of about target_s, from a short pilot profile."""
    samples_per_step = config.batch_size * (config.accumulate or 1)
    pilot = run_profile(config.command(samples_per_step * 200),
                        options(min_iterations=10, max_iterations=40, validation_batches=2, epoch2_iterations=0),
                        quiet=True)
    iteration_s = pilot.steady_state.iteration.mean_s
    budget_s = max(30.0, target_s - pilot.init.total_s)
    steps = max(60, int(budget_s / config.epochs / iteration_s))
    return steps * samples_per_step, pilot


def write(rows: list[dict], target_s: float, started: float, args: argparse.Namespace, name: str) -> dict:
    errors = [r["abs_error"] for r in rows]
    result = {
        "benchmark": "integrations_prediction", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(threads_per_run=THREADS),
        "summary": {
            "median_abs_error": statistics.median(errors) if errors else None,
            "max_abs_error": max(errors) if errors else None,
            "per_integration": {r["integration"]: r["abs_error"] for r in rows},
            "without_level_correction": ({"median_abs_error": statistics.median(u),
                                          "max_abs_error": max(u)}
                                         if (u := [r["abs_error_without_level_correction"] for r in rows
                                                   if "abs_error_without_level_correction" in r]) else None),
            "profiling_cost_fraction": statistics.median(r["profiling_cost_fraction"] for r in rows) if rows else None,
            "noise_floor_median": statistics.median(r["noise_floor"] for r in rows) if rows else None,
            "self_consistency_max_error": max(r["self_consistency_error"] for r in rows) if rows else None,
            "noise_floor_max": max(r["noise_floor"] for r in rows) if rows else None,
            # the full run's own iterations over the profile's steps vs its mean (same_machine_prediction)
            "same_steps_floor": ({"median": statistics.median(floor), "max": max(floor)}
                                 if (floor := same_steps_errors(rows)) else None),
            "band_coverage": band_coverage(rows),
            "configurations": len(rows),
            "target": "median ≤ 5 %, max ≤ 10 % (the core profiler's same-machine target)",
            "estimator": "trainwise (trainwise.predict.same_machine.trainwise_estimate)",
            "error_convention": "|predicted − actual| / actual; actual = launch → end of the last iteration/validation "
                                "of the --full run",
        },
        "rows": rows, "target_full_run_s": target_s, "benchmark_wall_s": time.time() - started,
        "quick": args.quick, "pinned_cpu": args.cpu,
        "parallel": ({"cpus": args.parallel_cpus, "repeat_cpus": args.repeat_cpus,
                      "how": "each integration in its own process pinned to one CPU, all at once, the repeat of each "
                             "full run at the same time on its own CPU"} if args.parallel_cpus else None),
        "notes": ("run side by side (--parallel-cpus), meant for a dedicated many-core machine; each row's "
                  "load_average says how busy it was around its full run"
                  if args.parallel_cpus else
                  "shared 2-core development machine: other engineers' jobs ran at the same time; each row's "
                  "load_average says how busy the machine was around its full run"),
    }
    atomic_write_text(RESULTS / name, json.dumps(result, indent=1))
    return result


def measure(config: Config, train_samples: int) -> dict:
    """Profile, predict and fully run one sized configuration: its results row (without the repeat)."""
    profile = sampled_profile(config, train_samples)
    load_before = os.getloadavg()[0]
    full = run_profile(config.command(train_samples), options(mode="full"), workload=config.module, quiet=True)
    load_after = os.getloadavg()[0]
    return build_row(config, train_samples, profile, full, [load_before, load_after])


def sampled_profile(config: Config, train_samples: int) -> Profile:
    return run_profile(config.command(train_samples), options(epochs_hint=config.epochs), workload=config.module,
                       quiet=True)


def build_row(config: Config, train_samples: int, profile: Profile, full: Profile, load_average: list[float]) -> dict:
    """The results row of one integration (without its repeat): the profile's prediction against its full run."""
    command = config.command(train_samples)
    prediction = predict_total(profile, config.epochs)
    # side by side: the same profile without the host-level correction
    uncorrected = predict_total(profile, config.epochs, level_correction=False)
    actual_s = full.full_run.training_end_s
    return {
        "integration": config.integration, "workload": config.module, "command": command,
        "batch_size": config.batch_size, "accumulate": config.accumulate or 1, "epochs": config.epochs,
        "train_samples": train_samples, "val_samples": config.val_samples,
        "iterations_per_epoch": profile.dataset.iterations_per_epoch,
        "batches_per_iteration": profile.dataset.batches_per_iteration,
        "profiled_iterations": len(profile.iterations), "profile_stop": profile.stop_reason,
        "profile_sampling_stopped_by": profile.steady_state.sampling_stopped_by,
        "profile_validation_batches_timed": sum(v.batches_timed for v in profile.validations),
        "profile_wall_s": profile.process_wall_s, "full_run_wall_s": full.process_wall_s,
        "profiling_cost_fraction": profile.process_wall_s / full.process_wall_s,
        "actual_s": actual_s, "predicted_s": prediction.total_s, "band_s": [prediction.low_s, prediction.high_s],
        "abs_error": relative_error(actual_s, prediction.total_s),
        "predicted_without_level_correction_s": uncorrected.total_s,
        "abs_error_without_level_correction": relative_error(actual_s, uncorrected.total_s),
        "level_probes_s": [p.level_s for p in profile.level_probes],
        "host_mean_level_s": profile.host_noise.mean_level_s() if profile.host_noise is not None else None,
        "predicted_breakdown_s": prediction.breakdown_s,
        "actual_init_s": full.init.total_s, "profile_init_s": profile.init.total_s,
        "steady_iteration_profile_s": profile.steady_state.iteration.mean_s,
        "steady_iteration_full_s": full.steady_state.iteration.mean_s,
        # Diagnostic: the full run's iterations in the window the profile sampled. Close to the
        # profile's mean while the full run's overall mean differs = the machine's speed changed
        # along the run (neighbours' load), not a measurement error of the profile.
        "full_same_window_mean_iteration_s": same_window_mean_iteration_s(full, profile),
        "profile_warmup_iterations": profile.steady_state.warmup_iterations,
        "sampled_steps_s": sampled_steps_s(profile), "host_stray": host_stray_fraction(profile),
        # Accounting check without run-to-run noise: the estimator fed the full run's own profile
        # should give back the full run's time (any missing or double-counted time shows here).
        "self_consistency_error": relative_error(actual_s, predict_total(full, config.epochs).total_s),
        "actual_validation_s": sum(v.wall_s for v in full.validations),
        "load_average": load_average,
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def full_run_s(config: Config, train_samples: int) -> float:
    """The instrumented full run's launch → end-of-training time."""
    full = run_profile(config.command(train_samples), options(mode="full"), workload=config.module, quiet=True)
    return full.full_run.training_end_s


def add_repeat(row: dict, repeat_s: float) -> None:
    """The repeat of the same full run: the row's noise floor."""
    row["repeat_full_run_s"] = repeat_s
    row["noise_floor"] = abs(row["actual_s"] - repeat_s) / ((row["actual_s"] + repeat_s) / 2)
    row["abs_error_vs_repeat"] = relative_error(repeat_s, row["predicted_s"])


def worker(task: dict) -> dict:
    """One measurement of a parallel run (`_parallel.run_tasks`), in this process pinned to its CPU."""
    config = next(c for c in CONFIGS if c.integration == task["integration"])
    if task["task"] == "size":
        train_samples, pilot = size_run(config, task["target_s"])
        return {"train_samples": train_samples, "pilot_iteration_s": pilot.steady_state.iteration.mean_s}
    if task["task"] == "profile":
        return {"profile": sampled_profile(config, task["train_samples"]).model_dump_json()}
    if task["task"] == "full":
        load_before = os.getloadavg()[0]
        full = run_profile(config.command(task["train_samples"]), options(mode="full"), workload=config.module,
                           quiet=True)
        return {"actual_s": full.full_run.training_end_s, "load_average": [load_before, os.getloadavg()[0]],
                "profile": full.model_dump_json() if task.get("keep") else None}
    raise ValueError(f"unknown worker task {task['task']!r}")


def parallel_rows(configs: list[Config], cpus: list[int], repeat_cpus: list[int], target_s: float) -> list[dict]:
    """Every configuration side by side, one pinned CPU each: pilots, profiles, then full runs with the
    repeat of each at the same time on the repeat CPUs."""
    script = str(Path(__file__).resolve())
    console.print(f"[bold]parallel[/bold]: {len(configs)} integrations on CPUs {cpus}, repeats on {repeat_cpus}")
    # The pilots run on the repeat CPUs too (results unused there), so that they size the full runs
    # under the load the full runs will have.
    sizes = run_tasks(script, [(cpu_list[n % len(cpu_list)],
                                {"task": "size", "integration": c.integration, "target_s": target_s})
                               for cpu_list in [cpus, repeat_cpus] for n, c in enumerate(configs)],
                      label="pilot")[:len(configs)]
    # Then every sampled profile at once (the same profiles on the repeat CPUs as load); then every
    # full run at once with its repeat: each profile and each full run see the neighbours in the same phase.
    def sized(c: Config, size: dict, **more) -> dict:
        return {"integration": c.integration, "train_samples": size["train_samples"], **more}

    profile_tasks = [(cpu_list[n % len(cpu_list)], {"task": "profile", **sized(c, size)})
                     for cpu_list in [cpus, repeat_cpus] for n, (c, size) in enumerate(zip(configs, sizes))]
    profiles = [Profile.model_validate_json(p["profile"])
                for p in run_tasks(script, profile_tasks, label="profile")[:len(configs)]]
    full_tasks = [(cpu_list[n % len(cpu_list)], {"task": "full", **sized(c, size, keep=cpu_list is cpus)})
                  for cpu_list in [cpus, repeat_cpus] for n, (c, size) in enumerate(zip(configs, sizes))]
    results = run_tasks(script, full_tasks, label="full run / repeat")
    rows = []
    for c, size, profile, full_result, repeat in zip(configs, sizes, profiles, results[:len(configs)],
                                                     results[len(configs):]):
        row = build_row(c, size["train_samples"], profile, Profile.model_validate_json(full_result["profile"]),
                        full_result["load_average"])
        add_repeat(row, repeat["actual_s"])
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target-minutes", type=float, default=1.5)
    parser.add_argument("--quick", action="store_true", help="tiny runs to check the script works (results not committed)")
    parser.add_argument("--only", choices=[c.integration for c in CONFIGS], action="append")
    parser.add_argument("--cpu", type=int, default=None, help="pin the benchmark and its runs to one CPU")
    parser.add_argument("--parallel-cpus", metavar="CPUS",
                        help="measure the integrations side by side, one process pinned per CPU (e.g. 0-2): for a "
                             "dedicated many-core machine; needs --repeat-cpus for the repeats")
    parser.add_argument("--repeat-cpus", metavar="CPUS", help="with --parallel-cpus: CPUs for the repeat full runs")
    parser.add_argument("--output", help="results file name under benchmarks/results (default: integrations_prediction.json)")
    parser.add_argument("--worker-task", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    os.environ.setdefault("KERAS_BACKEND", "torch")
    if args.worker_task:
        write_worker_result(args.worker_out, worker(json.loads(args.worker_task)))
        return
    target_s = 25.0 if args.quick else args.target_minutes * 60
    name = "integrations_prediction_quick.json" if args.quick else "integrations_prediction.json"
    configs = [c for c in CONFIGS if not args.only or c.integration in args.only]
    if args.output:
        name = args.output
    # --only measures some integrations again: the other rows of the results file stay (each with its measured_at)
    previous = RESULTS / name
    kept = ([r for r in json.loads(previous.read_text())["rows"] if r["integration"] not in args.only]
            if args.only and not args.quick and previous.exists() else [])
    rows: list[dict] = list(kept)
    started = time.time()
    if args.parallel_cpus:
        cpus = parse_cpus(args.parallel_cpus)
        if not args.repeat_cpus:
            raise SystemExit("error: --parallel-cpus needs --repeat-cpus (CPUs for the repeat full runs, e.g. 3-5)")
        repeat_cpus = parse_cpus(args.repeat_cpus)
        if set(cpus) & set(repeat_cpus):
            raise SystemExit("error: --parallel-cpus and --repeat-cpus overlap: give the repeats their own CPUs")
        rows = kept + parallel_rows(configs, cpus, repeat_cpus, target_s)
        configs = []
    for config in configs:
        train_samples, pilot = size_run(config, target_s)
        console.print(f"[bold]{config.integration}[/bold] ({config.module}): {train_samples} samples × {config.epochs} "
                      f"epochs (pilot {pilot.steady_state.iteration.mean_s * 1000:.1f} ms/iteration, "
                      f"init {pilot.init.total_s:.1f} s)")
        row = measure(config, train_samples)
        # The same full run again: how much this machine alone moves a run's time (noise floor).
        add_repeat(row, full_run_s(config, train_samples))
        rows.append(row)
        write(rows, target_s, started, args, name)
        console.print(f"  predicted {row['predicted_s']:.1f} s, actual {row['actual_s']:.1f} s "
                      f"(repeat {row['repeat_full_run_s']:.1f} s), error {row['abs_error']:.1%} "
                      f"(iteration {row['steady_iteration_profile_s'] * 1000:.1f} vs "
                      f"{row['steady_iteration_full_s'] * 1000:.1f} ms)")
    result = write(rows, target_s, started, args, name)
    table = Table(title="Same-machine prediction through the framework integrations (trainwise estimator)")
    for column in ("integration", "epochs", "it/epoch", "actual", "predicted", "error", "profile cost"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(r["integration"], str(r["epochs"]), str(r["iterations_per_epoch"]), f"{r['actual_s']:.1f} s",
                      f"{r['predicted_s']:.1f} s", f"{r['abs_error']:.1%}", f"{r['profiling_cost_fraction']:.0%}")
    console.print(table)
    console.print(result["summary"])


if __name__ == "__main__":
    sys.exit(main())
