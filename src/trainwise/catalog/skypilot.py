"""Read, validate and normalise SkyPilot catalog CSVs (v7 AWS/GCP/Lambda, v6 Azure).

Used by `build.py` (packaged snapshot) and `importer.py` (`trainwise catalog import`): one code
path, so an imported catalog gets exactly the quirk handling the packaged one got.

Validation (every problem names file, row and column; row = the file's line number, header = 1):
header (the format's columns must all be present; which cloud a file is comes from the exact
header order or, where AWS and GCP share a column set, from the file name), numbers (non-numeric,
NaN/inf, negative), required cells, duplicate keys with conflicting values, unknown accelerator
names (with the nearest catalog names).

Quirks of the source, each handled explicitly and recorded as a note code on the rows it touches
(see `NOTES`) and counted in the build/import report:
- GCP lists host VM rows and accelerator rows separately: a GPU offering's price is host +
  accelerators of the same zone and count (fixed shapes for a2/a3/g2, any N1 host for T4/V100/P100/P4).
- GCP TPU rows are whole slices with no host; `accelerator_count` = chips (slice names count
  TensorCores for v2/v3/v4/v5p, chips for v5e/v6e).
- Exact duplicate rows (154 GCP TPU rows) are removed; AWS p4de has two rows per AZ for 5 AZs
  (same on-demand price, one with a spot price): the row with the spot price is kept.
- Price = SpotPrice = 700.0 is a placeholder (40 GCP tpu-v6e rows): both dropped. A real price may
  exceed 700 (tpu-v6e-256 is 829.44 $/h), so the rule is the exact placeholder, not a threshold.
- Empty price cells mean "not priced" (None), never zero (AWS p5e on-demand, trn1.32xlarge, ...).
- Azure v6: ND96isr_H100_v5 says 12 GPUs (Microsoft documents 8): corrected; H100 v5 spot = on-demand
  (a placeholder): spot dropped; accelerator fields empty for NC A10 v4 / NCC H100 v5: filled from
  Microsoft's published sizes; Radeon MI25 (NVv4 graphics partitions) and ND40s_v3 (no accelerator,
  no price) are dropped.
- Lambda: 9 columns in a different order; lists every type in every region; no spot market;
  `gpu_1x_h100_pcie` is the H100 PCIe; GpuInfo's TotalGpuMemoryInMiB is not multiplied by the
  count, so per-device memory is always taken from SizeInMiB (all clouds).
- Rows without an accelerator (CPU instance types in a full SkyPilot catalog) are skipped and counted.
"""

from __future__ import annotations

import ast
import csv
import hashlib
import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainwise.catalog import names
from trainwise.errors import TrainwiseError
from trainwise.userfiles import SAFE_NAME

FORMATS: dict[str, tuple[str, ...]] = {
    "aws": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo", "Price",
            "SpotPrice", "Region", "AvailabilityZone"),
    "gcp": ("InstanceType", "vCPUs", "MemoryGiB", "AcceleratorName", "AcceleratorCount", "GpuInfo", "Region",
            "AvailabilityZone", "Price", "SpotPrice"),
    "azure": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "GpuInfo", "Price",
              "SpotPrice", "Region", "Generation"),
    "lambda": ("InstanceType", "AcceleratorName", "AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "Region",
               "GpuInfo", "SpotPrice"),
}
NUMERIC = ("AcceleratorCount", "vCPUs", "MemoryGiB", "Price", "SpotPrice")
# far above any offering (the dearest, a whole GCP TPU pod, is 29,362 $/h), low enough that sums stay finite
MAX_NUMBER = {"AcceleratorCount": 100_000.0, "vCPUs": 1e6, "MemoryGiB": 1e8, "Price": 1e6, "SpotPrice": 1e6}

# Billing granularity and minimum per cloud. Not in the SkyPilot data: the providers' published
# terms for Linux VMs (AWS/GCP per second after the first minute; Azure and Lambda per minute).
BILLING: dict[str, tuple[str, float]] = {
    "aws": ("per_second", 60.0),
    "gcp": ("per_second", 60.0),
    "azure": ("per_minute", 60.0),
    "lambda": ("per_minute", 60.0),
}

PLACEHOLDER_PRICES = frozenset({700.0})

