"""Build the packaged `current` catalog from the shared SkyPilot snapshot.

    python -m trainwise.catalog.build [SHARED_CATALOG_DIR]   (default: ../shared/catalog)

Reads `aws_vms.csv`, `gcp_vms.csv`, `azure_vms.csv`, `lambda_vms.csv` and `accelerators.csv`,
applies and records every quirk (see `trainwise.catalog.skypilot`), and writes
`trainwise/catalog/data/`:
- `offerings-current.csv`: one row per offering, columns `model.OFFERING_COLUMNS`;
- `accelerators.csv`: the spec table normalised to canonical names (`names.CANONICAL`), plus the rows of
  `supplementary_accelerators.csv` (GPUs the spec table lacks);
- `current.json`: name, snapshot date, provenance, note texts, caveats and the build report
  (per-file quirk counts).
The runtime never reads the shared folder; it reads these files through importlib.resources.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from trainwise._io import atomic_write_text
from trainwise.catalog import names, skypilot
from trainwise.catalog.model import OFFERING_COLUMNS, normalise_frame

DATA_DIR = Path(__file__).parent / "data"
# GPUs the shared spec table lacks but the device model's kernel data ran on (PCIe A100/V100 parts),
# in ACCELERATOR_COLUMNS with their datasheet sources; read at build time only.
SUPPLEMENTARY_CSV = Path(__file__).parent / "supplementary_accelerators.csv"
# Boost clock and L2 size of every NVIDIA GPU (the spec table has neither), with their sources; read at build time.
CLOCKS_L2_CSV = Path(__file__).parent / "gpu_clocks_l2.csv"
SNAPSHOT_DATE = "2026-11-21"  # the day the SkyPilot catalog files were read (shared/catalog/README.md)
SOURCE_FILES = {
    "aws_vms.csv": ("catalogs/v7/aws/vms.csv", "001367d22a0033fac286a8c71aeac7109e431bcb"),
    "gcp_vms.csv": ("catalogs/v7/gcp/vms.csv", "017e2502fb63c7a28757acd94002b2d6099d3e3d"),
    "azure_vms.csv": ("catalogs/v6/azure/vms.csv", "098741e70562f65d7af1cceb81e33b284f742604"),
    "lambda_vms.csv": ("catalogs/v7/lambda/vms.csv", "11580132cea293395776b033c8533714d42abb4e"),
}
CAVEATS = [
    "GPU/TPU/Trainium offerings only, a subset of the public SkyPilot catalog (skypilot-org/skypilot-catalog) read on "
    "2026-11-21; the repository's license was not checked.",
    "AWS has no p2 (K80) rows and GCP no K80: use catalog seed-2021 for the p2 prices Malta (2021) quotes; Azure NC still lists K80.",
    "Azure comes from catalog v6 (no v7 exists) and covers 9 US regions only.",
    "Some GCP accelerator prices look low next to list prices (e.g. H100 x8 33.61 $/h in us-central1-a) and were not "
    "cross-checked; H100-MEGA x8 is far above H100 x8.",
    "Lambda lists every type in every region; a listing does not mean capacity.",
    "Egress prices are not part of the snapshot: the table shipped is the April 2023 one of Erben et al., 'How Can We Train Deep Learning Models Across Clouds and Continents?' (VLDB 2024, "
    "Table 1).",
]

SPEC_FLOATS = {"memory_gib": "memory_gib", "memory_bw_gbs": "memory_bw_gbs", "fp64_tflops": "fp64_tflops",
               "fp32_tflops": "fp32_tflops", "tf32_tensor_tflops": "tf32_tflops", "fp16_tensor_tflops": "fp16_tflops",
               "bf16_tensor_tflops": "bf16_tflops", "fp8_tensor_tflops": "fp8_tflops", "int8_tops": "int8_tops",
               "fp16_nontensor_tflops": "fp16_nontensor_tflops", "tdp_w": "tdp_w"}
ACCELERATOR_COLUMNS = ["name", "spec_name", "vendor", "kind", "granularity", "architecture", "year",
                       *SPEC_FLOATS.values(), "cores", "boost_clock_mhz", "l2_cache_mib", "interconnect", "aliases", "notes", "source"]


def normalise_accelerators(spec_csv: Path) -> list[dict[str, Any]]:
    """accelerators.csv rows under canonical names (plus the derived ones), in ACCELERATOR_COLUMNS."""
    with spec_csv.open(newline="", encoding="utf-8") as handle:
        by_name = {row["name"].strip(): row for row in csv.DictReader(handle)}
    out: dict[str, dict[str, Any]] = {}
    for canonical, (spec_name, kind, granularity, aliases) in names.CANONICAL.items():
        if spec_name not in by_name:
            raise SystemExit(f"accelerators.csv has no row {spec_name!r} (needed for {canonical})")
        row = by_name[spec_name]
        record: dict[str, Any] = {"name": canonical, "spec_name": spec_name, "vendor": row["vendor"], "kind": kind,
                                  "granularity": granularity, "architecture": row["architecture"],
                                  "year": row["year"], "cores": row["sm_count"], "interconnect": row["interconnect"],
                                  "aliases": "|".join(aliases), "notes": row["notes"],
                                  "source": f"accelerators.csv row {spec_name!r}; {row['sources']}"}
        for column, target in SPEC_FLOATS.items():
            record[target] = row[column]
        out[canonical] = record
    for canonical, info in names.DERIVED.items():
        record = dict(out[str(info["from"])])
        record.update(name=canonical, aliases="|".join(info["aliases"]), notes=str(info["note"]),  # type: ignore[arg-type]
                      source=f"derived from {record['spec_name']!r}: {info['note']}")
        record.update({k: v for k, v in info["override"].items()})  # type: ignore[union-attr]
        out[canonical] = record
    with SUPPLEMENTARY_CSV.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["name"] in out:
                raise SystemExit(f"{SUPPLEMENTARY_CSV.name}: {row['name']!r} is already a canonical or derived name")
            out[row["name"]] = row
    with CLOCKS_L2_CSV.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            if row["name"] not in out:
                raise SystemExit(f"{CLOCKS_L2_CSV.name}: {row['name']!r} is not an accelerator of the catalog")
            record = out[row["name"]]
            record.update(boost_clock_mhz=row["boost_clock_mhz"], l2_cache_mib=row["l2_cache_mib"],
                          source=f"{record['source']}; boost clock and L2: {row['clock_source']}")
    lacking = sorted(n for n, r in out.items() if r["vendor"].startswith("NVIDIA") and not r.get("boost_clock_mhz"))
    if lacking:
        raise SystemExit(f"{CLOCKS_L2_CSV.name} lacks the NVIDIA GPUs {', '.join(lacking)}")
    unused = sorted(set(by_name) - {v[0] for v in names.CANONICAL.values()})
    if unused:
        print(f"note: accelerators.csv rows without a canonical name: {', '.join(unused)}", file=sys.stderr)
    return list(out.values())


def _csv_text(rows: list[dict[str, Any]], columns: list[str]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({c: ("" if row.get(c) is None else row.get(c)) for c in columns})
    return buffer.getvalue()


def offerings_csv_text(frame: pd.DataFrame) -> str:
    frame = normalise_frame(frame)
    return frame.to_csv(index=False, lineterminator="\n", float_format="%.10g")


def spec_memory(accelerators: list[dict[str, Any]]) -> dict[str, float | None]:
    return {a["name"]: (float(a["memory_gib"]) if str(a["memory_gib"]).strip() else None) for a in accelerators}


def build(shared: Path, out: Path = DATA_DIR) -> dict[str, Any]:
    accelerators = normalise_accelerators(shared / "accelerators.csv")
    memory = spec_memory(accelerators)
    records: list[dict[str, Any]] = []
    report: dict[str, Any] = {}
    for file_name, (source_path, commit) in SOURCE_FILES.items():
        path = shared / file_name
        parsed = skypilot.read_skypilot_csv(path, label=file_name)
        rows, counts = skypilot.normalise(parsed, "current", SNAPSHOT_DATE, memory, source_label=file_name)
        records.extend(rows)
        report[file_name] = {"cloud": parsed.cloud, "source": f"skypilot-org/skypilot-catalog:{source_path}@{commit}",
                             "sha256": parsed.sha256, "rows_read": len(parsed.rows)
                             + counts.get("exact duplicate rows removed", 0)
                             + counts.get("same-key rows resolved (kept the row with a spot price)", 0),
                             "counts": counts}
    frame = normalise_frame(pd.DataFrame(records, columns=list(OFFERING_COLUMNS)))
    duplicated = frame["offering_id"][frame["offering_id"].duplicated()]
    if not duplicated.empty:
        raise SystemExit(f"duplicate offering ids after normalising: {duplicated.tolist()[:5]}")
    meta = {
        "name": "current",
        "snapshot_date": SNAPSHOT_DATE,
        "source": "SkyPilot catalog v7 (AWS, GCP, Lambda) and v6 (Azure), GPU/TPU/Trainium rows, read 2026-11-21; "
                  "accelerator specs from accelerators.csv (vendor datasheets)",
        "caveats": CAVEATS,
        "notes": skypilot.NOTES,
        "report": report,
        "offerings": int(len(frame)),
        "by_cloud": {k: int(v) for k, v in frame["cloud"].value_counts().sort_index().items()},
    }
    atomic_write_text(out / "offerings-current.csv", offerings_csv_text(frame))
    atomic_write_text(out / "accelerators.csv", _csv_text(accelerators, ACCELERATOR_COLUMNS))
    atomic_write_text(out / "current.json", json.dumps(meta, indent=1, sort_keys=False) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    shared = Path(args[0]) if args else Path(__file__).resolve().parents[3].parent / "shared" / "catalog"
    meta = build(shared.resolve())
    print(f"wrote {meta['offerings']} offerings ({meta['by_cloud']}) to {DATA_DIR}")
    for file_name, info in meta["report"].items():
        print(f"  {file_name}: " + "; ".join(f"{k}: {v}" for k, v in info["counts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
