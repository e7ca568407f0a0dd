"""The one exception type the CLI turns into a one-line message and a non-zero exit code."""


class TrainwiseError(Exception):
    """A problem with the user's input or environment; the message names it and the fix."""

    exit_code = 2
