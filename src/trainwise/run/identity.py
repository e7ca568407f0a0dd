"""A Hivemind peer's identity: the private-key file libp2p derives the peer id from.

libp2p will not dial a bare `/ip4/HOST/tcp/PORT`: a bootstrap address must end in `/p2p/<peer id>`.
A peer started with `identity_path` (hivemind.DHT → hivemind.p2p.P2P, daemon flag `-id`) has the peer
id of that key, so a launcher that writes the key first knows the head's full address before any
node starts. The file format and the key → peer id rule are hivemind's own
(`P2P.generate_identity`, `PeerID.from_identity`): a libp2p `crypto_pb2.PrivateKey` protobuf holding
an RSA-2048 key in DER. The key is a peer identity, not a cloud credential, but whoever holds it can
impersonate the head peer: it is written 0600 and never printed.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from trainwise.errors import TrainwiseError

# libp2p peer ids in base58btc (a sha2-256 multihash of an RSA key starts with Qm).
PEER_ID_PATTERN = re.compile(r"^[1-9A-HJ-NP-Za-km-z]{40,100}$")
_HIVEMIND_MISSING = "Hivemind is not installed: pip install 'hivemind==1.1.12'"


def _read_identity(identity_path: str | os.PathLike[str]) -> bytes:
    path = Path(identity_path)
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise TrainwiseError(f"identity file {path} does not exist: give the private-key file the head peer was "
                             "started with (trainwise launch writes one next to the task YAML), or create one with "
                             f"trainwise.run.identity.generate_identity('{path}'), which returns its peer id") from None
    except OSError as exc:
        raise TrainwiseError(f"cannot read identity file {path} ({exc.strerror}): check its permissions") from None


def peer_id_of(identity_path: str | os.PathLike[str]) -> str:
    """The base58 peer id a Hivemind peer started with this identity file has, computed with
    hivemind's own key → PeerID code, without starting a daemon."""
    data = _read_identity(identity_path)
    try:
        from hivemind.p2p import PeerID
    except ImportError:
        raise TrainwiseError(_HIVEMIND_MISSING) from None
    try:
        return PeerID.from_identity(data).to_base58()
    except Exception:  # protobuf DecodeError, cryptography ValueError: not a libp2p RSA private key
        raise TrainwiseError(f"identity file {identity_path} is not a libp2p private key (hivemind's format): "
                             "generate one with `trainwise launch` or hivemind.P2P.generate_identity") from None


def generate_identity(identity_path: str | os.PathLike[str]) -> str:
    """Write a fresh identity (hivemind's format) to `identity_path` atomically with mode 0600;
    returns its peer id. An existing file there is replaced."""
    try:
        from hivemind.proto import crypto_pb2
        from hivemind.utils.crypto import RSAPrivateKey
    except ImportError:
        raise TrainwiseError(_HIVEMIND_MISSING) from None
    key = crypto_pb2.PrivateKey(key_type=crypto_pb2.KeyType.RSA, data=RSAPrivateKey().to_bytes())
    target = Path(identity_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file 0600, so the key is never readable by others, even mid-write.
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(key.SerializeToString())
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return peer_id_of(target)


def has_peer_id(multiaddr: str) -> bool:
    """Whether a multiaddr names the peer (`.../p2p/<peer id>`), as libp2p needs to dial it."""
    parts = multiaddr.rstrip("/").split("/")
    return any(name in ("p2p", "ipfs") and i + 1 < len(parts) and PEER_ID_PATTERN.match(parts[i + 1])
               for i, name in enumerate(parts))
