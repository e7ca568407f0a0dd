"""Synthetic profiles with known timings, for the planner's tests and the ranking benchmark.

`synthetic_profile` builds a Profile through the same `profile_from_raw` path a real recording
takes, so every field the planner reads is filled as in a measured profile. Nothing here is
presented as a measurement: the workload name says `synthetic`.
"""

from __future__ import annotations

from trainwise.profile.schema import Profile, profile_from_raw


def synthetic_profile(*, iteration_s: float = 0.05, first_iteration_s: float | None = None, init_s: float = 2.0,
                      iterations: int = 30, batch_size: int = 32, batches_per_epoch: int = 100, val_batch_s: float = 0.01,
                      val_batches_total: int = 20, host: str = "synthetic-host", device_name: str | None = None,
                      jitter: float = 0.0, peak_device_bytes: int | None = None, parameters: int = 1_000_000,
                      workload: str = "synthetic", growth: float = 0.0) -> Profile:
    """A profile whose steady iteration takes `iteration_s` (± `jitter`, alternating; times 1 + `growth` x i / n for
    the i-th of n, a step that keeps growing), with validation, an epoch-2 start and the given host and device (None:
    CPU)."""
    t = init_s
    walls = [first_iteration_s if first_iteration_s is not None else iteration_s * 3]
    walls += [iteration_s * (1 + (jitter if i % 2 else -jitter)) * (1 + growth * i / iterations)
              for i in range(iterations - 1)]
    records = []
    for wall in walls:
        records.append({"index": len(records), "epoch": 0, "start_s": t, "end_s": t + wall, "data_wait_s": wall * 0.1,
                        "samples": batch_size, "batches": 1})
        t += wall
    epochs = [{"index": 0, "start_s": init_s, "end_s": t, "iterations": len(walls), "truncated": True,
               "batches_per_epoch": batches_per_epoch}]
    starts = []
    v0 = t
    for _ in range(5):
        starts.append(t)
        t += val_batch_s
    validations = [{"epoch": 0, "start_s": v0, "end_s": t, "batch_starts_s": starts, "data_wait_s": [0.0] * 5,
                    "samples": batch_size * 5, "truncated": True, "batches_total": val_batches_total}]
    epochs.append({"index": 1, "start_s": t, "end_s": None, "iterations": 3, "truncated": False,
                   "batches_per_epoch": batches_per_epoch})
    for _ in range(3):
        records.append({"index": len(records), "epoch": 1, "start_s": t, "end_s": t + iteration_s, "data_wait_s": 0.0,
                        "samples": batch_size, "batches": 1})
        t += iteration_s
    device = "cpu" if device_name is None else "cuda:0"
    raw = {
        "raw_format_version": 1, "mode": "sampled", "config": {}, "stop_reason": "sampled",
        "stability": {"iterations": iterations, "stable": True, "relative_drift": 0.0},
        "marks": {"bootstrap": 0.1, "torch_import_start": 0.1, "torch_imported": 1.5, "first_iteration_start": init_s},
        "iterations": records, "validations": validations, "epochs": epochs,
        "loaders": {"train": {"batches_per_pass": batches_per_epoch, "dataset_size": batches_per_epoch * batch_size,
                              "drop_last": False, "num_workers": 0},
                    "val": {"batches_per_pass": val_batches_total, "dataset_size": val_batches_total * batch_size,
                            "drop_last": False, "num_workers": 0}},
        "model": {"parameters": parameters, "trainable_parameters": parameters, "gradient_bytes": parameters * 4,
                  "device": device, "parameter_dtypes": ["float32"], "optimizer": "Adam"},
        "environment": {"python_version": "3.11", "platform": "linux", "hostname": host, "cpu_model": "synthetic cpu",
                        "logical_cores": 2, "torch_version": "2.14.1", "torch_threads": 2, "device": device,
                        "device_name": device_name},
        "memory": {"peak_rss_bytes": 1 << 28, "peak_device_bytes": peak_device_bytes},
        "training_end_s": t, "recorded_until_s": t, "explicit_steps": False, "notes": [],
    }
    return profile_from_raw(raw, command=["python", "train.py"], process_wall_s=t + 0.5, exit_code=0, workload=workload)
