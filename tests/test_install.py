"""Installation (issue 35): ranges in pyproject.toml, the hashed lock that make and CI install from,
a lean core, the one-line error for a missing extra, and what launch installs on a cluster."""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

import pytest

from trainwise.errors import TrainwiseError
from trainwise.launch import package as pkg
from trainwise.optional import BrokenExtraError, MissingExtraError, missing_extra, require

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
NOT_IN_CORE = {"scikit-learn", "h5py", "soundfile", "tokenizers", "lightning", "keras", "transformers", "hivemind",
               "skypilot", "webdataset", "torchvision"}


def _name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _lock(name: str) -> dict[str, str]:
    """{package: version} of a lock file; every pin carries at least one sha256."""
    text = (ROOT / "requirements" / name).read_text(encoding="utf-8")
    pins = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", text):
        first = block.splitlines()[0]
        if not first or first.startswith("#"):
            continue
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s\\;]+)", first)
        assert match, f"{name}: {first!r} is not pinned exactly"
        assert "--hash=sha256:" in block, f"{name}: {match[1]} has no hash"
        pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


def test_dependencies_are_ranges_and_python_3_10_to_3_13_is_allowed():
    from packaging.specifiers import SpecifierSet

    project = PYPROJECT["project"]
    for requirement in project["dependencies"] + sum(project["optional-dependencies"].values(), []):
        assert "==" not in requirement, f"{requirement}: pin exactly only in the lock (requirements/*.txt)"
    allowed = SpecifierSet(project["requires-python"])
    assert all(version in allowed for version in ("3.10", "3.11", "3.12", "3.13"))
    torch = next(r for r in project["dependencies"] if _name(r) == "torch")
    assert "2.14.1" in SpecifierSet(torch[len("torch"):]) and "2.4.1" not in SpecifierSet(torch[len("torch"):])


def test_core_brings_none_of_the_extras_packages():
    core = {_name(r) for r in PYPROJECT["project"]["dependencies"]}
    assert not core & NOT_IN_CORE
    # the lock of the core (`make install`; `make run` installs the test lock for its ResNet-50 default) is the resolved closure: none of them either
    assert not set(_lock("run.txt")) & NOT_IN_CORE
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"pipeline", "workloads", "hivemind", "keras", "lightning", "hf", "sky", "test", "all"} <= set(extras)
    assert "import-linter" in {_name(r) for r in extras["test"]}


def test_the_lock_pins_the_current_stack_within_the_ranges():
    from packaging.requirements import Requirement

    test, run = _lock("test.txt"), _lock("run.txt")
    assert test["torch"] == "2.14.1" and test["numpy"] == "2.4.6" and test["pandas"] == "3.1.1"
    assert {name: test[name] for name in run} == run, "run.txt and test.txt disagree on a version"
    environment = {"python_version": "3.11", "python_full_version": "3.11.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "os_name": "posix", "extra": ""}
    project = PYPROJECT["project"]
    for text in project["dependencies"] + sum(project["optional-dependencies"].values(), []):
        requirement = Requirement(text)
        if requirement.name == "trainwise" or (requirement.marker and not requirement.marker.evaluate(environment)):
            continue
        name = requirement.name.lower().replace("_", "-")
        assert name in test, f"{name} is declared but not locked"
        assert requirement.specifier.contains(test[name], prereleases=True), f"lock {name}=={test[name]} outside {text}"


def test_make_and_ci_install_from_the_lock():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-r requirements/run.txt" in makefile and "-r requirements/test.txt" in makefile
    assert "--no-deps --no-build-isolation -e ." in makefile
    assert "make compat" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert not list(ROOT.glob("*.whl")), "a wheel at the repository root"


def test_compat_counts_the_lock_pair_from_make_tests_junit_only_when_it_is_current_and_complete(tmp_path):
    import importlib.util
    import os

    spec = importlib.util.spec_from_file_location("compat", ROOT / "benchmarks" / "compat.py")
    compat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compat)
    junit = tmp_path / "junit.xml"
    junit.write_text('<testsuites><testsuite name="pytest">'
                     '<testcase classname="tests.test_agent" name="a"/>'
                     '<testcase classname="tests.test_agent.TestGroup" name="b"><skipped message="x"/></testcase>'
                     '<testcase classname="tests.test_profile" name="c"><failure message="boom"/></testcase>'
                     '<testcase classname="tests.test_other" name="d"><error message="not ours"/></testcase>'
                     '</testsuite></testsuites>')
    counts = compat.junit_counts(junit, ["tests/test_agent.py", "tests/test_profile.py"])
    assert counts == {"passed": 1, "failed": 1, "errors": 0, "skipped": 1}
    assert compat.lock_pair(["tests/test_agent.py", "tests/test_profile.py"], junit)["ok"] is False
    assert compat.junit_counts(junit, ["tests/test_agent.py", "tests/test_layers.py"]) is None  # a file it lacks
    os.utime(junit, (1, 1))  # older than the sources: another checkout's run
    assert compat.junit_counts(junit, ["tests/test_agent.py"]) is None


def test_a_missing_extra_is_one_line_naming_the_extra(monkeypatch):
    error = missing_extra("sklearn.preprocessing", "the nn_twins workload")
    assert str(error) == "the nn_twins workload needs scikit-learn: pip install 'trainwise[workloads]'"
    assert isinstance(error, TrainwiseError) and isinstance(error, ImportError)
    monkeypatch.setitem(sys.modules, "webdataset", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"^reading shards needs webdataset: pip install 'trainwise\[pipeline\]'$"):
        require("webdataset", "reading shards")
    assert require("json").dumps([1]) == "[1]"


