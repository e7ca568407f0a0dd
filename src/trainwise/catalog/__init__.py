"""Where to train and at what price: cloud offerings x prices, accelerator specs, egress.

    from trainwise.catalog import load_catalog, load_user_offerings

    catalog = load_catalog()                       # "current": user import if any, else the packaged snapshot
    seed = load_catalog("seed-2021")               # the prices the papers used (Malta; Künas; Erben et al.)
    mine = catalog.merged_with(load_user_offerings("lab.toml"))
    frame = mine.search(accelerator="V100", max_price=5)   # pandas DataFrame, cheapest first
    print(mine.caption)                            # name + snapshot date: show it in every report

See `model.py` for the DataFrame columns (`OFFERING_COLUMNS`) and conventions, `skypilot.py` for
the source quirks and how each is handled, `user.py` for the user offerings file and price formulas.

The names below are imported lazily (PEP 562), so `trainwise.catalog.cli` can be registered in the
main CLI without importing pandas at start-up.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "data_dir": "current", "load_catalog": "loader", "load_packaged": "current", "load_seed_2021": "loader",
    "packaged_accelerators": "packaged",
    "EGRESS_COLUMNS": "model", "EGRESS_SCOPES": "model", "OFFERING_COLUMNS": "model", "Accelerator": "model",
    "Catalog": "model", "Offering": "model",
    "CatalogDataError": "skypilot", "Problem": "skypilot",
    "load_user_offerings": "user", "on_premise_price_per_hour": "user", "reserved_price_per_hour": "user",
    "import_skypilot": "importer", "catalog_from_skypilot": "importer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainwise.catalog' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainwise.catalog.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