# GCP host families with a fixed accelerator (README "Host VM rows"): host -> (accelerator row name, count).
GCP_HOST_ACCELERATORS: dict[str, tuple[str, int]] = {
    **{f"a2-highgpu-{n}g": ("A100", n) for n in (1, 2, 4, 8)},
    "a2-megagpu-16g": ("A100", 16),
    **{f"a2-ultragpu-{n}g": ("A100-80GB", n) for n in (1, 2, 4, 8)},
    **{f"a3-highgpu-{n}g": ("H100", n) for n in (1, 2, 4, 8)},
    "a3-edgegpu-8g": ("H100", 8),
    "a3-edgegpu-8g-nolssd": ("H100", 8),
    "a3-megagpu-8g": ("H100-MEGA", 8),
    "a3-ultragpu-8g": ("H200", 8),
    "a3-ultragpu-8g-nolssd": ("H200", 8),
    **{f"g2-standard-{v}": ("L4", 1) for v in (4, 8, 12, 16, 32)},
    "g2-standard-24": ("L4", 2),
    "g2-standard-48": ("L4", 4),
    "g2-standard-96": ("L4", 8),
}
# N1 hosts that carry attachable GPUs; every (host, accelerator row) pair in a zone is an offering.
GCP_N1_HOSTS = ("n1-standard-4", "n1-standard-8", "n1-highmem-8")
GCP_N1_ACCELERATORS = ("T4", "V100", "P100", "P4")

# Azure v6 rows with empty accelerator fields, filled from Microsoft's published VM sizes.
AZURE_FILL: dict[str, tuple[str, float]] = {
    "Standard_NC8ads_A10_v4": ("A10", 1 / 3),
    "Standard_NC16ads_A10_v4": ("A10", 2 / 3),
    "Standard_NC32ads_A10_v4": ("A10", 1.0),
    "Standard_NCC40ads_H100_v5": ("H100", 1.0),
}
AZURE_COUNT_FIX: dict[str, float] = {"Standard_ND96isr_H100_v5": 8.0}
LAMBDA_ACCELERATOR_FIX: dict[str, str] = {"gpu_1x_h100_pcie": "H100-PCIe"}

# Accelerator names a source may list that are deliberately not offered (no spec, not a training target).
EXCLUDED_ACCELERATORS: dict[str, str] = {
    "radeonmi25": "excluded-mi25",
}

NOTES: dict[str, str] = {
    "gcp-host+acc": "GCP price = host VM row + accelerator row (same zone and count); SkyPilot lists them separately",
    "gcp-n1-attach": "GPU attached to an N1 host VM (n1-standard-4/n1-standard-8/n1-highmem-8 can each carry it)",
    "tpu-slice": "TPU slice: priced per whole slice, no host VM; accelerator_count = chips",
    "tpu-name-cores": "slice name counts TensorCores (2 per chip), so chips = size / 2 (v2/v3/v4/v5p)",
    "tpu-name-chips": "slice name counts chips (v5e/v6e)",
    "dup-removed": "an exact duplicate of this row in the source was removed",
    "dup-key-kept-spot": "the source has two rows for this key (same on-demand price); kept the one with a spot price",
    "placeholder-700": "source Price = SpotPrice = 700.0 is a placeholder, not a price: both dropped (not priced)",
    "no-ondemand": "no on-demand price in the source",
    "no-spot": "no spot price in the source",
    "azure-count-fix": "source AcceleratorCount 12; Microsoft documents ND96isr H100 v5 as 8 x H100: corrected to 8",
    "azure-spot-placeholder": "source SpotPrice equals Price (a placeholder): spot dropped",
    "azure-filled": "accelerator fields empty in the source; filled from Microsoft's published VM size",
    "azure-v6": "Azure prices from SkyPilot catalog v6 (no v7 exists); 9 US regions only",
    "lambda-listing": "Lambda lists every type in every region at one price; a listing is not availability",
    "lambda-h100-pcie": "gpu_1x_h100_pcie is the H100 PCIe (SkyPilot names it H100)",
    "per-die": "one K80/M60 'GPU' is one die of a two-die board (clouds count dies)",
    "h100-mega": "SkyPilot's H100-MEGA (a3-megagpu) is an H100 80GB; H100 specs used",
    "fractional-gpu": "a fraction of one GPU (partitioned); accelerator_memory_gib is the partition's share",
    "excluded-mi25": "AMD Radeon MI25 graphics partitions (NVv4): no spec in accelerators.csv, not a training target",
}


