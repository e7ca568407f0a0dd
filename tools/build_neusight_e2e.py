"""Extract NeuSight's end-to-end training measurements into benchmarks/data/neusight_e2e.json (EVALUATION data only).

From NeuSight's artifact (github.com/sitar-lab/NeuSight, MIT licence; Lee et al., ASPLOS 2025):
- scripts/asplos/label/<GPU>/<model>-train-<seq>-<batch>.json: the measured fp32 training-step latency (ms), its
  forward and backward parts (timed apart by its harness, `neusight/Tracing/trace.py` `measure_e2e`) and the
  model's layer count;
- scripts/asplos/results/opgraph/<model>-train-<seq>-<batch>.csv: the operator graph NeuSight traced (one
  transformer layer; its forward, backward and gradient-accumulation kernels with their dimensions), which
  this script expands to the whole model (the layer's rows x the layer count);
- scripts/asplos/summary/nvidia_train.csv: the published per-row errors of Roofline, Habitat, Li et al. and
  NeuSight, quoted side by side in benchmarks/results/device_model.json;
- scripts/asplos/label/<GPU>/<workload>.csv: NeuSight's per-node forward latencies on the same GPU; the nodes that
  are one Linear kernel (joined by node name to the operator graph) become `label_linear_fw`, so the benchmark can
  compare them with the same GEMM shapes in NeuSight's per-kernel test set (a consistency check of the two
  measurements, never a fit); and all its nodes' forward, backward and accumulation times summed per kernel class
  (`label_class_ms`): the per-category shares a profile on that GPU would give, for the transfer evaluation.
The benchmark never fits anything on these rows. Single-GPU NVIDIA rows only (data/tensor/pipeline-parallel and
AMD rows are skipped: the catalog has no AMD Instinct rows).
Run: .venv/bin/python tools/build_neusight_e2e.py --neusight /path/to/NeuSight
"""

from __future__ import annotations

import argparse
import ast
import csv
import io
import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_kernel_dataset import Repo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "data" / "neusight_e2e.json"
GPUS = {"NVIDIA_H100_80GB_HBM3": "H100", "NVIDIA_L4": "L4", "NVIDIA_A100_80GB_PCIe": "A100-80GB-PCIe",
        "Tesla_V100-PCIE-32GB": "V100-PCIe-32GB", "NVIDIA_A100-PCIE-40GB": "A100-PCIe"}
SUMMARY_MODELS = {"BERT-Large": "bert_large", "GPT2-Large": "gpt2_large", "GPT3-XL": "gpt3_xl", "OPT-1.3B": "opt_13",
                  "GPT3-2.7B": "gpt3_27", "SwitchTrans": "switchxl4"}
# first and one-past-last node of the traced layer, per model family (the graph holds layer 0 only)
LAYER_BOUNDS = {"bert": ("bert_encoder_layer_0_attention_self_query", "bert_encoder_layer_0_output_layer_norm"),
                "gpt": ("transformer_h_0_ln_1", "add_15"), "opt": ("model_decoder_layers_0_self_attn_layer_norm", "view_11")}


def layer_span(names: list[str], n_layer: int, model: str) -> tuple[int, int]:
    """[start, end) of the traced layer's nodes in the graph (its rows count n_layer times); (0, 0) if none."""
    fam = next((f for f in LAYER_BOUNDS if model.startswith(f)), None)
    if not (fam and n_layer):
        return 0, 0
    first, last = LAYER_BOUNDS[fam]
    if fam == "gpt" and "transformer_h_0_ln_1_grad" in names:
        first = "transformer_h_0_ln_1_grad"
    return names.index(first), names.index(last) + 1


def graph_kernels(text: str, n_layer: int, model: str) -> list[list]:
    rows = list(csv.DictReader(io.StringIO(text)))
    names = [r["Name"] for r in rows]
    start, end = layer_span(names, n_layer, model)
    agg: dict[tuple, float] = defaultdict(float)
    for i, r in enumerate(rows):
        mult = n_layer if start <= i < end else 1
        for phase, col in (("fw", "FwOps"), ("bw", "BwOps"), ("acc", "AccOps")):
            for kind, dims in ast.literal_eval(r[col] or "[]"):
                if kind == "MEM":
                    elements = sum(eval_prod(s) for s in dims)
                    agg[(phase, "MEM", (elements,))] += mult
                else:
                    agg[(phase, kind, tuple(int(d) for d in dims))] += mult
    return [[p, k, list(d), m] for (p, k, d), m in sorted(agg.items())]


def label_linear_fw(label_csv: str, graph_csv: str) -> list[list]:
    """[rows, reduction, out, forward ms] of the label's nodes whose forward is exactly one Linear kernel."""
    fw_ops = {r["Name"]: r["FwOps"] for r in csv.DictReader(io.StringIO(graph_csv))}
    out = []
    for r in csv.DictReader(io.StringIO(label_csv)):
        ops = ast.literal_eval(fw_ops.get(r.get("Name", ""), "") or "[]")
        if len(ops) == 1 and ops[0][0] == "Linear" and float(r["fw_latency"] or 0) > 0:
            out.append([*(int(d) for d in ops[0][1]), round(float(r["fw_latency"]), 6)])
    return out


# a node's class by the heaviest kind of kernel it runs (NeuSight's kinds: Linear, BMM, VEC<op>, MEM)
NODE_CLASS_ORDER = ("gemm", "softmax", "norm", "elementwise", "mem")


