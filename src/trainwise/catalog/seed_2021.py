"""The `seed-2021` catalog: the offerings and prices the papers trainwise implements used (Malta; Künas; Künas et al.; Erben et al.).

Replaying a paper's decision needs the prices it saw, not today's; the current snapshot lacks K80
(AWS p2) entirely. Every row names the paper and section it came from. Where a paper gives a
price but not an instance's shape, the shape is the provider's published one and the note says so;
nothing here is a price the papers do not state, except the one row flagged `derived`.

Sources: Künas, MSc thesis (UFRGS, 2023); Künas et al., CLOSER 2023; Malta, MSc dissertation (UNICAMP,
2021); Erben et al., "How Can We Train Deep Learning Models Across Clouds and Continents?" (VLDB 2024; April 2023 prices).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from trainwise.catalog.model import EGRESS_COLUMNS, Offering
from trainwise.catalog.user import on_premise_price_per_hour

NAME = "seed-2021"
SNAPSHOT_DATE = "2021-02 to 2023-04 (per row: price_date)"
SOURCE = ("prices quoted by the papers trainwise builds on: AWS on-demand Feb 2021 (Malta 2021), Cloud TPU and the "
          "amortised local cluster (Künas 2023, Künas et al. 2023), T4/A10/DGX-2 spot and on-demand and egress April 2023 "
          "(Erben et al. 2024)")

_AWS_2021 = "Malta 2021 §3.1.1 Table 3.1, 'Prices on February 2021'"
_AWS_SHAPE = ("vCPUs/memory are AWS's published p2/p3 shapes (not in the paper); region not stated in the paper: "
              "these are the us-east-1 list prices")
_AZURE_2021 = "Malta 2021 §3.2.1 Table 3.3, 'Prices on February 2021' (listed, not used in the experiments)"
_TPU = "Künas 2023 (thesis) §4 Table 4.1 and §4.5 (Google Cloud, Iowa us-central1); Künas et al. 2023 Table 2"
_TPU_PREEMPTIBLE = "Künas 2023 §6.3 / Künas et al. 2023: preemptible TPUs 'about 70% less': TPUv3-8 8.00 -> 2.40 $/h"
_LOCAL = "Künas 2023 §4 Table 4.1 (25,000 $ / (1 x 365 x 24) = 2.85 $/h) and §4.5 platforms; Künas et al. 2023 Table 2"
_T4 = "Erben et al. 2024 Table 1, 'average us-west cloud pricing in April 23' (1xT4 with 8 CPU cores)"
_T4_SHAPE = "instance type inferred from '1xT4 with 8 CPU cores' (Erben et al. 2024 §5); the paper names no type"
_DGX2 = "Erben et al. 2024 §6 cost analysis: 'A spot DGX-2 costs ... $6.30/h ($14.60/h on-demand) in GC US'"
_A10 = "Erben et al. 2024 §3: LambdaLabs 'on-demand A10 GPUs for just $0.60/hour', US West only"
_LOCAL_PRICE = on_premise_price_per_hour(25_000, lifetime_years=1)  # 2.85, the paper's own rounding


def _row(**fields: Any) -> Offering:
    fields.setdefault("kind", "cloud")
    fields.setdefault("billing", "per_second")
    fields.setdefault("min_billed_seconds", 60.0)
    fields.setdefault("catalog", NAME)
    zone_or_region = fields.get("zone") or fields.get("region") or "-"
    fields.setdefault("offering_id", f"{fields['cloud']}/{zone_or_region}/{fields['instance_type']}")
    fields["notes"] = tuple(fields.get("notes", ()))
    return Offering(**fields)


def offerings() -> list[Offering]:
    rows: list[Offering] = []
    # Malta 2021: AWS p2 (K80) / p3 (V100) on-demand, February 2021. One K80 "GPU" is one die of the board.
    aws = [("p2.xlarge", "K80", 1, 4, 61, 0.90), ("p2.8xlarge", "K80", 8, 32, 488, 7.20),
           ("p2.16xlarge", "K80", 16, 64, 732, 14.40), ("p3.2xlarge", "V100", 1, 8, 61, 3.06),
           ("p3.8xlarge", "V100", 4, 32, 244, 12.24), ("p3.16xlarge", "V100", 8, 64, 488, 24.48)]
    for instance_type, accelerator, count, vcpus, memory, price in aws:
        rows.append(_row(cloud="aws", region="us-east-1", instance_type=instance_type, accelerator=accelerator,
                         source_accelerator=accelerator, accelerator_count=count, vcpus=vcpus, memory_gib=memory,
                         accelerator_memory_gib=12.0 if accelerator == "K80" else 16.0, price_per_hour=price,
                         price_date="2021-02", source=_AWS_2021,
                         notes=[_AWS_SHAPE] + (["one K80 'GPU' is one die of a two-die board"] if accelerator == "K80" else [])))
    # Azure NC (K80) on-demand, February 2021, billed per hour per the paper ("charge per hour of usage").
    for instance_type, count, vcpus, memory, price in (("Standard_NC6", 1, 6, 56, 0.90), ("Standard_NC12", 2, 12, 112, 1.80),
                                                       ("Standard_NC24", 4, 24, 224, 3.60)):
        rows.append(_row(cloud="azure", region="us (unstated)", instance_type=instance_type, accelerator="K80",
                         source_accelerator="K80", accelerator_count=count, vcpus=vcpus, memory_gib=memory,
                         accelerator_memory_gib=12.0, price_per_hour=price, price_date="2021-02", source=_AZURE_2021,
                         billing="per_hour", min_billed_seconds=3600.0,
                         notes=["vCPUs/memory are Microsoft's published NC shapes (not in the paper); region not stated",
                                "one K80 'GPU' is one die of a two-die board"]))
    # Künas 2023: Cloud TPU (us-central1): a v2-8/v3-8 is one 4-chip board = 8 TensorCores; priced per board.
    tpu_note = "TPU v{v}-8: one host board of 4 chips = 8 TensorCores (global batch = per-core batch x 8); priced per board"
    rows.append(_row(cloud="gcp", region="us-central1", instance_type="tpu-v3-8", accelerator="TPU-v3",
                     source_accelerator="TPUv3-8", accelerator_count=4, accelerator_memory_gib=32.0, price_per_hour=8.00,
                     spot_price_per_hour=2.40, price_date="undated (Künas 2023, Künas et al. 2023)", source=f"{_TPU}; preemptible: {_TPU_PREEMPTIBLE}",
                     notes=[tpu_note.format(v=3), "spot = preemptible TPU; needs restart-resilient training (checkpoints)"]))
    rows.append(_row(cloud="gcp", region="us-central1", instance_type="tpu-v2-8", accelerator="TPU-v2",
                     source_accelerator="TPUv2-8", accelerator_count=4, accelerator_memory_gib=16.0, price_per_hour=6.00,
                     spot_price_per_hour=1.80, price_date="undated (Künas 2023, Künas et al. 2023)", source=f"{_TPU}; preemptible: {_TPU_PREEMPTIBLE}",
                     notes=[tpu_note.format(v=2),
                            "derived: preemptible 1.80 $/h = 6.00 x (1 - 0.70) from the paper's 'about 70% less'; "
                            "the paper quotes no TPUv2 preemptible price"]))
    # Künas 2023: the amortised local cluster: one node, the papers ran on one of its four GPUs and charged the whole node.
    local = [("local-cluster-p100", "P100-SXM2", 44, 256, "Blaise (PCAD, INF/UFRGS, Porto Alegre): 2x Xeon E5-2699 v4, "
              "256 GB RAM, 4x Tesla P100-SXM2-16GB; the reference platform of Künas' thesis"),
             ("local-cluster-v100", "V100-32GB", 48, 384, "Bull Sequana X1120 (SDumont, LNCC, Petrópolis): 2x Xeon Gold 6252, "
              "384 GB RAM, 4x Tesla V100-SXM2-32GB; the reference platform of Künas et al.")]
    for instance_type, accelerator, vcpus, memory, machine in local:
        rows.append(_row(cloud="on-premise", region="brazil", instance_type=instance_type, accelerator=accelerator,
                         source_accelerator=accelerator, accelerator_count=1, vcpus=vcpus, memory_gib=memory,
                         accelerator_memory_gib=16.0 if accelerator == "P100-SXM2" else 32.0, price_per_hour=_LOCAL_PRICE,
                         kind="on_premise", billing="per_second", min_billed_seconds=0.0, price_date="undated (Künas 2023, Künas et al. 2023)",
                         source=_LOCAL,
                         notes=[machine, "on-premise: 25,000 $ capex / (1 y x 8760 h) = 2.85 $/h; no power, staff or "
                                "facilities (the paper's simplification)",
                                "the node has 4 GPUs; the papers trained on 1 and charged the whole node (share_of_node = 1)"]))
    # Erben et al. 2024: T4 spot / on-demand, April 2023 (us-west averages), one T4 with 8 vCPUs per VM.
    t4 = [("gcp", "n1-standard-8", 8, 30, 0.572, 0.180), ("aws", "g4dn.2xlarge", 8, 32, 0.802, 0.395),
          ("azure", "Standard_NC8as_T4_v3", 8, 56, 0.489, 0.134)]
    for cloud, instance_type, vcpus, memory, price, spot in t4:
        rows.append(_row(cloud=cloud, region="us-west", instance_type=instance_type, accelerator="T4", source_accelerator="T4",
                         accelerator_count=1, vcpus=vcpus, memory_gib=memory, accelerator_memory_gib=16.0,
                         price_per_hour=price, spot_price_per_hour=spot, price_date="2023-04", source=_T4,
                         notes=[_T4_SHAPE, "Table 1 prices are us-west averages"]))
    rows.append(_row(cloud="gcp", region="us", instance_type="DGX-2 (8xV100)", accelerator="V100", source_accelerator="V100",
                     accelerator_count=8, accelerator_memory_gib=16.0, price_per_hour=14.60, spot_price_per_hour=6.30,
                     price_date="2023-04", source=_DGX2,
                     notes=["the paper calls it 'DGX-2 (8xV100)' in GC US and names no instance type; vCPUs/memory unknown",
                            "$/1M samples check (Erben et al.): 6.30 $/h at 413 samples/s -> 4.24"]))
    rows.append(_row(cloud="lambda", region="us-west", instance_type="gpu_1x_a10", accelerator="A10", source_accelerator="A10",
                     accelerator_count=1, accelerator_memory_gib=24.0, price_per_hour=0.60, price_date="2023-04",
                     source=_A10, billing="per_minute",
                     notes=["no spot market; LambdaLabs charges no egress (Erben et al. 2024 §6)",
                            "8xA10 in Erben et al. = 8 of these single-GPU VMs: 8 x 0.60 = 4.80 $/h"]))
    return rows


# Erben et al. 2024: egress, $/GB, April 2023 (Erben et al. 2024 Table 1: GC / AWS / Azure), the 0.01 $/GB dataset egress from
# object storage (Backblaze B2, Erben et al. 2024 §4 setup), and LambdaLabs' free egress (Erben et al. 2024 §6).
_EGRESS_TABLE = {
    "inter_zone": (0.01, 0.01, 0.00),
    "inter_region_us": (0.01, 0.01, 0.02),
    "inter_region_eu": (0.02, 0.01, 0.02),
    "inter_region_asia": (0.05, 0.01, 0.08),
    "inter_region_oce": (0.08, 0.01, 0.08),
    "any_to_oce": (0.15, 0.02, 0.08),
    "inter_continent": (0.08, 0.02, 0.02),
}
_EGRESS_SOURCE = "Erben et al. 2024 Table 1, April 2023 us-west averages"


def egress(label: str = "") -> pd.DataFrame:
    rows = []
    for scope, prices in _EGRESS_TABLE.items():
        for cloud, price in zip(("gcp", "aws", "azure"), prices):
            rows.append({"cloud": cloud, "scope": scope, "usd_per_gb": price, "price_date": "2023-04",
                         "source": _EGRESS_SOURCE + label})
        rows.append({"cloud": "lambda", "scope": scope, "usd_per_gb": 0.0, "price_date": "2023-04",
                     "source": "Erben et al. 2024 §6: 'LambdaLabs does not charge for any data egress'" + label})
    rows.append({"cloud": "object-storage", "scope": "object_storage", "usd_per_gb": 0.01, "price_date": "2023-04",
                 "source": "Erben et al. 2024 §4: dataset egress from Backblaze B2 object storage, 0.01 $/GB" + label})
    return pd.DataFrame(rows, columns=list(EGRESS_COLUMNS))


CAVEATS = [
    "Prices are those the papers quote (2021 to April 2023), for replaying their decisions; use catalog "
    "'current' to plan today.",
    "TPUv2-8 preemptible 1.80 $/h is derived from the paper's 'about 70% less', not quoted.",
    "The local cluster's 2.85 $/h amortises 25,000 $ over one year and leaves out power, staff and facilities.",
]