@dataclass
class Problem:
    file: str
    row: int
    column: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: row {self.row}" + (f", column {self.column}" if self.column else "")
        return f"{where}: {self.message}"


class CatalogDataError(TrainwiseError):
    """Bad catalog data; `problems` lists every one found (the message names the first)."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        first = problems[0]
        more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
        super().__init__(f"bad catalog data: {first}{more}")


@dataclass
class ParsedFile:
    """The validated rows of one SkyPilot CSV: each a dict of typed cells plus `_line`."""

    cloud: str
    path: Path
    rows: list[dict[str, Any]]
    header: tuple[str, ...]
    counts: dict[str, int] = field(default_factory=dict)
    sha256: str = ""  # of the bytes read (the same read that was validated)


def _bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    counts[key] = counts.get(key, 0) + by


def detect_cloud(path: Path, header: list[str], cloud: str | None = None) -> str:
    """Which SkyPilot format `header` is; raises a Problem-style error naming what is wrong."""
    label = path.name
    if cloud is not None:
        cloud = cloud.lower()
        if cloud not in FORMATS:
            raise TrainwiseError(f"unknown cloud {cloud!r} for {label}: use one of {', '.join(FORMATS)}")
        expected = FORMATS[cloud]
        missing = [c for c in expected if c not in header]
        if missing:
            raise CatalogDataError([Problem(label, 1, missing[0], f"header lacks {', '.join(missing)}; a SkyPilot {cloud} "
                                            f"catalog has the header {','.join(expected)}")])
        return cloud
    # the file's name or its folder's (SkyPilot keeps ~/.sky/catalogs/v8/<cloud>/vms.csv)
    hinted = [c for c in FORMATS if c in path.name.lower() or c == path.parent.name.lower()]
    exact = [c for c, cols in FORMATS.items() if tuple(header) == cols]
    if len(exact) == 1:
        if not hinted or exact[0] in hinted:
            return exact[0]
        raise TrainwiseError(f"{label}: its name says {' or '.join(hinted)} but its header is exactly a {exact[0]} "
                             f"catalog's: rename the file or pass --cloud")
    complete = [c for c, cols in FORMATS.items() if set(cols) <= set(header)]
    if len(hinted) == 1:
        # the file's name says the cloud: its columns must agree (an AWS file without AvailabilityZone has
        # exactly Lambda's columns; taking it for Lambda would replace every Lambda offering)
        if hinted[0] in complete:
            return hinted[0]
    elif len(complete) == 1:
        # the columns decide only when no other cloud's format also has all of them (then the file
        # may be that cloud's with columns missing)
        known = set(header) & set().union(*FORMATS.values())
        alike = [c for c, cols in FORMATS.items() if c != complete[0] and known <= set(cols)]
        if not alike:
            return complete[0]
        raise TrainwiseError(f"{label}: cannot tell which cloud this SkyPilot catalog is: its columns are "
                             f"{complete[0]}'s, but also a {' or '.join(alike)} catalog's with columns missing; pass "
                             f"--cloud {complete[0]} (or the right cloud) or name the file <cloud>_vms.csv")
    elif len(complete) > 1:
        raise TrainwiseError(f"{label}: cannot tell which cloud this SkyPilot catalog is ({' or '.join(complete)}): "
                             "name the file aws_vms.csv/gcp_vms.csv or pass --cloud")
    # Wrong header: compare with the format the name suggests, else the closest one.
    target = hinted[0] if len(hinted) == 1 else max(FORMATS, key=lambda c: len(set(FORMATS[c]) & set(header)))
    expected = FORMATS[target]
    missing = [c for c in expected if c not in header]
    unexpected = [c for c in header if c not in expected]
    detail = f"missing {', '.join(missing)}" + (f"; unexpected {', '.join(unexpected)}" if unexpected else "")
    raise CatalogDataError([Problem(label, 1, missing[0] if missing else "", f"wrong header ({detail}); a SkyPilot "
                                    f"{target} catalog starts with {','.join(expected)}")])


def _number(text: str) -> float | None:
    text = text.strip()
    if text == "":
        return None
    value = float(text)  # ValueError for non-numeric
    return value


def read_skypilot_csv(path: str | Path, cloud: str | None = None, *, skip_unknown: bool = False,
                      label: str | None = None) -> ParsedFile:
    """Read and validate one SkyPilot catalog CSV; raise `CatalogDataError` listing every problem."""
    from trainwise.userfiles import MAX_CSV_BYTES, MAX_CSV_FIELD_BYTES, decode_utf8, read_bytes

    path = Path(path)
    label = label or str(path)
    # bounded size, UTF-8 checked with the byte offset named, before any row is parsed
    data = read_bytes(path, "catalog file", max_bytes=MAX_CSV_BYTES)
    text = decode_utf8(data, f"catalog file {label}")
    csv.field_size_limit(MAX_CSV_FIELD_BYTES)
    with io.StringIO(text, newline="") as handle:
        reader = csv.reader(handle)
        try:
            header = [h.strip() for h in next(reader)]
        except StopIteration:
            raise CatalogDataError([Problem(label, 1, "", "empty file: expected a SkyPilot catalog header")]) from None
        except csv.Error as exc:
            raise CatalogDataError([Problem(label, 1, "", f"unreadable CSV ({exc})")]) from None
        try:
            cloud = detect_cloud(path, header, cloud)
        except CatalogDataError as exc:
            for p in exc.problems:
                p.file = label
            raise CatalogDataError(exc.problems) from None
        problems: list[Problem] = []
        rows: list[dict[str, Any]] = []
        counts: dict[str, int] = {}
        index = {name: i for i, name in enumerate(header)}
        try:
            for cells in reader:
                line = reader.line_num
                if not any(c.strip() for c in cells):
                    continue
                if len(cells) != len(header):
                    problems.append(Problem(label, line, "", f"{len(cells)} cells, the header has {len(header)}"))
                    continue
                row = _validate_row(cloud, label, line, {name: cells[i].strip() for name, i in index.items()}, problems,
                                    counts, skip_unknown)
                if row is not None:
                    rows.append(row)
        except csv.Error as exc:
            problems.append(Problem(label, reader.line_num, "", f"unreadable CSV ({exc})"))
    if not problems:
        rows = _dedupe(cloud, label, rows, problems, counts)
    if problems:
        raise CatalogDataError(problems)
    return ParsedFile(cloud=cloud, path=path, rows=rows, header=tuple(header), counts=counts,
                      sha256=hashlib.sha256(data).hexdigest())


def _validate_row(cloud: str, label: str, line: int, raw: dict[str, str], problems: list[Problem],
                  counts: dict[str, int], skip_unknown: bool) -> dict[str, Any] | None:
    row: dict[str, Any] = {"_line": line, "_raw": tuple(raw[c] for c in FORMATS[cloud])}
    before = len(problems)
    for column in FORMATS[cloud]:
        row[column] = raw[column]
    for column in NUMERIC:
        text = raw[column]
        try:
            value = _number(text)
        except ValueError:
            problems.append(Problem(label, line, column, f"{text!r} is not a number"))
            continue
        if value is not None and not math.isfinite(value):
            problems.append(Problem(label, line, column, f"{text!r} is not a finite number"))
            continue
        if value is not None and value < 0:
            problems.append(Problem(label, line, column, f"negative value {text}"))
            continue
        if value is not None and value > MAX_NUMBER[column]:
            problems.append(Problem(label, line, column, f"{text} is over the {MAX_NUMBER[column]:g} limit (no offering "
                                    "comes near it)"))
            continue
        row[column] = value
    for column in ("InstanceType", "Region", "AvailabilityZone"):
        # these reach SkyPilot tasks and shells: refuse anything but the characters cloud names use
        if raw.get(column) and not SAFE_NAME.match(raw[column]):
            problems.append(Problem(label, line, column, f"{raw[column][:40]!r} has characters a cloud name cannot have "
                                    "(letters, digits and . _ : + - only)"))
    required = {"aws": ("InstanceType", "Region", "AvailabilityZone"), "gcp": ("Region", "AvailabilityZone"),
                "azure": ("InstanceType", "Region"), "lambda": ("InstanceType", "Region")}[cloud]
    for column in required:
        if not raw[column]:
            problems.append(Problem(label, line, column, "empty; every row needs one"))
    if cloud == "gcp" and not raw["InstanceType"] and not raw["AcceleratorName"]:
        problems.append(Problem(label, line, "InstanceType", "neither an instance type nor an accelerator"))
    if len(problems) > before:
        return None
    # Accelerator name -> canonical (or a TPU slice, or an exclusion).
    name = raw["AcceleratorName"]
    if cloud == "azure" and not name and raw["InstanceType"] in AZURE_FILL:
        name, count = AZURE_FILL[raw["InstanceType"]]
        row["AcceleratorName"], row["AcceleratorCount"] = name, count
        row["_notes"] = ["azure-filled"]
    if name:
        if row["AcceleratorCount"] is None or row["AcceleratorCount"] <= 0:
            problems.append(Problem(label, line, "AcceleratorCount", f"{raw['AcceleratorCount']!r}: an accelerator "
                                    "row needs a positive count"))
            return None
        slice_info = names.tpu_slice(name) if cloud == "gcp" else None
        excluded = EXCLUDED_ACCELERATORS.get(names._key(name))
        if slice_info is not None:
            row["_canonical"] = slice_info[0]
            row["_tpu"] = slice_info
        elif excluded is not None:
            row["_excluded"] = excluded
        else:
            canonical = names.canonical_name(name)
            if canonical is None:
                if skip_unknown:
                    _bump(counts, "skipped unknown accelerator")
                    return None
                near = names.suggest(name, list(names.CANONICAL) + list(names.DERIVED))
                hint = f"did you mean {', '.join(near)}?" if near else "add it to a user offerings file"
                problems.append(Problem(label, line, "AcceleratorName", f"unknown accelerator {name!r}: {hint} "
                                        "(or import with --skip-unknown-accelerators)"))
                return None
            row["_canonical"] = canonical
    elif cloud != "gcp":
        # A CPU-only row (the full SkyPilot catalogs list every instance type): not a training offering here.
        _bump(counts, "skipped rows without an accelerator")
        return None
    return row


def _key(cloud: str, row: dict[str, Any]) -> tuple[Any, ...]:
    if cloud == "aws":
        return ("aws", row["InstanceType"], row["AvailabilityZone"])
    if cloud == "gcp":
        if row["InstanceType"]:
            return ("gcp-host", row["InstanceType"], row["AvailabilityZone"])
        return ("gcp-acc", row["AcceleratorName"], row["AcceleratorCount"], row["AvailabilityZone"])
    return (cloud, row["InstanceType"], row["Region"])


def _key_text(cloud: str, row: dict[str, Any]) -> str:
    if cloud == "aws":
        return f"InstanceType={row['InstanceType']}, AvailabilityZone={row['AvailabilityZone']}"
    if cloud == "gcp" and row["InstanceType"]:
        return f"InstanceType={row['InstanceType']}, AvailabilityZone={row['AvailabilityZone']}"
    if cloud == "gcp":
        return f"AcceleratorName={row['AcceleratorName']}, AcceleratorCount={row['AcceleratorCount']:g}, AvailabilityZone={row['AvailabilityZone']}"
    return f"InstanceType={row['InstanceType']}, Region={row['Region']}"


def _dedupe(cloud: str, label: str, rows: list[dict[str, Any]], problems: list[Problem],
            counts: dict[str, int]) -> list[dict[str, Any]]:
    """Exact duplicates: drop. Same key, same on-demand price, one row without a spot price: keep
    the one with the spot price. Any other same-key pair: a problem naming both rows."""
    kept: dict[tuple[Any, ...], dict[str, Any]] = {}
    for row in rows:
        key = _key(cloud, row)
        first = kept.get(key)
        if first is None:
            kept[key] = row
            continue
        if first["_raw"] == row["_raw"]:
            first.setdefault("_notes", []).append("dup-removed")
            _bump(counts, "exact duplicate rows removed")
            continue
        if first["Price"] == row["Price"] and (first["SpotPrice"] is None) != (row["SpotPrice"] is None):
            winner = first if first["SpotPrice"] is not None else row
            winner.setdefault("_notes", []).append("dup-key-kept-spot")
            kept[key] = winner
            _bump(counts, "same-key rows resolved (kept the row with a spot price)")
            continue
        differing = next((c for c in FORMATS[cloud] if first[c] != row[c]), "")
        problems.append(Problem(label, row["_line"], differing, f"duplicate key ({_key_text(cloud, row)}) already on "
                                f"row {first['_line']} with {differing}={first[differing]!r} vs {row[differing]!r}"))
    return list(kept.values())


# --- normalisation ----------------------------------------------------------------------------


def _gpu_memory_gib(gpu_info: str) -> float | None:
    """Per-GPU memory from SkyPilot's GpuInfo dict literal (SizeInMiB), or None."""
    if not gpu_info or not gpu_info.startswith("{"):
        return None
    try:
        info = ast.literal_eval(gpu_info)
        size = info["Gpus"][0]["MemoryInfo"]["SizeInMiB"]
        return float(size) / 1024.0
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None


