"""Move data between a URI and the job's working storage through fsspec: local paths by default,
`s3://`/`gs://` when the matching filesystem package (s3fs, gcsfs) is installed. Every file is
hashed (SHA-256) while it streams and the copy is re-read and compared, with a rich progress bar
over bytes."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn, TransferSpeedColumn

from trainwise.errors import TrainwiseError
from trainwise.launch.safety import scheme_of

CHUNK_BYTES = 1 << 20
_FS_PACKAGES = {"s3": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


@dataclass
class Transfer:
    source: str
    destination: str
    files: list[dict[str, Any]] = field(default_factory=list)  # {path, bytes, sha256}

    @property
    def total_bytes(self) -> int:
        return sum(f["bytes"] for f in self.files)

    def manifest(self) -> dict[str, Any]:
        return {"source": self.source, "destination": self.destination, "total_bytes": self.total_bytes,
                "files": self.files}


def filesystem(uri: str) -> tuple[Any, str]:
    """(fsspec filesystem, path within it), with a one-line error naming the package to install."""
    import fsspec

    scheme = scheme_of(uri)
    try:
        fs, path = fsspec.core.url_to_fs(uri)
    except ImportError:
        package = _FS_PACKAGES.get(scheme, f"the fsspec filesystem for {scheme}://")
        raise TrainwiseError(f"{uri}: reading {scheme}:// needs the {package} package: pip install {package}") from None
    except ValueError as exc:
        raise TrainwiseError(f"{uri}: fsspec cannot open it ({exc}): use a local path, s3:// or gs://") from None
    return fs, path


def _sha256_of(fs: Any, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def copy_tree(source: str, destination: str, *, console: Console | None = None, what: str = "staging") -> Transfer:
    """Copy a file or a directory tree from `source` to `destination` (both URIs or paths), hashing
    each file as it streams and verifying the copy by re-reading it."""
    src_fs, src_root = filesystem(source)
    dst_fs, dst_root = filesystem(destination)
    if not src_fs.exists(src_root):
        raise TrainwiseError(f"{what}: {source} does not exist: check the URI (and the bucket's permissions)")
    if src_fs.isdir(src_root):
        found = src_fs.find(src_root, detail=True)
        entries = sorted((path, info) for path, info in found.items() if info.get("type") == "file")
        pairs = [(path, os.path.relpath(path, src_root).replace(os.sep, "/"), int(info.get("size") or 0))
                 for path, info in entries]
    else:
        info = src_fs.info(src_root)
        pairs = [(src_root, os.path.basename(src_root.rstrip("/")), int(info.get("size") or 0))]
    transfer = Transfer(source=source, destination=destination)
    total = sum(size for _, _, size in pairs)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                        TimeRemainingColumn(), console=console or Console(stderr=True), transient=True)
    with progress:
        task = progress.add_task(f"{what} {source} → {destination}", total=total or None)
        for path, relative, _ in pairs:
            target = f"{dst_root.rstrip('/')}/{relative}"
            parent = target.rsplit("/", 1)[0]
            if parent:
                dst_fs.makedirs(parent, exist_ok=True)
            digest = hashlib.sha256()
            written = 0
            with src_fs.open(path, "rb") as reader, dst_fs.open(target, "wb") as writer:
                while chunk := reader.read(CHUNK_BYTES):
                    digest.update(chunk)
                    writer.write(chunk)
                    written += len(chunk)
                    progress.advance(task, len(chunk))
            expected = digest.hexdigest()
            actual = _sha256_of(dst_fs, target)
            if actual != expected:
                raise TrainwiseError(f"{what}: checksum mismatch for {relative} (source {expected[:12]}…, copy "
                                     f"{actual[:12]}…): the copy is corrupt; retry")
            transfer.files.append({"path": relative, "bytes": written, "sha256": expected})
    return transfer


def local_path(uri: str) -> Path | None:
    """The local filesystem path of a `file` URI or plain path, else None."""
    if scheme_of(uri) != "file":
        return None
    return Path(uri[len("file://"):] if uri.startswith("file://") else uri).expanduser()
