"""Atomic file output: a reader never sees a half-written file, a crash never leaves one."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from trainwise.errors import WriteError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and a rename: a reader
    sees the old file or the whole new one, never part of it.

    A stream (`--json /dev/stdout`, a FIFO, /dev/null) is written straight into: a rename would
    replace the device's name in /dev with a regular file. A symbolic link is followed and its
    target replaced, so the link stays a link. An OSError becomes a WriteError (a TrainwiseError and
    an OSError) whose message is one line naming the file and the fix."""
    try:
        return _atomic_write_bytes(Path(path), data)
    except WriteError:
        raise
    except OSError as exc:  # full disk, read-only or unwritable folder: one line, not a traceback
        raise WriteError(path, exc) from None


def _atomic_write_bytes(target: Path, data: bytes) -> Path:
    if is_stream(target):
        with open(target, "wb") as handle:
            handle.write(data)
        return target
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        # mkstemp makes the file private (0600); an output file gets the permissions any new file would.
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def is_stream(path: str | os.PathLike[str]) -> bool:
    """`path` exists and is not a regular file or folder (a character device, a FIFO, a socket;
    /dev/stdout follows to one of these)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def cache_root() -> Path | None:
    """trainwise's cache folder: $TRAINWISE_CACHE_DIR, else ~/.cache/trainwise; None with TRAINWISE_NO_CACHE=1."""
    if os.environ.get("TRAINWISE_NO_CACHE"):
        return None
    return Path(os.environ.get("TRAINWISE_CACHE_DIR") or Path.home() / ".cache" / "trainwise")


def check_output_path(path: str | os.PathLike[str], option: str, inputs: tuple[str | os.PathLike[str], ...] = (),
                      fix: str | None = None) -> Path:
    """Fail early, with the fix, when `path` cannot receive an output file: before a long job runs,
    not after it. Missing parent folders are fine (atomic_write_text creates them). `fix` replaces the
    advice when no file can be created there (for a destination the user did not name: how to name one)."""
    from trainwise.errors import TrainwiseError

    target = Path(path)
    if target.is_dir():
        raise TrainwiseError(f"{option} {target} is a folder: give a file name, e.g. {target / 'out.json'}")
    if is_stream(target):
        if not os.access(target, os.W_OK):
            raise TrainwiseError(f"{option} {target}: cannot write to it (no permission): choose a writable output path")
        return target  # written straight into (atomic_write_bytes): nothing is created beside it
    for source in inputs:
        try:
            if target.exists() and Path(source).exists() and target.samefile(source):
                raise TrainwiseError(f"{option} {target} would overwrite the input {source}: write to another file")
        except OSError:
            continue
    # a link is written through to its target (atomic_write_bytes): that folder must take the new file
    written = Path(os.path.realpath(target)) if target.is_symlink() else target.absolute()
    _check_creatable_in(written.parent, option, target, fix)
    return target


def check_output_folder(path: str | os.PathLike[str], option: str, files: tuple[str, ...] = (),
                        inputs: tuple[str | os.PathLike[str], ...] = ()) -> Path:
    """check_output_path for a folder of outputs: `path` must be a folder or creatable as one, and
    none of the `files` it will receive may be a folder or one of `inputs`."""
    from trainwise.errors import TrainwiseError

    target = Path(path)
    if target.exists() and not target.is_dir():
        raise TrainwiseError(f"{option} {target} is a file, not a folder: give a folder for the output files "
                             "(it is created if missing)")
    _check_creatable_in(target.absolute(), option, target)
    for name in files:
        if (target / name).is_dir():
            raise TrainwiseError(f"{option} {target}: its {name} would be a file but is a folder: "
                                 "remove it or choose another folder")
        check_output_path(target / name, option, inputs)
    return target


def _check_creatable_in(folder: Path, option: str, shown: Path, fix: str | None = None) -> None:
    """`folder` exists and takes new files, or its nearest existing ancestor takes new folders."""
    from trainwise.errors import TrainwiseError

    ancestor = folder
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise TrainwiseError(f"{option} {shown}: {ancestor} is a file, not a folder: {fix or 'choose another output path'}")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise TrainwiseError(f"{option} {shown}: cannot write in {ancestor} (read-only or no permission): "
                             f"{fix or 'choose a writable output path'}")
    # os.access answers from the permission bits, which root bypasses; some places refuse new entries
    # anyway (/proc, /sys): creating one is the only sure test.
    try:
        fd, probe = tempfile.mkstemp(prefix=".trainwise-probe-", dir=ancestor)
    except OSError as exc:
        raise TrainwiseError(f"{option} {shown}: cannot write in {ancestor} ({exc.strerror or exc}): "
                             f"{fix or 'choose a writable output path'}") from None
    os.close(fd)
    os.unlink(probe)


def write_output_text(path: str | os.PathLike[str], text: str, option: str) -> Path:
    """atomic_write_text for a user-named output: an OS error becomes a one-line error naming the option."""
    from trainwise.errors import TrainwiseError

    try:
        return atomic_write_text(path, text)
    except OSError as exc:
        raise TrainwiseError(f"cannot write {option} {path} ({exc.strerror or exc}): choose a writable output path") from None
