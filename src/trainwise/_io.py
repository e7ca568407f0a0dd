"""Atomic file output: a reader never sees a half-written file, a crash never leaves one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def cache_root() -> Path | None:
    """trainwise's cache folder: $TRAINWISE_CACHE_DIR, else ~/.cache/trainwise; None with TRAINWISE_NO_CACHE=1."""
    if os.environ.get("TRAINWISE_NO_CACHE"):
        return None
    return Path(os.environ.get("TRAINWISE_CACHE_DIR") or Path.home() / ".cache" / "trainwise")
