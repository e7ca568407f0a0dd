"""Measured GPU training throughput vs the device model's prediction (issue 4's out-of-sample check).

Two steps, because the GPU and the project's usual machine are different machines:

  python benchmarks/gpu_throughput.py measure --out DIR     # on a machine with a CUDA GPU
  python benchmarks/gpu_throughput.py compare DIR           # anywhere: predict the same rows, compare

`measure` trains each configuration below for real (`trainwise.predict.measure.measure_throughput`:
the exact step the characteriser traces, synthetic inputs on the device, median of timed blocks with
their spread) and writes DIR/gpu_measured.csv (the validation CSV format of `trainwise validate`) and
DIR/gpu_measured.json (every measurement with its spread, peak memory, the GPU's clocks and power
limit). It writes both after every configuration, so a run cut short keeps what it measured. Then it
checks issue 2's same-machine estimator on the GPU: `trainwise profile` of reference workloads with
`--device cuda` (plain PyTorch, Lightning, Hugging Face Trainer), the predicted full run, and the full
run itself (`SAME_MACHINE`).

`compare` predicts every measured row with the packaged device model (fitted only on the published
calibration set: none of these rows is in it, so the errors are out-of-sample), compares the
predicted memory with the measured peak, and writes benchmarks/results/gpu_throughput.json (summary:
median, p90, max |error|) and benchmarks/results/gpu_measured_<accelerator>.csv.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _machine import machine

from trainwise._io import atomic_write_text

RESULTS = Path(__file__).resolve().parent / "results"

# (model, per-device batch, precision, extra): torchvision CNNs and a ViT, hf: transformers at their usual
# sequence lengths, the seeds' reference workloads, NCF; each precision the device model distinguishes.
CONFIGS: list[tuple[str, int, str, dict[str, Any]]] = [
    ("resnet50", 256, "amp_fp16", {"memory_format": "nhwc"}),
    ("resnet50", 256, "amp_fp16", {}),
    ("resnet50", 128, "tf32", {}),
    ("resnet50", 128, "fp32", {}),
    ("resnet50", 64, "amp_bf16", {"memory_format": "nhwc"}),
    ("resnet152", 128, "amp_fp16", {"memory_format": "nhwc"}),
    ("convnext_large", 64, "amp_bf16", {}),
    ("convnext_tiny", 128, "amp_bf16", {}),
    ("vit_b_16", 128, "amp_bf16", {}),
    ("vit_b_16", 32, "amp_fp16", {}),
    ("swin_t", 128, "amp_bf16", {}),
    ("efficientnet_b0", 256, "amp_fp16", {"memory_format": "nhwc"}),
    ("inception_v3", 128, "amp_fp16", {}),
    ("densenet121", 128, "amp_fp16", {}),
    ("vgg16", 128, "amp_fp16", {}),
    ("alexnet", 512, "amp_fp16", {}),
    ("mobilenet_v3_large", 256, "amp_fp16", {}),
    ("hf:bert-base-uncased", 64, "amp_fp16", {"seq_len": 128}),
    ("hf:bert-base-uncased", 32, "tf32", {"seq_len": 512}),
    ("hf:bert-large-uncased", 16, "amp_bf16", {"seq_len": 512}),
    ("hf:roberta-large", 8, "amp_bf16", {"seq_len": 512}),
    ("hf:gpt2", 8, "amp_bf16", {"seq_len": 1024}),
    ("hf:gpt2-medium", 4, "tf32", {"seq_len": 1024}),
    ("resnet50_cifar10", 1024, "fp32", {}),
    ("resnet50_cifar10", 256, "amp_fp16", {}),
    ("seismic_fcn", 64, "fp32", {}),
    ("inceptionv3_dr", 64, "amp_fp16", {}),
    ("rnn_sa_lstm", 256, "fp32", {}),
    ("ncf", 1_048_576, "tf32", {}),
]

# Where the device time goes (torch.profiler, per operator category), for the configurations whose
# errors have different causes: channels-last AMP, a host-bound small step, transformers, depthwise.
BREAKDOWN_CONFIGS: list[tuple[str, int, str, dict[str, Any]]] = [
    ("resnet50", 256, "amp_fp16", {"memory_format": "nhwc"}),
    ("resnet50", 256, "amp_fp16", {}),
    ("resnet50", 64, "amp_bf16", {"memory_format": "nhwc"}),
    ("resnet50_cifar10", 256, "amp_fp16", {}),
    ("vit_b_16", 128, "amp_bf16", {}),
    ("hf:bert-base-uncased", 32, "tf32", {"seq_len": 512}),
    ("hf:gpt2", 8, "amp_bf16", {"seq_len": 1024}),
    ("mobilenet_v3_large", 256, "amp_fp16", {}),
    ("inception_v3", 128, "amp_fp16", {}),
]

# The same-machine checks on the GPU (issue 2's estimator on CUDA jobs, plain PyTorch and through the
# Lightning and Hugging Face Trainer integrations): profile, predict, run in full.
SAME_MACHINE = [
    {"workload": "resnet50_cifar10", "batch_size": 256, "epochs": 10, "train_samples": 50_000,
     "val_samples": 10_000, "num_workers": 4, "device": "cuda"},
    {"workload": "lightning_rnn_sa", "batch_size": 64, "epochs": 3, "train_samples": 12_000, "val_samples": 1_000,
     "accumulate": 2, "device": "cuda"},
    {"workload": "hf_tiny_bert", "batch_size": 64, "epochs": 3, "train_samples": 12_000, "val_samples": 1_000,
     "accumulate": 2, "device": "cuda"},
]


def _nvidia_smi() -> dict[str, str]:
    fields = "name,driver_version,clocks.max.sm,clocks.max.mem,power.limit,memory.total"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30, check=True).stdout.strip().splitlines()[0]
        return dict(zip(fields.split(","), (v.strip() for v in out.split(","))))
    except (OSError, subprocess.SubprocessError, IndexError):
        return {}


def _write(out: Path, rows: list[dict[str, Any]], payload: dict[str, Any]) -> None:
    from trainwise.predict.measure import validation_csv_text

    atomic_write_text(out / "gpu_measured.csv", validation_csv_text(rows))
    atomic_write_text(out / "gpu_measured.json", json.dumps(payload, indent=1))


def measure(out: Path, only: list[str], min_run_time_s: float, same_machine: bool = True,
            breakdown_only: bool = False) -> int:
    import torch

    from trainwise.catalog import load_catalog
    from trainwise.errors import TrainwiseError
    from trainwise.predict import measure as me

    if not torch.cuda.is_available():
        print("error: no CUDA device here: run `measure` on a machine with a GPU", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    device_name = torch.cuda.get_device_name()
    accelerator = me.accelerator_of_device_name(device_name, load_catalog())
    source = (f"measured by trainwise benchmarks/gpu_throughput.py on a {device_name} ({accelerator}), "
              f"torch {torch.__version__}, {time.strftime('%Y-%m-%d')}")
    configs = [c for c in CONFIGS if (not only or c[0] in only) and not breakdown_only]
    payload: dict[str, Any] = {"accelerator": accelerator, "source": source, "nvidia_smi": _nvidia_smi(),
                               "machine": machine(), "min_run_time_s": min_run_time_s, "measurements": [], "failed": []}
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for i, (model, batch, precision, extra) in enumerate(configs, 1):
        label = f"{model} b{batch} {precision} {extra or ''}".strip()
        try:
            m = me.measure_throughput(model, batch, precision, min_run_time_s=min_run_time_s, **extra)
        except (TrainwiseError, RuntimeError) as exc:
            payload["failed"].append({"config": label, "error": str(exc).splitlines()[0][:300]})
            print(f"[{i}/{len(configs)}] {label}: FAILED {str(exc).splitlines()[0][:200]}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        payload["measurements"].append(m.model_dump())
        rows.append(me.to_validation_row(m, accelerator, source))
        spread = m.step_time_s_iqr / m.step_time_s_median
        print(f"[{i}/{len(configs)}] {label}: {m.samples_per_s:,.1f} samples/s, step {m.step_time_s_median * 1e3:.2f} ms "
              f"(IQR {spread:.1%}, {len(m.step_time_s_blocks)}x{m.steps_per_block}), peak "
              f"{(m.peak_memory_bytes or 0) / 2**30:.1f} GiB, {time.perf_counter() - started:.0f} s", flush=True)
        payload["seconds"] = round(time.perf_counter() - started, 1)
        _write(out, rows, payload)
    _write(out, rows, payload)
    payload["breakdowns"] = []
    for model, batch, precision, extra in [c for c in BREAKDOWN_CONFIGS if not only or c[0] in only]:
        try:
            b = me.measure_breakdown(model, batch, precision, **extra)
        except (TrainwiseError, RuntimeError) as exc:
            payload["breakdowns"].append({"model": model, "per_device_batch": batch, "precision": precision,
                                          "error": str(exc).splitlines()[0][:300]})
            continue
        finally:
            torch.cuda.empty_cache()
        payload["breakdowns"].append(b.model_dump())
        print(f"breakdown {model} b{batch} {precision} {extra or ''}: wall {b.step_wall_s * 1e3:.1f} ms, device busy "
              f"{b.device_busy_s * 1e3:.1f} ms (idle {b.idle_fraction:.0%}): "
              + ", ".join(f"{k} {v * 1e3:.1f}" for k, v in b.by_category_s.items()), flush=True)
        _write(out, rows, payload)
    if same_machine and not breakdown_only:
        payload["same_machine_cuda"] = []
        for config in SAME_MACHINE:
            try:
                payload["same_machine_cuda"].append(same_machine_check(config))
            except Exception as exc:  # noqa: BLE001 - one failed check must not lose the others
                payload["same_machine_cuda"].append({"workload": config["workload"], "error": str(exc)[:300]})
            _write(out, rows, payload)
    return 0 if rows or payload["breakdowns"] else 1


def same_machine_check(same_machine: dict[str, Any]) -> dict[str, Any]:
    """Profile a reference workload on the GPU, predict its full run, run it in full: the error."""
    from trainwise.predict.same_machine import predict_total, relative_error
    from trainwise.profile.runner import ProfileOptions, run_profile
    from trainwise.workloads import WORKLOADS, command_for

    config = dict(same_machine)
    workload, epochs = config.pop("workload"), config["epochs"]
    if workload in WORKLOADS:
        command = command_for(workload, **config)
    else:  # an integration example (trainwise.workloads.lightning_rnn_sa, hf_tiny_bert): same options
        command = [sys.executable, "-m", f"trainwise.workloads.{workload}"]
        for key, value in config.items():
            command += [f"--{key.replace('_', '-')}", str(value)]
    profile = run_profile(command, ProfileOptions(epochs_hint=epochs), workload=workload, quiet=True)
    predicted = predict_total(profile, epochs)
    full = run_profile(command, ProfileOptions(mode="full"), quiet=True)
    actual_s = full.full_run.training_end_s
    result = {"workload": workload, **config, "command": " ".join(command[1:]), "predicted_s": predicted.total_s,
              "actual_s": actual_s, "abs_error": relative_error(actual_s, predicted.total_s),
              "profile_wall_s": profile.process_wall_s, "full_run_wall_s": full.process_wall_s,
              "profiling_cost_fraction": profile.process_wall_s / full.process_wall_s,
              "profiled_iterations": len(profile.iterations), "peak_device_bytes": profile.memory.peak_device_bytes,
              "device_name": profile.environment.device_name}
    print(f"same machine ({config['device']}): {workload} b{config['batch_size']} x {epochs} epochs: predicted "
          f"{predicted.total_s:.1f} s, actual {actual_s:.1f} s ({result['abs_error']:.1%}), profiling cost "
          f"{result['profiling_cost_fraction']:.1%}", flush=True)
    return result


def compare(folder: Path, breakdowns_json: Path | None = None, output: str = "gpu_throughput.json") -> int:
    from trainwise.catalog import load_catalog
    from trainwise.predict.calibration_eval import quantile
    from trainwise.predict.device_params import load_params
    from trainwise.predict.measurements import load_measurements
    from trainwise.predict.validate import validate_dataset

    measured_csv, measured_json = folder / "gpu_measured.csv", folder / "gpu_measured.json"
    if not measured_csv.is_file() or not measured_json.is_file():
        print(f"error: {folder} holds no gpu_measured.csv/json: run `measure --out {folder}` on the GPU first",
              file=sys.stderr)
        return 2
    raw = json.loads(measured_json.read_text(encoding="utf-8"))
    catalog = load_catalog()
    report = validate_dataset(measured_csv, catalog=catalog)
    rows = load_measurements(measured_csv, catalog)
    params = load_params()
    per_row = []
    for r, m, meas in zip(report.predictions, rows, raw["measurements"]):
        peak_gib = (meas.get("peak_memory_bytes") or 0) / 2**30
        per_row.append({"model": r.model, "per_device_batch": r.per_device_batch, "precision": r.precision,
                        "memory_format": m.memory_format, "seq_len": m.seq_len,
                        "measured_samples_per_s": r.measured_samples_per_s,
                        "measured_step_iqr_fraction": round(meas["step_time_s_iqr"] / meas["step_time_s_median"], 4),
                        "predicted_samples_per_s": r.predicted_samples_per_s, "error": r.error, "band": r.band,
                        "within_band": r.within_band,
                        "measured_peak_memory_gib": round(peak_gib, 2),
                        "predicted_memory_gib": round(r.memory_required_gib, 2),
                        "memory_ratio_predicted_to_measured": round(r.memory_required_gib / peak_gib, 3) if peak_gib else None})
    errors = [abs(r["error"]) for r in per_row]
    memory_ratios = [r["memory_ratio_predicted_to_measured"] for r in per_row if r["memory_ratio_predicted_to_measured"]]
    accelerator = raw["accelerator"]
    summary = {"rows": len(per_row), "accelerator": accelerator, "device": raw["nvidia_smi"].get("name") or raw["machine"].get("gpu"),
               "median_abs_error": round(statistics.median(errors), 4),
               "p90_abs_error": round(quantile(errors, 0.9), 4), "max_abs_error": round(max(errors), 4),
               "mean_abs_error": round(statistics.fmean(errors), 4),
               "within_band_fraction": report.summary["within_band_fraction"],
               "memory_ratio_median": round(statistics.median(memory_ratios), 3) if memory_ratios else None,
               "memory_ratio_range": [min(memory_ratios), max(memory_ratios)] if memory_ratios else None,
               "habitat_published_mean_error": 0.12,
               "provenance": ("measured on a lent GPU (samples/s: median of timed blocks) vs modelled by the packaged "
                              "device model fitted on the published calibration set only: out-of-sample"),
               "failed_configs": len(raw.get("failed", [])),
               "same_machine_cuda_abs_error": _same_machine_errors(raw.get("same_machine_cuda"))}
    breakdowns = raw.get("breakdowns") or []
    if breakdowns_json is not None:
        breakdowns = json.loads(breakdowns_json.read_text(encoding="utf-8")).get("breakdowns") or []
    compared_breakdowns = [_compare_breakdown(b, catalog.accelerator(accelerator), params) for b in breakdowns if "error" not in b]
    if compared_breakdowns:
        categories = sorted({c for b in compared_breakdowns for c in b["modelled"]["breakdown_s"]})
        pooled = {}
        for category in categories:
            measured_s = sum(b["measured"]["by_category_s"].get(category, 0.0) for b in compared_breakdowns)
            modelled_s = sum(b["modelled"]["breakdown_s"].get(category, 0.0) for b in compared_breakdowns)
            if modelled_s > 0 and measured_s > 0:
                pooled[category] = round(measured_s / modelled_s, 3)
        # device time per category, measured (torch.profiler kernel time) / modelled, pooled over the breakdowns
        summary["breakdown_measured_to_modelled"] = pooled
        summary["breakdown_note"] = ("kernel time per category from torch.profiler (self device time of each ATen "
                                     "operator) while profiling 5 steps; the profiler slows the host, so idle "
                                     "fractions (1 - device busy / wall) are upper bounds")
        summary["breakdown_idle_fraction"] = {f"{b['model']} b{b['per_device_batch']} {b['precision']} {b['memory_format']}":
                                              b["measured"]["idle_fraction"] for b in compared_breakdowns}
    result = {"summary": summary, "rows": per_row, "failed": raw.get("failed", []), "measured_on": raw["machine"],
              "breakdowns": compared_breakdowns,
              "nvidia_smi": raw["nvidia_smi"], "source": raw["source"], "min_run_time_s": raw.get("min_run_time_s"),
              "same_machine_cuda": raw.get("same_machine_cuda"), "compared_on": machine()}
    RESULTS.mkdir(exist_ok=True)
    atomic_write_text(RESULTS / output, json.dumps(result, indent=1))
    shutil.copyfile(measured_csv, RESULTS / f"gpu_measured_{accelerator.lower()}.csv")
    print(f"{'model':24} {'batch':>7} {'prec':9} {'fmt':4} {'measured':>12} {'predicted':>12} {'error':>7}  mem pred/meas")
    for r in per_row:
        print(f"{r['model'][:24]:24} {r['per_device_batch']:>7} {r['precision']:9} {r['memory_format']:4} "
              f"{r['measured_samples_per_s']:>12,.1f} {r['predicted_samples_per_s']:>12,.1f} {r['error']:>+7.1%}  "
              f"{r['predicted_memory_gib']:.1f}/{r['measured_peak_memory_gib']:.1f} GiB")
    for b in compared_breakdowns:
        m, p = b["measured"], b["modelled"]
        print(f"\n{b['model']} b{b['per_device_batch']} {b['precision']} {b['memory_format']}: wall {m['step_wall_s'] * 1e3:.1f} ms "
              f"(device busy {m['device_busy_s'] * 1e3:.1f} ms, idle {m['idle_fraction']:.0%}) vs modelled "
              f"{p['iteration_s'] * 1e3:.1f} ms (device {p['device_s'] * 1e3:.1f}, host floor {p['host_bound_s'] * 1e3:.1f})")
        for category in sorted(set(m["by_category_s"]) | set(p["breakdown_s"]), key=lambda c: -m["by_category_s"].get(c, 0.0)):
            print(f"   {category:14} measured {m['by_category_s'].get(category, 0.0) * 1e3:8.2f} ms   "
                  f"modelled {p['breakdown_s'].get(category, 0.0) * 1e3:8.2f} ms")
    print(json.dumps(summary, indent=1))
    return 0


def _recategorised(measured: dict[str, Any]) -> dict[str, Any]:
    """The breakdown with each listed operator in the category `category_of_aten` gives it now (a run
    before aten::add/mul/div were classed elementwise listed them as other; only its 15 largest
    operators were kept then, `top_ops`, which held all but a few microseconds of "other")."""
    from trainwise.predict.measure import category_of_aten

    ops = measured.get("ops") or measured.get("top_ops") or []
    by_category = dict(measured["by_category_s"])
    for name, old, seconds in ops:
        new = category_of_aten(name)
        if new != old:
            by_category[old] = by_category.get(old, 0.0) - seconds
            by_category[new] = by_category.get(new, 0.0) + seconds
    by_category = {k: round(v, 9) for k, v in sorted(by_category.items(), key=lambda kv: -kv[1]) if v > 1e-9}
    return {**measured, "by_category_s": by_category}


def _compare_breakdown(measured: dict[str, Any], accelerator: Any, params: Any) -> dict[str, Any]:
    """A measured per-category breakdown beside the device model's for the same step."""
    from trainwise.predict import device_model as dm
    from trainwise.predict import operator_time as ot
    from trainwise.predict.characterise import characterise_named

    measured = _recategorised(measured)

    # breakdowns written before they recorded their sequence length take it from BREAKDOWN_CONFIGS
    seq_len = measured.get("seq_len") or _seq_len_of(measured["model"])
    char = characterise_named(measured["model"], measured["per_device_batch"], measured["precision"], seq_len,
                              memory_format=measured["memory_format"])
    p = dm.predict_iteration(char, accelerator, 1, measured["precision"], params=params)
    return {"model": measured["model"], "per_device_batch": measured["per_device_batch"],
            "precision": measured["precision"], "memory_format": measured["memory_format"],
            "kernels_traced": char.kernel_launches, "host_dispatched_kernels": ot.host_dispatched_kernels(char.records),
            "measured": measured,
            "modelled": {"iteration_s": p.iteration_s, "device_s": p.device_s, "host_bound_s": p.host_bound_s,
                         "breakdown_s": p.breakdown_s}}


