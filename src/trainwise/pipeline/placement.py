"""Where the offline part runs: at the edge (the user's machine, then upload the materialised data) or in
the cloud (upload the raw data, preprocess there). A strategy's storage size gives its upload time
and transfer cost; the plan's data-staging cost can take `staged_bytes` from here.

Künas' thesis (cloud TPUs vs a local GPU cluster) ch. 5: preprocessing at the edge shrank the upload from ≈ 8,204.5 MB to
≈ 185.7 MB (≈ 44×) and the bandwidth used from ≈ 66 Mb/s to ≈ 5.7 Mb/s (≈ 11.5×);
`thesis_chapter5()` recomputes both ratios from those published inputs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from trainwise.errors import TrainwiseError
from trainwise.core.costs import DEFAULT_STAGING_BYTES_PER_S, STAGING_SOURCE


class PlacementOption(BaseModel):
    where: Literal["edge", "cloud"]
    uploaded_bytes: float
    upload_s: float
    transfer_usd: float
    offline_s: float
    offline_usd: float = Field(description="cloud compute for the offline part (0 at the edge: the user's machine)")
    total_s: float
    total_usd: float


class Placement(BaseModel):
    edge: PlacementOption
    cloud: PlacementOption
    upload_reduction: float = Field(description="raw bytes / materialised bytes")
    best_by_time: str
    best_by_cost: str
    bandwidth_bytes_per_s: float
    bandwidth_source: str


def placement(raw_bytes: float, stored_bytes: float, offline_s_edge: float, *, offline_s_cloud: float | None = None,
              bandwidth_bytes_per_s: float = DEFAULT_STAGING_BYTES_PER_S, transfer_usd_per_gb: float = 0.0,
              offline_compute_usd_per_hour: float = 0.0, bandwidth_source: str = STAGING_SOURCE) -> Placement:
    """Edge (preprocess here, upload `stored_bytes`) vs cloud (upload `raw_bytes`, preprocess there)."""
    if raw_bytes <= 0 or stored_bytes <= 0:
        raise TrainwiseError("raw and stored sizes must be positive bytes")
    if bandwidth_bytes_per_s <= 0:
        raise TrainwiseError(f"bandwidth must be positive (got {bandwidth_bytes_per_s})")
    cloud_s = offline_s_edge if offline_s_cloud is None else offline_s_cloud
    edge_upload = stored_bytes / bandwidth_bytes_per_s
    cloud_upload = raw_bytes / bandwidth_bytes_per_s
    edge = PlacementOption(where="edge", uploaded_bytes=stored_bytes, upload_s=edge_upload, transfer_usd=stored_bytes / 1e9 * transfer_usd_per_gb,
                           offline_s=offline_s_edge, offline_usd=0.0, total_s=offline_s_edge + edge_upload,
                           total_usd=stored_bytes / 1e9 * transfer_usd_per_gb)
    offline_usd = cloud_s / 3600 * offline_compute_usd_per_hour
    cloud = PlacementOption(where="cloud", uploaded_bytes=raw_bytes, upload_s=cloud_upload, transfer_usd=raw_bytes / 1e9 * transfer_usd_per_gb,
                            offline_s=cloud_s, offline_usd=offline_usd, total_s=cloud_upload + cloud_s,
                            total_usd=raw_bytes / 1e9 * transfer_usd_per_gb + offline_usd)
    return Placement(edge=edge, cloud=cloud, upload_reduction=raw_bytes / stored_bytes,
                     best_by_time="edge" if edge.total_s <= cloud.total_s else "cloud",
                     best_by_cost="edge" if edge.total_usd <= cloud.total_usd else "cloud",
                     bandwidth_bytes_per_s=bandwidth_bytes_per_s, bandwidth_source=bandwidth_source)


def thesis_chapter5() -> dict[str, float | str]:
    """Künas' thesis ch. 5's edge-preprocessing ratios, recomputed from its published inputs."""
    raw_mb, preprocessed_mb = 8204.5, 185.7
    raw_mbps, preprocessed_mbps = 66.0, 5.7
    return {"raw_mb": raw_mb, "preprocessed_mb": preprocessed_mb, "size_reduction": raw_mb / preprocessed_mb,
            "raw_bandwidth_mbps": raw_mbps, "preprocessed_bandwidth_mbps": preprocessed_mbps,
            "bandwidth_reduction": raw_mbps / preprocessed_mbps, "published": "≈ 44× size, ≈ 11.5× bandwidth",
            "source": "Künas' thesis ch. 5: '≈ 8,204.5 MB to ≈ 185.7 MB', '≈ 66 Mbps' vs '≈ 5.7 Mbps'"}
