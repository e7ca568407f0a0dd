"""The one exception type the CLI turns into a one-line message and a non-zero exit code."""


class TrainwiseError(Exception):
    """A problem with the user's input or environment; the message names it and the fix."""

    exit_code = 2


class WriteError(TrainwiseError, OSError):
    """An output file could not be written (full disk, read-only or unwritable folder).

    Also an OSError, so code that handles the OS error itself still catches it; the CLI shows the
    one-line message."""

    def __init__(self, path: object, exc: OSError) -> None:
        reason = exc.strerror or str(exc)
        fix = ("free some space or write elsewhere" if exc.errno == 28
               else "choose a writable location (check the folder's permissions)")
        OSError.__init__(self, exc.errno, reason, str(path))
        self.message = f"cannot write {path} ({reason}): {fix}"

    def __str__(self) -> str:
        return self.message
