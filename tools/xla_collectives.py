"""XLA's measured collective performance table as benchmarks/data/xla_collectives.csv (evaluation data for the
intra-node all-reduce models; benchmarks/collectives.py).

XLA's GPU cost model (OpenXLA, github.com/openxla/xla, Apache-2.0 licence) reads a table of collectives it measured
on whole NVLink machines (`xla/service/gpu/model/default_collective_perf_table.txtpb`, a
`xla.gpu.DeviceHloInstructionProfiles`): `xla/tools/collective_perf_table_gen` runs one f32 all-reduce, all-gather,
reduce-scatter or all-to-all per size (256 B - 1 GiB) and device grouping (one group of 8, two of 4, four of 2 on an
8-GPU machine) through XLA's NCCL backend, 20 runs, and stores tensor bytes / median run time. Every XLA GPU build
carries it as a serialized proto; this reads it from such a build (the `jax-cuda12-pjrt` wheel or its shared
object) with a small protobuf wire-format reader (field numbers of `hlo_op_profile.proto` and `hlo.proto`).

Kept: the tables whose machine the catalog has - `sm_90` (XLA's Hopper machine: its op profiles name the part
"NVIDIA H100 80GB HBM3", an 8-GPU NVLink 4 node; catalog `H100`) and `sm_100_B200` (an 8-GPU HGX B200; catalog
`B200`); collective permutes (point-to-point patterns, not a data-parallel collective) are left out.
Run: .venv/bin/python tools/xla_collectives.py jax_cuda12_pjrt-0.12.0.1-py3-none-manylinux_2_27_x86_64.whl
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import re
import sys
import zipfile
from pathlib import Path

from trainwise._io import atomic_write_text

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "data" / "xla_collectives.csv"
GPU_NAMES = {"sm_90": "H100", "sm_100_B200": "B200"}
OPS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all")
ELEMENT_BYTES = {11: 4}  # xla.PrimitiveType F32
# field numbers: DeviceHloInstructionProfiles.entries = 2 (map: key 1, value 2); HloInstructionProfileList.entries = 1;
# HloInstructionProfile.instruction = 1, network_throughput_bytes_per_sec = 6; HloInstructionProto.opcode = 2,
# shape = 3, iota_collective_device_list = 92; ShapeProto.element_type = 2, dimensions = 3;
# IotaReplicaGroupListProto.num_replica_groups = 1, num_devices_per_group = 2
_MAP_ENTRY = re.compile(rb"\x12[\x80-\xff]{1,3}[\x00-\x7f]\n[\x01-\x20](?:sm|gfx)[0-9A-Za-z_]+\x12")
COLUMNS = ("source", "gpu", "op", "groups", "devices_per_group", "bytes", "time_us", "algbw_gbs")


def _varint(b: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return value, i


def fields(b: bytes) -> list[tuple[int, object]]:
    """(field number, value) of a serialized message: varints as ints, length-delimited fields as bytes."""
    i, out = 0, []
    while i < len(b):
        tag, i = _varint(b, i)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            value, i = b[i:i + n], i + n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, i = b[i:i + size], i + size
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        out.append((number, value))
    return out


def _first(msg: list[tuple[int, object]], number: int, default: object = None) -> object:
    return next((v for n, v in msg if n == number), default)


def _packed(raw: object) -> list[int]:
    if isinstance(raw, int):
        return [raw]
    out, i = [], 0
    while i < len(raw):
        value, i = _varint(raw, i)
        out.append(value)
    return out


def profile_row(key: str, profile: bytes) -> dict | None:
    """One HloInstructionProfile as a row, or None for what is not kept."""
    msg = fields(profile)
    instruction = fields(_first(msg, 1, b""))
    op = (_first(instruction, 2, b"") or b"").decode()
    throughput = _first(msg, 6)
    if op not in OPS or not throughput:
        return None
    shape = fields(_first(instruction, 3, b""))
    size = ELEMENT_BYTES.get(_first(shape, 2))
    dims = [d for n, v in shape if n == 3 for d in _packed(v)]
    iota = fields(_first(instruction, 92, b""))
    groups, per_group = _first(iota, 1, 1), _first(iota, 2)
    if size is None or not dims or not per_group:
        return None
    nbytes = size * dims[0]
    if op == "reduce-scatter":  # the instruction's shape is the output, the table's size its input
        nbytes *= per_group
    seconds = nbytes / throughput
    return {"source": "xla", "gpu": GPU_NAMES[key], "op": op, "groups": groups, "devices_per_group": per_group,
            "bytes": nbytes, "time_us": f"{seconds * 1e6:.4g}", "algbw_gbs": f"{throughput / 1e9:.4g}"}


def table_rows(blob: bytes) -> list[dict]:
    """Rows of every kept machine's table in a binary holding the serialized collective table."""
    rows: list[dict] = []
    for match in _MAP_ENTRY.finditer(blob):
        n, start = _varint(blob, match.start() + 1)
        entry = fields(blob[start:start + n])
        key = (_first(entry, 1, b"") or b"").decode(errors="replace")
        if key not in GPU_NAMES:
            continue
        profiles = [v for number, v in fields(_first(entry, 2, b"")) if number == 1]
        got = [r for r in (profile_row(key, p) for p in profiles) if r is not None]
        rows += sorted(got, key=lambda r: (r["op"], r["devices_per_group"], r["bytes"]))
    return rows


def read_rows(path: Path) -> list[dict]:
    if path.suffix == ".whl":
        with zipfile.ZipFile(path) as wheel:
            blobs = [wheel.read(n) for n in wheel.namelist() if n.endswith(".so")]
    else:
        blobs = [path.read_bytes()]
    rows = [r for blob in blobs for r in table_rows(blob)]
    if not rows:
        raise ValueError(f"{path}: no collective table of a catalog machine in it")
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=Path, help="the jax-cuda12-pjrt wheel (pip download jax-cuda12-pjrt==0.12.0.1 "
                                             "--no-deps) or its shared object")
    ap.add_argument("--output", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if not args.build.is_file():
        print(f"error: {args.build} is not a file: pip download jax-cuda12-pjrt==0.12.0.1 --no-deps first",
              file=sys.stderr)
        return 2
    try:
        rows = read_rows(args.build)
    except (ValueError, zipfile.BadZipFile) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    digest = hashlib.sha256(args.build.read_bytes()).hexdigest()
    buf = io.StringIO()
    buf.write(f"# XLA's collective performance table in {args.build.name} (sha256 {digest[:16]}; OpenXLA, "
              "Apache-2.0 licence); tools/xla_collectives.py\n")
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_text(args.output, buf.getvalue())  # temp file + rename: never half-written
    print(f"{len(rows)} collectives -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
