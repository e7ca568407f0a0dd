"""The compatibility matrix, tested: trainwise's wheel on other torch/Python pairs than the lock's.

For each pair this builds nothing twice: the sdist and wheel are built once (`python -m build`) and
checked for their package data; then, per pair,
  1. a fresh venv with that Python gets that torch (`pip install torch==V`: a local CPU build or the
     package index's), then the wheel alone (the core: the ranges resolve against the index here),
     and the core's installed packages are checked against the list it must not pull;
  2. `trainwise profile -o p.json -- python -m trainwise.workloads.mnist_cnn` then
     `trainwise plan --profile p.json` run there, from a folder outside the checkout;
  3. the wheel's [test,workloads] extras are added and the agent/profile/predict tests run there
     against the installed wheel (not the checkout's src/).
The pair `lock` runs step 3 in the current interpreter (make's .venv, the lock's exact versions).
Writes benchmarks/results/compat.json; `summary.pairs_passed` counts distinct (Python, torch) pairs
whose steps all passed. Timings are wall seconds on this machine (a shared, noisy one: install and
download times vary with the network and the load).

    python benchmarks/compat.py --pairs lock,py3.11-torch2.13.0+cpu,py3.12-torch2.13.0

Pairs can run in parallel processes (each with its own --dist-dir and --output: setuptools builds the
sdist in the source tree, so start them a minute apart), then `--pairs "" --merge A.json --merge B.json`
writes one file from their records.
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
WORK = ROOT / ".compat"
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
PAIR = re.compile(r"^py(?P<python>3\.\d+)-torch(?P<torch>[0-9][0-9A-Za-z.+]*)$")
STEP_TIMEOUT_S = 1800


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
    found = shutil.which(f"python{version}")
    if found:
        return found
    matches = sorted(glob.glob(f"/root/.pyenv/versions/{version}.*/bin/python{version}"))
    return matches[-1] if matches else None


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
    code, seconds, tail = run([python, "-m", "pytest", "-q", "-m", "not long", "-p", "no:cacheprovider", *files],
                              cwd=ROOT, env=env, timeout=STEP_TIMEOUT_S)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|errors?|deselected)", tail)}
    return {"ok": code == 0 and counts.get("passed", 0) > 0, "exit_code": code, "seconds": seconds, "counts": counts,
            **({} if code == 0 else {"output_tail": tail})}


def clean_env() -> dict[str, str]:
    """The environment for a compat venv: no PYTHONPATH or venv of ours leaking into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def lock_pair(files: list[str]) -> dict:
    import torch

    record = {"pair": "lock", "python": platform.python_version(), "torch": torch.__version__,
              "environment": sys.prefix, "steps": {}}
    env = clean_env()
    record["steps"]["tests"] = run_tests(sys.executable, files, env)
    record["ok"] = record["steps"]["tests"]["ok"]
    return record


