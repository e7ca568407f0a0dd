"""Catalog data model: accelerators, offerings, and the `Catalog` that queries them.

Prices are data behind a small query API (SkyPilot style). `Catalog.offerings` is a pandas
DataFrame (one row per offering, columns `OFFERING_COLUMNS`) so the planner can rank 100,000 rows
vectorised; `Catalog.iter_offerings()` yields the same rows as validated `Offering` models.

Conventions
- Prices are USD per hour for the whole offering (all its accelerators, host included); NaN in
  the DataFrame / None in a model means *not priced* (never zero).
- `accelerator_count` counts units of the `accelerator` spec: GPUs as CUDA sees them (a K80/M60
  "GPU" is one die of a two-die board), TPU *chips* (a `tpu-v3-8` slice = 8 TensorCores = 4
  chips), Trainium chips; fractional for partitioned GPUs (Azure NC A10 v4: 1/3, 2/3).
- `accelerator_memory_gib` is per device (per GPU, die or chip), as the cloud reports it where it
  does (SkyPilot GpuInfo), else the spec's `memory_gib`.
- `notes` in the DataFrame holds `;`-separated note codes; `Catalog.notes[code]` is the text, and
  `Offering.notes` carries the texts.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pandas as pd

from trainwise.catalog import names
from trainwise.core.offering import (Accelerator, AcceleratorKind, Billing, Granularity,  # noqa: F401 - re-exported
                                     Offering, OfferingKind)
from trainwise.errors import TrainwiseError

# DataFrame columns, in order, with their dtype family: "str" (NaN when absent) or "float".
OFFERING_COLUMNS: dict[str, str] = {
    "offering_id": "str",          # unique within a catalog: cloud/zone-or-region/instance_type[+NxACC]
    "catalog": "str",              # the catalog the row came from (kept through merged_with)
    "cloud": "str",                # aws, gcp, azure, lambda, or a user-defined provider
    "region": "str",
    "zone": "str",                 # NaN where the cloud has no zones in the data (Azure, Lambda)
    "instance_type": "str",        # GCP: the host VM type (n1-standard-8) or the TPU slice (tpu-v3-8)
    "accelerator": "str",          # canonical accelerator name (Catalog.accelerators key); NaN: none
    "source_accelerator": "str",   # the name as the source wrote it (H100-MEGA, tpu-v3-8, Radeon...)
    "accelerator_count": "float",
    "vcpus": "float",
    "memory_gib": "float",         # host RAM
    "accelerator_memory_gib": "float",  # per device
    "price_per_hour": "float",     # on-demand (or amortised / reserved) USD/h; NaN: not priced
    "spot_price_per_hour": "float",  # spot / preemptible USD/h; NaN: no spot market or not priced
    "kind": "str",                 # cloud | on_premise | reserved
    "billing": "str",              # per_second | per_minute | per_hour
    "min_billed_seconds": "float",
    "price_date": "str",           # when the price was valid (ISO date or YYYY-MM)
    "source": "str",               # provenance: file and line numbers, or seed document and section
    "notes": "str",                # ';'-separated note codes (Catalog.notes maps them to text)
}

EGRESS_COLUMNS = ("cloud", "scope", "usd_per_gb", "price_date", "source")
EGRESS_SCOPES = ("inter_zone", "inter_region_us", "inter_region_eu", "inter_region_asia", "inter_region_oce",
                 "any_to_oce", "inter_continent", "object_storage")


def _none(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is pd.NA:
        return None
    return value


def empty_offerings() -> pd.DataFrame:
    return normalise_frame(pd.DataFrame({column: [] for column in OFFERING_COLUMNS}))


def normalise_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """Columns in `OFFERING_COLUMNS` order with their dtypes (float64, str with NaN for absent)."""
    frame = frame.copy()
    for column, family in OFFERING_COLUMNS.items():
        if column not in frame.columns:
            frame[column] = math.nan
        if family == "float":
            frame[column] = pd.to_numeric(frame[column], errors="raise").astype("float64")
        else:
            values = frame[column].astype("str")
            frame[column] = values.mask(values == "")
    return frame[list(OFFERING_COLUMNS)].reset_index(drop=True)


def frame_from_offerings(offerings: list[Offering], notes_to_codes: dict[str, str] | None = None) -> pd.DataFrame:
    rows = []
    for offering in offerings:
        row = offering.model_dump()
        row["notes"] = ";".join(offering.notes) if notes_to_codes is None else ";".join(
            notes_to_codes.get(n, n) for n in offering.notes)
        rows.append(row)
    return normalise_frame(pd.DataFrame(rows, columns=list(OFFERING_COLUMNS)))


class Catalog:
    """Offerings + accelerator specs + egress prices, with the query API the planner uses."""

    def __init__(self, *, name: str, snapshot_date: str, source: str, offerings: pd.DataFrame,
                 accelerators: dict[str, Accelerator], egress: pd.DataFrame | None = None,
                 notes: dict[str, str] | None = None, caveats: list[str] | None = None,
                 origin: str = "packaged", report: dict[str, Any] | None = None) -> None:
        self.name = name
        self.snapshot_date = snapshot_date
        self.source = source
        self.origin = origin
        self.offerings = normalise_frame(offerings)
        self.accelerators = dict(accelerators)
        self.egress = (egress if egress is not None else pd.DataFrame(columns=list(EGRESS_COLUMNS))).reset_index(drop=True)
        self.notes = dict(notes or {})
        self.caveats = list(caveats or [])
        self.report = dict(report or {})
        self._aliases: dict[str, str] = {}
        for accelerator in self.accelerators.values():
            for alias in (accelerator.name, accelerator.spec_name, *accelerator.aliases):
                self._aliases.setdefault(names._key(alias), accelerator.name)

    @classmethod
    def from_offerings(cls, offerings: list[Offering], **kwargs: Any) -> "Catalog":
        """A Catalog from Offering models; their note texts get codes `<catalog>#<n>`."""
        texts = list(dict.fromkeys(note for offering in offerings for note in offering.notes))
        codes = {text: f"{kwargs['name']}#{i}" for i, text in enumerate(texts, start=1)}
        notes = {**kwargs.pop("notes", {}), **{code: text for text, code in codes.items()}}
        return cls(offerings=frame_from_offerings(offerings, codes), notes=notes, **kwargs)

    def __repr__(self) -> str:
        return f"Catalog({self.name!r}, snapshot {self.snapshot_date}, {len(self.offerings)} offerings)"

    def __len__(self) -> int:
        return len(self.offerings)

    @property
    def caption(self) -> str:
        """One line for every report that uses these prices: catalog, snapshot date, origin."""
        return f"catalog {self.name}, prices as of {self.snapshot_date} ({self.origin})"

    # --- accelerators -------------------------------------------------------------------------

    def accelerator(self, name: str) -> Accelerator:
        """The spec of accelerator `name` (any alias, case-insensitive); unknown names get suggestions."""
        canonical = self._aliases.get(names._key(name))
        if canonical is None:
            canonical = names.canonical_name(name)
        if canonical is None or canonical not in self.accelerators:
            candidates = sorted(self.accelerators)
            near = names.suggest(name, candidates + [a for acc in self.accelerators.values() for a in acc.aliases])
            near_canonical = list(dict.fromkeys(self._aliases.get(names._key(n), n) for n in near))
            hint = f"did you mean {', '.join(near_canonical)}?" if near_canonical else f"known: {', '.join(candidates)}"
            raise TrainwiseError(f"unknown accelerator {name!r}: {hint} (list them with `trainwise catalog accelerators`)")
        return self.accelerators[canonical]

    # --- offerings ----------------------------------------------------------------------------

    def iter_offerings(self, frame: pd.DataFrame | None = None) -> Iterator[Offering]:
        frame = self.offerings if frame is None else frame
        for row in frame.to_dict("records"):
            yield self._offering(row)

    def _offering(self, row: dict[str, Any]) -> Offering:
        data = {key: _none(value) for key, value in row.items()}
        codes = [c for c in (data.pop("notes") or "").split(";") if c]
        data["notes"] = tuple(self.notes.get(code, code) for code in codes)
        data["accelerator_count"] = data["accelerator_count"] or 0.0
        data["min_billed_seconds"] = data["min_billed_seconds"] or 0.0
        data["price_date"] = data["price_date"] or ""
        data["source"] = data["source"] or ""
        return Offering(**data)

    def clouds(self) -> list[str]:
        return sorted(self.offerings["cloud"].dropna().unique().tolist())

    def regions(self, cloud: str) -> list[str]:
        cloud = self._check_cloud(cloud)
        rows = self.offerings[self.offerings["cloud"] == cloud]
        return sorted(rows["region"].dropna().unique().tolist())

    def region_summary(self, cloud: str | None = None) -> pd.DataFrame:
        """One row per (cloud, region), sorted: its continent (the codes `plan --local-continent` takes;
        empty when unknown), zones, offerings, offerings with a spot price, and accelerators."""
        from trainwise.core.geography import continent_of

        frame = self.offerings if cloud is None else self.offerings[self.offerings["cloud"] == self._check_cloud(cloud)]
        rows = [{"cloud": cloud_name, "region": region, "continent": continent_of(str(region)) or "",
                 "zones": int(part["zone"].nunique()), "offerings": len(part),
                 "with_spot": int(part["spot_price_per_hour"].notna().sum()),
                 "accelerators": ", ".join(sorted(part["accelerator"].dropna().unique()))}
                for (cloud_name, region), part in frame[frame["region"].notna()].groupby(["cloud", "region"], sort=True)]
        return pd.DataFrame(rows, columns=["cloud", "region", "continent", "zones", "offerings", "with_spot", "accelerators"])

    def regions_hint(self) -> str:
        """Where to find this catalog's region names, for an unknown-region error."""
        option = f" --catalog {self.name}" if self.name in names.CATALOG_NAMES and self.name != "current" else ""
        return f"list them with `trainwise catalog regions{option}`"

    def _check_cloud(self, cloud: str) -> str:
        clouds = self.clouds()
        match = [c for c in clouds if c.lower() == cloud.strip().lower()]
        if not match:
            near = names.suggest(cloud, clouds)
            hint = f"did you mean {', '.join(near)}?" if near else f"this catalog has {', '.join(clouds)}"
            raise TrainwiseError(f"no cloud {cloud!r} in catalog {self.name}: {hint}")
        return match[0]

    def search(self, cloud: str | None = None, region: str | None = None, accelerator: str | None = None,
               max_price: float | None = None, spot: bool = False, min_accelerator_memory_gib: float | None = None,
               *, instance_type: str | None = None, kind: str | None = None, min_accelerator_count: float | None = None,
               priced_only: bool = False) -> pd.DataFrame:
        """Offerings matching every filter given, cheapest first (by spot price when `spot`).

        `spot=True` keeps only rows with a spot price; `max_price` (USD/h, on the spot price when
        `spot`) and `priced_only` drop unpriced rows; region/zone match exactly or by prefix
        (`us-` matches every US region). `accelerator` accepts any alias.
        """
        frame = self.offerings
        mask = pd.Series(True, index=frame.index)
        if cloud is not None:
            mask &= frame["cloud"] == self._check_cloud(cloud)
        if max_price is not None and not max_price >= 0:  # also NaN
            raise TrainwiseError(f"--max-price must be a price >= 0 USD/h (got {max_price:g})")
        if min_accelerator_memory_gib is not None and not min_accelerator_memory_gib >= 0:
            raise TrainwiseError(f"--min-memory must be >= 0 GiB (got {min_accelerator_memory_gib:g})")
        if region is not None:
            wanted = region.strip().lower()
            regions = frame["region"].fillna("").str.lower()
            zones = frame["zone"].fillna("").str.lower()
            in_region = (regions == wanted) | (zones == wanted) | regions.str.startswith(wanted)
            if not wanted or not in_region.any():
                # An unknown region is a typo, not "no offerings": say so, as `plan --region` does.
                from trainwise.catalog import names

                known = sorted(set(frame["region"].dropna()) | set(frame["zone"].dropna()))
                near = names.suggest(region, known)
                hint = f"did you mean {', '.join(near)}?" if near else self.regions_hint()
                raise TrainwiseError(f"region {region!r}: no such region, zone or region prefix in catalog {self.name}: {hint}")
            mask &= in_region
        if accelerator is not None:
            mask &= frame["accelerator"] == self.accelerator(accelerator).name
        if instance_type is not None:
            mask &= frame["instance_type"].fillna("").str.lower() == instance_type.strip().lower()
        if kind is not None:
            mask &= frame["kind"] == kind
        if min_accelerator_count is not None:
            mask &= frame["accelerator_count"] >= min_accelerator_count
        if min_accelerator_memory_gib is not None:
            mask &= frame["accelerator_memory_gib"] >= min_accelerator_memory_gib
        price = frame["spot_price_per_hour" if spot else "price_per_hour"]
        if spot or priced_only or max_price is not None:
            mask &= price.notna()
        if max_price is not None:
            mask &= price <= max_price
        result = frame[mask]
        order = "spot_price_per_hour" if spot else "price_per_hour"
        return result.sort_values([order, "cloud", "region", "instance_type"], na_position="last", kind="stable")

    def get(self, cloud: str, instance_type: str, region: str | None = None, *, zone: str | None = None,
            accelerator: str | None = None, accelerator_count: float | None = None) -> Offering:
        """The cheapest (on-demand) offering of `instance_type` on `cloud` [in `region`/`zone`].

        GCP N1 hosts carry several GPU options: pass `accelerator` (and `accelerator_count`) there.
        """
        cloud = self._check_cloud(cloud)
        on_cloud = self.offerings[self.offerings["cloud"] == cloud]
        rows = on_cloud[on_cloud["instance_type"].str.lower() == instance_type.strip().lower()]
        if rows.empty:
            near = names.suggest(instance_type, sorted(on_cloud["instance_type"].dropna().unique().tolist()))
            hint = f"did you mean {', '.join(near)}?" if near else "see `trainwise catalog search --cloud " + cloud + "`"
            raise TrainwiseError(f"no instance type {instance_type!r} on {cloud} in catalog {self.name}: {hint}")
        if region is not None:
            in_region = rows[(rows["region"] == region) | (rows["zone"] == region)]
            if in_region.empty:
                raise TrainwiseError(f"{cloud} {instance_type} is not offered in {region!r} in catalog {self.name}; "
                                     f"it is in: {', '.join(sorted(rows['region'].dropna().unique()))}")
            rows = in_region
        if zone is not None:
            rows = rows[rows["zone"] == zone]
            if rows.empty:
                raise TrainwiseError(f"{cloud} {instance_type} is not offered in zone {zone!r} in catalog {self.name}")
        if accelerator is not None:
            rows = rows[rows["accelerator"] == self.accelerator(accelerator).name]
        if accelerator_count is not None:
            rows = rows[rows["accelerator_count"] == float(accelerator_count)]
        combos = rows[["accelerator", "accelerator_count"]].drop_duplicates()
        if rows.empty:
            raise TrainwiseError(f"{cloud} {instance_type} has no offering with {accelerator or ''} x{accelerator_count or ''} "
                                 f"in catalog {self.name}")
        if len(combos) > 1:
            options = ", ".join(f"{a} x{c:g}" for a, c in combos.itertuples(index=False))
            raise TrainwiseError(f"{cloud} {instance_type} carries several accelerator options ({options}): "
                                 "pass accelerator= and accelerator_count=")
        best = rows.sort_values(["price_per_hour", "spot_price_per_hour", "offering_id"], na_position="last").iloc[0]
        return self._offering(best.to_dict())

    def cheapest_per_region(self, spot: bool = False) -> pd.DataFrame:
        """One row per (cloud, region, instance type, accelerator, count): its cheapest zone."""
        column = "spot_price_per_hour" if spot else "price_per_hour"
        frame = self.offerings[self.offerings[column].notna()]
        keys = ["cloud", "region", "instance_type", "accelerator", "accelerator_count"]
        ordered = frame.sort_values([column, "offering_id"], kind="stable")
        return ordered.drop_duplicates([k for k in keys], keep="first").sort_values(column, kind="stable")

    # --- egress -------------------------------------------------------------------------------

    def egress_price(self, cloud: str, scope: str) -> float:
        """USD per GB leaving `cloud` for `scope` (one of EGRESS_SCOPES)."""
        if scope not in EGRESS_SCOPES:
            raise TrainwiseError(f"unknown egress scope {scope!r}: use one of {', '.join(EGRESS_SCOPES)}")
        rows = self.egress[(self.egress["cloud"] == cloud) & (self.egress["scope"] == scope)]
        if rows.empty:
            known = sorted(self.egress["cloud"].unique().tolist())
            raise TrainwiseError(f"no {scope} egress price for {cloud!r} in catalog {self.name} (it has: {', '.join(known)}); "
                                 "add one in a user offerings file")
        return float(rows["usd_per_gb"].iloc[0])

    # --- combining ----------------------------------------------------------------------------

    def merged_with(self, other: "Catalog") -> "Catalog":
        """This catalog plus `other`'s offerings, accelerators and egress; `other` wins on equal keys."""
        offerings = pd.concat([self.offerings, other.offerings], ignore_index=True)
        offerings = offerings.drop_duplicates("offering_id", keep="last")
        egress = pd.concat([self.egress, other.egress], ignore_index=True).drop_duplicates(["cloud", "scope"], keep="last")
        dates = self.snapshot_date if self.snapshot_date == other.snapshot_date else f"{self.snapshot_date}; {other.name}: {other.snapshot_date}"
        return Catalog(name=f"{self.name}+{other.name}", snapshot_date=dates, source=f"{self.source} + {other.source}",
                       offerings=offerings, accelerators={**self.accelerators, **other.accelerators}, egress=egress,
                       notes={**self.notes, **other.notes}, caveats=self.caveats + other.caveats,
                       origin=f"{self.origin} + {other.origin}", report={self.name: self.report, other.name: other.report})
