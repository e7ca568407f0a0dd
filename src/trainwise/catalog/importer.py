"""`trainwise catalog import`: refresh prices from SkyPilot catalog files.

SkyPilot users have the files locally (`~/.sky/catalogs/<schema>/<cloud>/vms.csv`: v8 for the pinned SkyPilot
0.14, v7/v6 for older releases; the packaged snapshot was built from v7 files). Each file
is validated (`skypilot.read_skypilot_csv`: header, numbers, negatives, duplicate keys, unknown
accelerators, each error naming file, row and column), normalised with the same quirk handling as
the packaged snapshot, and stored in the user's data directory (`$TRAINWISE_DATA_DIR` or
`~/.local/share/trainwise`, under `catalog/current/`), atomically: the offerings go to a new
content-addressed file first and `catalog.json`, which points at it, is replaced last. Clouds not
imported keep their rows from the catalog in effect before (a previous import or the packaged
snapshot). The price date of an imported file is its modification date (SkyPilot refreshes the
files when it fetches them).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from trainwise._io import atomic_write_text
from trainwise.catalog import skypilot
from trainwise.catalog.build import offerings_csv_text
from trainwise.catalog.current import load_imported, load_packaged, read_catalog_meta, user_catalog_dir
from trainwise.catalog.model import OFFERING_COLUMNS, Catalog, normalise_frame
from trainwise.catalog.packaged import packaged_accelerators, packaged_current, spec_memory
from trainwise.errors import TrainwiseError
from trainwise.userfiles import write_json


@dataclass
class ImportResult:
    directory: Path
    catalog: Catalog
    clouds: dict[str, dict[str, Any]]  # cloud -> {file, sha256, price_date, offerings, counts}


def _price_date(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).date().isoformat()


def _read_all(paths: list[Path], cloud: str | None, skip_unknown: bool) -> tuple[pd.DataFrame, dict[str, dict[str, Any]]]:
    memory = spec_memory()
    frames: list[pd.DataFrame] = []
    clouds: dict[str, dict[str, Any]] = {}
    problems: list[skypilot.Problem] = []
    for path in paths:
        try:
            parsed = skypilot.read_skypilot_csv(path, cloud, skip_unknown=skip_unknown, label=str(path))
        except skypilot.CatalogDataError as exc:
            problems.extend(exc.problems)
            continue
        if parsed.cloud in clouds:
            raise TrainwiseError(f"{path} and {clouds[parsed.cloud]['file']} are both {parsed.cloud} catalogs: import one per cloud")
        price_date = _price_date(path)
        records, counts = skypilot.normalise(parsed, "current", price_date, memory, source_label=path.name)
        if not records:
            raise TrainwiseError(f"{path}: no GPU/TPU offerings found in this {parsed.cloud} catalog")
        frames.append(pd.DataFrame(records, columns=list(OFFERING_COLUMNS)))
        clouds[parsed.cloud] = {"file": str(path), "sha256": parsed.sha256,
                                "price_date": price_date, "offerings": len(records), "counts": counts}
    if problems:
        raise skypilot.CatalogDataError(problems)
    frame = normalise_frame(pd.concat(frames, ignore_index=True))
    duplicated = frame["offering_id"][frame["offering_id"].duplicated()]
    if not duplicated.empty:
        raise TrainwiseError(f"two rows normalise to the same offering {duplicated.iloc[0]!r}: check the files for duplicates")
    return frame, clouds


def catalog_from_skypilot(paths: list[str | Path], cloud: str | None = None, skip_unknown: bool = False) -> Catalog:
    """A Catalog of just these SkyPilot files, validated and normalised, without storing anything."""
    files = [Path(p) for p in paths]
    frame, clouds = _read_all(files, cloud, skip_unknown)
    dates = sorted({info["price_date"] for info in clouds.values()})
    return Catalog(name="skypilot-files", snapshot_date=", ".join(dates), source="SkyPilot catalog files "
                   + ", ".join(info["file"] for info in clouds.values()), offerings=frame,
                   accelerators=packaged_accelerators(), notes=skypilot.NOTES, origin="files read now, not stored",
                   report={c: info for c, info in clouds.items()})


# Where the pinned SkyPilot (0.14, catalog schema v8) keeps the files a user would import.
EXAMPLE_CATALOG_FILE = "~/.sky/catalogs/v8/aws/vms.csv"


def import_skypilot(paths: list[str | Path], *, cloud: str | None = None, skip_unknown: bool = False,
                    directory: Path | None = None) -> ImportResult:
    """Validate `paths`, merge them over the catalog in effect, and store the result for `load_catalog("current")`."""
    if not paths:
        raise TrainwiseError(f"give at least one SkyPilot catalog file, e.g. {EXAMPLE_CATALOG_FILE}")
    files = [Path(p).expanduser() for p in paths]
    for path in files:
        if not path.is_file():
            raise TrainwiseError(f"no such catalog file: {path}: pass a SkyPilot vms.csv (SkyPilot 0.14 keeps them "
                                 f"under ~/.sky/catalogs/v8/<cloud>/, e.g. {EXAMPLE_CATALOG_FILE}, "
                                 "downloaded the first time it needs prices)")
    new_rows, clouds = _read_all(files, cloud, skip_unknown)
    directory = directory or user_catalog_dir()
    previous_meta: dict[str, Any] = {}
    if (directory / "catalog.json").is_file():
        base = load_imported(directory)  # verified against its content hash: a damaged import is refused here
        previous_meta = read_catalog_meta(directory)
    else:
        base = load_packaged()
    packaged_date = packaged_current()[1]["snapshot_date"]
    sources: dict[str, dict[str, Any]] = previous_meta.get("clouds") or {
        c: {"file": "packaged snapshot", "price_date": packaged_date} for c in base.clouds()}
    kept = base.offerings[~base.offerings["cloud"].isin(list(clouds))]
    frame = normalise_frame(pd.concat([kept, new_rows], ignore_index=True))
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    for name, info in clouds.items():
        sources[name] = {**info, "imported_at": now}
    dates = sorted({info["price_date"] for info in sources.values()})
    snapshot = dates[0] if len(dates) == 1 else ", ".join(f"{c} {sources[c]['price_date']}" for c in sorted(sources))
    text = offerings_csv_text(frame)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    offerings_file = f"offerings-{digest[:12]}.csv"
    meta = {
        "name": "current",
        "snapshot_date": snapshot,
        "source": "user import of SkyPilot catalogs: " + "; ".join(
            f"{c}: {sources[c]['file']} ({sources[c]['price_date']})" for c in sorted(sources)),
        "imported_at": now,
        "offerings_file": offerings_file,
        "offerings_sha256": digest,  # load_imported refuses a file that does not hash to this
        "offerings": int(len(frame)),
        "clouds": sources,
        "notes": skypilot.NOTES,
        "caveats": [f"prices of {', '.join(sorted(clouds))} imported {now[:10]}; other clouds as before "
                    f"(packaged snapshot of {packaged_date} unless imported earlier)"],
        "report": {c: info["counts"] for c, info in clouds.items()},
    }
    try:
        atomic_write_text(directory / offerings_file, text)
        write_json(directory / "catalog.json", meta, "catalog metadata")
        for stale in directory.glob("offerings-*.csv"):
            if stale.name != offerings_file:
                stale.unlink(missing_ok=True)
    except OSError as exc:  # an unwritable or full data directory: the previous catalog stays in effect
        reason = exc.strerror or str(exc)
        raise TrainwiseError(f"cannot store the imported catalog in {directory} ({reason}): set TRAINWISE_DATA_DIR to a "
                             "writable folder with free space; the catalog in effect is unchanged") from None
    return ImportResult(directory=directory, catalog=load_imported(directory), clouds=clouds)
