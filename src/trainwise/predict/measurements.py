"""Measured training throughputs: the rows the device model is calibrated and validated on, read from CSV.

Data (`data/`, every row with its source):

- `calibration.csv`: training throughputs the device model's constants are fitted on (Lambda Labs' PyTorch
  benchmark tables, 1-8 GPUs; Lambda's TensorFlow tf_cnn_benchmarks tables, 1 GPU; NVIDIA
  DeepLearningExamples performance tables, 1 GPU; the seeds' Malta K80/V100 runtimes and Erben's
  T4/A10/RTX8000 throughputs);
- `validation.csv`: rows never used in the fit — NVIDIA's 8-GPU rows and Erben et al.'s multi-GPU
  rows — checked with the full fit;
- `ratios.csv`: published speedups without absolute numbers (Künas' P100/V100/TPU ratios, Malta's
  MNIST K80/V100 ratios); fitted as log-ratios (they are what identifies the TPU constants) and
  reported separately.

Columns of a measurements CSV (`validate --dataset`): exactly
`model,accelerator,count,per_device_batch,precision,samples_per_s,source`, plus optional `seq_len`,
`image_size`, `task` (hf: heads mlm/clm/qa/cls), `optimizer`, `framework` (pytorch | tensorflow),
`stack` (software-stack family, see below; default from `source`), `link` (multi-GPU: how gradients
travelled, `accelerator_features.LINKS`; `host` for NCCL_P2P_DISABLE=1 runs), `notes` and any other column (ignored).

Software stack (`stack_of`): the optional `stack` column, else the family of the source prefix
(`STACK_OF_SOURCE`), else the source's first word; the fit gives each family its own throughput and
fusion factor (see `calibration_fit`).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from trainwise.errors import TrainwiseError
from trainwise.predict.accelerator_features import LINKS, normalise_link
from trainwise.agent.trace.optimizers import fused_variant, normalise_optimizer
from trainwise.agent.trace.step import normalise_precision
from trainwise.core.workload import WorkloadCharacterisation
from trainwise.predict.characterise import characterise_named, normalise_memory_format
from trainwise.predict.device_params import REFERENCE_STACK

DATA_DIR = Path(__file__).with_name("data")
CALIBRATION_CSV = DATA_DIR / "calibration.csv"
VALIDATION_CSV = DATA_DIR / "validation.csv"
# Training throughputs trainwise measured itself on a lent H100 (benchmarks/gpu_throughput.py): never fitted.
MEASURED_H100_CSV = DATA_DIR / "measured_h100.csv"
# `trainwise validate --dataset NAME` accepts these names for the packaged files.
PACKAGED_DATASETS = {"validation": VALIDATION_CSV, "calibration": CALIBRATION_CSV, "measured-h100": MEASURED_H100_CSV}
RATIOS_CSV = DATA_DIR / "ratios.csv"
REQUIRED_COLUMNS = ("model", "accelerator", "count", "per_device_batch", "precision", "samples_per_s", "source")
RATIO_COLUMNS = ("model", "accelerator", "count", "per_device_batch", "reference_accelerator", "reference_count",
                 "reference_batch", "precision", "speedup", "source")
# source prefix -> software stack family (see stack_of); stock PyTorch eager is the reference (factor 1)
STACK_OF_SOURCE = (("lambdal/", REFERENCE_STACK), ("NVIDIA/DeepLearningExamples", "nvidia-dle"),
                   ("LambdaColdStorage/lambda-tensorflow-benchmark", "lambda-tf-cnn-benchmarks"),
                   ("Malta, ", "seed-malta-keras"), ("Erben, ", "seed-erben"), ("Künas, ", "seed-kunas-tf"),
                   ("Künas et al., ", "seed-kunas-tf"),
                   # stock PyTorch eager, what trainwise.predict.measure runs
                   ("measured by trainwise", REFERENCE_STACK))


class Measurement(BaseModel):
    """One published training throughput."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    line: int = 0
    model: str
    accelerator: str
    count: int = Field(ge=1)
    per_device_batch: int = Field(ge=1)
    precision: str
    samples_per_s: float = Field(gt=0)
    source: str = Field(min_length=1)
    seq_len: int | None = Field(default=None, ge=1)
    image_size: int | None = Field(default=None, ge=1)
    task: str | None = None
    optimizer: str | None = None
    framework: str = "pytorch"
    memory_format: str = "nchw"
    grad_accumulation: int = Field(default=1, ge=1, description="micro-batches per all-reduce (data parallel)")
    stack: str | None = Field(default=None, description="software stack family; default derived from `source`")
    link: str | None = Field(default=None, description=(
        "how gradients travelled between the devices (data parallel): auto (default: NVLink where present), "
        "nvlink, pcie (peer-to-peer over PCIe), or host (peer-to-peer disabled, e.g. NCCL_P2P_DISABLE=1: "
        "through host memory)"))
    notes: str = ""

    @field_validator("link")
    @classmethod
    def _link(cls, v: str | None) -> str | None:
        if not (v or "").strip():
            return None
        try:
            return normalise_link(v)
        except TrainwiseError:
            raise ValueError(f"must be one of {', '.join(LINKS)}") from None

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        return normalise_precision(v)

    @field_validator("memory_format")
    @classmethod
    def _layout(cls, v: str) -> str:
        try:
            return normalise_memory_format(v)
        except TrainwiseError:
            raise ValueError("must be nchw or nhwc (channels_last)") from None

    @field_validator("model", "accelerator", "source")
    @classmethod
    def _strip(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("must not be empty")
        return v


class RatioMeasurement(BaseModel):
    """A published speedup: throughput on `accelerator` / throughput on `reference_accelerator`."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    line: int = 0
    model: str
    accelerator: str
    count: int = Field(ge=1)
    per_device_batch: int = Field(ge=1)
    reference_accelerator: str
    reference_count: int = Field(ge=1)
    reference_batch: int = Field(ge=1)
    precision: str
    speedup: float = Field(gt=0)
    source: str = Field(min_length=1)
    framework: str = "pytorch"
    notes: str = ""

    @field_validator("precision")
    @classmethod
    def _precision(cls, v: str) -> str:
        return normalise_precision(v)

    def side(self, reference: bool) -> Measurement:
        return Measurement(line=self.line, model=self.model,
                           accelerator=self.reference_accelerator if reference else self.accelerator,
                           count=self.reference_count if reference else self.count,
                           per_device_batch=self.reference_batch if reference else self.per_device_batch,
                           precision=self.precision, samples_per_s=1.0, source=self.source, framework=self.framework)


def stack_of(m: Measurement | RatioMeasurement) -> str:
    """The software-stack family of a measurement: its `stack` column, else from its source prefix,
    else the source's first word (a user's own source: an unknown stack, predicted at factor 1)."""
    explicit = getattr(m, "stack", None)
    if explicit:
        return explicit
    for prefix, stack in STACK_OF_SOURCE:
        if m.source.startswith(prefix):
            return stack
    return m.source.split(":")[0].split(" ")[0]


def _read_csv(path: str | Path, required: Sequence[str]) -> list[tuple[int, dict[str, str]]]:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise TrainwiseError(f"dataset {p} does not exist: pass a CSV with the columns {','.join(required)}, or a "
                             f"packaged set ({', '.join(PACKAGED_DATASETS)})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainwiseError(f"dataset {p} cannot be read ({type(exc).__name__}): pass a UTF-8 CSV file") from None
    lines = text.splitlines()
    if not lines or not lines[0].strip():
        raise TrainwiseError(f"dataset {p} is empty: it needs a header row {','.join(required)}")
    reader = csv.DictReader(lines)
    header = [h.strip() for h in (reader.fieldnames or [])]
    missing = [c for c in required if c not in header]
    if missing:
        raise TrainwiseError(f"dataset {p} lacks column(s) {', '.join(missing)}; the header must contain "
                             f"{','.join(required)} (extra columns are allowed), got {','.join(header)}")
    rows = []
    for number, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        if not any(row.values()):
            continue
        if None in raw:
            raise TrainwiseError(f"dataset {p} line {number}: more fields than header columns (quote fields containing commas)")
        rows.append((number, row))
    if not rows:
        raise TrainwiseError(f"dataset {p} has a header but no rows")
    return rows


def _parse(model_cls: type[BaseModel], path: Path, number: int, row: dict[str, str]) -> Any:
    data: dict[str, Any] = {k: v for k, v in row.items() if v != ""}
    data["line"] = number
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "row"
        value = row.get(where, "")
        raise TrainwiseError(f"dataset {path} line {number}: column `{where}` {first['msg'].lower()}"
                             f"{f' (got {value!r})' if value else ''}") from None
    except TrainwiseError as exc:
        raise TrainwiseError(f"dataset {path} line {number}: {exc}") from None


def load_measurements(path: str | Path, catalog: Any = None, check_accelerators: bool = True) -> list[Measurement]:
    """Parse and validate a measurements CSV; errors name the line, the column and the fix."""
    p = Path(path)
    rows = [_parse(Measurement, p, n, r) for n, r in _read_csv(p, REQUIRED_COLUMNS)]
    if check_accelerators:
        catalog = catalog or default_catalog()
        for m in rows:
            try:
                catalog.accelerator(m.accelerator)
            except TrainwiseError as exc:
                raise TrainwiseError(f"dataset {p} line {m.line}: {exc}") from None
    return rows


def load_ratios(path: str | Path = RATIOS_CSV) -> list[RatioMeasurement]:
    p = Path(path)
    return [_parse(RatioMeasurement, p, n, r) for n, r in _read_csv(p, RATIO_COLUMNS)]


def default_catalog() -> Any:
    """The installed catalog, for callers that pass none."""
    from trainwise.catalog import load_catalog

    return load_catalog()


def characterise_row(m: Measurement) -> WorkloadCharacterisation:
    """A published row's step; TensorFlow applies each variable's update in one fused kernel (`ResourceApply*`),
    not in torch's foreach passes."""
    optimizer = m.optimizer
    if optimizer and m.framework.lower() in ("tensorflow", "keras", "tf"):
        optimizer = fused_variant(normalise_optimizer(optimizer))
    return characterise_named(m.model, m.per_device_batch, m.precision, m.seq_len, image_size=m.image_size,
                              optimizer=optimizer, task=m.task, memory_format=m.memory_format)
