"""Per-kernel sources of the kernel model: Vidur's profiles read right, and the ablation that decides what of a
source the packaged data keep (per-kernel data only)."""

from __future__ import annotations

import importlib.util
import json
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from trainwise.predict import kernel_fit as kf
from trainwise.predict import kernel_model as km

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "tools" / f"{name}.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.fixture(scope="module")
def dataset():
    return kf.load_dataset()


def test_vidur_profiles_become_gemm_rows(tmp_path):
    """tools/build_kernel_dataset.py --vidur: each mlp.csv row gives the block's four fp16 GEMMs (M = tokens, the
    tensor-parallel share of N or K, the gated MLP's up-projection twice as wide); its vector operators, an empty or
    zero time and an unknown device folder give nothing."""
    tool = _tool("build_kernel_dataset")
    ops = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj", "add")
    head = [f"time_stats.{op}.median" for op in (*ops, "post_attention_layernorm")] + [
        "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens", "num_tensor_parallel_workers"]
    llama = ["0.5", "0.2", "1.0", "0.6", "0.01", "0.02", "32", "8", "4096", "14336", "True", "256", "2"]
    no_norm = ["0.5", "0.2", "1.0", "0.6", "0.01", "", "32", "32", "2560", "10240", "False", "64", "1"]
    zero = ["0", "", "1.0", "0.6", "0.01", "0.02", "32", "32", "4096", "11008", "True", "8", "1"]
    for device, rows in {"a40": [llama, no_norm, zero], "mi300": [llama]}.items():
        folder = tmp_path / "vidur" / "data" / "profiling" / "compute" / device / "org" / "model"
        folder.mkdir(parents=True)
        (folder / "mlp.csv").write_text("\n".join(",".join(r) for r in [head, *rows]) + "\n", encoding="utf-8")
    rows = tool.vidur_rows(tool.Repo(tmp_path / "vidur", None, probe=tool.VIDUR_COMPUTE), cap=100,
                           rng=random.Random(0))
    got = sorted((r["op"], r["dims"], r["latency_us"]) for r in rows)
    assert got == sorted([
        ("mm", "1x256x3072x4096", "500"),   # (32 + 2 x 8) heads x 128 / TP 2
        ("mm", "1x256x4096x2048", "200"),   # 32 x 128 / 2 reduced
        ("mm", "1x256x14336x4096", "1000"),  # gated: 2 x 14336 / 2
        ("mm", "1x256x4096x7168", "600"),
        ("mm", "1x64x7680x2560", "500"), ("mm", "1x64x2560x2560", "200"), ("mm", "1x64x10240x2560", "1000"),
        ("mm", "1x64x2560x10240", "600"),
        ("mm", "1x8x22016x4096", "1000"), ("mm", "1x8x4096x11008", "600")])  # the zero and empty times left out
    assert {(r["source"], r["gpu"], r["dtype"]) for r in rows} == {("vidur", "A40", "fp16")}
    adds = tool.vidur_rows(tool.Repo(tmp_path / "vidur", None, probe=tool.VIDUR_COMPUTE), cap=100,
                           rng=random.Random(0), adds=True)
    assert sorted((r["dims"], r["latency_us"]) for r in adds if r["op"] == "add") == [("256x4096", "10"), ("8x4096", "10")]


def test_packaged_dataset_has_vidur_kernels_on_an_a40(dataset):
    fams = {km.family(g) for g, s in zip(dataset.gpus, dataset.sources) if s == "vidur"}
    assert fams == {"A40", "A100", "H100"}
    readme = (km.DATA_DIR / "README.md").read_text(encoding="utf-8")
    commit = next(line for line in km.DATASET_PATH.read_text(encoding="utf-8").splitlines()
                  if line.startswith("# Vidur")).split("@")[1].split()[0]
    assert "microsoft/vidur" in readme and commit in readme and "MIT" in readme


def test_ablation_scores_only_the_other_sources_families(dataset):
    """A family only the tested source covers (Vidur's A40) is never scored; each other family is scored on the
    same rows with and without the source, and the two fits differ (the source's rows are in one of them)."""
    keep = (np.arange(len(dataset.gpus)) % 40 == 0) | (np.array(dataset.sources) == "vidur")
    out = _tool("source_ablation").ablate(dataset.subset(keep), "vidur", None,
                                          {"n_estimators": 20, "max_depth": 3, "learning_rate": 0.3, "features": "kernel"})
    assert "A40" not in out["by_family"] and {"A100", "H100", "V100"} <= set(out["by_family"])
    for fam, row in out["by_family"].items():
        assert row["with"]["rows"] == row["without"]["rows"] > 0, fam
    assert any(row["with"]["regime_bias"] != row["without"]["regime_bias"] for row in out["by_family"].values())


def test_ablation_refuses_an_unknown_source_in_one_line():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "source_ablation.py"), "nosuch"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "no rows of source 'nosuch'" in proc.stderr and "vidur" in proc.stderr


