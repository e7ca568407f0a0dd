"""Write trainwise's packaged AWS/GCP price snapshot in SkyPilot's own catalog layout, so SkyPilot
can validate a task with no network (it reads `<root>/.sky/catalogs/v8/<cloud>/vms.csv` and
`common/accelerators.csv` when present and only downloads them when absent).

Column formats are SkyPilot's (`trainwise.catalog.skypilot.FORMATS`, the same ones the importer
reads). The snapshot keeps GCP host + accelerator prices joined (README "Catalogs"); written back
out, the host row carries no price and the accelerator row the joined price. That is enough for
SkyPilot's validation (instance types, regions, zones, accelerators), not a source of GCP prices.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainwise._io import atomic_write_text
from trainwise.catalog.skypilot import FORMATS
from trainwise.errors import TrainwiseError

SKY_CATALOG_VERSION = "v8"
SKY_NAMES = {"aws": "AWS", "gcp": "GCP"}


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _write_rows(path: Path, header: Sequence[str], rows: list[dict[str, Any]]) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(row.get(column)) for column in header])
    return atomic_write_text(path, buffer.getvalue())


def _aws_rows(frame: Any) -> list[dict[str, Any]]:
    rows = []
    for r in frame.itertuples(index=False):
        rows.append({"InstanceType": r.instance_type, "AcceleratorName": r.source_accelerator,
                     "AcceleratorCount": r.accelerator_count, "vCPUs": r.vcpus, "MemoryGiB": r.memory_gib,
                     "GpuInfo": "", "Price": r.price_per_hour, "SpotPrice": r.spot_price_per_hour, "Region": r.region,
                     "AvailabilityZone": r.zone})
    return rows


def _gcp_rows(frame: Any) -> list[dict[str, Any]]:
    hosts: dict[tuple[str, str], dict[str, Any]] = {}
    accelerators: dict[tuple[str, float, str], dict[str, Any]] = {}
    for r in frame.itertuples(index=False):
        tpu = str(r.source_accelerator).lower().startswith("tpu-")
        if tpu:
            accelerators[(r.source_accelerator, 1.0, r.zone)] = {
                "InstanceType": "", "vCPUs": "", "MemoryGiB": "", "AcceleratorName": r.source_accelerator,
                "AcceleratorCount": 1, "GpuInfo": "", "Region": r.region, "AvailabilityZone": r.zone,
                "Price": r.price_per_hour, "SpotPrice": r.spot_price_per_hour}
            continue
        hosts.setdefault((r.instance_type, r.zone), {
            "InstanceType": r.instance_type, "vCPUs": r.vcpus, "MemoryGiB": r.memory_gib, "AcceleratorName": "",
            "AcceleratorCount": "", "GpuInfo": "", "Region": r.region, "AvailabilityZone": r.zone, "Price": "",
            "SpotPrice": ""})
        accelerators.setdefault((r.source_accelerator, float(r.accelerator_count), r.zone), {
            "InstanceType": "", "vCPUs": "", "MemoryGiB": "", "AcceleratorName": r.source_accelerator,
            "AcceleratorCount": r.accelerator_count, "GpuInfo": "", "Region": r.region, "AvailabilityZone": r.zone,
            "Price": r.price_per_hour, "SpotPrice": r.spot_price_per_hour})
    return list(hosts.values()) + list(accelerators.values())


def write_skypilot_catalog(home: str | Path, clouds: Sequence[str] = ("aws", "gcp"), catalog: Any | None = None) -> list[Path]:
    """Write `home/.sky/catalogs/v8/{cloud}/vms.csv` and `common/accelerators.csv` from the packaged
    snapshot. `home` is the directory SkyPilot treats as `~` (HOME or SKY_RUNTIME_DIR)."""
    if catalog is None:
        from trainwise.catalog import load_catalog

        catalog = load_catalog("packaged")
    root = Path(home) / ".sky" / "catalogs" / SKY_CATALOG_VERSION
    frame = catalog.offerings
    written: list[Path] = []
    accelerator_clouds: dict[str, set[str]] = {}
    for cloud in clouds:
        if cloud not in SKY_NAMES:
            raise TrainwiseError(f"cannot write a SkyPilot catalog for {cloud!r}: trainwise writes {', '.join(SKY_NAMES)}")
        subset = frame[(frame["cloud"] == cloud) & frame["source_accelerator"].notna()]
        rows = _aws_rows(subset) if cloud == "aws" else _gcp_rows(subset)
        written.append(_write_rows(root / cloud / "vms.csv", FORMATS[cloud], rows))
        for name in subset["source_accelerator"].unique():
            if not str(name).lower().startswith("tpu-"):
                accelerator_clouds.setdefault(str(name), set()).add(SKY_NAMES[cloud])
    common = [{"AcceleratorName": name, "Clouds": str(sorted(clouds_))} for name, clouds_ in sorted(accelerator_clouds.items())]
    written.append(_write_rows(root / "common" / "accelerators.csv", ("AcceleratorName", "Clouds"), common))
    return written
