"""What the device model reads off a catalog accelerator besides its peaks: its generation, its compute
twin, and the bandwidth gradients get between devices of one machine (`LINKS`)."""

from __future__ import annotations

import re
from typing import Any

from trainwise.errors import TrainwiseError
from trainwise.predict.device_params import DeviceModelParams


def generation_of(acc: Any) -> str:
    """Coarse family + die class: volta, turing, ampere_ga100, ampere_ga10x, hopper, tpu_v3, ..."""
    arch = (getattr(acc, "architecture", None) or "").lower()
    name = getattr(acc, "name", "").lower()
    if getattr(acc, "kind", "") == "tpu" or "tpu" in arch:
        m = re.search(r"v(\d)", arch or name)
        return f"tpu_v{m.group(1)}" if m else "tpu"
    for key, gen in (("kepler", "kepler"), ("maxwell", "maxwell"), ("volta", "volta"), ("turing", "turing"),
                     ("ada", "ada"), ("hopper", "hopper"), ("blackwell", "blackwell"), ("trainium", "trainium"),
                     ("gaudi", "gaudi")):
        if key in arch:
            return gen
    if "pascal" in arch:
        return "pascal_gp100" if "gp100" in arch else "pascal_gp10x"
    if "ampere" in arch:
        return "ampere_ga100" if "ga100" in arch else "ampere_ga10x"
    return "unknown"


# How gradients travel between the devices of one machine (`link`): "auto" uses the fastest path the
# accelerator has (NVLink where present, else peer-to-peer over PCIe); "nvlink" and "pcie" force one;
# "host" is the path NCCL takes with peer-to-peer disabled (NCCL_P2P_DISABLE=1, as every Lambda PyTorch
# benchmark exports, or GPUs without P2P): each byte goes device -> host memory -> device over PCIe,
# whatever NVLink the machine has, and it hides behind the backward pass less (`ddp_overlap_host`).
LINKS = ("auto", "nvlink", "pcie", "host")
# Devices one CPU socket hosts in the servers the calibration data ran on (8-GPU servers: two sockets,
# four GPUs each); more than this on the host path crosses sockets (`host_cross_socket`).
HOST_PATH_GPUS_PER_SOCKET = 4


def crosses_sockets(link: str | None, count: int) -> bool:
    """Whether a host-path (peer-to-peer disabled) all-reduce over `count` devices crosses CPU sockets."""
    return link == "host" and count > HOST_PATH_GPUS_PER_SOCKET


def normalise_link(link: str | None, what: str = "link") -> str:
    """`link` lower-cased, "auto" for None/empty; an unknown one raises naming `what` (e.g. "--link")."""
    value = (link or "auto").strip().lower()
    if value not in LINKS:
        raise TrainwiseError(f"unknown {what} {link!r}: use one of {', '.join(LINKS)} "
                             "(host: peer-to-peer disabled, e.g. NCCL_P2P_DISABLE=1)")
    return value


def _pcie_bandwidth_gbs(text: str, acc: Any) -> float:
    """Effective per-device all-reduce GB/s over PCIe (through host memory), by PCIe generation."""
    if "gen5" in text:
        return 40.0
    if "gen4" in text:
        return 20.0
    if getattr(acc, "granularity", "") == "per_die":
        return 6.0  # two dies share one Gen3 slot
    return 10.0


def compute_twin_key(acc: Any) -> str:
    """Accelerators with one key have the same silicon at the same clocks and power limit (they differ
    in memory only, which the model prices separately), so they share one fitted compute multiplier:
    a per-accelerator multiplier would otherwise absorb which publisher happened to measure which twin."""
    fields = ("kind", "granularity", "architecture", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "tdp_w")
    return "|".join(str(getattr(acc, f, None)) for f in fields)


def compute_multiplier(params: DeviceModelParams, acc: Any) -> float:
    """The fitted per-accelerator compute multiplier: its own, else its compute twin's, else 1."""
    if acc.name in params.g_compute:
        return params.g_compute[acc.name]
    return params.g_compute_twin.get(compute_twin_key(acc), 1.0)


def link_bandwidth_gbs(acc: Any, link: str | None = None) -> float:
    """Effective per-device all-reduce bandwidth (GB/s) between devices of one machine.

    `link`: None/"auto" (NVLink where the accelerator has it, else PCIe), "nvlink", "pcie", or "host"
    (peer-to-peer disabled: through host memory over PCIe; see LINKS)."""
    link = normalise_link(link)
    text = (getattr(acc, "interconnect", None) or "").lower()
    name = getattr(acc, "name", "").lower()
    gen = generation_of(acc)
    if gen.startswith("tpu"):
        return {"tpu_v2": 60.0, "tpu_v3": 80.0, "tpu_v4": 120.0, "tpu_v5": 180.0, "tpu_v6": 300.0}.get(gen, 80.0)
    if link in ("pcie", "host"):
        return _pcie_bandwidth_gbs(text, acc)
    # "no NVLink" (T4, A10, L4 ...) must not read as NVLink; a 2-way bridge joins pairs only
    has_nvlink = "nvlink" in text and "no nvlink" not in text and "pcie" not in name and "bridge" not in text
    if has_nvlink:
        m = re.search(r"nvlink (\d)", text)
        version = int(m.group(1)) if m else 2
        return {1: 60.0, 2: 130.0, 3: 230.0, 4: 360.0, 5: 700.0}.get(version, 130.0)
    return _pcie_bandwidth_gbs(text, acc)