def venv_pair(name: str, wheel: Path, files: list[str], reuse: bool) -> dict:
    match = PAIR.match(name)
    if match is None:
        raise SystemExit(f"--pairs: {name!r} is not `lock` or pyX.Y-torchVERSION (e.g. py3.12-torch2.13.0)")
    python_version, torch_version = match["python"], match["torch"]
    record: dict = {"pair": name, "python": python_version, "torch": torch_version, "steps": {}}
    base = find_python(python_version)
    if base is None:
        record.update(ok=False, error=f"python{python_version} not found (PATH, /root/.pyenv/versions)")
        return record
    venv = WORK / name
    vpy = str(venv / "bin" / "python")
    env = clean_env()
    steps = record["steps"]
    have = pip_list(vpy) if (reuse and Path(vpy).exists()) else {}
    if have.get("torch") == torch_version:
        steps["torch"] = {"ok": True, "seconds": 0.0, "reused": str(venv)}
    else:
        shutil.rmtree(venv, ignore_errors=True)
        code, seconds, tail = run([base, "-m", "venv", str(venv)])
        if code != 0:
            steps["venv"] = {"ok": False, "seconds": seconds, "error": tail}
            record["ok"] = False
            return record
        code, seconds, tail = run([vpy, "-m", "pip", "install", "--quiet", f"torch=={torch_version}"], env=env)
        steps["torch"] = {"ok": code == 0, "seconds": seconds, **({} if code == 0 else {"error": tail})}
    if not steps["torch"]["ok"]:
        record["ok"] = False
        return record
    # What the core pulls on this Python: pip's own resolution of the wheel into an empty site
    # (--ignore-installed), so the check holds for a reused venv too.
    report = venv / "core-report.json"
    code, seconds, tail = run([vpy, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
                               "--report", str(report), str(wheel)], env=env)
    closure = sorted({item["metadata"]["name"].lower().replace("_", "-")
                      for item in json.loads(report.read_text())["install"]}) if code == 0 else []
    pulled = sorted(name for name in NOT_IN_CORE if name in closure)
    steps["core_closure"] = {"ok": code == 0 and not pulled, "seconds": seconds, "packages": len(closure),
                             "not_in_core_but_pulled": pulled, **({} if code == 0 else {"error": tail})}
    # --force-reinstall --no-deps: a reused venv gets this wheel, not an earlier trainwise
    code, seconds, tail = run([vpy, "-m", "pip", "install", "--quiet", str(wheel)], env=env)
    if code == 0 and "reused" in steps["torch"]:
        code, more, tail = run([vpy, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", str(wheel)],
                               env=env)
        seconds += more
    installed = pip_list(vpy)
    steps["core_install"] = {"ok": code == 0 and installed.get("trainwise") is not None, "seconds": seconds,
                             **({} if code == 0 else {"error": tail})}
    record["torch_installed"] = installed.get("torch")
    record["python_installed"] = subprocess.run([vpy, "-c", "import platform; print(platform.python_version())"],
                                                capture_output=True, text=True).stdout.strip()
    if not (steps["core_install"]["ok"] and steps["core_closure"]["ok"]):
        record["ok"] = False
        return record
    # The acceptance commands, from a folder outside the checkout (no src/ on the path).
    trainwise = str(venv / "bin" / "trainwise")
    with tempfile.TemporaryDirectory(prefix="trainwise-compat-") as scratch:
        code, seconds, tail = run([trainwise, "profile", "-o", "p.json", "--", vpy, "-m", "trainwise.workloads.mnist_cnn"],
                                  cwd=Path(scratch), env=env)
        steps["profile"] = {"ok": code == 0 and (Path(scratch) / "p.json").exists(), "seconds": seconds,
                            **({} if code == 0 else {"error": tail})}
        if steps["profile"]["ok"]:
            code, seconds, tail = run([trainwise, "plan", "--profile", "p.json"], cwd=Path(scratch), env=env)
            steps["plan"] = {"ok": code == 0, "seconds": seconds, **({} if code == 0 else {"error": tail})}
    if not all(step["ok"] for step in steps.values()) or "plan" not in steps:
        record["ok"] = False
        return record
    code, seconds, tail = run([vpy, "-m", "pip", "install", "--quiet", f"{wheel}[test,workloads]",
                               f"torch=={torch_version}"], env=env)
    steps["test_extras"] = {"ok": code == 0, "seconds": seconds, **({} if code == 0 else {"error": tail})}
    if code == 0:
        steps["tests"] = run_tests(vpy, files, env)
    record["ok"] = all(step["ok"] for step in steps.values())
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", default="lock,py3.11-torch2.13.0+cpu,py3.12-torch2.13.0",
                        help="comma-separated: lock and/or pyX.Y-torchVERSION")
    parser.add_argument("--tests", default=",".join(DEFAULT_TESTS), help="comma-separated test file globs")
    parser.add_argument("--reuse", action="store_true",
                        help="keep a .compat venv that already has the pair's torch (skips its download)")
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--dist-dir", type=Path, default=WORK / "dist", help="where the sdist and wheel are built")
    parser.add_argument("--update", action="store_true", help="keep the records of pairs not rerun from --output")
    parser.add_argument("--merge", type=Path, action="append", default=[],
                        help="a compat JSON of another run (e.g. a pair run in parallel): its pair records are added")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    WORK.mkdir(exist_ok=True)
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    files = test_files(args.tests.split(","))
    previous = json.loads(args.output.read_text(encoding="utf-8")) if args.update and args.output.exists() else {}
    if any(name != "lock" for name in pairs):
        dists = build_dists(args.dist_dir)
    else:  # the lock pair tests this checkout in place: no wheel needed
        dists = previous.get("dists") or {"ok": True, "skipped": "only the lock pair ran"}
    # --update: keep the other pairs' records of the last run; --merge: add those of parallel runs
    records = [r for r in previous.get("pairs", []) if r["pair"] not in pairs]
    for other in args.merge:
        merged = json.loads(other.read_text(encoding="utf-8"))
        records = [r for r in records if r["pair"] not in {m["pair"] for m in merged["pairs"]}] + merged["pairs"]
        if merged.get("dists", {}).get("wheel") and not dists.get("wheel"):
            dists = merged["dists"]
    if not pairs:
        write_result(args.output, records, dists, files, started)
    for name in pairs:
        print(f"compat: {name} ...", flush=True)
        if name == "lock":
            record = lock_pair(files)
        elif not dists["ok"]:
            record = {"pair": name, "ok": False, "error": "the wheel did not build"}
        else:
            record = venv_pair(name, args.dist_dir / dists["wheel"], files, args.reuse)
        record["seconds"] = round(sum(step.get("seconds", 0.0) for step in record.get("steps", {}).values()), 1)
        timings = ", ".join(f"{step} {info.get('seconds')} s" for step, info in record.get("steps", {}).items())
        print(f"compat: {name}: {'passed' if record['ok'] else 'FAILED'} in {record['seconds']} s ({timings})", flush=True)
        records.append(record)
        write_result(args.output, records, dists, files, started)  # after every pair: a cut-short run keeps what it did
    return 0 if dists["ok"] and all(r["ok"] for r in records) else 1


def write_result(output: Path, records: list[dict], dists: dict, files: list[str], started: float) -> None:
    passed = {(r.get("python_installed") or r["python"], r.get("torch_installed") or r["torch"])
              for r in records if r["ok"]}
    result = {
        "summary": {
            "pairs_tried": len(records),
            "pairs_passed": len(passed),
            "passed": sorted(f"python {py} + torch {torch}" for py, torch in passed),
            "failed": [r["pair"] for r in records if not r["ok"]],
            "wheel_ok": dists["ok"],
            "run_seconds": round(time.perf_counter() - started, 1),
        },
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count()},
        "tests": files,
        "dists": dists,
        "pairs": records,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    tmp = output.with_name(f".{output.name}.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, output)
    print(f"compat: {len(passed)} of {len(records)} pairs passed; {output}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
