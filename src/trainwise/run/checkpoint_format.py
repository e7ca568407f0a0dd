"""The checkpoint file format: a header naming the key and the HMAC, then a weights-only torch.save
payload (trainwise.run.checkpoint documents the format and the store that writes and reads it).
A file is authenticated before anything in it is deserialised."""

from __future__ import annotations

import hashlib
import hmac
import io
import re
from collections import OrderedDict
from typing import Any

from trainwise.errors import TrainwiseError

MAGIC = b"TRAINWISE-CKPT"
FORMAT_VERSION = 2
NAME_PATTERN = re.compile(r"^ckpt-(\d{12})\.twckpt$")
DEFAULT_KEEP = 3
# Headers are short; anything past this without a newline is not one.
MAX_HEADER_BYTES = 256


def checkpoint_name(global_batch: int) -> str:
    return f"ckpt-{global_batch:012d}.twckpt"


class CorruptCheckpoint(Exception):
    """A checkpoint file whose header, length or content does not verify."""


class UntrustedCheckpoint(CorruptCheckpoint):
    """A checkpoint file whose HMAC does not verify under this user's key: never deserialised."""


def _mac(secret: bytes, name: str, payload: bytes) -> str:
    message = hmac.new(secret, b"trainwise-checkpoint\0" + name.encode("utf-8", "surrogateescape") + b"\0"
                       + str(len(payload)).encode() + b"\0", hashlib.sha256)
    message.update(payload)
    return message.hexdigest()


_SCALARS = (type(None), bool, int, float, complex, str, bytes)


def _loadable(value: Any, where: str) -> Any:
    """`value` in the types a weights-only load reads back (NumPy scalars become Python numbers); a
    one-line error naming the entry otherwise, at the write rather than at the resume."""
    import torch

    if isinstance(value, (torch.Tensor, torch.dtype, torch.device, torch.Size)):
        return value
    if type(value) in _SCALARS:
        return value
    if type(value) in (dict, OrderedDict):
        items = [(_loadable(k, f"{where} key"), _loadable(v, f"{where}[{k!r}]")) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())):
            return value  # unchanged: the same object (a state_dict keeps its _metadata)
        copy = type(value)(items)
        if getattr(value, "__dict__", None):
            copy.__dict__.update(value.__dict__)
        return copy
    if type(value) in (list, tuple, set):
        converted = [_loadable(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value if all(a is b for a, b in zip(converted, value)) else type(value)(converted)
    module = type(value).__module__
    if module == "numpy" and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    raise TrainwiseError(f"checkpoint state {where} is a {module}.{type(value).__qualname__}: a checkpoint holds tensors, "
                         "numbers, strings, lists and dicts only (it is loaded without running code); convert it, e.g. "
                         "torch.as_tensor(x) or float(x)")


def encode(state: dict[str, Any], name: str = "") -> bytes:
    """The file for `state` under the name `name` (the HMAC covers it: a renamed file does not verify)."""
    import torch

    from trainwise.run.checkpoint_key import load_key

    key = load_key()
    buffer = io.BytesIO()
    torch.save(_loadable(state, "state"), buffer)
    payload = buffer.getvalue()
    header = MAGIC + f" {FORMAT_VERSION} {key.key_id} {_mac(key.secret, name, payload)} {len(payload)}\n".encode()
    return header + payload


def decode(blob: bytes, name: str = "") -> dict[str, Any]:
    """The state in a file named `name`; CorruptCheckpoint (damaged) or UntrustedCheckpoint (not written
    under this user's key) before anything is deserialised."""
    import pickle

    import torch

    from trainwise.run.checkpoint_key import load_key

    newline = blob.find(b"\n", 0, MAX_HEADER_BYTES)
    if newline < 0 or not blob.startswith(MAGIC + b" "):
        raise CorruptCheckpoint("no trainwise checkpoint header")
    parts = blob[:newline].split()
    if len(parts) >= 2 and parts[1] == b"1":
        raise UntrustedCheckpoint("format 1 has no key (anyone can forge its checksum), so it is not loaded; "
                                  "resume from a checkpoint this trainwise wrote, or start afresh")
    if len(parts) != 5 or parts[1] != str(FORMAT_VERSION).encode() or not parts[4].isdigit():
        raise CorruptCheckpoint("malformed header")
    _, _, key_id, digest, length = parts
    payload = blob[newline + 1:]
    if len(payload) != int(length):
        raise CorruptCheckpoint(f"truncated: {len(payload)} of {int(length)} bytes")
    key = load_key()
    if not hmac.compare_digest(_mac(key.secret, name, payload).encode(), digest):
        if key_id.decode("ascii", "replace") != key.key_id:
            raise UntrustedCheckpoint(f"signed with another key (id {key_id.decode('ascii', 'replace')[:16]}; this user's "
                                      f"key {key.key_id} from {key.source}): if it is yours, resume with the key that "
                                      "wrote it (TRAINWISE_CHECKPOINT_KEY_FILE)")
        raise UntrustedCheckpoint("authentication failed (HMAC mismatch: altered, renamed or forged)")
    try:
        return torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, TypeError, AttributeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CorruptCheckpoint(f"not a weights-only state ({first[:200]})") from None
