"""Canonical accelerator names, their aliases, and the map from SkyPilot's names to ours.

One canonical short name per accelerator spec (`V100`, `A100-80GB`, `TPU-v3`, `K80`): offerings,
searches and the planner use these. Each maps to one row of `accelerators.csv` (the vendor spec
table in `/work/shared/catalog/`, packaged normalised as `data/accelerators.csv`). Aliases cover
SkyPilot's names (`H100-MEGA`, `tpu-v5litepod`, `Trainium`), the spec table's long names, and
common spellings; lookup is case-insensitive and ignores spaces, `_` and `-`.
"""

from __future__ import annotations

import difflib
import re
from typing import Any

from trainwise.errors import TrainwiseError

CATALOG_NAMES = ("current", "packaged", "seed-2021")  # the catalogs trainwise ships, by name

# canonical name -> (row name in accelerators.csv, kind, granularity, extra aliases)
# granularity: what one unit of `accelerator_count` is. K80/M60 cloud "GPUs" are dies of a
# two-die board; TPU offerings count chips; the v2-8/v3-8 rows are whole 4-chip boards.
CANONICAL: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    "K80": ("K80 (per GPU die)", "gpu", "per_die", ("Tesla K80", "GK210")),
    "M60": ("M60 (per GPU die)", "gpu", "per_die", ("Tesla M60",)),
    "P4": ("P4", "gpu", "per_gpu", ("Tesla P4",)),
    # GCP's P100 is the PCIe card; the seed's local cluster (Blaise) has SXM2 P100s.
    "P100": ("P100-16GB PCIe", "gpu", "per_gpu", ("P100-PCIe", "P100-16GB", "Tesla P100", "P100-PCIE-16GB")),
    "P100-SXM2": ("P100-16GB SXM2", "gpu", "per_gpu", ("P100-SXM2-16GB", "Tesla P100-SXM2-16GB")),
    # SkyPilot's V100 (AWS p3, GCP, Lambda) is the 16 GB SXM2 part.
    "V100": ("V100-16GB SXM2", "gpu", "per_gpu", ("V100-16GB", "V100-SXM2", "V100-SXM2-16GB", "Tesla V100")),
    "V100-32GB": ("V100-32GB SXM2", "gpu", "per_gpu", ("V100-SXM2-32GB", "Tesla V100-SXM2-32GB")),
    "V100-PCIe": ("V100 PCIe 16GB", "gpu", "per_gpu", ("V100-PCIe-16GB",)),
    "T4": ("T4", "gpu", "per_gpu", ("Tesla T4",)),
    "A10": ("A10", "gpu", "per_gpu", ()),
    "A10G": ("A10G", "gpu", "per_gpu", ()),
    "A6000": ("RTX A6000", "gpu", "per_gpu", ("RTX-A6000",)),
    "RTX8000": ("Quadro RTX 8000", "gpu", "per_gpu", ("Quadro-RTX-8000", "RTX 8000")),
    "L4": ("L4", "gpu", "per_gpu", ()),
    "L40S": ("L40S", "gpu", "per_gpu", ()),
    "A100": ("A100-40GB SXM4", "gpu", "per_gpu", ("A100-40GB", "A100-SXM4-40GB", "A100-SXM4")),
    "A100-80GB": ("A100-80GB SXM4", "gpu", "per_gpu", ("A100-SXM4-80GB",)),
    # SkyPilot names GCP's a3-megagpu accelerator H100-MEGA: the same H100 80GB (README).
    "H100": ("H100 SXM5 80GB", "gpu", "per_gpu", ("H100-SXM5", "H100-SXM", "H100-80GB", "H100-MEGA")),
    "H100-PCIe": ("H100 PCIe 80GB", "gpu", "per_gpu", ("H100-PCIe-80GB",)),
    "H200": ("H200 SXM 141GB", "gpu", "per_gpu", ("H200-SXM",)),
    "GH200": ("GH200 96GB (GPU portion)", "gpu", "per_gpu", ()),
    "B200": ("B200 (HGX, per GPU)", "gpu", "per_gpu", ()),
    "TPU-v2": ("TPU v2 (per chip)", "tpu", "per_chip", ("tpu-v2", "TPUv2")),
    "TPU-v2-8": ("TPU v2-8 (per board, 4 chips)", "tpu", "per_board", ("TPUv2-8", "v2-8")),
    "TPU-v3": ("TPU v3 (per chip)", "tpu", "per_chip", ("tpu-v3", "TPUv3")),
    "TPU-v3-8": ("TPU v3-8 (per board, 4 chips)", "tpu", "per_board", ("TPUv3-8", "v3-8")),
    "TPU-v4": ("TPU v4 (per chip)", "tpu", "per_chip", ("tpu-v4", "TPUv4")),
    "TPU-v5e": ("TPU v5e (v5litepod, per chip)", "tpu", "per_chip", ("tpu-v5litepod", "TPU-v5litepod", "v5litepod", "TPUv5e")),
    "TPU-v5p": ("TPU v5p (per chip)", "tpu", "per_chip", ("tpu-v5p", "TPUv5p")),
    "TPU-v6e": ("TPU v6e Trillium (per chip)", "tpu", "per_chip", ("tpu-v6e", "Trillium", "TPUv6e")),
    "Trainium": ("Trainium1 (trn1, per chip)", "other", "per_chip", ("Trainium1", "trn1")),
    "Gaudi": ("Gaudi HL-205 (first-gen Gaudi)", "other", "per_gpu", ("Gaudi HL-205", "HL-205")),
}

