"""What may go into a task file, a shell line or a record: names, URIs, commands and secrets.

Every user string that reaches a shell is quoted with `shlex.quote`, one argument at a time; the
few shell expressions trainwise writes itself (SkyPilot's node-rank variables) are fixed text, never
built from user input. Names and bucket URIs that a cloud or SkyPilot will splice into its own
commands are checked against strict patterns and refused with a one-line error otherwise. No value
of a credential environment variable may appear in anything trainwise writes.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from trainwise.errors import TrainwiseError

# SkyPilot's cluster/task name rule (lower-case DNS label, as Kubernetes and GCP require).
NAME_PATTERN = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
BUCKET_SCHEMES = ("s3", "gs", "r2", "az", "cos", "oci")
# A bucket name as S3/GCS allow it; a key made of the characters object stores and SkyPilot's mount
# tools handle without quoting problems.
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_KEY = re.compile(r"^[A-Za-z0-9._\-/=+@,]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

# Credential variables by name, plus any variable whose name says it is a secret.
SECRET_ENV_NAMES = frozenset({
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS_JSON",
    "AZURE_CLIENT_SECRET", "AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "LAMBDA_API_KEY", "RUNPOD_API_KEY", "GITHUB_TOKEN",
    "TRAINWISE_CHECKPOINT_KEY",  # signs checkpoints (run.checkpoint_key): a SkyPilot secret, never in the task
})
_SECRET_NAME = re.compile(r"(SECRET|TOKEN|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)", re.IGNORECASE)
_MIN_SECRET_LENGTH = 6  # shorter values ("1", "true") would match everywhere and protect nothing


@dataclass(frozen=True)
class ShellExpr:
    """Shell text trainwise writes itself (e.g. `"$SKYPILOT_NODE_RANK"`): emitted unquoted. Never
    construct one from user input."""

    text: str


def check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise TrainwiseError(f"{what} {name!r} is not allowed: use 1-63 lower-case letters, digits and '-', "
                             "starting with a letter (e.g. mnist-cnn)")
    return name


def name_from(text: str, fallback: str = "trainwise-job") -> str:
    """A valid name derived from free text (a workload name): lower-cased, other characters to '-'."""
    slug = re.sub(r"[^a-z0-9]+", "-", (text or "").lower()).strip("-")
    if not slug or not slug[0].isalpha():
        slug = f"tw-{slug}".strip("-")
    slug = slug[:63].rstrip("-")
    return slug if NAME_PATTERN.match(slug) else fallback


def no_control_characters(value: str, what: str) -> str:
    if _CONTROL.search(value):
        raise TrainwiseError(f"{what} {value!r} contains a control character (newline, tab, NUL, ...): "
                             "remove it")
    return value


def scheme_of(uri: str) -> str:
    match = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", uri)
    return match.group(1).lower() if match else "file"


def is_bucket_uri(uri: str) -> bool:
    return scheme_of(uri) in BUCKET_SCHEMES


def check_uri(uri: str, what: str, *, bucket_only: bool = False) -> str:
    """A dataset/checkpoint/model location: a local path or `scheme://bucket/key`. Bucket URIs are
    held to strict characters because mount tools on the cluster splice them into commands."""
    if not isinstance(uri, str) or not uri.strip():
        raise TrainwiseError(f"{what} is empty: give a local path or a bucket URI such as s3://my-bucket/data")
    no_control_characters(uri, what)
    scheme = scheme_of(uri)
    if scheme == "file":
        if bucket_only:
            raise TrainwiseError(f"{what} {uri!r} is a local path; a cloud run needs a bucket that outlives the "
                                 "cluster: use s3://BUCKET/PATH or gs://BUCKET/PATH")
        return uri
    if scheme not in BUCKET_SCHEMES:
        if bucket_only:
            raise TrainwiseError(f"{what} {uri!r}: scheme {scheme}:// is not a bucket SkyPilot can mount; use one of "
                                 + ", ".join(f"{s}://" for s in BUCKET_SCHEMES))
        return uri  # another fsspec protocol (memory://, http://): used locally through fsspec only
    rest = uri.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    if not _BUCKET.match(bucket):
        raise TrainwiseError(f"{what} {uri!r}: bucket name {bucket!r} is not valid: use 3-222 lower-case letters, "
                             "digits, '.', '-' or '_'")
    if not _KEY.match(key):
        raise TrainwiseError(f"{what} {uri!r}: the path after the bucket may only contain letters, digits and "
                             "._-/=+@, (rename the objects or pick another prefix)")
    return uri


def quote_argv(argv: Sequence[str | ShellExpr]) -> str:
    """One shell line: user strings single-quoted by shlex, trainwise's own expressions as written."""
    parts = []
    for arg in argv:
        if isinstance(arg, ShellExpr):
            parts.append(arg.text)
        elif isinstance(arg, str):
            if "\x00" in arg:
                raise TrainwiseError(f"command argument {arg!r} contains a NUL byte: remove it")
            parts.append(shlex.quote(arg))
        else:
            raise TypeError(f"argv items are str or ShellExpr, got {type(arg).__name__}")
    return " ".join(parts)


def secret_values(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """name -> value of every credential-looking variable in the environment (values long enough to
    recognise)."""
    env = os.environ if environ is None else environ
    return {name: value for name, value in env.items()
            if (name in SECRET_ENV_NAMES or _SECRET_NAME.search(name)) and len(value) >= _MIN_SECRET_LENGTH}


def assert_no_secrets(texts: Iterable[str], where: str, environ: Mapping[str, str] | None = None) -> None:
    """Refuse to write `where` when any credential value from the environment occurs in it."""
    secrets = secret_values(environ)
    if not secrets:
        return
    for text in texts:
        for name, value in secrets.items():
            if value in text:
                raise TrainwiseError(f"refusing to write {where}: it would contain the value of ${name}; pass "
                                     "credentials through the cloud's own credential files or SkyPilot secrets, "
                                     "not on the command line")
