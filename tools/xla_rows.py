"""XLA's GEMM performance tables as kernel_latency.csv rows (tools/build_kernel_dataset.py --xla).

XLA's GPU cost model (OpenXLA, github.com/openxla/xla, Apache-2.0 licence) interpolates GEMM throughput from a
table it measured per GPU generation (`xla/service/gpu/model/default_matmul_perf_table.txtpb`, a
`xla.GemmPerfTable`): `xla/tools/matmul_perf_table_gen` compiles one dot on a b x m x n x k grid (256-4096, batch
1-4), lets XLA pick the kernel (cuBLAS or Triton, autotuned), and stores 2bmnk / t with t the median of the traced
kernel times (device time, no host launch gap). The table ships compiled into every XLA GPU build; this reader takes
it from such a build (the wheel of `jax-cuda12-pjrt`, its shared object, or the .txtpb itself), so a rebuild needs
no XLA checkout: `pip download jax-cuda12-pjrt==0.12.0.1 --no-deps`.

Kept: the tables whose GPU the catalog names unambiguously - `sm_100_B200` (B200) and `sm_90` (XLA's Hopper table;
XLA's own profiles name that part "NVIDIA H100 80GB HBM3", and its bf16 throughput, up to 0.78 PFLOP/s, is above
the H100 PCIe's dense peak, so the SXM part: catalog `H100`) - and their 16- and 32-bit dtypes: `bf16xbf16->bf16`
as bf16; `f32xf32->f32` as tf32, because XLA's default precision runs f32 dots on the tensor cores in TF32 (the
table's f32 throughput is up to six times the FP32 units' peak, checked per table below). fp8 entries and tables of
GPUs the catalog lacks (sm_103, sm_107) are skipped. A table with a kernel faster than its roofline on the catalog
GPU is skipped whole (a mislabelled GPU or dtype), as tools/kernelbench_rows.py does.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))  # tools/, also when loaded by path (the tests)
from kernelbench_rows import below_roofline  # noqa: E402 - the shared roofline check

MARKER = b"# proto-message: xla.GemmPerfTable"
# table key -> catalog GPU
GPU_NAMES = {"sm_100_B200": "B200", "sm_90": "H100"}
# table dtype key -> the kernel data's dtype
DTYPES = {"bf16xbf16->bf16": "bf16", "f32xf32->f32": "tf32"}
_ENTRY = re.compile(r"\bb:\s*(\d+)\s+m:\s*(\d+)\s+n:\s*(\d+)\s+k:\s*(\d+)\s+((?:flops\s*\{[^}]*\}\s*)+)")
_FLOPS = re.compile(r'flops\s*\{\s*key:\s*"([^"]+)"\s*value:\s*(\d+)\s*\}')
_TABLE = re.compile(r'^entries\s*\{\s*key:\s*"([^"]+)"', re.M)


def table_text(path: Path) -> str:
    """The GemmPerfTable text of a .txtpb file, or the one compiled into a shared object or a wheel holding one."""
    if path.suffix in (".txtpb", ".pbtxt"):
        return path.read_text(encoding="utf-8")
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            for name in wheel.namelist():
                if name.endswith(".so"):
                    text = _literal(wheel.read(name))
                    if text is not None:
                        return text
        raise ValueError(f"{path}: no shared object in it holds XLA's GEMM performance table")
    text = _literal(path.read_bytes())
    if text is None:
        raise ValueError(f"{path}: XLA's GEMM performance table is not in it")
    return text


def _literal(blob: bytes) -> str | None:
    """The NUL-terminated string literal holding MARKER in a binary."""
    at = blob.find(MARKER)
    if at < 0:
        return None
    start = blob.rfind(b"\0", 0, at) + 1
    end = blob.find(b"\0", at)
    return blob[start:end].decode("utf-8")


def tables(text: str) -> dict[str, list[tuple[int, int, int, int, dict[str, int]]]]:
    """{table key: [(b, m, n, k, {dtype key: FLOP/s})]} of a GemmPerfTable's text."""
    starts = [(m.start(), m.group(1)) for m in _TABLE.finditer(text)]
    out: dict[str, list[tuple[int, int, int, int, dict[str, int]]]] = {}
    for i, (at, key) in enumerate(starts):
        body = text[at:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        out[key] = [(int(e[1]), int(e[2]), int(e[3]), int(e[4]), {d: int(v) for d, v in _FLOPS.findall(e[5])})
                    for e in _ENTRY.finditer(body)]
    return out


def xla_rows(path: Path) -> list[dict]:
    """Rows of the catalog GPUs' tables in the XLA build or table at `path` (see the module's docstring)."""
    from trainwise.catalog import load_catalog

    catalog = load_catalog()
    rows: list[dict] = []
    for key, entries in tables(table_text(path)).items():
        gpu = GPU_NAMES.get(key)
        if gpu is None:
            print(f"xla: table {key} skipped: no catalog GPU for it")
            continue
        got, tf32_top = [], 0.0
        for b, m, n, k, flops in sorted(entries):
            tf32_top = max(tf32_top, float(flops.get("f32xf32->f32", 0)))
            for dtype_key, dtype in DTYPES.items():
                rate = flops.get(dtype_key)
                if rate:
                    got.append({"source": "xla", "gpu": gpu, "op": "mm" if b == 1 else "bmm", "dtype": dtype,
                                "dims": f"{b}x{m}x{n}x{k}", "latency_us": f"{2.0 * b * m * n * k / rate * 1e6:.4g}"})
        fp32_peak = float(catalog.accelerator(gpu).fp32_tflops or 0.0) * 1e12
        if tf32_top <= 1.5 * fp32_peak:
            print(f"xla: table {key} skipped: its f32 GEMMs never outrun the FP32 units (not TF32)")
            continue
        if any(below_roofline(r, catalog) for r in got):
            print(f"xla: table {key} skipped: a kernel below its roofline on the catalog's {gpu}")
            continue
        rows += got
    return rows
