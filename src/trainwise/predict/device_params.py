"""The device model's fitted constants (`DeviceModelParams`) and where they are read from.

The packaged fit is `data/device_model_params.json` (written by `calibration.fit_packaged`); a user's own fit
is named by $TRAINWISE_DEVICE_PARAMS or passed as a path. Without a fit the defaults are the priors.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError

DATA_DIR = Path(__file__).with_name("data")
PARAMS_PATH = DATA_DIR / "device_model_params.json"

COMPUTE_CLASSES = ("fp32", "tf32", "tc16", "tpu")
MEMORY_CATEGORIES = ("elementwise", "reduction", "normalisation", "embedding", "optimizer", "copy", "other", "depthwise")
# Published numbers of one model on one GPU differ by up to 1.56x between software stacks (NVIDIA's
# fused/DALI/apex DeepLearningExamples vs Lambda's stock PyTorch): the stack is a term of the model,
# and stock PyTorch eager is the reference every prediction is made at unless a stack is named.
REFERENCE_STACK = "pytorch-eager"


class DeviceModelParams(BaseModel):
    """Fitted constants of the device model (JSON: data/device_model_params.json)."""

    model_config = ConfigDict(extra="forbid")

    e_compute: dict[str, dict[str, float]] = Field(default_factory=lambda: {
        "fp32": {"matmul": 0.75, "conv": 0.65, "attention": 0.5},
        "tf32": {"matmul": 0.55, "conv": 0.5, "attention": 0.4},
        "tc16": {"matmul": 0.55, "conv": 0.45, "attention": 0.35},
        "tpu": {"matmul": 0.5, "conv": 0.4, "attention": 0.35},
    })
    e_memory: dict[str, float] = Field(default_factory=lambda: {
        "elementwise": 0.7, "reduction": 0.5, "normalisation": 0.5, "embedding": 0.3, "optimizer": 0.7,
        "copy": 0.6, "other": 0.5, "depthwise": 0.3})
    g_compute: dict[str, float] = Field(default_factory=dict, description="per accelerator (canonical name), default 1")
    g_compute_twin: dict[str, float] = Field(default_factory=dict, description=(
        "per compute twin (`compute_twin_key`: same die, peaks and power limit, e.g. V100 16/32 GB, A100 40/80 GB, "
        "RTX 6000/8000): the fit shares one compute multiplier between twins, and an accelerator without its own "
        "entry in g_compute takes its twin's"))
    g_generation: dict[str, float] = Field(default_factory=dict, description="compute multiplier per generation, default 1")
    g_memory: dict[str, float] = Field(default_factory=dict, description="memory-efficiency multiplier per generation")
    t_launch_s: float = 4e-6
    t_host_op_s: float = 12e-6
    t_step_s: float = 1.5e-3
    t_step_tensorflow_s: float = 4e-3
    alpha: dict[str, float] = Field(default_factory=lambda: {"matmul": 0.1, "conv": 0.2, "attention": 0.1},
                                    description="efficiency falls as (peak / 100 TFLOP/s)^-alpha: the larger the peak, "
                                                "the harder a category's kernels fill it")
    wave_exponent: float = Field(default=0.5, description=(
        "compute efficiency x wave_utilisation^this: 1 = the full tail-wave and tile-padding quantisation of "
        "128x128 output tiles over the SMs, 0 = none (libraries shrink tiles or split K for small problems, which softens it)"))
    g_grouped: float = Field(default=0.5, description="efficiency multiplier of grouped (not depthwise) convolutions")
    nchw_penalty: float = Field(default=2.0, description="layout-transpose passes per byte of a 16-bit NCHW convolution "
                                "(prior 2: cuDNN transposes each activation in and out, one read + one write per byte)")
    tensorflow_efficiency: float = Field(default=1.0, description="efficiency multiplier for Keras/TensorFlow "
                                         "measurements; not fitted (1): TensorFlow rows belong to TensorFlow "
                                         "stacks, whose stack_factors/stack_fusion carry it")
    t_step_tpu_s: float = Field(default=0.02, description="per-step host<->TPU cost (infeed, outfeed, dispatch)")
    link_efficiency: float = Field(default=1.0, description="achieved fraction of the all-reduce link bandwidth")
    t_allreduce_s: float = Field(default=1e-3, description="fixed cost of a data-parallel step's gradient synchronisation")
    ddp_overlap: float = 0.7
    ddp_overlap_host: float = Field(default=0.5, description=(
        "fraction of the all-reduce that hides when gradients go through host memory (link 'host': peer-to-peer "
        "disabled; the exposed time is ring x (1 - this)); fitted on Lambda's multi-GPU rows, which all ran "
        "with NCCL_P2P_DISABLE=1: their exposed exchange does not shrink with a longer backward pass (8x V100 "
        "BERT-large FP32 exposes all of it, AMP about half)"))
    host_cross_socket: float = Field(default=1.0, description=(
        "fraction of the host-path all-reduce bandwidth left when the devices span two CPU sockets (link 'host', "
        "count > HOST_PATH_GPUS_PER_SOCKET): the ring's socket-crossing hop sets its pace; fitted on Lambda's "
        "8-GPU P2P-disabled rows (8x A100 80GB BERT-large exposes ~2.5x the exchange of 4x)"))
    tpu_fusion: float = 0.5
    stack_factors: dict[str, float] = Field(default_factory=dict, description=(
        "throughput multiplier per software stack (source family) of the calibration data; the reference stack, "
        f"{REFERENCE_STACK!r} (stock PyTorch eager, Lambda's benchmarks), is 1 by definition and so is any stack not "
        "listed: a user's own profile is predicted at the reference stack unless told otherwise"))
    stack_fusion: dict[str, float] = Field(default_factory=dict, description=(
        "per software stack: how much faster it runs the fusable memory-bound operators (FUSABLE_CATEGORIES: "
        "fused layer norm, bias+activation, multi-tensor optimizers) than the eager trace; 1 for the reference "
        "and any stack not listed"))
    bands: dict[str, Any] = Field(default_factory=dict, description="expected |relative error| by accelerator/generation/kind")
    fitted_on: dict[str, Any] = Field(default_factory=dict)


@lru_cache(maxsize=4)
def _load_params_cached(path: str, mtime: float) -> DeviceModelParams:
    return DeviceModelParams.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))


PARAMS_ENV = "TRAINWISE_DEVICE_PARAMS"


def load_params(path: str | Path | None = None) -> DeviceModelParams:
    """The fit at `path`; else the one $TRAINWISE_DEVICE_PARAMS names (a user's own fit, `trainwise device
    calibrate --add`); else the packaged fit, or defaults (uncalibrated priors) when it is missing."""
    if path is None and os.environ.get(PARAMS_ENV):
        path = os.environ[PARAMS_ENV]
    p = Path(path) if path is not None else PARAMS_PATH
    if not p.is_file():
        if path is not None:
            raise TrainwiseError(f"device-model parameters {p} do not exist: fit them with `trainwise device calibrate "
                                 f"--add MY_ROWS.csv --output {p}` (or unset {PARAMS_ENV})")
        return DeviceModelParams()
    try:
        return _load_params_cached(str(p), p.stat().st_mtime)
    except (ValueError, OSError) as exc:
        raise TrainwiseError(f"device-model parameters {p} are not a trainwise fit ({type(exc).__name__}): "
                             "write them with `trainwise device calibrate --output`") from None