# Accelerators a cloud lists that accelerators.csv has no row for, derived from a row it has.
# Lambda's gpu_1x_rtx6000 is the Quadro RTX 6000: the same TU102 die and clocks as the Quadro RTX
# 8000 row, with 24 GB instead of 48 GB (memory from SkyPilot's GpuInfo: 24,576 MiB).
DERIVED: dict[str, dict[str, object]] = {
    "RTX6000": {
        "from": "RTX8000",
        "aliases": ("Quadro RTX 6000", "RTX-6000"),
        "override": {"memory_gib": 24.0},
        "note": "derived: Quadro RTX 8000 row of accelerators.csv (same TU102 die and clocks) with 24 GiB "
                "(SkyPilot GpuInfo for Lambda gpu_1x_rtx6000); no RTX 6000 row exists in accelerators.csv",
    },
}

# TPU generation prefix (SkyPilot `tpu-v3-8`) -> (canonical per-chip name, does the slice suffix
# count TensorCores (2 per chip) rather than chips). ACCELERATORS.md pitfall 3: v2/v3/v4/v5p slice
# names count cores, v5e (v5litepod)/v6e count chips.
TPU_GENERATIONS: dict[str, tuple[str, bool]] = {
    "tpu-v2": ("TPU-v2", True),
    "tpu-v3": ("TPU-v3", True),
    "tpu-v4": ("TPU-v4", True),
    "tpu-v5p": ("TPU-v5p", True),
    "tpu-v5litepod": ("TPU-v5e", False),
    "tpu-v6e": ("TPU-v6e", False),
}

_TPU_SLICE = re.compile(r"^(tpu-v[0-9]+[a-z]*)-([0-9]+)$")


def tpu_slice(name: str) -> tuple[str, int, float] | None:
    """`tpu-v3-8` -> ("TPU-v3", 8, 4.0 chips); None when `name` is not a known TPU slice."""
    match = _TPU_SLICE.match(name.strip().lower())
    if not match or match.group(1) not in TPU_GENERATIONS:
        return None
    canonical, counts_cores = TPU_GENERATIONS[match.group(1)]
    size = int(match.group(2))
    return canonical, size, size / 2 if counts_cores else float(size)


def _key(name: str) -> str:
    return re.sub(r"[\s_\-()]+", "", name).lower()


def alias_table() -> dict[str, str]:
    """Normalised alias -> canonical name, for every canonical, derived and spec-table name."""
    table: dict[str, str] = {}
    for canonical, (spec_name, _, _, aliases) in CANONICAL.items():
        for name in (canonical, spec_name, *aliases):
            table.setdefault(_key(name), canonical)
    for canonical, info in DERIVED.items():
        for name in (canonical, *info["aliases"]):  # type: ignore[misc]
            table.setdefault(_key(name), canonical)
    return table


_ALIASES = alias_table()


def canonical_name(name: str, known: dict[str, str] | None = None) -> str | None:
    """The canonical accelerator name for `name`, or None. `known`: extra alias -> canonical."""
    key = _key(name)
    if known and key in known:
        return known[key]
    return _ALIASES.get(key)


def suggest(name: str, candidates: list[str], n: int = 3) -> list[str]:
    """The catalog names nearest to `name` (difflib), best first."""
    by_key = {_key(c): c for c in candidates}
    picks = difflib.get_close_matches(_key(name), list(by_key), n=n, cutoff=0.5)
    if not picks:
        picks = difflib.get_close_matches(_key(name), list(by_key), n=n, cutoff=0.3)
    return [by_key[p] for p in picks]


_VENDOR_WORDS = ("nvidia", "tesla", "geforce", "quadro", "amd", "google")
_MEMORY_WORDS = ("hbm3e", "hbm3", "hbm2e", "hbm2", "gddr6x", "gddr6")


def resolve_device_name(device_name: str | None, catalog: Any) -> str | None:
    """Canonical accelerator of a CUDA device name ("NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB",
    "NVIDIA H100 80GB HBM3", "NVIDIA GH200 480GB"), or None when it is a CPU or not in `catalog`. Strict: a name
    is never taken for its family's base part (an H100 NVL is not an H100 SXM)."""
    if not device_name:
        return None
    words = device_name.replace("_", " ").split()
    stripped = [w for w in words if w.lower() not in _VENDOR_WORDS]
    plain = [w for w in stripped if w.lower() not in _MEMORY_WORDS]
    candidates = [" ".join(words), " ".join(stripped), " ".join(plain),
                  " ".join(w for w in plain if not re.fullmatch(r"\d+GB", w, flags=re.I))]  # GH200 480GB: the board's
    for candidate in candidates:
        if not candidate:
            continue
        try:
            return catalog.accelerator(candidate).name
        except TrainwiseError:  # not this spelling: try the next
            continue
    return None
