"""The compatibility matrix, tested: trainwise's wheel on other torch/Python pairs than the lock's.

The sdist and wheel are built once (`python -m build`) and checked for their package data; then, per pair,
  1. a fresh venv with that Python gets torch==V alone, and this checkout's trainwise (the lock's interpreter)
     profiles jobs run by that venv's python (`trainwise profile -- VENV/bin/python train.py`: trainwise in its
     own environment, the user's holding another Python and torch and nothing of trainwise's;
     tests/test_profile_other_venv.py); then `pip install <wheel> torch==V` there (the core: the ranges resolve
     against the package index here), and what that installed is checked against the list the core must not pull;
  2. `trainwise profile -o p.json -- python -m trainwise.workloads.mnist_cnn` then
     `trainwise plan --profile p.json` run there, from a folder outside the checkout (the smoke);
  3. the wheel's [test,workloads] extras are added and the agent/profile/predict tests run there
     against the installed wheel (not the checkout's src/); a pair named NAME:smoke stops after step 2.
The pair `lock` runs step 3 in the current interpreter (make's .venv, the lock's exact versions: not rebuilt),
or, with --lock-junit, counts them from `make test`'s JUnit XML of this same checkout (CI: not run twice).
The venvs and pip's download cache live in one temporary folder, removed at the end (--keep keeps it).
Writes benchmarks/results/compat.json; `summary.pairs_passed` counts distinct (Python, torch) pairs whose
steps all passed. Exits non-zero when fewer than --min-passed pairs passed or no pair with Python
--smoke-python and a torch other than the lock's passed the smoke (CI calls this through `make compat`).
Timings are wall seconds on this machine (shared and noisy: the load average is recorded beside them).

    python benchmarks/compat.py --pairs lock,py3.12-torch2.13.0

Why not a CPU-only torch here: the local 2.13.0+cpu build (cp311) loads, but torchvision from the index is
built against the CUDA torch (its ops fail to register: "operator torchvision::nms does not exist"), so the
tests that build torchvision models cannot run there; the index's CUDA builds of torch and torchvision match.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "compat.json"
# What the core install must not bring (issue 35): the extras' heavy or niche packages.
NOT_IN_CORE = ("scikit-learn", "h5py", "soundfile", "tokenizers", "lightning", "pytorch-lightning", "keras",
               "transformers", "hivemind", "skypilot", "webdataset", "torchvision")
# Package data the wheel must carry (read through importlib.resources or run as files at run time).
WHEEL_MUST_HAVE = ("trainwise/catalog/data/current.json", "trainwise/catalog/data/offerings-current.csv",
                   "trainwise/catalog/data/accelerators.csv", "trainwise/predict/data/calibration.csv",
                   "trainwise/predict/data/device_model_params.json", "trainwise/workloads/data/digits.csv.gz",
                   "trainwise/profile/_bootstrap/sitecustomize.py", "trainwise/run/_bootstrap/sitecustomize.py")
# The agent/profile/predict tests (those present in this checkout).
DEFAULT_TESTS = ("tests/test_agent*.py", "tests/test_profile.py", "tests/test_characterise.py",
                 "tests/test_device_model.py")
PAIR = re.compile(r"^py(?P<python>3\.\d+)-torch(?P<torch>[0-9][0-9A-Za-z.+]*)(?P<smoke>:smoke)?$")
STEP_TIMEOUT_S = 1800
DEFAULT_PAIRS = "lock,py3.12-torch2.13.0"


def run(argv: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = STEP_TIMEOUT_S) -> tuple[int, float, str]:
    """(exit code, wall seconds, last lines of output) of one command."""
    start = time.perf_counter()
    try:
        done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
        code, out = done.returncode, done.stderr + done.stdout  # pytest's summary line last
    except subprocess.TimeoutExpired as exc:
        code, out = 124, f"timed out after {timeout:.0f} s: {exc}"
    lines = [line for line in out.splitlines() if "is ignored: it is neither a file nor a directory" not in line]
    return code, round(time.perf_counter() - start, 1), "\n".join(lines[-15:])


def find_python(version: str) -> str | None:
    """A Python `version` that runs (a pyenv shim on PATH may exist and fail for a version not selected)."""
    candidates = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))[::-1]
    candidates += [found] if (found := shutil.which(f"python{version}")) else []
    for candidate in candidates:
        if subprocess.run([candidate, "-c", "import sys"], capture_output=True).returncode == 0:
            return candidate
    return None


def build_dists(out: Path) -> dict:
    """sdist + wheel with `python -m build` (no isolation: the lock's setuptools), package data checked."""
    shutil.rmtree(out, ignore_errors=True)
    code, seconds, tail = run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)])
    wheels, sdists = sorted(out.glob("trainwise-*.whl")), sorted(out.glob("trainwise-*.tar.gz"))
    info: dict = {"ok": code == 0 and bool(wheels) and bool(sdists), "seconds": seconds}
    if not info["ok"]:
        info["error"] = tail
        return info
    names = set(zipfile.ZipFile(wheels[0]).namelist())
    missing = [name for name in WHEEL_MUST_HAVE if name not in names]
    info.update(wheel=wheels[0].name, sdist=sdists[0].name, wheel_bytes=wheels[0].stat().st_size,
                wheel_files=len(names), package_data_missing=missing, ok=not missing)
    return info


