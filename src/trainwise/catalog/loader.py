"""Load catalogs: the packaged snapshot, the seed-2021 prices, a user import, a file.

The packaged data is read through importlib.resources only (no run-time dependency on the shared
folder it was built from). `load_catalog("current")` prefers the user's imported catalog
(`trainwise catalog import`) when one exists and says so in `Catalog.origin` and `caption`.
"""

from __future__ import annotations

import copy
import io
import json
import os
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd

from trainwise.catalog import names, seed_2021
from trainwise.catalog.model import OFFERING_COLUMNS, Accelerator, Catalog
from trainwise.errors import TrainwiseError

CATALOG_NAMES = names.CATALOG_NAMES
_FLOATS = ("memory_gib", "memory_bw_gbs", "fp64_tflops", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops",
           "fp8_tflops", "int8_tops", "fp16_nontensor_tflops", "tdp_w")


def data_dir() -> Path:
    """The user's trainwise data directory: $TRAINWISE_DATA_DIR, else ~/.local/share/trainwise."""
    configured = os.environ.get("TRAINWISE_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".local" / "share") / "trainwise"


def user_catalog_dir() -> Path:
    return data_dir() / "catalog" / "current"


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
def _packaged_current() -> tuple[pd.DataFrame, dict[str, Any]]:
    meta = json.loads(_data_text("current.json"))
    return read_offerings_csv(_data_text("offerings-current.csv")), meta


def _egress_for(label: str) -> pd.DataFrame:
    return seed_2021.egress(label)


def load_packaged() -> Catalog:
    """The packaged `current` snapshot, ignoring any user import."""
    frame, meta = _packaged_current()
    return Catalog(name="current", snapshot_date=meta["snapshot_date"], source=meta["source"], offerings=frame.copy(),
                   accelerators=packaged_accelerators(),
                   egress=_egress_for(" (labelled April 2023: the snapshot has no egress prices)"),
                   notes=meta["notes"], caveats=meta["caveats"], origin="packaged snapshot",
                   report=copy.deepcopy(meta["report"]))


def load_seed_2021() -> Catalog:
    return Catalog.from_offerings(seed_2021.offerings(), name=seed_2021.NAME, snapshot_date=seed_2021.SNAPSHOT_DATE,
                                  source=seed_2021.SOURCE, accelerators=packaged_accelerators(),
                                  egress=seed_2021.egress(), caveats=seed_2021.CAVEATS, origin="packaged seed prices")


def _damaged(directory: Path, why: str) -> TrainwiseError:
    return TrainwiseError(f"the imported catalog in {directory} is damaged ({why}): re-run `trainwise catalog import` "
                          f"or delete {directory} to use the packaged snapshot")


def read_catalog_meta(directory: Path) -> dict[str, Any]:
    """catalog.json of an imported catalog, through the bounded user-file reader."""
    from trainwise.userfiles import UserFileError, load_json

    try:
        meta = load_json(directory / "catalog.json", "catalog metadata")
    except UserFileError as exc:
        raise _damaged(directory, str(exc)) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("offerings_file"), str):
        raise _damaged(directory, "catalog.json names no offerings file")
    return meta


def load_imported(directory: Path) -> Catalog:
    """A catalog stored by `trainwise catalog import` (a directory holding catalog.json), verified
    against the content hash recorded when it was stored: a truncated or edited file is refused, not
    read as a smaller catalog."""
    import hashlib
    import re

    from trainwise.userfiles import MAX_CSV_BYTES, UserFileError, decode_utf8, read_bytes

    meta = read_catalog_meta(directory)
    name = meta["offerings_file"]
    named = re.fullmatch(r"offerings-([0-9a-f]{12})\.csv", name)
    if named is None:
        raise _damaged(directory, f"catalog.json names {name!r}, not a file `trainwise catalog import` writes")
    try:
        data = read_bytes(directory / name, "catalog file", max_bytes=MAX_CSV_BYTES)
        digest = hashlib.sha256(data).hexdigest()
        expected = meta.get("offerings_sha256") or named.group(1)
        if not digest.startswith(expected):
            raise _damaged(directory, f"{name} does not match the content hash stored with it (truncated or edited)")
        frame = read_offerings_csv(decode_utf8(data, f"catalog file {directory / name}"))
    except UserFileError as exc:
        raise _damaged(directory, str(exc)) from None
    except (KeyError, ValueError) as exc:
        raise _damaged(directory, f"{exc.__class__.__name__}: {exc}") from None
    if isinstance(meta.get("offerings"), int) and meta["offerings"] != len(frame):
        raise _damaged(directory, f"{len(frame)} offerings where {meta['offerings']} were stored")
    return Catalog(name="current", snapshot_date=meta["snapshot_date"], source=meta["source"], offerings=frame,
                   accelerators=packaged_accelerators(),
                   egress=_egress_for(" (labelled April 2023: SkyPilot catalogs have no egress prices)"),
                   notes=meta.get("notes", {}), caveats=meta.get("caveats", []),
                   origin=f"user import in {directory}, {meta.get('imported_at', '?')}; overrides the packaged snapshot "
                          f"of {_packaged_current()[1]['snapshot_date']}",
                   report=meta.get("report", {}))


def load_catalog(name: str | os.PathLike[str] = "current", *, prefer_user: bool = True) -> Catalog:
    """`current` (the user's import if any, else the packaged snapshot), `packaged`, `seed-2021`, or a path:
    an import directory, a user offerings file (.toml/.yaml), or a SkyPilot CSV (read, not stored)."""
    text = os.fspath(name)
    if text == "current":
        imported = user_catalog_dir()
        if prefer_user and (imported / "catalog.json").is_file():
            return load_imported(imported)
        return load_packaged()
    if text in ("packaged", "snapshot"):
        return load_packaged()
    if text in ("seed-2021", "seed_2021", "seed"):
        return load_seed_2021()
    path = Path(text).expanduser()
    if path.is_dir():
        return load_imported(path)
    if path.is_file():
        suffix = path.suffix.lower()
        if suffix in (".toml", ".yaml", ".yml"):
            from trainwise.catalog.user import load_user_offerings

            return load_user_offerings(path)
        if suffix == ".csv":
            from trainwise.catalog.importer import catalog_from_skypilot

            return catalog_from_skypilot([path])
    near = names.suggest(text, list(CATALOG_NAMES))
    hint = f"did you mean {', '.join(near)}?" if near else f"use {', '.join(CATALOG_NAMES)} or a file/directory path"
    raise TrainwiseError(f"no catalog {text!r}: {hint}")