def _prices(row: dict[str, Any], notes: list[str], counts: dict[str, int]) -> tuple[float | None, float | None]:
    price, spot = row["Price"], row["SpotPrice"]
    if price is not None and price in PLACEHOLDER_PRICES and spot == price:
        notes.append("placeholder-700")
        _bump(counts, "placeholder prices (700.0) dropped")
        return None, None
    return price, spot


def _finish(record: dict[str, Any], notes: list[str], counts: dict[str, int]) -> dict[str, Any]:
    if record["price_per_hour"] is None:
        notes.append("no-ondemand")
        _bump(counts, "offerings without an on-demand price")
    if record["spot_price_per_hour"] is None:
        notes.append("no-spot")
    record["notes"] = ";".join(dict.fromkeys(notes))
    return record


def _base(cloud: str, catalog: str, price_date: str) -> dict[str, Any]:
    billing, minimum = BILLING.get(cloud, ("per_second", 0.0))
    return {"catalog": catalog, "cloud": cloud, "kind": "cloud", "billing": billing, "min_billed_seconds": minimum,
            "price_date": price_date}


def _accelerator_fields(row: dict[str, Any], specs_memory: dict[str, float | None], notes: list[str]) -> dict[str, Any]:
    canonical = row["_canonical"]
    count = float(row["AcceleratorCount"])
    memory = _gpu_memory_gib(row.get("GpuInfo", "")) or specs_memory.get(canonical)
    if count < 1 and memory is not None:
        memory = round(memory * count, 3)
        notes.append("fractional-gpu")
    if canonical in ("K80", "M60"):
        notes.append("per-die")
    if row["AcceleratorName"] == "H100-MEGA":
        notes.append("h100-mega")
    return {"accelerator": canonical, "source_accelerator": row["AcceleratorName"], "accelerator_count": count,
            "accelerator_memory_gib": memory}


