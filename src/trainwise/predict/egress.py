"""What a peer's network traffic costs: destination split × the provider's $/GB.

The price table is the catalog's (`Catalog.egress`: Erben et al. (VLDB 2024) Table 1, April 2023, GC /
AWS / Azure; LambdaLabs free; object storage 0.01 $/GB — packaged in `trainwise.catalog.seed_2021`).
Scopes are the catalog's `EGRESS_SCOPES` plus `intra_zone` (two VMs of one zone), which Table 1 has
no row for; Erben et al. bill that traffic at the inter-zone rate (its 8×T4 cost: "GC does [charge]
with $0.01/GB"), and so does trainwise. On-premise and LambdaLabs senders pay no per-GB egress.

Per-peer egress per hour = bytes sent per averaging round × rounds per hour, split by destination
(`destination_split`), each share at the sending cloud's price for that scope. Data loading from
object storage = samples/h × bytes/sample × the object-storage price.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from trainwise.errors import TrainwiseError
from trainwise.predict.topology import Site

INTRA_ZONE = "intra_zone"
FREE_SENDERS = ("on-premise", "local", "lambda")
OBJECT_STORAGE_USD_PER_GB = 0.01
OBJECT_STORAGE_SOURCE = "Erben et al. (VLDB 2024) §4: dataset egress from Backblaze B2 object storage, 0.01 $/GB"


def scope_between(sender: Site, receiver: Site) -> str:
    """The egress class of traffic from `sender` to `receiver` (Erben et al. Table 1's rows):
    intra-zone, inter-zone, inter-region within a continent (by continent), to Oceania from
    elsewhere, or between continents. Traffic to another cloud in the same continent is billed as
    leaving the region (Erben et al. §5: D-2/D-3 cross-cloud traffic at the US inter-region rates)."""
    same_cloud = sender.cloud.lower() == receiver.cloud.lower()
    if same_cloud and sender.region == receiver.region:
        return INTRA_ZONE if sender.zone == receiver.zone else "inter_zone"
    if sender.continent != receiver.continent:
        return "any_to_oce" if receiver.continent == "oce" else "inter_continent"
    region_scope = {"us": "inter_region_us", "eu": "inter_region_eu", "asia": "inter_region_asia", "oce": "inter_region_oce"}
    return region_scope.get(sender.continent, "inter_continent")


def destination_split(sites: Sequence[Site], sender: int) -> dict[str, float]:
    """Fraction of `sender`'s averaging traffic per egress scope when every peer exchanges an equal
    share with every other peer (Hivemind's all-reduce in one group, Erben et al. §5 D-2/D-3: 'each
    peer sends its gradients to every other peer')."""
    others = [i for i in range(len(sites)) if i != sender]
    if not others:
        return {}
    split: dict[str, float] = {}
    for i in others:
        scope = scope_between(sites[sender], sites[i])
        split[scope] = split.get(scope, 0.0) + 1.0 / len(others)
    return split


def price_per_gb(egress: pd.DataFrame | None, cloud: str, scope: str) -> float:
    """$/GB for traffic leaving `cloud` in `scope`, from a catalog egress table."""
    if cloud.lower() in FREE_SENDERS:
        return 0.0
    if scope == INTRA_ZONE:
        scope = "inter_zone"  # the seed's accounting (module docstring)
    if egress is None or egress.empty:
        raise TrainwiseError("no egress price table: load a catalog (trainwise.catalog.load_catalog()) and pass its .egress")
    rows = egress[(egress["cloud"] == cloud.lower()) & (egress["scope"] == scope)]
    if rows.empty:
        known = ", ".join(sorted(egress["cloud"].unique()))
        raise TrainwiseError(f"no {scope} egress price for cloud {cloud!r} (the table has {known}); "
                             "add it to a user catalog or use one of those clouds")
    return float(rows["usd_per_gb"].iloc[0])


def egress_usd_per_hour(gb_per_hour: float, split: Mapping[str, float], cloud: str, egress: pd.DataFrame | None) -> float:
    """Σ_scope gb_per_hour × share × price(cloud, scope)."""
    if gb_per_hour < 0:
        raise TrainwiseError(f"traffic must be non-negative (got {gb_per_hour} GB/h)")
    total_share = sum(split.values())
    if split and abs(total_share - 1.0) > 1e-6:
        raise TrainwiseError(f"a destination split must sum to 1 (got {total_share:.4f}): {dict(split)}")
    return sum(gb_per_hour * share * price_per_gb(egress, cloud, scope) for scope, share in split.items())


def data_loading_usd_per_hour(samples_per_s: float, bytes_per_sample: float,
                              usd_per_gb: float = OBJECT_STORAGE_USD_PER_GB) -> float:
    """Streaming the training data from object storage (Erben et al. §4: Backblaze B2 at 0.01 $/GB).
    The seed notes it stops once the data set is cached on local disk; this is the streaming rate."""
    return samples_per_s * 3600.0 * bytes_per_sample / 1e9 * usd_per_gb
