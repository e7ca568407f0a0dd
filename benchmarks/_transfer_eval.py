"""Transfer from a GPU the user has (issue 33, item 4), evaluated: the `transfer*` keys of device_model.json.

- `transfer_eval`: the H100 -> H200 per-category transfer (`transfer.transfer_step`) on the profiled configurations;
- `transfer_from_profile_eval`: what `predict`/`plan` do with a GPU profile (`transfer.transfer_from_profile`), H100 ->
  H200 on every configuration measured on both;
- `transfer_across_gpus`: the transfer across GPU families on NeuSight's rows (evaluation data only).
"""

from __future__ import annotations

import json
import statistics
from types import SimpleNamespace
from typing import Any

import numpy as np

from trainwise.predict import kernel_model as km
from _kernel_eval import OWN_RUNS, HERE, HeldOutModels, predict_neusight_by_class

H100_DEVICE_NAME = "NVIDIA H100 80GB HBM3"  # torch.cuda.get_device_name() of the lent H100 SXM


def transfer_across_gpus(doc: dict, catalog: Any, held: HeldOutModels) -> dict[str, Any]:
    """Item 4 across GPU families, on NeuSight's rows: a step measured on GPU A (its forward and backward spans,
    split per kernel class by the label's per-node times, `label_class_ms`) predicts GPU B's step as
    `transfer.transfer_step` does — each class's measured share times the kernel model's B ÷ A ratio for that class
    — with the model fitted without B's family (the user has A, not B); against the no-GPU path on the same rows."""
    rows = {(r["gpu"], r["workload"]): r for r in doc["rows"]}
    shares = doc.get("label_class_ms", {})
    passes = {"forward": ("fw",), "backward": ("bw", "acc")}
    pairs = []
    for (gpu_b, wl_name), rb in rows.items():
        acc_b = catalog.accelerator(gpu_b)
        model = held.without(acc_b.name)
        wl = doc["workloads"][wl_name]
        pred_b = predict_neusight_by_class(wl, km.GpuSpec.of(acc_b), model)
        no_gpu = sum(sum(v.values()) for v in pred_b.values()) / rb["measured_ms"] - 1
        for gpu_a, by_workload in shares.items():
            if km.family(gpu_a) == km.family(gpu_b) or wl_name not in by_workload or (gpu_a, wl_name) not in rows:
                continue
            ra = rows[(gpu_a, wl_name)]
            pred_a = predict_neusight_by_class(wl, km.GpuSpec.of(catalog.accelerator(gpu_a)), model)
            moved = 0.0
            for name, phases in passes.items():
                measured = {}
                for ph in phases:
                    for c, ms in by_workload[wl_name].get(ph, {}).items():
                        measured[(ph, c)] = measured.get((ph, c), 0.0) + ms
                total = sum(measured.values())
                ratio = sum(ms / total * (pred_b.get(ph, {}).get(c, 0.0) / pred_a[ph][c] if pred_a.get(ph, {}).get(c) else 1.0)
                            for (ph, c), ms in measured.items()) if total else 1.0
                moved += ra[f"measured_{name}_ms"] * ratio
            pairs.append({"source": gpu_a, "target": gpu_b, "workload": wl_name,
                          "transfer_error": round(moved / rb["measured_ms"] - 1, 4), "no_gpu_error": round(no_gpu, 4),
                          "same_step_error": round(ra["measured_ms"] / rb["measured_ms"] - 1, 4)})
    med = lambda sel, key: round(statistics.median(abs(p[key]) for p in sel), 4) if sel else None  # noqa: E731
    by_source = {g: {"pairs": len(sel), "transfer_median_abs_error": med(sel, "transfer_error"),
                     "no_gpu_median_abs_error": med(sel, "no_gpu_error")}
                 for g in sorted({p["source"] for p in pairs}) for sel in [[p for p in pairs if p["source"] == g]]}
    return {"pairs": pairs, "n_pairs": len(pairs), "transfer_median_abs_error": med(pairs, "transfer_error"),
            "no_gpu_median_abs_error": med(pairs, "no_gpu_error"), "same_step_median_abs_error": med(pairs, "same_step_error"),
            "by_source": by_source,
            "note": "NeuSight's measured spans on A (evaluation data used as the user's measurement) -> B; B's measured "
                    "step only as the answer; the kernel core's per-class ratios, B's family held out of its fit"}