def normalise(parsed: ParsedFile, catalog: str, price_date: str, specs_memory: dict[str, float | None],
              source_label: str | None = None) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Offering records (OFFERING_COLUMNS dicts) from one validated file, and quirk counts."""
    counts = dict(parsed.counts)
    label = source_label or parsed.path.name
    records: list[dict[str, Any]] = []
    cloud = parsed.cloud
    if cloud == "gcp":
        return _normalise_gcp(parsed, catalog, price_date, specs_memory, label, counts)
    for row in parsed.rows:
        notes = list(row.get("_notes", []))
        if "_excluded" in row:
            _bump(counts, f"dropped: {NOTES[row['_excluded']]}")
            continue
        price, spot = _prices(row, notes, counts)
        if cloud == "azure":
            notes.append("azure-v6")
            if row["InstanceType"] in AZURE_COUNT_FIX:
                row["AcceleratorCount"] = AZURE_COUNT_FIX[row["InstanceType"]]
                notes.append("azure-count-fix")
                _bump(counts, "Azure accelerator counts corrected")
            if spot is not None and spot == price:
                spot = None
                notes.append("azure-spot-placeholder")
                _bump(counts, "Azure spot = on-demand placeholders dropped")
        if cloud == "lambda":
            notes.append("lambda-listing")
            if row["InstanceType"] in LAMBDA_ACCELERATOR_FIX:
                row["_canonical"] = LAMBDA_ACCELERATOR_FIX[row["InstanceType"]]
                notes.append("lambda-h100-pcie")
        record = _base(cloud, catalog, price_date)
        zone = row.get("AvailabilityZone") or None
        place = zone or row["Region"]
        record.update(offering_id=f"{cloud}/{place}/{row['InstanceType']}", region=row["Region"], zone=zone,
                      instance_type=row["InstanceType"], vcpus=row["vCPUs"], memory_gib=row["MemoryGiB"],
                      price_per_hour=price, spot_price_per_hour=spot, source=f"{label}:{row['_line']}")
        record.update(_accelerator_fields(row, specs_memory, notes))
        records.append(_finish(record, notes, counts))
    _bump(counts, "offerings", len(records))
    return records, counts


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a + b, 6)


def _normalise_gcp(parsed: ParsedFile, catalog: str, price_date: str, specs_memory: dict[str, float | None],
                   label: str, counts: dict[str, int]) -> tuple[list[dict[str, Any]], dict[str, int]]:
    hosts: dict[tuple[str, str], dict[str, Any]] = {}
    accelerators: dict[tuple[str, float, str], dict[str, Any]] = {}
    by_zone: dict[str, list[dict[str, Any]]] = {}
    records: list[dict[str, Any]] = []
    used: set[int] = set()
    for row in parsed.rows:
        if row["InstanceType"]:
            hosts[(row["InstanceType"], row["AvailabilityZone"])] = row
        elif "_tpu" in row:
            canonical, size, chips = row["_tpu"]
            notes = list(row.get("_notes", [])) + ["tpu-slice", "tpu-name-cores" if chips != size else "tpu-name-chips"]
            price, spot = _prices(row, notes, counts)
            record = _base("gcp", catalog, price_date)
            record.update(offering_id=f"gcp/{row['AvailabilityZone']}/{row['AcceleratorName']}", region=row["Region"],
                          zone=row["AvailabilityZone"], instance_type=row["AcceleratorName"], accelerator=canonical,
                          source_accelerator=row["AcceleratorName"], accelerator_count=chips, vcpus=None, memory_gib=None,
                          accelerator_memory_gib=specs_memory.get(canonical), price_per_hour=price,
                          spot_price_per_hour=spot, source=f"{label}:{row['_line']}")
            records.append(_finish(record, notes, counts))
            _bump(counts, "TPU slice offerings")
        else:
            accelerators[(row["AcceleratorName"], float(row["AcceleratorCount"]), row["AvailabilityZone"])] = row
            by_zone.setdefault(row["AvailabilityZone"], []).append(row)

    def join(host: dict[str, Any], acc: dict[str, Any], extra: list[str]) -> None:
        notes = list(dict.fromkeys(host.get("_notes", []) + acc.get("_notes", []))) + ["gcp-host+acc"] + extra
        host_price, host_spot = _prices(host, notes, counts)
        acc_price, acc_spot = _prices(acc, notes, counts)
        record = _base("gcp", catalog, price_date)
        suffix = f"+{acc['AcceleratorCount']:g}x{acc['AcceleratorName']}" if extra else ""
        record.update(offering_id=f"gcp/{host['AvailabilityZone']}/{host['InstanceType']}{suffix}", region=host["Region"],
                      zone=host["AvailabilityZone"], instance_type=host["InstanceType"], vcpus=host["vCPUs"],
                      memory_gib=host["MemoryGiB"], price_per_hour=_add(host_price, acc_price),
                      spot_price_per_hour=_add(host_spot, acc_spot), source=f"{label}:{host['_line']}+{acc['_line']}")
        record.update(_accelerator_fields(acc, specs_memory, notes))
        records.append(_finish(record, notes, counts))
        used.add(id(acc))
        _bump(counts, "GCP host+accelerator offerings")

    for (instance_type, zone), host in hosts.items():
        if instance_type in GCP_HOST_ACCELERATORS:
            name, count = GCP_HOST_ACCELERATORS[instance_type]
            acc = accelerators.get((name, float(count), zone))
            if acc is None:
                _bump(counts, "dropped: GCP host rows without a matching accelerator row")
                continue
            join(host, acc, [])
        elif instance_type in GCP_N1_HOSTS:
            attached = [a for a in by_zone.get(zone, []) if a["_canonical"] in GCP_N1_ACCELERATORS]
            for acc in attached:
                join(host, acc, ["gcp-n1-attach"])
            if not attached:
                _bump(counts, "dropped: GCP N1 host rows with no attachable GPU in the zone")
        else:
            _bump(counts, "skipped: GCP host rows not used for GPU offerings")
    unused = [a for a in accelerators.values() if id(a) not in used]
    for acc in unused:
        _bump(counts, f"dropped: GCP {acc['AcceleratorName']} accelerator rows without a host VM row")
    _bump(counts, "offerings", len(records))
    return records, counts