def kernel_class(kind: str) -> str:
    if kind in ("Linear", "BMM"):
        return "gemm"
    if kind == "MEM":
        return "mem"
    return {"VECsoftmax": "softmax", "VECln": "norm"}.get(kind, "elementwise")


def label_class_ms(label_csv: str, graph_csv: str, n_layer: int, model: str) -> dict[str, dict[str, float]]:
    """{phase: {class: ms}}: the label's per-node times (each node timed alone on the GPU) summed per pass and per
    kernel class over the whole model (a layer's nodes x the layer count, as `graph_kernels` expands them); a
    node's class is that of the heaviest kind of kernel the operator graph gives it in that phase."""
    graph = {r["Name"]: r for r in csv.DictReader(io.StringIO(graph_csv))}
    names = list(graph)
    start, end = layer_span(names, n_layer, model)
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for r in csv.DictReader(io.StringIO(label_csv)):
        node = graph.get(r.get("Name", ""))
        if node is None:
            continue
        mult = n_layer if start <= names.index(r["Name"]) < end else 1
        for phase, col, lat in (("fw", "FwOps", "fw_latency"), ("bw", "BwOps", "bw_latency"), ("acc", "AccOps", "acc_latency")):
            ms = float(r.get(lat) or 0)
            kinds = [kernel_class(kind) for kind, _ in ast.literal_eval(node[col] or "[]")]
            if ms > 0 and kinds:
                out[phase][min(kinds, key=NODE_CLASS_ORDER.index)] += ms * mult
    return {p: {c: round(v, 6) for c, v in sorted(by.items())} for p, by in sorted(out.items())}


def eval_prod(shape: tuple) -> int:
    out = 1
    for d in shape:
        out *= int(d)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--neusight", type=Path, required=True)
    ap.add_argument("--commit", default=None)
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    repo = Repo(args.neusight, args.commit)
    commit = repo.head()
    label_files = repo.list_all("scripts/asplos/label")
    workloads: dict[str, dict] = {}
    rows = []
    label_gemms: dict[str, dict[str, list]] = defaultdict(dict)
    label_classes: dict[str, dict[str, dict]] = defaultdict(dict)
    for rel in label_files:
        m = re.match(r"scripts/asplos/label/([^/]+)/(([a-z0-9_]+)-train-(\d+)-(\d+))\.json$", rel)
        if not m or m.group(1) not in GPUS:
            continue
        gpu_dir, workload, model, seq, batch = m.groups()
        label = json.loads(repo.read(rel))
        if workload not in workloads:
            graph = repo.read(f"scripts/asplos/results/opgraph/{workload}.csv")
            workloads[workload] = {"model": model, "seq_len": int(seq), "batch": int(batch),
                                   "num_layer": int(label["num_layer"]),
                                   "kernels": graph_kernels(graph, int(label["num_layer"]), model)}
        # the harness times the forward and the backward separately (CUDA events, the fastest of its repeats;
        # the allocator's cache emptied before each forward): both kept, so the two passes can be scored apart
        rows.append({"gpu": GPUS[gpu_dir], "workload": workload, "measured_ms": float(label["e2e_latency"]),
                     "measured_forward_ms": float(label["fw_latency"]), "measured_backward_ms": float(label["bwall_latency"])})
        per_node = rel[:-len(".json")] + ".csv"
        try:  # some per-node files of the artifact are empty or not in the checkout: the check skips them
            text = repo.read(per_node) if per_node in label_files else ""
        except subprocess.CalledProcessError:
            text = ""
        if text.strip():
            graph = repo.read(f"scripts/asplos/results/opgraph/{workload}.csv")
            label_gemms[GPUS[gpu_dir]][workload] = label_linear_fw(text, graph)
            label_classes[GPUS[gpu_dir]][workload] = label_class_ms(text, graph, int(label["num_layer"]), model)
        else:
            print(f"no per-node label for {GPUS[gpu_dir]} {workload}: left out of the consistency check")
    published: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    text = repo.read("scripts/asplos/summary/nvidia_train.csv").splitlines()
    i = 0
    while i < len(text):
        if text[i].strip() in GPUS:
            gpu = GPUS[text[i].strip()]
            header = next(csv.reader([text[i + 1]]))
            batches = next(csv.reader([text[i + 2]]))
            models, cur = [], None
            for h in header[1:]:
                cur = h or cur
                models.append(cur)
            j = i + 3
            while j < len(text) and text[j].strip():
                cells = next(csv.reader([text[j]]))
                for model_name, b, v in zip(models, batches[1:], cells[1:]):
                    if v and model_name in SUMMARY_MODELS:
                        seq = {"bert_large": 512, "gpt2_large": 1024, "switchxl4": 512}.get(SUMMARY_MODELS[model_name], 2048)
                        key = f"{SUMMARY_MODELS[model_name]}-train-{seq}-{b}"
                        published[f"{gpu}|{key}"][cells[0]] = float(v) / 100
                j += 1
            i = j
        i += 1
    doc = {"source": f"github.com/sitar-lab/NeuSight@{commit}", "licence": "MIT",
           "citation": "Lee et al., Forecasting GPU Performance for Deep Learning Training and Inference, ASPLOS 2025",
           "note": "evaluation data only: fp32 single-GPU training steps (forward + backward + gradient accumulation)",
           "workloads": workloads, "rows": rows, "published_abs_error": published, "label_linear_fw": label_gemms,
           "label_class_ms": label_classes}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, separators=(",", ":")), encoding="utf-8")
    tmp.replace(args.output)
    print(f"{len(rows)} rows, {len(workloads)} workloads -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
