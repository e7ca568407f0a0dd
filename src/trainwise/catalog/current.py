"""The `current` catalog's two sources: the packaged snapshot, and the user's import stored in the
trainwise data directory (verified against its content hash before it is read)."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from trainwise.catalog import seed_2021
from trainwise.catalog.model import Catalog
from trainwise.catalog.packaged import packaged_accelerators, packaged_current, read_offerings_csv
from trainwise.errors import TrainwiseError


def data_dir() -> Path:
    """The user's trainwise data directory: $TRAINWISE_DATA_DIR, else ~/.local/share/trainwise."""
    configured = os.environ.get("TRAINWISE_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".local" / "share") / "trainwise"


def user_catalog_dir() -> Path:
    return data_dir() / "catalog" / "current"


def load_packaged() -> Catalog:
    """The packaged `current` snapshot, ignoring any user import."""
    frame, meta = packaged_current()
    return Catalog(name="current", snapshot_date=meta["snapshot_date"], source=meta["source"], offerings=frame.copy(),
                   accelerators=packaged_accelerators(),
                   egress=seed_2021.egress(" (labelled April 2023: the snapshot has no egress prices)"),
                   notes=meta["notes"], caveats=meta["caveats"], origin="packaged snapshot",
                   report=copy.deepcopy(meta["report"]))


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
                   egress=seed_2021.egress(" (labelled April 2023: SkyPilot catalogs have no egress prices)"),
                   notes=meta.get("notes", {}), caveats=meta.get("caveats", []),
                   origin=f"user import in {directory}, {meta.get('imported_at', '?')}; overrides the packaged snapshot "
                          f"of {packaged_current()[1]['snapshot_date']}",
                   report=meta.get("report", {}))