def _seq_len_of(model: str) -> int | None:
    for name, _, _, extra in BREAKDOWN_CONFIGS:
        if name == model and "seq_len" in extra:
            return int(extra["seq_len"])
    return None


def _same_machine_errors(checks: Any) -> dict[str, float] | None:
    if not checks:
        return None
    if isinstance(checks, dict):  # a measure run before the checks became a list
        checks = [checks]
    # per workload; a workload checked more than once gets the median of its runs (each run is in
    # same_machine_cuda)
    errors: dict[str, list[float]] = {}
    for c in checks:
        if "abs_error" in c:
            errors.setdefault(c["workload"], []).append(c["abs_error"])
    return {workload: round(statistics.median(values), 4) for workload, values in errors.items()}


def microbench(out: Path, device: str = "cuda", scale: int = 1) -> int:
    """Per-category ground truth the whole-step rows cannot give: GEMM throughput by size and precision,
    batch norm and convolution in both layouts, elementwise bandwidth, and the host's dispatch cost per
    eager operator (a 1-element add, timed in a loop): DIR/gpu_microbench.json. `scale` divides the
    sizes (a CPU smoke test)."""
    import torch
    import torch.utils.benchmark as benchmark

    dev = torch.device(device)
    results: dict[str, Any] = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
                               "torch": torch.__version__, "gemm": [], "batch_norm": [], "conv": [], "elementwise": []}

    def timed(fn: Any, seconds: float = 0.3) -> float:
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        return float(benchmark.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=seconds).median)

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cudnn.benchmark = dev.type == "cuda"
    try:
        for label, dtype, tf32 in (("fp32", torch.float32, False), ("tf32", torch.float32, True),
                                   ("fp16", torch.float16, False), ("bf16", torch.bfloat16, False)):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            for m, k, n in [(s, s, s) for s in (256, 512, 1024, 2048, 4096, 8192)] + [(16384, 768, 768), (16384, 768, 3072),
                                                                                    (16384, 3072, 768), (2048, 64, 2048)]:
                m, k, n = max(8, m // scale), max(8, k // scale), max(8, n // scale)
                a = torch.randn(m, k, device=dev, dtype=dtype)
                b = torch.randn(k, n, device=dev, dtype=dtype)
                t = timed(lambda: a @ b)
                results["gemm"].append({"precision": label, "m": m, "k": k, "n": n, "seconds": t,
                                        "tflops": round(2.0 * m * k * n / t / 1e12, 2)})
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = True
        for shape in ((256, 64, 56, 56), (256, 256, 14, 14), (256, 32, 112, 112)):
            n_, c_, h_, w_ = shape
            shape = (max(2, n_ // scale), c_, max(4, h_ // scale), max(4, w_ // scale))
            for layout in ("nchw", "nhwc"):
                fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
                bn = torch.nn.BatchNorm2d(shape[1]).to(dev).to(memory_format=fmt)
                x = torch.randn(shape, device=dev, dtype=torch.float16).contiguous(memory_format=fmt).requires_grad_()

                def bn_step() -> None:
                    with torch.autocast(dev.type, dtype=torch.float16):
                        y = bn(x)
                    y.backward(torch.ones_like(y))

                t = timed(bn_step)
                moved = 5 * x.numel() * 2  # forward read + write, backward reads x, dy and writes dx (16-bit)
                results["batch_norm"].append({"shape": list(shape), "layout": layout, "seconds": t,
                                              "effective_gb_per_s": round(moved / t / 1e9, 1)})
                conv = torch.nn.Conv2d(shape[1], shape[1], 3, padding=1, bias=False).to(dev).to(memory_format=fmt)

                def conv_step() -> None:
                    with torch.autocast(dev.type, dtype=torch.float16):
                        y = conv(x)
                    y.backward(torch.ones_like(y))

                t = timed(conv_step)
                flops = 3 * 2 * x.numel() * shape[1] * 9
                results["conv"].append({"shape": list(shape), "kernel": 3, "layout": layout, "seconds": t,
                                        "tflops": round(flops / t / 1e12, 2)})
        big = torch.randn(max(1024, 256 * 2**20 // scale), device=dev, dtype=torch.float16)
        other = torch.randn_like(big)
        for name, fn, passes in (("relu", lambda: torch.relu(big), 2), ("add", lambda: big + other, 3),
                                 ("copy_fp32", lambda: big.float(), 3)):
            t = timed(fn)
            results["elementwise"].append({"op": name, "elements": big.numel(), "seconds": t,
                                           "effective_gb_per_s": round(passes * big.numel() * 2 / t / 1e9, 1)})
        tiny, one = torch.zeros(1, device=dev), torch.ones(1, device=dev)

        def hundred_adds() -> None:
            for _ in range(100):
                tiny.add_(one)

        results["host_dispatch_us_per_op"] = round(timed(hundred_adds, 0.5) / 100 * 1e6, 2)
        w = torch.nn.Linear(64, 64).to(dev)
        xs = torch.randn(8, 64, device=dev, requires_grad=True)

        def tiny_training_ops() -> None:  # forward + backward of a tiny layer: ~6 eager operators with autograd
            w(xs).sum().backward()

        results["host_tiny_linear_step_us"] = round(timed(tiny_training_ops, 0.5) * 1e6, 2)
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark) = saved
    out.mkdir(parents=True, exist_ok=True)
    summary = microbench_summary(results)
    atomic_write_text(out / "gpu_microbench.json", json.dumps({"summary": summary, "machine": machine(), **results}, indent=1))
    print(json.dumps(summary, indent=1), flush=True)
    return 0


def microbench_summary(results: dict[str, Any]) -> dict[str, Any]:
    """Headline figures of a microbench run, against the catalog's peaks for the device (when it has one)."""
    from trainwise.catalog import load_catalog
    from trainwise.errors import TrainwiseError
    from trainwise.predict import measure as me

    best = {p: max(g["tflops"] for g in results["gemm"] if g["precision"] == p) for p in ("fp32", "tf32", "fp16", "bf16")}
    summary: dict[str, Any] = {"best_gemm_tflops": best, "host_dispatch_us_per_op": results["host_dispatch_us_per_op"],
                               "host_tiny_linear_step_us": results["host_tiny_linear_step_us"]}
    try:
        catalog = load_catalog()
        acc = catalog.accelerator(me.accelerator_of_device_name(results["device"], catalog))
        peaks = {"fp32": acc.fp32_tflops, "tf32": acc.tf32_tflops, "fp16": acc.fp16_tflops, "bf16": acc.bf16_tflops}
        summary["accelerator"] = acc.name
        summary["best_gemm_fraction_of_peak"] = {p: round(best[p] / peaks[p], 3) for p in best if peaks.get(p)}
        summary["elementwise_fraction_of_bandwidth"] = round(
            max(e["effective_gb_per_s"] for e in results["elementwise"]) / acc.memory_bw_gbs, 3)
    except (TrainwiseError, AttributeError, KeyError):
        summary["accelerator"] = None
    for kind in ("batch_norm", "conv"):
        pairs = {}
        for entry in results[kind]:
            pairs.setdefault(tuple(entry["shape"]), {})[entry["layout"]] = entry["seconds"]
        summary[f"{kind}_nchw_over_nhwc_time"] = {"x".join(map(str, k)): round(v["nchw"] / v["nhwc"], 2)
                                                  for k, v in pairs.items() if "nchw" in v and "nhwc" in v}
    return summary


def own_fit(folder: Path | None) -> int:
    """Fold the measured rows into the calibration set and hold each model out: how well a device model
    calibrated with a stack's own measurements predicts a model it has never seen on that GPU."""
    from trainwise.catalog import load_catalog
    from trainwise.predict import calibration_eval as ce
    from trainwise.predict import measurements as meas

    catalog = load_catalog()
    measured_csv = folder / "gpu_measured.csv" if folder else meas.MEASURED_H100_CSV
    started = time.perf_counter()
    published, _ = ce.plausible_rows(meas.load_measurements(meas.CALIBRATION_CSV, catalog), catalog)
    measured = meas.load_measurements(measured_csv, catalog)
    rows = published + measured
    ratios = meas.load_ratios(meas.RATIOS_CSV)
    result: dict[str, Any] = {"measured": str(measured_csv), "calibration_rows": len(published), "measured_rows": len(measured)}
    for group in ("model", "model_accelerator"):
        res = ce.loo(rows, ratios, group, catalog)
        errors = res.errors[len(published):]
        published_errors = res.errors[:len(published)]
        result[group] = {
            "measured_rows": ce.summarise_errors(errors),
            "published_rows": ce.summarise_errors(published_errors),
            "per_row": [{"model": m.model, "per_device_batch": m.per_device_batch, "precision": m.precision,
                         "memory_format": m.memory_format, "error": round(e, 4)} for m, e in zip(measured, errors)]}
        print(f"{group}: measured rows median {result[group]['measured_rows']['median_abs_error']:.1%} p90 "
              f"{result[group]['measured_rows']['p90_abs_error']:.1%}; published rows median "
              f"{result[group]['published_rows']['median_abs_error']:.1%} p90 "
              f"{result[group]['published_rows']['p90_abs_error']:.1%}", flush=True)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["note"] = ("leave-one-group-out over the published calibration rows plus the measured rows: `model` holds a model "
                      "out everywhere (published and measured rows), `model_accelerator` holds it out on one accelerator "
                      "only (Habitat's setting: the model is known from other GPUs)")
    summary = {"loo_model_measured_median_abs_error": result["model"]["measured_rows"]["median_abs_error"],
               "loo_model_measured_p90_abs_error": result["model"]["measured_rows"]["p90_abs_error"],
               "loo_model_accelerator_measured_median_abs_error": result["model_accelerator"]["measured_rows"]["median_abs_error"],
               "loo_model_published_median_abs_error": result["model"]["published_rows"]["median_abs_error"],
               "loo_model_published_p90_abs_error": result["model"]["published_rows"]["p90_abs_error"]}
    atomic_write_text(RESULTS / "gpu_own_fit.json", json.dumps({"summary": summary, **result, "machine": machine()}, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="train each configuration on this machine's GPU")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--only", nargs="*", default=[], help="model names to measure (default: all)")
    m.add_argument("--min-run-time", type=float, default=2.0, help="seconds of timed steps per configuration")
    m.add_argument("--no-same-machine", action="store_true", help="skip the profile/predict/full-run check on the GPU")
    m.add_argument("--breakdown-only", action="store_true", help="only the per-category device-time breakdowns")
    c = sub.add_parser("compare", help="predict the measured rows and write benchmarks/results/gpu_throughput.json")
    c.add_argument("folder", type=Path)
    c.add_argument("--breakdowns", type=Path, default=None,
                   help="gpu_measured.json of a `measure --breakdown-only` run (default: the folder's own)")
    c.add_argument("--output", default="gpu_throughput.json",
                   help="results file under benchmarks/results (another accelerator's: e.g. gpu_throughput_h200.json)")
    o = sub.add_parser("own-fit", help="leave-one-model-out with the measured rows folded into the calibration set")
    o.add_argument("folder", type=Path, nargs="?", default=None, help="a measure --out folder (default: the packaged H100 rows)")
    b = sub.add_parser("microbench", help="GEMM / batch norm / conv / elementwise / host-dispatch ground truth")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--device", default="cuda")
    b.add_argument("--scale", type=int, default=1, help="divide the sizes (a quick CPU check)")
    args = parser.parse_args(argv)
    if args.command == "microbench":
        return microbench(args.out, args.device, args.scale)
    if args.command == "own-fit":
        return own_fit(args.folder)
    if args.command == "measure":
        return measure(args.out, args.only, args.min_run_time, not args.no_same_machine, args.breakdown_only)
    return compare(args.folder, args.breakdowns, args.output)


if __name__ == "__main__":
    raise SystemExit(main())
