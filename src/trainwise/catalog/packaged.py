"""The data files packaged with trainwise (accelerator specs, the `current` offerings snapshot),
read through importlib.resources only: no run-time dependency on the shared folder they were built
from. Every catalog reader takes the accelerators from here, so this module imports no other reader.
"""

from __future__ import annotations

import io
import json
from functools import lru_cache
from importlib import resources
from typing import Any

import pandas as pd

from trainwise.catalog.model import OFFERING_COLUMNS, Accelerator
from trainwise.errors import TrainwiseError

_FLOATS = ("memory_gib", "memory_bw_gbs", "fp64_tflops", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops",
           "fp8_tflops", "int8_tops", "fp16_nontensor_tflops", "tdp_w", "boost_clock_mhz", "l2_cache_mib")


def _data_text(name: str) -> str:
    return (resources.files("trainwise.catalog") / "data" / name).read_text(encoding="utf-8")


def read_offerings_csv(text: str) -> pd.DataFrame:
    dtypes = {c: ("float64" if f == "float" else "str") for c, f in OFFERING_COLUMNS.items()}
    frame = pd.read_csv(io.StringIO(text), dtype=dtypes, keep_default_na=False, na_values={c: [""] for c in OFFERING_COLUMNS})
    missing = [c for c in OFFERING_COLUMNS if c not in frame.columns]
    if missing:
        raise TrainwiseError(f"catalog data lacks columns {', '.join(missing)}: rebuild it (python -m trainwise.catalog.build) "
                             "or re-run `trainwise catalog import`")
    return frame


def _opt(value: str) -> str | None:
    return value if value not in ("", None) else None


@lru_cache(maxsize=1)
def _packaged_accelerators() -> dict[str, Accelerator]:
    frame = pd.read_csv(io.StringIO(_data_text("accelerators.csv")), dtype=str, keep_default_na=False)
    out: dict[str, Accelerator] = {}
    for row in frame.to_dict("records"):
        payload: dict[str, Any] = {k: _opt(row[k]) for k in ("architecture", "interconnect")}
        payload.update({k: float(row[k]) if row[k] else None for k in _FLOATS})
        out[row["name"]] = Accelerator(name=row["name"], spec_name=row["spec_name"], vendor=row["vendor"], kind=row["kind"],
                                       granularity=row["granularity"], year=int(row["year"]) if row["year"] else None,
                                       cores=int(float(row["cores"])) if row["cores"] else None,
                                       aliases=tuple(a for a in row["aliases"].split("|") if a), notes=row["notes"],
                                       source=row["source"], **payload)
    return out


def packaged_accelerators() -> dict[str, Accelerator]:
    """Canonical name -> Accelerator, from the packaged (normalised) accelerators.csv."""
    return dict(_packaged_accelerators())


def spec_memory() -> dict[str, float | None]:
    return {name: spec.memory_gib for name, spec in _packaged_accelerators().items()}


@lru_cache(maxsize=1)
def packaged_current() -> tuple[pd.DataFrame, dict[str, Any]]:
    """The packaged `current` offerings and their metadata (cached: callers copy what they change)."""
    meta = json.loads(_data_text("current.json"))
    return read_offerings_csv(_data_text("offerings-current.csv")), meta