def pip_list(python: str) -> dict[str, str]:
    done = subprocess.run([python, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    return {row["name"].lower().replace("_", "-"): row["version"] for row in json.loads(done.stdout or "[]")}


def test_files(patterns: list[str]) -> list[str]:
    files: list[str] = []
    for pattern in patterns:
        files += sorted(str(Path(p).relative_to(ROOT)) for p in ROOT.glob(pattern))
    return files


def run_tests(python: str, files: list[str], env: dict[str, str]) -> dict:
    """pytest on `files` (not the long ones) with `python`; counts from its summary line."""
    # no -q: pyproject's addopts has one, and -qq would drop the "N passed" line the counts come from
    code, seconds, tail = run([python, "-m", "pytest", "-m", "not long", "-p", "no:cacheprovider", *files],
                              cwd=ROOT, env=env, timeout=STEP_TIMEOUT_S)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?|deselected)", tail)}
    return {"ok": code == 0 and counts.get("passed", 0) > 0, "exit_code": code, "seconds": seconds, "counts": counts,
            **({} if code == 0 else {"output_tail": tail})}


def clean_env(cache: Path | None = None) -> dict[str, str]:
    """The environment for a compat venv: no PYTHONPATH or venv of ours leaking into it; pip's cache in `cache`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    if cache is not None:
        env["PIP_CACHE_DIR"] = str(cache)
    return env


def junit_counts(junit: Path, files: list[str]) -> dict | None:
    """The results of `files` in the JUnit XML of a pytest run of this same checkout and interpreter (`make test`
    writes one), or None when it is missing, older than a source or test file, or lacks one of the files."""
    import xml.etree.ElementTree as ET

    if not junit.is_file():
        return None
    newest_source = max(path.stat().st_mtime for path in [*(ROOT / "src").rglob("*.py"), *(ROOT / f for f in files)])
    if junit.stat().st_mtime < newest_source:
        return None
    modules = {f.removesuffix(".py").replace("/", "."): f for f in files}
    counts = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
    seen = set()
    for case in ET.parse(junit).getroot().iter("testcase"):
        module = next((m for m in modules if case.get("classname", "") == m or case.get("classname", "").startswith(m + ".")), None)
        if module is None:
            continue
        seen.add(module)
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        counts[{"failure": "failed", "error": "errors"}.get(outcome, outcome)] += 1
    return counts if seen == set(modules) else None


def lock_pair(files: list[str], junit: Path | None = None) -> dict:
    import torch

    record = {"pair": "lock", "python": platform.python_version(), "torch": torch.__version__,
              "environment": sys.prefix, "steps": {}}
    counts = junit_counts(junit, files) if junit is not None else None
    if counts is not None:  # make test ran these very files here just before (CI): not run twice
        ok = counts["passed"] > 0 and counts["failed"] == counts["errors"] == 0
        record["steps"]["tests"] = {"ok": ok, "seconds": 0.0, "counts": counts,
                                    "source": f"{junit.name}: the default test run of this checkout with this interpreter"}
        record["ok"] = ok
        return record
    env = clean_env()
    env["PYTHONPATH"] = str(ROOT / "src")  # this checkout, whether or not the venv has it installed editable
    record["steps"]["tests"] = run_tests(sys.executable, files, env)
    record["ok"] = record["steps"]["tests"]["ok"]
    return record


def step(code: int, seconds: float, tail: str, ok: bool = True, **extra) -> dict:
    return {"ok": code == 0 and ok, "seconds": seconds, **extra, **({} if code == 0 else {"error": tail})}


def zero_install(user_python: str) -> dict:
    """tests/test_profile_other_venv.py with this interpreter (trainwise from this checkout's src/) profiling jobs
    that `user_python` runs: another Python and torch, no trainwise dependency there."""
    env = clean_env()
    env["PYTHONPATH"] = str(ROOT / "src")
    env["TRAINWISE_TEST_OTHER_TORCH_PYTHON"] = user_python
    code, seconds, tail = run([sys.executable, "-m", "pytest", "-m", "long", "-p", "no:cacheprovider",
                               "tests/test_profile_other_venv.py"], cwd=ROOT, env=env, timeout=STEP_TIMEOUT_S)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)", tail)}
    # the test skips itself without the variable: only a pass counts
    return step(code, seconds, tail, ok=counts.get("passed", 0) >= 1 and not counts.get("skipped"), counts=counts)


def venv_pair(name: str, wheel: Path, files: list[str], work: Path) -> dict:
    match = PAIR.match(name)
    if match is None:
        raise SystemExit(f"--pairs: {name!r} is not `lock` or pyX.Y-torchVERSION[:smoke] (e.g. py3.12-torch2.13.0)")
    python_version, torch_version = match["python"], match["torch"]
    record: dict = {"pair": name, "python": python_version, "torch": torch_version, "smoke_only": bool(match["smoke"]),
                    "steps": {}}
    base = find_python(python_version)
    if base is None:
        record.update(ok=False, error=f"python{python_version} not found (PATH, /root/.pyenv/versions)")
        return record
    venv = work / name.replace(":", "-")
    vpy = str(venv / "bin" / "python")
    env = clean_env(work / "pip-cache")
    steps = record["steps"]
    steps["venv"] = step(*run([base, "-m", "venv", str(venv)]))
    if not steps["venv"]["ok"]:
        record["ok"] = False
        return record
    # The user's environment before trainwise: their Python and torch alone, profiled from this checkout's
    # environment (the agent imports only the standard library and torch there)
    steps["torch_only"] = step(*run([vpy, "-m", "pip", "install", "--quiet", f"torch=={torch_version}"], env=env))
    if not steps["torch_only"]["ok"]:
        record["ok"] = False
        return record
    steps["zero_install"] = zero_install(vpy)
    # The core as a user installs it beside their torch: the wheel and that torch in one resolution.
    code, seconds, tail = run([vpy, "-m", "pip", "install", "--quiet", str(wheel), f"torch=={torch_version}"], env=env)
    installed = pip_list(vpy)
    pulled = sorted(name for name in NOT_IN_CORE if name in installed)
    steps["core_install"] = step(code, seconds, tail, ok="trainwise" in installed and not pulled,
                                 packages=len(installed), not_in_core_but_pulled=pulled)
    record["torch_installed"] = installed.get("torch")
    record["python_installed"] = subprocess.run([vpy, "-c", "import platform; print(platform.python_version())"],
                                                capture_output=True, text=True).stdout.strip()
    if not steps["core_install"]["ok"]:
        record["ok"] = False
        return record
    # The acceptance commands, from a folder outside the checkout (no src/ on the path).
    trainwise = str(venv / "bin" / "trainwise")
    with tempfile.TemporaryDirectory(prefix="trainwise-compat-") as scratch:
        code, seconds, tail = run([trainwise, "profile", "-o", "p.json", "--", vpy, "-m", "trainwise.workloads.mnist_cnn"],
                                  cwd=Path(scratch), env=env)
        steps["profile"] = step(code, seconds, tail, ok=(Path(scratch) / "p.json").exists())
        if steps["profile"]["ok"]:
            steps["plan"] = step(*run([trainwise, "plan", "--profile", "p.json"], cwd=Path(scratch), env=env))
    record["smoke_ok"] = all(s["ok"] for s in steps.values()) and "plan" in steps
    if not record["smoke_ok"] or record["smoke_only"]:
        record["ok"] = record["smoke_ok"]
        return record
    steps["test_extras"] = step(*run([vpy, "-m", "pip", "install", "--quiet", f"{wheel}[test,workloads]",
                                      f"torch=={torch_version}"], env=env))
    if steps["test_extras"]["ok"]:
        steps["tests"] = run_tests(vpy, files, env)
    record["ok"] = all(s["ok"] for s in steps.values())
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default=DEFAULT_PAIRS, help="comma-separated: lock and/or pyX.Y-torchVERSION[:smoke]")
    parser.add_argument("--tests", default=",".join(DEFAULT_TESTS), help="comma-separated test file globs")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--work", type=Path, help="folder for the dists, venvs and pip cache (default: a new temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (it holds gigabytes of CUDA wheels)")
    parser.add_argument("--min-passed", type=int, default=2, help="exit non-zero when fewer pairs passed")
    parser.add_argument("--smoke-python", default="3.12",
                        help="exit non-zero unless a pair with this Python and another torch than the lock's passed "
                             "install + profile + plan ('' to not require it)")
    parser.add_argument("--lock-junit", type=Path,
                        help="the lock pair takes its test results from this JUnit XML (make test's) when it is newer "
                             "than every source and test file, instead of running the tests again")
    parser.add_argument("--update", action="store_true", help="keep the records of pairs not rerun from --output")
    parser.add_argument("--merge", type=Path, action="append", default=[],
                        help="a compat JSON of another run (e.g. a pair run in parallel): its pair records are added")
    args = parser.parse_args(argv)
    started, load_start = time.perf_counter(), os.getloadavg()
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    for name in pairs:
        if name != "lock" and PAIR.match(name) is None:
            parser.error(f"--pairs: {name!r} is not `lock` or pyX.Y-torchVERSION[:smoke] (e.g. py3.12-torch2.13.0)")
    files = test_files(args.tests.split(","))
    previous = json.loads(args.output.read_text(encoding="utf-8")) if args.update and args.output.exists() else {}
    work = args.work or Path(tempfile.mkdtemp(prefix="trainwise-compat-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        if any(name != "lock" for name in pairs):
            dists = build_dists(work / "dist")
        else:  # the lock pair tests this checkout in place: no wheel needed
            dists = previous.get("dists") or {"ok": True, "skipped": "only the lock pair ran"}
        # --update: keep the other pairs' records of the last run; --merge: add those of parallel runs
        records = [r for r in previous.get("pairs", []) if r["pair"] not in pairs]
        for other in args.merge:
            merged = json.loads(other.read_text(encoding="utf-8"))
            records = [r for r in records if r["pair"] not in {m["pair"] for m in merged["pairs"]}] + merged["pairs"]
            if merged.get("dists", {}).get("wheel") and not dists.get("wheel"):
                dists = merged["dists"]
        summary = write_result(args, records, dists, files, started, load_start)
        for name in pairs:
            print(f"compat: {name} ...", flush=True)
            if name == "lock":
                record = lock_pair(files, args.lock_junit)
            elif not dists["ok"]:
                record = {"pair": name, "ok": False, "error": "the wheel did not build"}
            else:
                record = venv_pair(name, work / "dist" / dists["wheel"], files, work)
            record["seconds"] = round(sum(s.get("seconds", 0.0) for s in record.get("steps", {}).values()), 1)
            timings = ", ".join(f"{step} {info.get('seconds')} s" for step, info in record.get("steps", {}).items())
            print(f"compat: {name}: {'passed' if record['ok'] else 'FAILED'} in {record['seconds']} s ({timings})",
                  flush=True)
            if not record["ok"]:
                print("\n".join(f"  {step}: {info.get('error') or info.get('output_tail', '')}"
                                for step, info in record.get("steps", {}).items() if not info["ok"]), flush=True)
            records = [r for r in records if r["pair"] != name] + [record]
            summary = write_result(args, records, dists, files, started, load_start)  # a cut-short run keeps what it did
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    problems = []
    if not dists["ok"]:
        problems.append("the wheel did not build or lacks package data")
    if summary["pairs_passed"] < args.min_passed:
        problems.append(f"{summary['pairs_passed']} pairs passed, fewer than --min-passed {args.min_passed}")
    if args.smoke_python and not summary["smoke"]["ok"]:
        problems.append(f"no Python {args.smoke_python} pair with a torch other than {summary['smoke']['lock_torch']} "
                        "installed the wheel, profiled and planned")
    for problem in problems:
        print(f"error: compat: {problem} (see {args.output})", file=sys.stderr)
    return 1 if problems else 0


def lock_torch() -> str:
    """The lock's torch release (requirements/test.txt), without a local build tag."""
    found = re.search(r"^torch==([0-9.]+)", (ROOT / "requirements" / "test.txt").read_text(encoding="utf-8"), re.M)
    return found[1] if found else "unknown"


def write_result(args: argparse.Namespace, records: list[dict], dists: dict, files: list[str], started: float,
                 load_start: tuple[float, float, float]) -> dict:
    passed = {(r.get("python_installed") or r["python"], r.get("torch_installed") or r["torch"])
              for r in records if r["ok"] and not r.get("smoke_only")}
    locked = lock_torch()
    smokes = [r["pair"] for r in records if r.get("smoke_ok") and args.smoke_python
              and (r.get("python_installed") or "").startswith(args.smoke_python + ".")
              and (r.get("torch_installed") or "").split("+")[0] != locked]
    summary = {
        "pairs_tried": len(records),
        "pairs_passed": len(passed),
        "passed": sorted(f"python {py} + torch {torch}" for py, torch in passed),
        "failed": [r["pair"] for r in records if not r["ok"]],
        "pair_seconds": {r["pair"]: r.get("seconds") for r in records},
        "smoke": {"python": args.smoke_python, "lock_torch": locked, "ok": bool(smokes), "pairs": smokes},
        "wheel_ok": dists["ok"],
        "run_seconds": round(time.perf_counter() - started, 1),
    }
    result = {
        "summary": summary,
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(),
                    "load_average_1_5_15_min": {"start": [round(x, 2) for x in load_start],
                                                "end": [round(x, 2) for x in os.getloadavg()]},
                    "note": "wall seconds on a shared machine: other jobs' load and the network set them"},
        "tests": files,
        "dists": dists,
        "pairs": records,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(f".{args.output.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, args.output)
    print(f"compat: {len(passed)} of {len(records)} pairs passed; {args.output}", flush=True)
    return summary


if __name__ == "__main__":
    sys.exit(main())