def test_a_reference_workload_without_its_extra_is_refused_before_it_is_profiled(monkeypatch):
    """`trainwise plan` after `pip install .` (no [workloads]): the default ResNet-50 needs torchvision; the plan
    request says so in one line before any process starts (it was the job's traceback, hidden, and "exited before
    its first iteration")."""
    import importlib.util

    from trainwise import workloads
    from trainwise.plan.request import PlanRequest

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchvision" else real(name, *a))
    with pytest.raises(MissingExtraError, match=r"^the resnet50_imagenet workload needs torchvision: pip install 'trainwise\[workloads\]'$"):
        PlanRequest(workload="resnet50_imagenet")
    with pytest.raises(MissingExtraError):
        workloads.command_for("resnet50_cifar10")
    assert workloads.command_for("mnist_cnn")[2] == "trainwise.workloads.mnist_cnn"  # needs no extra
    PlanRequest(workload="resnet50_imagenet", profile_paths=(Path("p.json"),))  # a profile given: nothing to run
    with pytest.raises(TrainwiseError, match=r"^--workload: unknown workload 'resnet5'"):
        PlanRequest(workload="resnet5")
    with pytest.raises(TrainwiseError, match=r"unknown objective 'fastes': did you mean fastest"):
        PlanRequest(objective="fastes", profile_paths=(Path("p.json"),))


def test_a_broken_install_is_one_line_naming_its_error_not_a_missing_extra(tmp_path, monkeypatch):
    (tmp_path / "brokenpkg").mkdir()
    (tmp_path / "brokenpkg" / "__init__.py").write_text("import no_such_module_inside_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(BrokenExtraError, match=r"^brokenpkg is installed but cannot be imported \(ModuleNotFoundError: "
                       r"No module named 'no_such_module_inside_it'\): reinstall") as caught:
        require("brokenpkg")
    assert not isinstance(caught.value, MissingExtraError) and isinstance(caught.value, ImportError)
    # a torchvision built for another torch fails with a RuntimeError at import (seen with torch 2.13.0+cpu)
    (tmp_path / "badbuild").mkdir()
    (tmp_path / "badbuild" / "__init__.py").write_text("raise RuntimeError('operator badbuild::nms does not exist')\n")
    with pytest.raises(BrokenExtraError, match=r"badbuild::nms does not exist\): reinstall a badbuild built for"):
        require("badbuild")


@pytest.mark.parametrize("direct_url, extras, expected", [
    (None, (), "trainwise=={v}"),
    (None, ("hivemind",), "trainwise[hivemind]=={v}"),
    ({"url": "https://github.com/org/trainwise", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}, (),
     "trainwise @ git+https://github.com/org/trainwise@abc123"),
])
def test_the_cluster_installs_what_this_trainwise_came_from(monkeypatch, tmp_path, direct_url, extras, expected):
    monkeypatch.setattr(pkg, "_direct_url", lambda: direct_url)
    pkg._package_for.cache_clear()
    try:
        package = pkg.trainwise_package(out_dir=tmp_path)
        assert package.wheel is None
        assert package.requirement(extras) == expected.format(v=pkg.__version__)
    finally:
        pkg._package_for.cache_clear()
    assert pkg.trainwise_package("mypkg==1; x").requirement(("hivemind",)) == "mypkg==1; x"  # the user's, as given


def test_a_wheel_install_uploads_that_wheel_and_a_missing_one_is_refused(monkeypatch, tmp_path):
    wheel = tmp_path / "trainwise-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    monkeypatch.setattr(pkg, "_direct_url", lambda: {"url": wheel.as_uri(), "archive_info": {}})
    pkg._package_for.cache_clear()
    try:
        package = pkg.trainwise_package(out_dir=tmp_path / "out")
        assert package.wheel == wheel and package.requirement() == f"/trainwise/wheel/{wheel.name}"
        assert package.requirement(("hivemind",)) == f"trainwise[hivemind] @ file:///trainwise/wheel/{wheel.name}"
        wheel.unlink()
        pkg._package_for.cache_clear()
        with pytest.raises(TrainwiseError, match="no longer there: pass --trainwise-spec"):
            pkg.trainwise_package(out_dir=tmp_path / "out")
    finally:
        pkg._package_for.cache_clear()


@pytest.mark.slow
def test_a_source_checkout_is_built_into_a_wheel_with_its_package_data(tmp_path):
    wheel = pkg.build_wheel(ROOT, tmp_path)
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in ("trainwise/catalog/data/current.json", "trainwise/predict/data/calibration.csv",
                 "trainwise/workloads/data/digits.csv.gz", "trainwise/profile/_bootstrap/sitecustomize.py",
                 "trainwise/run/_bootstrap/sitecustomize.py"):
        assert name in names, f"{name} missing from {wheel.name}"
    assert not list(tmp_path.glob(".build-*")), "the build folder was left behind"


def test_the_packaged_digits_are_scikit_learns():
    sklearn_datasets = pytest.importorskip("sklearn.datasets")
    import gzip
    from importlib import resources

    import numpy as np

    from trainwise.workloads.mnist_cnn import IMAGE_SIZE, load_digit_pools

    with resources.files("trainwise.workloads").joinpath("data/digits.csv.gz").open("rb") as raw, gzip.open(raw) as handle:
        table = np.loadtxt(handle, delimiter=",")
    digits = sklearn_datasets.load_digits()
    assert np.array_equal(table[:, :-1], digits.data) and np.array_equal(table[:, -1].astype(int), digits.target)
    train_x, train_y, val_x, val_y = load_digit_pools(seed=0)
    assert len(train_y) + len(val_y) == 1797 and train_x.shape[1:] == (1, IMAGE_SIZE, IMAGE_SIZE)
