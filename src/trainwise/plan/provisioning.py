"""Time from "go" to the first training step on a fresh cloud machine, per cloud and kind of machine,
with where each figure comes from. The planner bills it and adds it to the wall time (this machine
and on-premise machines: 0). `--provisioning-minutes` replaces the whole table.

Sources:
- Mao & Humphrey, "A Performance Study on the VM Startup Time in the Cloud" (IEEE CLOUD 2012): a
  Linux VM on Amazon EC2 started in ~97 s on average; Windows Azure roles took ~6 min.
- Erben et al., "How Can We Train Deep Learning Models Across Clouds and Continents? An Experimental
  Study" (VLDB 2024; Google Cloud, AWS, Azure and LambdaLabs GPU VMs): "VM startup time ranges
  between seconds to minutes with manual deployment taking up to 10 minutes".
- Jorge et al., infrastructure-as-code deployment of distributed TensorFlow on AWS: deploying a
  cluster (several machines, their software and shared storage) took 15–20 min.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

ERBEN = "Erben et al. (VLDB 2024): GPU VM startup seconds to minutes, up to 10 min"
MAO_EC2 = "Mao & Humphrey (IEEE CLOUD 2012): EC2 Linux VM startup ~97 s, plus the GPU image and driver (Erben et al.: up to 10 min)"
MAO_AZURE = "Mao & Humphrey (IEEE CLOUD 2012): Azure VM startup ~6 min; up to 10 min (Erben et al.)"
JORGE = "Jorge et al.: deploying a cluster of machines took 15–20 min"

# (low, expected, high) seconds and the source of each row.
SINGLE_VM_S = {
    "aws": ((97.0, 180.0, 600.0), MAO_EC2),
    "azure": ((240.0, 360.0, 600.0), MAO_AZURE),
    "gcp": ((60.0, 180.0, 600.0), ERBEN),
    "lambda": ((60.0, 180.0, 600.0), ERBEN),
}
OTHER_CLOUD_S = ((60.0, 180.0, 600.0), ERBEN)
# Several machines started and joined (multi-node DDP, Hivemind groups) or a TPU pod slice (many hosts).
CLUSTER_S = ((900.0, 1050.0, 1200.0), JORGE)
TPU_HOST_CHIPS = 8  # a TPU slice of more chips than one host carries spans several hosts: a cluster


def provisioning_table(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(low, expected, high, source) per candidate row of `frame` (cloud, accelerator,
    accelerator_count and, for groups, parallelism columns); rows of machines already running are
    zeroed by the caller."""
    n = len(frame)
    low, mid, high = np.empty(n), np.empty(n), np.empty(n)
    source = np.empty(n, dtype=object)
    clouds = frame["cloud"].astype(str).str.lower().to_numpy()
    accelerators = frame["accelerator"].astype(object).fillna("").astype(str).to_numpy()
    counts = np.nan_to_num(frame["accelerator_count"].to_numpy(dtype="float64"), nan=0.0)
    groups = (frame["parallelism"].astype(object).fillna("").astype(str).to_numpy() if "parallelism" in frame.columns
              else np.full(n, "", dtype=object))
    cluster = np.isin(groups, ["ddp-multi-node", "hivemind"]) | (
        np.char.startswith(accelerators.astype(str), "TPU") & (counts > TPU_HOST_CHIPS))
    for cloud in np.unique(clouds):
        (values, label) = SINGLE_VM_S.get(cloud, OTHER_CLOUD_S)
        rows = (clouds == cloud) & ~cluster
        low[rows], mid[rows], high[rows] = values
        source[rows] = label
    (values, label) = CLUSTER_S
    low[cluster], mid[cluster], high[cluster] = values
    source[cluster] = label
    return low, mid, high, source


def describe() -> str:
    """One line for the plan's assumptions."""
    parts = [f"{cloud} {mid / 60:.0f} min ({low / 60:.1f}–{high / 60:.0f})"
             for cloud, ((low, mid, high), _) in SINGLE_VM_S.items()]
    return ("provisioning of a cloud machine, per cloud: " + ", ".join(parts)
            + f"; several machines or a TPU pod slice: {CLUSTER_S[0][1] / 60:.1f} min ({CLUSTER_S[0][0] / 60:.0f}–"
            f"{CLUSTER_S[0][2] / 60:.0f}) — sources: {MAO_EC2}; {MAO_AZURE}; {ERBEN}; {JORGE}; "
            "on-premise and this machine: 0; --provisioning-minutes sets one figure for all")
