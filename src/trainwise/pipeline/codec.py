"""Sample fields ↔ WebDataset tar members, without pickle.

A sample {"__key__": k, "image": array, ...} becomes members `k.image.npy` (numpy's .npy format, or
`k.image.safetensors` with one tensor named "data"), bytes → `.bin`, str → `.txt`, numbers and small
JSON-able values → `.json`, numpy scalars → 0-d `.npy` (read back as numpy scalars of their dtype).
Compression is per member (`.npy.zst`, `.npy.gz`, `.npy.lz4`), which keeps
every shard a plain tar any tar reader opens and lets `webdataset` read it (`.gz` members are
decompressed by webdataset's own decoder; `decode_member` handles all four). Torch tensors are stored
as arrays; the manifest's field schema says which fields come back as torch tensors.
"""

from __future__ import annotations

import gzip
import io
import json
from typing import Any

import numpy as np

from trainwise.optional import require
from trainwise.errors import TrainwiseError

COMPRESSION_SUFFIX = {"none": "", "gzip": ".gz", "zstd": ".zst", "lz4": ".lz4"}
_SUFFIX_COMPRESSION = {v: k for k, v in COMPRESSION_SUFFIX.items() if v}


def _compress(data: bytes, compression: str) -> bytes:
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression == "zstd":
        require("zstandard", "zstd compression")
        import zstandard

        return zstandard.ZstdCompressor(level=3).compress(data)
    if compression == "lz4":
        require("lz4.frame", "lz4 compression")
        import lz4.frame

        return lz4.frame.compress(data)
    raise TrainwiseError(f"unknown compression {compression!r}: use none, gzip, zstd or lz4")


def decompress(data: bytes, compression: str) -> bytes:
    if compression == "none":
        return data
    if compression == "gzip":
        return gzip.decompress(data)
    if compression == "zstd":
        require("zstandard", "zstd compression")
        import zstandard

        return zstandard.ZstdDecompressor().decompress(data)
    if compression == "lz4":
        require("lz4.frame", "lz4 compression")
        import lz4.frame

        return lz4.frame.decompress(data)
    raise TrainwiseError(f"unknown compression {compression!r}")


def _field_kind(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return "numpy"
    if type(value).__module__.startswith("torch") and hasattr(value, "numpy"):
        return "torch"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "bytes"
    if isinstance(value, str):
        return "str"
    if isinstance(value, np.generic):  # (np.str_ and np.bytes_ are str and bytes, above)
        # A numpy scalar (an np.int64 label) is stored as a 0-d .npy array and read back as the same
        # numpy scalar: the online pipeline hands the DataLoader an np.int64, so must a materialised one
        # (as JSON it came back a Python int, and batched as float64 where it had been float32).
        return "numpy_scalar"
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        raise TrainwiseError(f"cannot store a {type(value).__name__} field without pickle: return numpy arrays, torch tensors, "
                             "bytes, str or JSON-able values from offline steps") from None
    return "json"


def encode_sample(sample: dict[str, Any], fmt: str, compression: str) -> tuple[list[tuple[str, bytes]], dict[str, str]]:
    """Tar members (name, payload) for one sample, and the field kinds {field: numpy|torch|bytes|str|json}."""
    key = sample["__key__"]
    members: list[tuple[str, bytes]] = []
    kinds: dict[str, str] = {}
    suffix = COMPRESSION_SUFFIX[compression]
    for name, value in sample.items():
        if name == "__key__":
            continue
        if "." in name or "/" in name:
            raise TrainwiseError(f"field name {name!r} contains '.' or '/', which the tar layout uses: rename the field")
        kind = _field_kind(value)
        kinds[name] = kind
        if kind in ("numpy", "torch", "numpy_scalar"):
            array = value.detach().cpu().numpy() if kind == "torch" else np.asarray(value)
            array = np.asarray(array, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)
            if fmt == "safetensors":
                require("safetensors.numpy", "the safetensors format")
                from safetensors.numpy import save

                payload, ext = save({"data": array}), "safetensors"
            else:
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, array, allow_pickle=False)
                payload, ext = buffer.getvalue(), "npy"
        elif kind == "bytes":
            payload, ext = bytes(value), "bin"
        elif kind == "str":
            payload, ext = value.encode("utf-8"), "txt"
        else:
            payload, ext = json.dumps(value).encode(), "json"
        members.append((f"{key}.{name}.{ext}{suffix}", _compress(payload, compression)))
    return members, kinds


def split_member_name(name: str) -> tuple[str, str, str, str]:
    """`key.field.ext[.comp]` → (key, field, ext, compression)."""
    base = name.rsplit("/", 1)[-1]
    parts = base.split(".")
    if len(parts) < 3:
        raise ValueError(f"member {name!r} is not key.field.ext")
    compression = "none"
    if "." + parts[-1] in _SUFFIX_COMPRESSION:
        compression = _SUFFIX_COMPRESSION["." + parts.pop()]
    return parts[0], parts[1], parts[2], compression


def decode_member(ext: str, payload: bytes, compression: str, kind: str | None = None) -> Any:
    """A member's payload back to its value (numpy array, or torch tensor when `kind` is torch)."""
    data = decompress(payload, compression)
    if ext == "npy":
        array = np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
    elif ext == "safetensors":
        require("safetensors.numpy", "the safetensors format")
        from safetensors.numpy import load

        array = load(data)["data"]
    elif ext == "bin":
        return data
    elif ext == "txt":
        return data.decode("utf-8")
    elif ext == "json":
        return json.loads(data)
    else:
        raise ValueError(f"unknown member extension {ext!r}")
    if kind == "torch":
        import torch

        return torch.from_numpy(array if array.flags.writeable else array.copy())
    if kind == "numpy_scalar":
        return array[()]
    return array


def decode_wds_sample(sample: dict[str, Any], field_kinds: dict[str, str] | None = None) -> dict[str, Any]:
    """A raw `webdataset.WebDataset(url)` sample ({"__key__", "image.npy.zst": bytes, ...}) decoded to fields."""
    out: dict[str, Any] = {"__key__": sample["__key__"]}
    for name, payload in sample.items():
        if name.startswith("__"):
            continue
        _, field, ext, compression = split_member_name(f"k.{name}")
        out[field] = decode_member(ext, payload, compression, (field_kinds or {}).get(field))
    return out