def test_a_gpus_graph_sweep_replaces_its_eager_sweep(tmp_path):
    """benchmarks/kernel_sweep.py --graph writes kernel_sweep_<GPU>_graph.csv: the kernels' own times. A GPU swept
    both ways keeps the graph rows; a GPU swept eagerly only keeps its eager rows; CPU smoke runs are dropped."""
    tool = _tool("build_kernel_dataset")
    header = "source,gpu,op,dtype,dims,latency_us\n"
    (tmp_path / "kernel_sweep_H200.csv").write_text(header + "trainwise-sweep-H200,H200,add,fp32,256x128,7.1\n")
    (tmp_path / "kernel_sweep_H200_graph.csv").write_text(header + "trainwise-sweep-graph-H200,H200,add,fp32,256x128,1.7\n")
    (tmp_path / "kernel_sweep_H100.csv").write_text(header + "trainwise-sweep-H100,H100,add,fp32,256x128,7.4\n")
    (tmp_path / "kernel_sweep_cpu-dry-run.csv").write_text(header + "trainwise-sweep-cpu-dry-run,cpu-dry-run,add,fp32,4x8,3\n")
    rows = tool.sweep_rows(tmp_path)
    assert sorted((r["source"], r["latency_us"]) for r in rows) == [("trainwise-sweep-H100", "7.4"),
                                                                    ("trainwise-sweep-graph-H200", "1.7")]
    # the graph source is a sweep source: its fp32 convolutions ran without TF32, its host floor is its own
    assert not kf.conv_tf32("trainwise-sweep-graph-H200")
    mask = kf.host_bound(["trainwise-sweep-graph-H200"] * 2, ["add"] * 2, np.array([1.7e-6, 3.0e-6]),
                         np.array([0.5e-6, 2.5e-6]))
    assert mask.tolist() == [True, False]


_KB_GEMM = '''import torch
class Model(torch.nn.Module):
    def forward(self, A, B):
        return torch.matmul(A, B)
M = {m}
K = 4096 * 2
N = M // 2
'''


def test_kernelbench_problems_read_without_running_them():
    """A problem's shape comes from its module constants (arithmetic on earlier ones included); a forward that is no
    longer the expected call, a non-square convolution or a problem the kernel data cannot hold gives nothing."""
    tool = _tool("kernelbench_rows")
    assert tool.constants("a = 16\nb = a * 2 + 1\nc = 'x'\nd = b // 3\nf = foo(2)\ng = a // 0\n") == {"a": 16, "b": 33, "d": 11}
    assert tool.problem_row(2, _KB_GEMM.format(m=1024)) == ("mm", (1, 1024, 512, 8192))
    assert tool.problem_row(2, _KB_GEMM.format(m=1024).replace("torch.matmul(A, B)", "torch.matmul(A, B) * 2")) is None
    assert tool.problem_row(40, "return self.ln(x)\nbatch_size = 16\n") is None  # layer norm over 16 rows: not kept
    conv = "return self.conv2d(x)\nbatch_size = 8\nin_channels = 3\nout_channels = 64\nkernel_size = 3\n"
    assert tool.problem_row(63, conv + "width = 256\nheight = 256\n") == ("conv", (8, 3, 64, 3, 256, 1, 0))
    assert tool.problem_row(63, conv + "width = 256\nheight = 128\n") is None


def test_kernelbench_timings_are_read_with_their_own_commits_problems(tmp_path):
    """Each timing file is paired with the problem sources of the commit that wrote it (the problems grow between
    releases); timings under MIN_US, unknown GPUs and failed entries are left out, and a file with a kernel faster
    than its roofline (timed on other sizes) is skipped whole."""
    tool = _tool("kernelbench_rows")
    repo = tmp_path / "KernelBench"
    git = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True, capture_output=True)  # noqa: E731
    repo.mkdir()
    git("init", "-q")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    problem = repo / "KernelBench" / "level1" / "2_Standard_matrix_multiplication_.py"
    problem.parent.mkdir(parents=True)

    def commit(m: int, machine: str, entries: dict) -> None:
        problem.write_text(_KB_GEMM.format(m=m), encoding="utf-8")
        timing = repo / "results" / "timing" / machine / "baseline_time_torch.json"
        timing.parent.mkdir(parents=True, exist_ok=True)
        timing.write_text(json.dumps({"level1": entries}), encoding="utf-8")
        git("add", "-A")
        git("commit", "-q", "-m", machine)

    t4 = {"2_Standard_matrix_multiplication_.py": {"mean": 3.0, "hardware": "Tesla T4"},
          "1_Square_matrix_multiplication_.py": None, "19_ReLU.py": {"mean": 0.03, "hardware": "Tesla T4"}}
    commit(1024, "T4_modal", t4)  # 1024 x 512 x 8192: 8.6 GFLOP, 1.1 ms at the T4's 8.1 TFLOPS: 3 ms is above it
    commit(2048, "L4_modal", {"2_Standard_matrix_multiplication_.py": {"mean": 3.0, "hardware": "NVIDIA L4"}})
    commit(4096, "H100_fast", {"2_Standard_matrix_multiplication_.py": {"mean": 0.3, "hardware": "NVIDIA H100 80GB HBM3"}})
    commit(4096, "MI300", {"2_Standard_matrix_multiplication_.py": {"mean": 5.0, "hardware": "AMD Instinct MI300X"}})
    rows = tool.kernelbench_rows(repo)
    got = sorted((r["gpu"], r["op"], r["dims"], r["latency_us"]) for r in rows)
    # T4 at its own commit's 1024 rows (the later sources have 2048 and 4096); the H100's 0.3 ms for 137 GFLOP
    # would beat its 67 TFLOPS: skipped; the MI300X is not in the catalog
    assert got == [("L4", "mm", "1x2048x1024x8192", "3000"), ("T4", "mm", "1x1024x512x8192", "3000")]
    assert {(r["source"], r["dtype"]) for r in rows} == {("kernelbench", "fp32")}


