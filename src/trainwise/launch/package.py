"""How a cluster installs the trainwise that runs here: the requirement `pip install` is given there.

Decided from how this trainwise was installed (PEP 610's direct_url.json in its dist-info):
- from a package index (no direct_url.json): `trainwise==VERSION`, which that index has;
- from a VCS URL: `trainwise @ git+URL@COMMIT`, the same commit;
- from a wheel file that is still here: that wheel, uploaded to the cluster in `file_mounts`;
- from a source folder (a checkout, editable or not): a wheel built from it with `pip wheel`,
  uploaded the same way.
A user-given `--trainwise-spec` overrides all of these.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

from trainwise import __version__
from trainwise.errors import TrainwiseError

WHEEL_MOUNT_DIR = "/trainwise/wheel"
WHEEL_BUILD_TIMEOUT_S = 300


@dataclass(frozen=True)
class TrainwisePackage:
    """What the cluster installs: `wheel` (a local file, uploaded), else the requirement `spec`; `kind`
    is user (given as is), index, url (a VCS or other URL, `spec` holds it) or wheel."""

    kind: str
    spec: str = ""
    wheel: Path | None = None
    source: str = ""  # where it came from, for the launch message

    @property
    def mount_path(self) -> str | None:
        return None if self.wheel is None else f"{WHEEL_MOUNT_DIR}/{self.wheel.name}"

    def requirement(self, extras: tuple[str, ...] = ()) -> str:
        """The argument to `pip install` on the cluster, with trainwise's `extras` (a user's spec as given)."""
        named = f"trainwise[{','.join(extras)}]" if extras else "trainwise"
        if self.kind == "user":
            return self.spec
        if self.kind == "index":
            return f"{named}=={__version__}"
        if self.kind == "wheel":
            return f"{named} @ file://{self.mount_path}" if extras else str(self.mount_path)
        return f"{named} @ {self.spec}"


def _direct_url() -> dict | None:
    try:
        text = metadata.distribution("trainwise").read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        return None
    return json.loads(text) if text else None


def _file_path(url: str) -> Path:
    return Path(unquote(urlparse(url).path))


def wheel_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "trainwise" / "wheels"


def build_wheel(source_dir: Path, out_dir: Path) -> Path:
    """`pip wheel --no-deps` of the trainwise source at `source_dir` into `out_dir`; the wheel's path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".build-") as staging:
        argv = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                "--wheel-dir", staging]
        if importlib.util.find_spec("setuptools") is not None:
            argv.append("--no-build-isolation")  # the installed setuptools builds it, without a download
        try:
            done = subprocess.run([*argv, str(source_dir)], capture_output=True, text=True, timeout=WHEEL_BUILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise TrainwiseError(f"building the trainwise wheel from {source_dir} took over {WHEEL_BUILD_TIMEOUT_S} s: "
                                 "build it yourself (`python -m build`) and pass --trainwise-spec") from None
        built = sorted(Path(staging).glob("trainwise-*.whl"))
        if done.returncode != 0 or not built:
            last = (done.stderr.strip().splitlines() or ["no wheel written"])[-1]
            raise TrainwiseError(f"could not build the trainwise wheel from {source_dir} ({last}): build it with "
                                 "`python -m build` and pass --trainwise-spec, or install trainwise from an index")
        target = out_dir / built[0].name
        os.replace(built[0], target)
    return target


@functools.lru_cache(maxsize=None)
def _package_for(out_dir: Path) -> TrainwisePackage:
    direct = _direct_url()
    if direct is None:
        return TrainwisePackage(kind="index", source="the package index it was installed from")
    url = str(direct.get("url", ""))
    vcs = direct.get("vcs_info")
    if vcs:
        commit = vcs.get("commit_id") or vcs.get("requested_revision")
        return TrainwisePackage(kind="url", spec=f"{vcs.get('vcs', 'git')}+{url}" + (f"@{commit}" if commit else ""),
                                source="the VCS URL it was installed from")
    if not url.startswith("file://"):
        return TrainwisePackage(kind="url", spec=url, source="the URL it was installed from")
    path = _file_path(url)
    if "dir_info" in direct:
        if not (path / "pyproject.toml").is_file():
            raise TrainwiseError(f"trainwise was installed from {path}, which is gone: reinstall it, or pass "
                                 "--trainwise-spec with a pip requirement the cluster can install")
        return TrainwisePackage(kind="wheel", wheel=build_wheel(path, out_dir), source=f"a wheel built from {path}")
    if path.suffix == ".whl" and path.is_file():
        return TrainwisePackage(kind="wheel", wheel=path, source=f"the wheel it was installed from ({path})")
    raise TrainwiseError(f"trainwise was installed from {path}, which is no longer there: pass --trainwise-spec with "
                         "a pip requirement the cluster can install (a wheel path, or trainwise @ git+https://...)")


def trainwise_package(spec: str | None = None, out_dir: Path | None = None) -> TrainwisePackage:
    """The user's `spec` when given, else what this trainwise was installed from (a wheel built once
    per process into `out_dir`, default ~/.cache/trainwise/wheels, when it came from a source folder)."""
    if spec:
        return TrainwisePackage(kind="user", spec=spec, source="--trainwise-spec")
    return _package_for((out_dir or wheel_cache_dir()).resolve())
