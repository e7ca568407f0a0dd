"""The secret that authenticates trainwise's checkpoints (HMAC-SHA256), kept away from the checkpoints.

A checkpoint folder may be a shared bucket (spot recovery): anyone who can write there can plant a
file, so a checkpoint is only loaded when its HMAC verifies under a key the folder never holds.

Where the key comes from, first match wins:

1. `TRAINWISE_CHECKPOINT_KEY`: the key itself, 64 hex digits (or any text of at least 32 characters),
   e.g. a cluster secret passed to `trainwise run` on the remote machine;
2. `TRAINWISE_CHECKPOINT_KEY_FILE`: a file holding it (a mounted secret);
3. the per-user file `$XDG_CONFIG_HOME/trainwise/checkpoint.key` (default `~/.config/...`).

A key file that does not exist yet is created with 32 random bytes, mode 0600, the first time a
checkpoint is written or read.

A key file must be private (no group or other permission bits) and must not sit inside the checkpoint
folder. Checkpoints written under one key do not load under another: a run resumed on another machine
needs the same key there (copy the file, or pass the secret).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from trainwise.errors import TrainwiseError

KEY_ENV = "TRAINWISE_CHECKPOINT_KEY"
KEY_FILE_ENV = "TRAINWISE_CHECKPOINT_KEY_FILE"
KEY_BYTES = 32
MIN_TEXT_KEY_CHARS = 32
MAX_KEY_FILE_BYTES = 4096


@dataclass(frozen=True)
class CheckpointKey:
    secret: bytes
    source: str  # where it came from, for messages: the env var's name or the file's path
    path: Path | None  # the key file, if any

    @property
    def key_id(self) -> str:
        """A public fingerprint (names the key in a refusal; reveals nothing a MAC does not)."""
        return hashlib.sha256(b"trainwise-checkpoint-key-id\0" + self.secret).hexdigest()[:16]


def default_key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "trainwise" / "checkpoint.key"


def _parse(text: str, where: str) -> bytes:
    value = text.strip()
    if len(value) == 2 * KEY_BYTES and all(c in "0123456789abcdefABCDEF" for c in value):
        return bytes.fromhex(value)
    if len(value) < MIN_TEXT_KEY_CHARS:
        raise TrainwiseError(f"the checkpoint key in {where} is too short ({len(value)} characters): give 64 hex digits, "
                             "e.g. from `python -c \"import secrets; print(secrets.token_hex(32))\"`")
    return value.encode("utf-8", "surrogateescape")


def _read_private(path: Path, explicit: bool) -> bytes:
    how = f"{KEY_FILE_ENV}={path}" if explicit else str(path)
    try:
        fd = os.open(path, os.O_RDONLY | (0 if explicit else os.O_NOFOLLOW))
    except OSError as exc:
        raise TrainwiseError(f"cannot read the checkpoint key {how} ({exc.strerror}): fix it, or set {KEY_FILE_ENV} to a "
                             "private key file") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TrainwiseError(f"the checkpoint key {how} is not a regular file: point {KEY_FILE_ENV} at a key file")
        if info.st_mode & 0o077:
            raise TrainwiseError(f"the checkpoint key {how} is open to other users (mode {stat.S_IMODE(info.st_mode):04o}): "
                                 f"run `chmod 600 {path}` (anyone who reads it can forge checkpoints)")
        if hasattr(os, "getuid") and info.st_uid not in (os.getuid(), 0):
            raise TrainwiseError(f"the checkpoint key {how} belongs to another user (uid {info.st_uid}): use your own "
                                 f"key file ({KEY_FILE_ENV})")
        data = os.read(fd, MAX_KEY_FILE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise TrainwiseError(f"the checkpoint key {how} is over {MAX_KEY_FILE_BYTES} bytes: it is not a key file")
    return _parse(data.decode("utf-8", "surrogateescape"), how)


def _create(path: Path) -> None:
    """A new random key, 0600, created atomically (a concurrent rank that loses the race reads the winner's)."""
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.parent / f".checkpoint.key.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_hex(KEY_BYTES) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            try:
                os.link(tmp, path)  # never replaces a key another process made meanwhile
            except FileExistsError:
                pass
        finally:
            tmp.unlink(missing_ok=True)
    except OSError as exc:
        raise TrainwiseError(f"cannot create the checkpoint key {path} ({exc.strerror or exc}): set {KEY_FILE_ENV} to a "
                             f"private file you can write, or {KEY_ENV} to 64 hex digits") from None


_cache: dict[tuple[str | None, str | None, str], CheckpointKey] = {}


def load_key(create: bool = True) -> CheckpointKey:
    """The checkpoint key (see the module's docstring); created when absent and `create`."""
    text, file_name = os.environ.get(KEY_ENV), os.environ.get(KEY_FILE_ENV)
    cache_key = (text, file_name, str(default_key_path()))
    if cache_key in _cache:
        return _cache[cache_key]
    if text:
        key = CheckpointKey(_parse(text, KEY_ENV), KEY_ENV, None)
    else:
        path = Path(file_name).expanduser() if file_name else default_key_path()
        if not path.exists() and not path.is_symlink():
            if not create:
                raise TrainwiseError(f"no checkpoint key at {path}: set {KEY_FILE_ENV} or {KEY_ENV}")
            _create(path)
        key = CheckpointKey(_read_private(path, explicit=bool(file_name)), str(path), path)
    _cache[cache_key] = key
    return key


def key_text(key: CheckpointKey) -> str:
    """The key as `TRAINWISE_CHECKPOINT_KEY` takes it (a cluster secret): hex for a 32-byte key, which
    `_parse` reads back to the same bytes; a longer or shorter text key as its own text."""
    if len(key.secret) == KEY_BYTES:
        return key.secret.hex()
    return key.secret.decode("utf-8", "surrogateescape")


def check_key_not_inside(folder: str) -> None:
    """Refuse a key file inside a (local) checkpoint folder: whoever can write checkpoints there could
    read it and forge them."""
    key = load_key()
    if key.path is None:
        return
    root = os.path.realpath(folder)
    where = os.path.realpath(key.path)
    if os.path.commonpath([root, where]) == root:
        raise TrainwiseError(f"the checkpoint key {key.path} lies inside the checkpoint folder {folder}: keep it elsewhere "
                             f"(the default is {default_key_path()}; or set {KEY_FILE_ENV})")