def test_packaged_dataset_has_kernelbench_kernels_on_new_families(dataset):
    fams = {km.family(g) for g, s in zip(dataset.gpus, dataset.sources) if s == "kernelbench"}
    assert {"A10G", "L40S", "B200", "L4", "T4", "A100", "H100"} <= fams and "A6000" not in fams
    readme = (km.DATA_DIR / "README.md").read_text(encoding="utf-8")
    commit = next(line for line in km.DATASET_PATH.read_text(encoding="utf-8").splitlines()
                  if line.startswith("# KernelBench")).split("@")[1].split()[0]
    assert "ScalingIntelligence/KernelBench" in readme and commit in readme and "MIT" in readme


_XLA_TABLE = """# proto-message: xla.GemmPerfTable
entries {{
  key: "sm_90"
  value {{
    entries {{
      b: 2
      m: 4096
      n: 1024
      k: 512
      flops {{ key: "bf16xbf16->bf16" value: {bf16} }}
      flops {{ key: "f32xf32->f32" value: {f32} }}
      flops {{ key: "f8e4m3fnxf8e4m3fn->bf16" value: 900000000000000 }}
    }}
  }}
}}
entries {{
  key: "sm_107"
  value {{
    entries {{
      b: 1
      m: 256
      n: 256
      k: 256
      flops {{ key: "bf16xbf16->bf16" value: 4809981651376 }}
    }}
  }}
}}
"""


def test_xla_tables_become_gemm_rows(tmp_path):
    """tools/xla_rows.py: a table's b x m x n x k entries become bf16 and TF32 GEMM rows at 2bmnk / FLOP/s (fp8 and
    tables of GPUs the catalog lacks left out); the table is found inside a binary as its compiled-in string; a
    table whose f32 GEMMs never outrun the FP32 units (not TF32) or with a kernel under its roofline is skipped."""
    tool = _tool("xla_rows")
    table = tmp_path / "table.txtpb"
    table.write_text(_XLA_TABLE.format(bf16=500_000_000_000_000, f32=250_000_000_000_000), encoding="utf-8")
    rows = tool.xla_rows(table)
    flop = 2.0 * 2 * 4096 * 1024 * 512
    assert [(r["gpu"], r["op"], r["dtype"], r["dims"]) for r in rows] == [("H100", "bmm", "bf16", "2x4096x1024x512"),
                                                                        ("H100", "bmm", "tf32", "2x4096x1024x512")]
    assert float(rows[0]["latency_us"]) == pytest.approx(flop / 5e14 * 1e6, rel=1e-3)
    blob = tmp_path / "plugin.so"
    blob.write_bytes(b"\x7fELF\0junk\0" + table.read_bytes() + b"\0more\0")
    assert tool.xla_rows(blob) == rows
    table.write_text(_XLA_TABLE.format(bf16=500_000_000_000_000, f32=60_000_000_000_000), encoding="utf-8")
    assert tool.xla_rows(table) == []  # 60 TFLOP/s f32 on an H100 (67 FP32): not TF32
    table.write_text(_XLA_TABLE.format(bf16=1_500_000_000_000_000, f32=250_000_000_000_000), encoding="utf-8")
    assert tool.xla_rows(table) == []  # 1.5 PFLOP/s bf16 beats the H100's dense peak: a mislabelled table
    blob.write_bytes(b"no table here")
    with pytest.raises(ValueError, match="not in it"):
        tool.table_text(blob)


def test_packaged_dataset_has_xla_tensor_core_gemms(dataset):
    """B200 and H100 bf16 and TF32 GEMMs from XLA's tables; the data README names the source and its licence."""
    got = {(g, op_dtype) for g, s, op_dtype in zip(dataset.gpus, dataset.sources,
                                                   (km.CLASSES[int(c)] + str(int(d)) for c, d in
                                                    zip(dataset.x[:, km.FEATURES.index("class")], dataset.dtype_code)))
           if s == "xla"}
    assert {g for g, _ in got} == {"B200", "H100"} and {d for _, d in got} == {"gemm1", "gemm3"}
    readme = (km.DATA_DIR / "README.md").read_text(encoding="utf-8")
    assert "openxla/xla" in readme and "jax-cuda12-pjrt" in readme and "Apache-2.0" in readme