def transfer_from_profile_eval(catalog: Any) -> dict[str, Any]:
    """What `trainwise predict`/`plan` do with a GPU profile (`transfer.transfer_from_profile`): the H100 step of every
    configuration measured on both GPUs moved to the H200 by the default core's whole-iteration ratio; its error,
    and how often the H200 prediction's own band (the device model's) holds it."""
    from trainwise.predict import device_model as dm
    from trainwise.predict.characterise import characterise_named
    from trainwise.predict.transfer import transfer_from_profile

    if not all(p.is_file() for p in OWN_RUNS):
        return {"rows": 0}
    key = lambda r: (r["model"], r["per_device_batch"], r["precision"], r.get("memory_format") or "nchw", r.get("seq_len"))  # noqa: E731
    h100 = {key(r): r for r in json.loads(OWN_RUNS[0].read_text(encoding="utf-8"))["rows"]}
    h200 = {key(r): r for r in json.loads(OWN_RUNS[1].read_text(encoding="utf-8"))["rows"]}
    tgt = catalog.accelerator("H200")
    moved, direct, unchanged, inside = [], [], [], []
    for k in sorted(set(h100) & set(h200), key=str):
        try:
            char = characterise_named(k[0], k[1], k[2], k[4], memory_format=k[3])
        except Exception:  # noqa: BLE001 - a configuration the characteriser cannot build is skipped, as in own_gpu_rows
            continue
        t_src, t_tgt = k[1] / float(h100[k]["measured_samples_per_s"]), k[1] / float(h200[k]["measured_samples_per_s"])
        b = dm.predict_iteration(char, tgt)
        # the H100 run as a profile of it reads (synthetic inputs on the device: no data wait), through the product's code
        h100_profile = SimpleNamespace(
            environment=SimpleNamespace(device="cuda:0", device_name=H100_DEVICE_NAME),
            steady_state=SimpleNamespace(iteration=SimpleNamespace(n=1, mean_s=t_src), data_wait=SimpleNamespace(mean_s=0.0)),
            dataset=SimpleNamespace(global_batch_size=k[1], batches_per_iteration=1.0))
        err = transfer_from_profile(h100_profile, char, b, catalog).iteration_s / t_tgt - 1
        moved.append(abs(err))
        direct.append(abs(b.iteration_s / t_tgt - 1))
        unchanged.append(abs(t_src / t_tgt - 1))
        inside.append(abs(err) <= b.relative_error)
    if not moved:
        return {"rows": 0}
    q = lambda v, f: round(float(np.quantile(v, f)), 4)  # noqa: E731
    return {"rows": len(moved), "median_abs_error": q(moved, 0.5), "p90_abs_error": q(moved, 0.9),
            "no_gpu_median_abs_error": q(direct, 0.5), "unchanged_step_median_abs_error": q(unchanged, 0.5),
            "band_coverage": round(sum(inside) / len(inside), 4),
            "note": "H100 measured -> H200 by the default core's whole-iteration ratio (the product's transfer); "
                    "H200 measured only as the answer; the band is the H200 prediction's own"}


def transfer_eval(catalog: Any) -> dict[str, Any]:
    """Item 4: predict the H200 step from the H100 measurement (per-category profile, `transfer.transfer_step`)
    vs the no-GPU path, on every configuration profiled on the H100 and measured on both GPUs."""
    from trainwise.predict import device_model as dm
    from trainwise.predict.characterise import characterise_named
    from trainwise.predict.transfer import transfer_step

    breakdowns = HERE / "results" / "gpu_breakdowns_h100.json"
    if not breakdowns.is_file() or not all(p.is_file() for p in OWN_RUNS):
        return {"rows": []}
    key = lambda r: (r["model"], r["per_device_batch"], r["precision"], r.get("memory_format") or "nchw")  # noqa: E731
    h100 = {key(r): r for r in json.loads(OWN_RUNS[0].read_text(encoding="utf-8"))["rows"]}
    h200 = {key(r): r for r in json.loads(OWN_RUNS[1].read_text(encoding="utf-8"))["rows"]}
    src, tgt = catalog.accelerator("H100"), catalog.accelerator("H200")
    rows = []
    for b in json.loads(breakdowns.read_text(encoding="utf-8"))["breakdowns"]:
        k = key(b)
        if k not in h100 or k not in h200:
            continue
        try:
            char = characterise_named(b["model"], b["per_device_batch"], b["precision"], h100[k].get("seq_len"),
                                      memory_format=k[3])
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            rows.append({"workload": "/".join(map(str, k)), "failed": f"{type(exc).__name__}"})
            continue
        batch = b["per_device_batch"]
        t_src = batch / float(h100[k]["measured_samples_per_s"])
        t_tgt = batch / float(h200[k]["measured_samples_per_s"])
        moved = transfer_step(char, src, tgt, t_src, b["by_category_s"], b["step_wall_s"])
        direct = dm.predict_iteration(char, tgt)
        rows.append({"workload": "/".join(map(str, k)), "measured_h200_step_s": round(t_tgt, 6),
                     "transfer_error": round(moved.iteration_s / t_tgt - 1, 4),
                     "no_gpu_error": round(direct.iteration_s / t_tgt - 1, 4),
                     "same_step_error": round(t_src / t_tgt - 1, 4)})
    ok = [r for r in rows if "transfer_error" in r]
    med = lambda key_: round(statistics.median(abs(r[key_]) for r in ok), 4) if ok else None  # noqa: E731
    return {"rows": rows, "transfer_median_abs_error": med("transfer_error"),
            "no_gpu_median_abs_error": med("no_gpu_error"), "unchanged_step_median_abs_error": med("same_step_error"),
            "note": "H100 measured (per-category torch.profiler breakdown) -> H200 predicted; H200 measured never used "
                    "except as the answer; default core"}
