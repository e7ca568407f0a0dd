"""Load catalogs by name or path: `current`, `packaged`, `seed-2021`, an import directory, a user
offerings file or a SkyPilot CSV. `load_catalog("current")` prefers the user's imported catalog
(`trainwise catalog import`) when one exists and says so in `Catalog.origin` and `caption`.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainwise.catalog import names, seed_2021
from trainwise.catalog.current import load_imported, load_packaged, user_catalog_dir
from trainwise.catalog.model import Catalog
from trainwise.catalog.packaged import packaged_accelerators
from trainwise.errors import TrainwiseError

CATALOG_NAMES = names.CATALOG_NAMES


def load_seed_2021() -> Catalog:
    return Catalog.from_offerings(seed_2021.offerings(), name=seed_2021.NAME, snapshot_date=seed_2021.SNAPSHOT_DATE,
                                  source=seed_2021.SOURCE, accelerators=packaged_accelerators(),
                                  egress=seed_2021.egress(), caveats=seed_2021.CAVEATS, origin="packaged seed prices")


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
