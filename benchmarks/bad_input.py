"""Bad input, as a new user and as a hostile one would give it, against every command.

Each case runs `python -m trainwise.cli ...` in a subprocess of its own, in a fresh folder, inside
bounds no probe can escape: its own session, a virtual-memory and file-size rlimit (and a process
rlimit, which root ignores), a wall timeout, and a watchdog that kills every process carrying the
case's marker in its environment when they number more than MAX_PROCESSES or hold more than
MAX_RSS_GIB together (a request beyond the machine that was not refused before starting). The corpus
is every numbered case of issue 37 plus files and options generated with hypothesis strategies.

Each case is judged on:
- clean_error / ok: a refusal is a non-zero exit whose stderr has an `error:` line and no traceback;
- tracebacks: "Traceback (most recent call last)" on stderr (or an exit without an `error:` line);
- hangs: still running at the wall timeout;
- half_written: a `*.tmp` file left behind, or an output named by the case written by a failed run;
- orphans: a process of the case still alive after the command returned;
- unbounded: the watchdog had to stop it (processes or memory), or a refusal that had to come
  "before work starts" came after training processes were started;
- injections: a marker file a hostile input tries to create exists afterwards;
- non_finite_outputs: a JSON output containing NaN or Infinity.

    python benchmarks/bad_input.py                 # the whole corpus -> benchmarks/results/bad_input.json
    python benchmarks/bad_input.py --fast          # the quick subset tests/test_bad_input.py runs
    python benchmarks/bad_input.py --only csv-     # cases whose id starts with csv-

Cases whose fix belongs to the `trust` branch (checkpoints, process/size bounds of options, nan
options, process groups) carry owner "trust"; the summary also counts failures per owner.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
SCRIPTS = ROOT / "tests" / "scripts"
sys.path.insert(0, str(Path(__file__).parent))

MAX_PROCESSES = 48  # per case: more means a request beyond the machine was started, not refused
MAX_RSS_GIB = 6.0  # per case, all its processes together
ADDRESS_SPACE_GIB = 16  # per process (RLIMIT_AS): torch maps a few GiB of address space at import
FILE_SIZE_LIMIT = 512 * 1024 * 1024  # RLIMIT_FSIZE: a runaway generator stops here
MARKER_ENV = "TRAINWISE_BAD_INPUT_CASE"
OWNER_NOTE = ("owner 'trust' marks the cases whose fix came from the trust branch (authenticated checkpoints, bounds of "
              "processes, nodes, epochs and pipeline sizes, NaN options, process groups), now merged: on a tree without it "
              "they fail")
TRACEBACK = "Traceback (most recent call last)"


@dataclass
class Case:
    id: str
    argv: list[str | bytes]
    files: dict[str, bytes | str] = field(default_factory=dict)
    expect: str = "error"  # error (a clean refusal), ok (exit 0), either (no traceback either way)
    owner: str = "files"
    timeout_s: float = 60.0
    env: dict[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()  # files a failed run must not leave (half-written)
    injection_marker: str | None = None  # a file the input tries to create
    refuse_before_work: bool = False  # a refusal that must come before any training process starts
    fsize_limit: int | None = None  # RLIMIT_FSIZE for this case (a "full disk")
    note: str = ""
    setup: Callable[[Path], None] | None = None


# ---------------------------------------------------------------------------------------- fixtures

def _profile_dict() -> dict[str, Any]:
    from trainwise.plan.synthetic import synthetic_profile

    return json.loads(synthetic_profile(host=socket.gethostname(), iteration_s=0.2, jitter=0.05).to_json())


def _user_toml() -> str:
    import trainwise.catalog.user as user

    doc = user.__doc__ or ""
    return "\n".join(line[4:] for line in doc[doc.index("    [catalog]"):doc.index("YAML: the same keys")].splitlines())


def _plan_dict(work: Path, profile_text: str) -> dict[str, Any] | None:
    """A real saved plan (plan --save), made once."""
    (work / "here.json").write_text(profile_text)
    (work / "train.py").write_text("pass\n")
    done = subprocess.run([sys.executable, "-m", "trainwise.cli", "plan", "--profile", "here.json", "--catalog", "packaged",
                           "--save", "plan.json", "--out-dir", "out", "--", "python", "train.py"], cwd=work,
                          capture_output=True, text=True, timeout=300, env=_base_env(work))
    if done.returncode != 0:
        print(f"note: no saved plan to mutate: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads((work / "plan.json").read_text())


GPU_INFO = "\"{'Gpus': [{'Name': 'V100', 'Manufacturer': 'NVIDIA', 'Count': 1, 'MemoryInfo': {'SizeInMiB': 16384}}], 'TotalGpuMemoryInMiB': 16384}\""
AWS_HEADER = "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone"
AWS_ROW = f"p3.2xlarge,V100,1.0,8.0,61.0,{GPU_INFO},3.06,0.9,us-east-1,use1-az1"


def _billion_laughs(levels: int = 9, width: int = 9) -> str:
    lines = ["a: &a [" + ", ".join(["lol"] * width) + "]"]
    for level in range(1, levels):
        prev, name = chr(96 + level), chr(97 + level)
        lines.append(f"{name}: &{name} [{', '.join(['*' + prev] * width)}]")
    return "\n".join(lines) + "\n"


def _forged_checkpoint(marker: str) -> bytes:
    """A checkpoint file with trainwise's old unkeyed header and a pickle that runs a shell command."""
    import hashlib

    class Exploit:
        def __reduce__(self):  # noqa: D401 - the payload
            return (os.system, (f"touch {marker}",))

    payload = pickle.dumps({"model": Exploit()})
    return b"TRAINWISE-CKPT" + f" 1 {hashlib.sha256(payload).hexdigest()} {len(payload)}\n".encode() + payload


# ------------------------------------------------------------------------------------------ corpus

def _hostile_contents(kind: str) -> dict[str, bytes]:
    """Generic bad contents for a file of `kind` (json, toml, yaml, csv)."""
    deep = {"json": "[" * 100_000 + "]" * 100_000, "toml": "a = " + "[" * 100_000 + "]" * 100_000,
            "yaml": "a: " + "[" * 100_000 + "]" * 100_000, "csv": '"' + "x" * 5_000_000 + '"\n'}[kind]
    big_int = {"json": '{"schema_version": 1, "n": ' + "9" * 5000 + "}", "toml": "n = " + "9" * 5000,
               "yaml": "n: " + "9" * 5000, "csv": AWS_HEADER + "\n" + AWS_ROW.replace("8.0", "9" * 5000, 1)}[kind]
    out = {
        "nonutf8": b"\xff\xfe\x00garbage\n",
        "nonutf8-late": ({"json": b'{"schema_version": 1, "x": "caf\xe9"}', "toml": b'name = "caf\xe9"\n',
                          "yaml": b"name: caf\xe9\n", "csv": (AWS_HEADER + "\n").encode() + b"p3.2xlarge\xff"})[kind],
        "deep": deep.encode(),
        "big-int": big_int.encode(),
        "empty": b"",
        "binary": bytes(random.Random(7).randrange(256) for _ in range(4096)),
        "truncated": {"json": b'{"schema_version": 1, "iterations": [', "toml": b"[[offering]]\nname = ",
                      "yaml": b"offering:\n- name: [", "csv": (AWS_HEADER + "\n" + AWS_ROW[:40]).encode()}[kind],
        "wrong-type": {"json": b"[1, 2, 3]", "toml": b"offering = 5\n", "yaml": b"- 1\n- 2\n", "csv": b"a,b\n1,2\n"}[kind],
        "huge-float": {"json": b'{"schema_version": 1, "x": 1e400}', "toml": b"[[offering]]\nname = \"x\"\nprice_per_hour = 1e400\n",
                       "yaml": b"offering:\n- name: x\n  price_per_hour: 1e400\n",
                       "csv": (AWS_HEADER + "\n" + AWS_ROW.replace("3.06", "1e400", 1)).encode()}[kind],
        "nan": {"json": b'{"schema_version": 1, "x": NaN}', "toml": b"[[offering]]\nname = \"x\"\nprice_per_hour = nan\n",
                "yaml": b"offering:\n- name: x\n  price_per_hour: .nan\n",
                "csv": (AWS_HEADER + "\n" + AWS_ROW.replace("3.06", "nan", 1)).encode()}[kind],
        "nul-bytes": b"\x00" * 1000,
        "bom-then-junk": b"\xef\xbb\xbf" + b"\x80" * 10,
    }
    if kind == "yaml":
        out["alias-bomb"] = (_billion_laughs() + "offering:\n- name: *i\n  price_per_hour: 1\n").encode()
        out["python-tag"] = b"offering: !!python/object/apply:os.system ['touch INJECTED']\n"
    if kind == "json":
        out["json-depth-dict"] = ('{"a":' * 50_000 + "1" + "}" * 50_000).encode()
    return out


def _special_paths(tmp_name: str) -> dict[str, Callable[[Path], str]]:
    """Paths that are not regular files: each returns the path to give."""

    def fifo(work: Path) -> str:
        os.mkfifo(work / f"{tmp_name}.fifo")
        return f"{tmp_name}.fifo"

    def folder(work: Path) -> str:
        (work / f"{tmp_name}.d").mkdir()
        return f"{tmp_name}.d"

    def sparse(work: Path) -> str:
        path = work / f"{tmp_name}.big"
        with open(path, "wb") as handle:
            handle.truncate(2 * 1024**3)  # 2 GiB, no disk used: refused before reading
        return path.name

    return {"fifo": fifo, "folder": folder, "sparse-2gib": sparse, "dev-zero": lambda work: "/dev/zero",
            "missing": lambda work: "no_such_file"}


def file_commands() -> list[tuple[str, str, Callable[[str], list[str]]]]:
    """(id, kind of file, argv given the file's path) for every command that reads a user file."""
    plan = ["plan", "--catalog", "packaged", "--single-machine", "--out-dir", "out"]
    return [
        ("catalog-show", "toml", lambda f: ["catalog", "show", "--catalog", f]),
        ("catalog-search-user-toml", "toml", lambda f: ["catalog", "search", "--user", f, "--catalog", "packaged"]),
        ("catalog-search-user-yaml", "yaml", lambda f: ["catalog", "search", "--user", f, "--catalog", "packaged"]),
        ("catalog-import", "csv", lambda f: ["catalog", "import", f, "--cloud", "aws"]),
        ("catalog-import-nocloud", "csv", lambda f: ["catalog", "import", f]),
        ("catalog-show-csv", "csv", lambda f: ["catalog", "show", "--catalog", f]),
        ("plan-profile", "json", lambda f: ["plan", "--profile", f, "--catalog", "packaged", "--single-machine", "--out-dir", "out"]),
        ("predict-profile", "json", lambda f: ["predict", f, "--epochs", "3"]),
        ("device-predict-from", "json", lambda f: ["device", "predict", "--from", f, "-a", "V100"]),
        ("plan-local-offering", "toml", lambda f: ["plan", "--profile", "here.json", *plan[1:], "--local-offering", f]),
        ("plan-catalog-yaml", "yaml", lambda f: ["plan", "--profile", "here.json", "--catalog", f, "--out-dir", "out"]),
        ("plan-network", "yaml", lambda f: ["plan", "--profile", "here.json", "--catalog", "packaged", "--node-counts", "2",
                                            "--network", f, "--out-dir", "out"]),
        ("plan-groups", "yaml", lambda f: ["plan", "--profile", "here.json", "--catalog", "packaged",
                                           "--hivemind-groups", f, "--out-dir", "out"]),
        ("launch-plan", "json", lambda f: ["launch", f, "--dry-run", "-o", "task.yaml"]),
    ]


_SUFFIX = {"json": ".json", "toml": ".toml", "yaml": ".yaml", "csv": ".csv"}


def file_cases() -> list[Case]:
    cases: list[Case] = []
    for command_id, kind, argv_of in file_commands():
        name = "aws_vms" if kind == "csv" else "input"
        for content_id, data in _hostile_contents(kind).items():
            path = name + _SUFFIX[kind]
            argv = argv_of(path)
            cases.append(Case(id=f"file-{command_id}-{content_id}", argv=argv, files={path: data},
                              outputs=("task.yaml",), injection_marker="INJECTED" if content_id == "python-tag" else None))
        for special_id, make in _special_paths(name).items():
            holder: dict[str, str] = {}

            def setup(work: Path, make=make, holder=holder) -> None:
                holder["path"] = make(work)

            # the path is fixed per special kind, so the argv can be built now
            fixed = {"fifo": f"{name}.fifo", "folder": f"{name}.d", "sparse-2gib": f"{name}.big", "dev-zero": "/dev/zero",
                     "missing": "no_such_file"}[special_id]
            cases.append(Case(id=f"file-{command_id}-{special_id}", argv=argv_of(fixed), setup=setup, timeout_s=60))
    return cases


def profile_mutation_cases(profile: dict[str, Any]) -> list[Case]:
    """Numbered cases of the issue on profiles (items 3 and 5), each against plan and predict."""
    def mutated(change: Callable[[dict[str, Any]], None]) -> str:
        data = json.loads(json.dumps(profile))
        change(data)
        return json.dumps(data)

    def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
        def change(data: dict[str, Any]) -> None:
            keys = path.split(".")
            target = data
            for key in keys[:-1]:
                target = target[int(key)] if isinstance(target, list) else target[key]
            last = keys[-1]
            if isinstance(target, list):
                target[int(last)] = value
            else:
                target[last] = value
        return change

    texts: dict[str, str] = {
        "step-1e308": mutated(set_path("steady_state.iteration.mean_s", 1e308)),
        "step-1e308-all": mutated(lambda d: d["iterations"].update(wall_s=[1e308] * len(d["iterations"]["wall_s"]))
                                  or d["steady_state"]["iteration"].update(mean_s=1e308, median_s=1e308, max_s=1e308,
                                                                           ci95_high_s=1e308)),
        "interval-low-above-high": mutated(lambda d: d["steady_state"]["iteration"].update(ci95_low_s=9.0, ci95_high_s=1.0)),
        "zero-batches-per-epoch": mutated(set_path("dataset.train_batches_per_epoch", 0)),
        "batch-0": mutated(set_path("dataset.global_batch_size", 0)),
        "negative-step": mutated(set_path("steady_state.iteration.mean_s", -1.0)),
        "int-10e400": json.dumps(profile).replace('"global_batch_size": ', '"global_batch_size": 1' + "0" * 400 + ", \"_x\": ", 1),
        "int-4300-digits": json.dumps(profile).replace('"peak_rss_bytes": ', '"peak_rss_bytes": ' + "9" * 4301 + ", \"_y\": ", 1),
        "nan-step": json.dumps(profile).replace('"mean_s": ', '"mean_s": NaN, "_z": ', 1),
        "infinity-step": json.dumps(profile).replace('"mean_s": ', '"mean_s": Infinity, "_z": ', 1),
        "schema-9": mutated(set_path("schema_version", 9)),
        "no-iterations": mutated(lambda d: d["iterations"].update({name: [] for name in d["iterations"]})),
        "string-times": mutated(set_path("steady_state.iteration.mean_s", "fast")),
    }
    cases = []
    for text_id, text in texts.items():
        cases.append(Case(id=f"profile-{text_id}-plan", argv=["plan", "--profile", "p.json", "--catalog", "packaged",
                                                                "--single-machine", "--out-dir", "out"],
                          files={"p.json": text}, expect="either" if text_id == "no-iterations" else "error"))
        cases.append(Case(id=f"profile-{text_id}-predict", argv=["predict", "p.json", "--epochs", "3", "--json", "pred.json"],
                          files={"p.json": text}, outputs=("pred.json",),
                          expect="either" if text_id == "no-iterations" else "error"))
    return cases


def offering_cases(user_toml: str) -> list[Case]:
    entries = {
        "docstring-example": (user_toml, "ok"),
        "no-region": ('[[offering]]\nname = "box"\nprovider = "vast"\naccelerator = "V100"\naccelerator_count = 1\n'
                      "price_per_hour = 0.3\n", "ok"),
        "price-1e308": ('[[offering]]\nname = "x"\nprice_per_hour = 1e308\n', "error"),
        "zero-tflops": ('[[accelerator]]\nname = "Z"\nfp32_tflops = 0\n[[offering]]\nname = "x"\naccelerator = "Z"\n'
                        "accelerator_count = 1\nprice_per_hour = 1\n", "error"),
        "injection-name": ('[[offering]]\nname = "p3.2xlarge;$(touch INJECTED)"\nprice_per_hour = 1\n', "error"),
        "injection-region": ('[[offering]]\nname = "x"\nregion = "us`touch INJECTED`"\nprice_per_hour = 1\n', "error"),
        "negative-count": ('[[offering]]\nname = "x"\naccelerator = "V100"\naccelerator_count = -1\nprice_per_hour = 1\n', "error"),
        "lifetime-tiny": ('[[offering]]\nname = "x"\nkind = "on_premise"\ncapex_usd = 1e9\nlifetime_hours = 1e-300\n', "error"),
    }
    cases = []
    for entry_id, (text, expect) in entries.items():
        for command_id, argv in (("search", ["catalog", "search", "--user", "u.toml", "--catalog", "packaged"]),
                                 ("plan", ["plan", "--profile", "here.json", "--catalog", "u.toml", "--out-dir", "out"]),
                                 ("plan-nodes", ["plan", "--profile", "here.json", "--catalog", "u.toml", "--node-counts", "2",
                                                 "--out-dir", "out"])):
            cases.append(Case(id=f"offering-{entry_id}-{command_id}", argv=argv, files={"u.toml": text}, expect=expect,
                              injection_marker="INJECTED" if "injection" in entry_id else None, timeout_s=120))
    yaml_bomb = _billion_laughs() + "offering:\n- name: *i\n  price_per_hour: 1\n"
    cases.append(Case(id="offering-yaml-alias-bomb-search", argv=["catalog", "search", "--user", "u.yaml"],
                      files={"u.yaml": yaml_bomb}))
    cases.append(Case(id="offering-yaml-alias-bomb-plan", argv=["plan", "--profile", "here.json", "--catalog", "u.yaml",
                                                                "--out-dir", "out"], files={"u.yaml": yaml_bomb}))
    return cases


def csv_cases() -> list[Case]:
    no_zone_header = ",".join(c for c in AWS_HEADER.split(",") if c != "AvailabilityZone")
    no_zone_row = AWS_ROW.rsplit(",", 1)[0]
    rows = {
        "aws-without-zone-named": ("aws_vms.csv", f"{no_zone_header}\n{no_zone_row}\n", "error"),
        "aws-without-zone-unnamed": ("vms.csv", f"{no_zone_header}\n{no_zone_row}\n", "error"),
        "aws-header-named-gcp": ("gcp_vms.csv", f"{AWS_HEADER}\n{AWS_ROW}\n", "error"),
        "good-aws": ("aws_vms.csv", f"{AWS_HEADER}\n{AWS_ROW}\n", "ok"),
        "injection-instance": ("aws_vms.csv", f"{AWS_HEADER}\n" + AWS_ROW.replace("p3.2xlarge", '"p3.2xlarge;$(touch INJECTED)"', 1) + "\n", "error"),
        "price-1e308": ("aws_vms.csv", f"{AWS_HEADER}\n" + AWS_ROW.replace("3.06", "1e308", 1) + "\n", "error"),
        "negative-price": ("aws_vms.csv", f"{AWS_HEADER}\n" + AWS_ROW.replace("3.06", "-3", 1) + "\n", "error"),
        "ragged-row": ("aws_vms.csv", f"{AWS_HEADER}\np3.2xlarge,V100\n", "error"),
        "huge-cell": ("aws_vms.csv", f"{AWS_HEADER}\n" + AWS_ROW.replace("us-east-1", "u" * 2_000_000, 1) + "\n", "error"),
    }
    cases = []
    for row_id, (name, text, expect) in rows.items():
        cases.append(Case(id=f"csv-{row_id}-import", argv=["catalog", "import", name], files={name: text}, expect=expect,
                          injection_marker="INJECTED" if "injection" in row_id else None))
        cases.append(Case(id=f"csv-{row_id}-show", argv=["catalog", "show", "--catalog", name], files={name: text},
                          expect=expect, injection_marker="INJECTED" if "injection" in row_id else None))
    return cases


def stored_catalog_cases() -> list[Case]:
    def import_then(change: Callable[[Path], None]) -> Callable[[Path], None]:
        def setup(work: Path) -> None:
            (work / "aws_vms.csv").write_text(f"{AWS_HEADER}\n{AWS_ROW}\n")
            subprocess.run([sys.executable, "-m", "trainwise.cli", "catalog", "import", "aws_vms.csv"], cwd=work,
                           env=_base_env(work), capture_output=True, timeout=300)
            change(work / "data" / "catalog" / "current")
        return setup

    def truncate(folder: Path) -> None:
        for path in folder.glob("offerings-*.csv"):
            text = path.read_text()
            path.write_text(text[: len(text) // 20])

    def edit(folder: Path) -> None:
        for path in folder.glob("offerings-*.csv"):
            path.write_text(path.read_text().replace("3.06", "0.01"))

    def bad_meta(folder: Path) -> None:
        (folder / "catalog.json").write_bytes(b'{"offerings_file": "../../../etc/passwd"}')

    def nonutf8_meta(folder: Path) -> None:
        (folder / "catalog.json").write_bytes(b'{"x": "\xff"}')

    cases = []
    for change_id, change in (("truncated", truncate), ("edited", edit), ("meta-traversal", bad_meta),
                              ("meta-nonutf8", nonutf8_meta)):
        for command_id, argv in (("show", ["catalog", "show"]), ("search", ["catalog", "search", "--cloud", "lambda"]),
                                 ("plan", ["plan", "--profile", "here.json", "--out-dir", "out"])):
            cases.append(Case(id=f"stored-{change_id}-{command_id}", argv=argv, setup=import_then(change), timeout_s=120))
    return cases


def plan_document_cases(plan: dict[str, Any] | None) -> list[Case]:
    if plan is None:
        return []

    def doc(change: Callable[[dict[str, Any]], None]) -> str:
        data = json.loads(json.dumps(plan))
        change(data)
        return json.dumps(data)

    def offering(**kw: Any) -> Callable[[dict[str, Any]], None]:
        return lambda d: d["offering"].update(kind="cloud", cloud="aws", **kw)

    docs = {
        "instance-injection": doc(offering(instance_type="p3.2xlarge;$(touch INJECTED)")),
        "region-injection": doc(offering(instance_type="p3.2xlarge", region="us-east-1\ninjected: true")),
        "interval-low-above-high": doc(lambda d: d["prediction"].update(low_s=10.0, high_s=1.0)),
        "cost-1e400": doc(lambda d: None).replace('"cost_usd": ', '"cost_usd": 1e400, "_x": ', 1),
        "nan-price": doc(lambda d: None).replace('"price_per_hour": ', '"price_per_hour": NaN, "_x": ', 1),
        "big-int-epochs": doc(lambda d: None).replace('"epochs": ', '"epochs": ' + "9" * 5000 + ', "_x": ', 1),
        "name-injection": doc(lambda d: d.update(name="x; touch INJECTED")),
    }
    cases = []
    for doc_id, text in docs.items():
        cases.append(Case(id=f"plandoc-{doc_id}-launch", argv=["launch", "p.json", "--dry-run", "-o", "task.yaml"],
                          files={"p.json": text, "train.py": "pass\n"}, outputs=("task.yaml",),
                          injection_marker="INJECTED" if "injection" in doc_id else None))
    return cases


def output_cases() -> list[Case]:
    """Item 4 and 5 on the writing side: non-UTF-8 bytes in the command, unwritable and full places."""
    mlp = str(SCRIPTS / "mlp_train.py")
    small = ["--epochs", "1", "--train-samples", "64", "--val-samples", "32"]
    cases = [
        Case(id="write-profile-nonutf8-command", argv=["profile", "-o", "prof.json", "--", "python", mlp, *small,
                                                       "--done-file", b"done_\xff"],
             expect="ok", timeout_s=300, note="issue item 4: the profile is written, the byte kept as \\udcff"),
        Case(id="write-run-nonutf8-command", argv=["run", "-o", "run.json", "--", "python", mlp, *small,
                                                   "--done-file", b"done_\xff"],
             expect="ok", timeout_s=300),
        Case(id="write-plan-save-nonutf8-command", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                         "--single-machine", "--save", "plan.json", "--out-dir", "out", "--",
                                                         "python", "train.py", "--data", b"/d_\xff"],
             files={"train.py": "pass\n"}, expect="ok"),
        Case(id="write-import-data-dir-is-a-file", argv=["catalog", "import", "aws_vms.csv"],
             files={"aws_vms.csv": f"{AWS_HEADER}\n{AWS_ROW}\n", "blocked": "x"}, env={"TRAINWISE_DATA_DIR": "{work}/blocked"}),
        Case(id="write-import-data-dir-proc", argv=["catalog", "import", "aws_vms.csv"],
             files={"aws_vms.csv": f"{AWS_HEADER}\n{AWS_ROW}\n"}, env={"TRAINWISE_DATA_DIR": "/proc/trainwise-data"}),
        Case(id="write-import-full-disk", argv=["catalog", "import", "aws_vms.csv"],
             files={"aws_vms.csv": f"{AWS_HEADER}\n{AWS_ROW}\n"}, fsize_limit=64 * 1024),
        Case(id="write-plan-save-dev-full", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                  "--single-machine", "--save", "/dev/full", "--out-dir", "out", "--",
                                                  "python", "train.py"], files={"train.py": "pass\n"}),
        Case(id="write-plan-full-disk", argv=["plan", "--profile", "here.json", "--catalog", "packaged", "--single-machine",
                                              "--out-dir", "out"], fsize_limit=16 * 1024, outputs=()),
        Case(id="write-predict-json-dev-full", argv=["predict", "here.json", "--epochs", "3", "--json", "/dev/full"]),
        Case(id="write-profile-full-disk", argv=["profile", "-o", "prof.json", "--", "python", mlp, *small],
             fsize_limit=8 * 1024, timeout_s=300, outputs=("prof.json",)),
        Case(id="write-run-full-disk-checkpoints", argv=["run", "--checkpoint-dir", "ck", "--checkpoint-every-batches", "1",
                                                         "--", "python", mlp, *small],
             fsize_limit=4 * 1024, timeout_s=300, owner="trust", note="in-loop OSError while checkpointing"),
    ]
    return cases


def trust_cases() -> list[Case]:
    """Issue items 1, 2, 3 (options), 5 (hivemind) and 6: fixed on the `trust` branch."""
    mlp = str(SCRIPTS / "mlp_train.py")
    small = ["--epochs", "1", "--train-samples", "64", "--val-samples", "32"]
    hang = str(SCRIPTS / "hang.py")
    spawner = ("import subprocess, sys, time, os\n"
               "subprocess.Popen(['sleep', '300'], start_new_session=True)\n"
               "subprocess.Popen(['sleep', '301'])\n"
               "import runpy; sys.argv = [sys.argv[1]] + sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')\n")
    groups_huge = "- name: g\n  peers:\n  - offering: aws/us-east-1a/p3.2xlarge\n    count: 100000000\n"
    cases = [
        Case(id="trust-ddp-nproc-4096", argv=["run", "--engine", "ddp", "--nproc", "4096", "--", "python", "-c", "pass"],
             owner="trust", refuse_before_work=True, timeout_s=60),
        Case(id="trust-ddp-nproc-100000", argv=["run", "--engine", "ddp", "--nproc", "100000", "--", "python", "-c", "pass"],
             owner="trust", refuse_before_work=True, timeout_s=60),
        Case(id="trust-plan-node-counts-1e8", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                    "--node-counts", "100000000", "--out-dir", "out"], owner="trust", timeout_s=90),
        Case(id="trust-plan-groups-count-1e8", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                     "--hivemind-groups", "g.yaml", "--out-dir", "out"],
             files={"g.yaml": groups_huge}, owner="trust", timeout_s=90),
        Case(id="trust-pipeline-workers-100000", argv=["pipeline", "profile", "cv", "--workers", "100000", "--size", "tiny"],
             owner="trust", refuse_before_work=True, timeout_s=90),
        Case(id="trust-pipeline-size-1e11", argv=["pipeline", "profile", "cv", "--size", "100000000000"], owner="trust",
             refuse_before_work=True, timeout_s=90),
        Case(id="trust-plan-epochs-1e12", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                "--epochs", "1000000000000", "--out-dir", "out"], owner="trust", timeout_s=90),
        Case(id="trust-plan-devices-1e8", argv=["plan", "--profile", "here.json", "--catalog", "packaged",
                                                "--node-counts", "100000000", "--single-machine", "--out-dir", "out"],
             owner="trust", timeout_s=90),
        Case(id="trust-checkpoint-every-s-nan", argv=["run", "--checkpoint-dir", "ck", "--checkpoint-every-s", "nan", "--",
                                                      "python", mlp, *small], owner="trust", refuse_before_work=True),
        Case(id="trust-profile-timeout-nan", argv=["profile", "--timeout", "nan", "-o", "p.json", "--", "python", mlp, *small],
             owner="trust", refuse_before_work=True),
        Case(id="trust-run-timeout-nan", argv=["run", "--timeout", "nan", "--", "python", mlp, *small], owner="trust",
             refuse_before_work=True),
        Case(id="trust-pipeline-weights-nan", argv=["pipeline", "profile", "cv", "--weights", "nan,0,1", "--size", "tiny"],
             owner="trust", refuse_before_work=True, timeout_s=120),
        Case(id="trust-pipeline-weights-negative", argv=["pipeline", "profile", "cv", "--weights", "-1,0,1", "--size", "tiny"],
             owner="trust", refuse_before_work=True, timeout_s=120),
        Case(id="trust-pipeline-weights-zero", argv=["pipeline", "profile", "cv", "--weights", "0,0,0", "--size", "tiny"],
             owner="trust", refuse_before_work=True, timeout_s=120),
        Case(id="trust-pipeline-required-sps-negative", argv=["pipeline", "profile", "cv", "--required-sps", "-5",
                                                              "--size", "tiny"], owner="trust", refuse_before_work=True,
             timeout_s=120),
        Case(id="trust-forged-checkpoint", argv=["run", "--checkpoint-dir", "ck", "--checkpoint-every-batches", "5", "--",
                                                 "python", mlp, *small],
             files={"ck/ckpt-000000999999.twckpt": _forged_checkpoint("INJECTED")}, owner="trust",
             injection_marker="INJECTED", expect="either", timeout_s=300),
        Case(id="trust-hivemind-missing", argv=["run", "--engine", "hivemind", "--target-batch-size", "64", "--", "python",
                                                mlp, *small], files={"shim/hivemind.py": "raise ImportError('no hivemind here')\n"},
             env={"PYTHONPATH": "{work}/shim"}, owner="trust", timeout_s=120),
        Case(id="trust-profile-helper-processes", argv=["profile", "-o", "p.json", "--", "python", "spawn.py", mlp, *small],
             files={"spawn.py": spawner}, owner="trust", expect="either", timeout_s=300),
        Case(id="trust-run-helper-processes", argv=["run", "--", "python", "spawn.py", mlp, *small],
             files={"spawn.py": spawner}, owner="trust", expect="either", timeout_s=300),
        Case(id="trust-run-timeout-hang", argv=["run", "--timeout", "5", "--", "python", hang], owner="trust",
             expect="either", timeout_s=120),
    ]
    return cases


def option_cases() -> list[Case]:
    """Bad option values of the commands this branch reads files for (one-line errors expected)."""
    base = ["plan", "--profile", "here.json", "--catalog", "packaged", "--out-dir", "out"]
    values = {
        "catalog-search-limit-neg": ["catalog", "search", "--limit", "-1"],
        "catalog-search-max-price-nan": ["catalog", "search", "--max-price", "nan"],
        "catalog-search-cloud-injection": ["catalog", "search", "--cloud", "aws;touch INJECTED"],
        "catalog-unknown": ["catalog", "show", "--catalog", "nope"],
        "plan-catalog-unknown": [*base[:3], "--catalog", "nope", "--out-dir", "out"],
        "predict-epochs-0": ["predict", "here.json", "--epochs", "0"],
        "predict-epochs-neg": ["predict", "here.json", "--epochs", "-3"],
        "predict-epochs-huge": ["predict", "here.json", "--epochs", "9" * 30],
        "predict-ipe-0": ["predict", "here.json", "--epochs", "3", "--iterations-per-epoch", "0"],
        "launch-missing": ["launch", "nope.json", "--dry-run"],
        "device-count-0": ["device", "predict", "resnet18", "--batch", "8", "-a", "V100", "--count", "0"],
        "device-batch-0": ["device", "predict", "resnet18", "--batch", "0", "-a", "V100"],
    }
    # epoch and device-count bounds of options are the `trust` branch's (trainwise.plan.bounds)
    trust = {"predict-epochs-huge", "device-count-0"}
    return [Case(id=f"option-{k}", argv=v, injection_marker="INJECTED" if "injection" in k else None,
                 owner="trust" if k in trust else "files",
                 expect="either" if k == "catalog-search-cloud-injection" else "error") for k, v in values.items()]


# ---------------------------------------------------------------------------- hypothesis strategies

def generated_cases(profile: dict[str, Any], n_profile: int, n_offering: int, n_csv: int) -> list[Case]:
    """Inputs drawn by hypothesis strategies (derandomized: the same corpus every run)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    drawn: dict[str, list[Any]] = {"profile": [], "offering": [], "csv": []}
    weird_numbers = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-(10**30), max_value=10**30),
        st.sampled_from([0, -1, 1e308, -1e308, 5e-324, 10**25, "1e400", "NaN", None, True, [], {}]),
        st.text(max_size=8))
    paths = []

    def walk(value: Any, prefix: tuple[Any, ...]) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, prefix + (k,))
        elif isinstance(value, list):
            for i, v in enumerate(value[:2]):
                walk(v, prefix + (i,))
        else:
            paths.append(prefix)

    walk(profile, ())
    settings_ = settings(max_examples=max(n_profile, n_offering, n_csv), derandomize=True, database=None, deadline=None,
                         suppress_health_check=list(HealthCheck))

    @settings_
    @given(st.sampled_from(paths), weird_numbers)
    def profiles(path: tuple[Any, ...], value: Any) -> None:
        if len(drawn["profile"]) < n_profile:
            drawn["profile"].append((path, value))

    offering_field = st.sampled_from(["price_per_hour", "spot_price_per_hour", "accelerator_count", "vcpus", "memory_gib",
                                      "capex_usd", "lifetime_years", "lifetime_hours", "utilisation", "share_of_node",
                                      "power_kw", "name", "region", "provider", "accelerator", "kind"])
    toml_value = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**25), 10**25),
                           st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12), st.booleans())

    @settings_
    @given(st.dictionaries(offering_field, toml_value, min_size=1, max_size=5))
    def offerings(entry: dict[str, Any]) -> None:
        if len(drawn["offering"]) < n_offering:
            drawn["offering"].append(entry)

    cell = st.one_of(st.text(max_size=10), st.sampled_from(["1e308", "-1", "nan", "inf", "", "9" * 400, "0"]),
                     st.floats(allow_nan=True).map(repr))

    @settings_
    @given(st.lists(cell, min_size=10, max_size=10))
    def csv_rows(cells: list[str]) -> None:
        if len(drawn["csv"]) < n_csv:
            drawn["csv"].append(cells)

    profiles()
    offerings()
    csv_rows()

    cases: list[Case] = []
    for index, (path, value) in enumerate(drawn["profile"]):
        data = json.loads(json.dumps(profile))
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        text = json.dumps(data, allow_nan=True)
        if isinstance(value, str) and value in ("1e400", "NaN"):  # as JSON tokens, not strings
            text = text.replace(json.dumps(value), value, 1)
        argv = (["predict", "p.json", "--epochs", "3", "--json", "pred.json"] if index % 2 else
                ["plan", "--profile", "p.json", "--catalog", "packaged", "--single-machine", "--out-dir", "out"])
        cases.append(Case(id=f"gen-profile-{index:03d}", argv=argv, files={"p.json": text}, expect="either",
                          note=f"{'.'.join(map(str, path))} = {value!r}"[:200]))
    for index, entry in enumerate(drawn["offering"]):
        lines = ["[[offering]]"]
        entry = {"name": "gen", "price_per_hour": 1.0, **entry}
        for key, value in entry.items():
            if isinstance(value, float):
                text = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
            elif isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, int):
                text = str(value)
            else:
                text = json.dumps(value)
            lines.append(f"{key} = {text}")
        cases.append(Case(id=f"gen-offering-{index:03d}", argv=["catalog", "search", "--user", "u.toml", "--catalog",
                                                                 "packaged", "--limit", "3"],
                          files={"u.toml": "\n".join(lines) + "\n"}, expect="either", note=json.dumps(entry, default=str)[:200]))
    for index, cells in enumerate(drawn["csv"]):
        import csv
        import io

        buffer = io.StringIO()
        csv.writer(buffer).writerow(cells)
        cases.append(Case(id=f"gen-csv-{index:03d}", argv=["catalog", "import", "aws_vms.csv"],
                          files={"aws_vms.csv": AWS_HEADER + "\n" + buffer.getvalue()}, expect="either"))
    return cases


def corpus(fast: bool = False, with_plan: bool = True) -> list[Case]:
    """Every case (`fast`: only FAST's, though ids of all are built; `with_plan`: make the saved plan
    the plan-document cases mutate, one `plan --save` run)."""
    profile = _profile_dict()
    plan = None
    if with_plan:
        with tempfile.TemporaryDirectory(prefix="trainwise-bad-input-plan-") as folder:
            plan = _plan_dict(Path(folder), json.dumps(profile))
    cases = (file_cases() + profile_mutation_cases(profile) + offering_cases(_user_toml()) + csv_cases()
             + stored_catalog_cases() + plan_document_cases(plan) + output_cases() + option_cases() + trust_cases()
             + generated_cases(profile, n_profile=70, n_offering=40, n_csv=20))
    shared = {"here.json": json.dumps(profile)}
    for case in cases:
        for name, data in shared.items():
            case.files.setdefault(name, data)
    if fast:
        cases = [c for c in cases if c.id in FAST]
    return cases


FAST = ("file-catalog-search-user-yaml-alias-bomb", "file-catalog-import-nonutf8-late", "file-plan-profile-big-int",
        "file-plan-groups-fifo", "profile-step-1e308-predict", "offering-injection-name-search",
        "csv-aws-without-zone-named-import", "stored-truncated-show", "write-import-data-dir-is-a-file")


# --------------------------------------------------------------------------------------- running

def _base_env(work: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINWISE_")}
    env.update(HOME=str(work / "home"), TRAINWISE_DATA_DIR=str(work / "data"), TRAINWISE_CACHE_DIR=str(work / "cache"),
               TRAINWISE_HOST_NOISE_DIR=str(work / "host_noise"), TRAINWISE_HISTORY_DIR=str(work / "history"),
               COLUMNS="200", NO_COLOR="1", PYTHONDONTWRITEBYTECODE="1")
    src = str(ROOT / "src")
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _case_processes(marker: str) -> list[int]:
    found = []
    needle = f"{MARKER_ENV}={marker}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _rss_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as handle:
                total += int(handle.read().split()[1]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            continue
    return total


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _preexec(fsize: int) -> Callable[[], None]:
    def limits() -> None:
        os.setsid()
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # over the file-size limit: EFBIG (a full disk), not a kill
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_GIB * 2**30, ADDRESS_SPACE_GIB * 2**30))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (MAX_PROCESSES * 4, MAX_PROCESSES * 4))
        except (ValueError, OSError):
            pass
    return limits


def _argv_bytes(argv: list[str | bytes]) -> list[bytes]:
    return [a if isinstance(a, bytes) else os.fsencode(a) for a in argv]


def _json_outputs_non_finite(work: Path, inputs_before: dict[Path, float]) -> list[str]:
    """JSON files the command wrote (new or changed) that hold NaN or Infinity."""
    bad = []
    for path in list(work.rglob("*.json")):
        if inputs_before.get(path) == path.stat().st_mtime:
            continue  # an input the case wrote, unchanged
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if re.search(r"(?<![\w\"])(NaN|-?Infinity)(?![\w\"])", text):
            bad.append(str(path.relative_to(work)))
    return bad



def run_case(case: Case, keep: bool = False) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"tw-bad-{case.id[:40]}-"))
    marker = f"{os.getpid()}-{case.id}"
    try:
        for name, data in case.files.items():
            path = work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
        if case.setup is not None:
            case.setup(work)
        inputs_before = {p: p.stat().st_mtime for p in work.rglob("*") if p.is_file()}
        env = _base_env(work)
        for key, value in case.env.items():
            value = value.replace("{work}", str(work))
            env[key] = value + (os.pathsep + env[key] if key == "PYTHONPATH" else "")
        env[MARKER_ENV] = marker
        argv = [os.fsencode(sys.executable), b"-m", b"trainwise.cli", *_argv_bytes(case.argv)]
        start = time.perf_counter()
        process = subprocess.Popen(argv, cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, preexec_fn=_preexec(case.fsize_limit or FILE_SIZE_LIMIT))
        stop = threading.Event()
        watchdog: dict[str, Any] = {"max_processes": 0, "max_rss_gib": 0.0, "killed": None, "trainers_started": False}

        def watch() -> None:
            while not stop.wait(0.25):
                pids = _case_processes(marker)
                rss = _rss_bytes(pids) / 2**30
                watchdog["max_processes"] = max(watchdog["max_processes"], len(pids))
                watchdog["max_rss_gib"] = max(watchdog["max_rss_gib"], round(rss, 2))
                if len(pids) > 2:
                    watchdog["trainers_started"] = True
                if len(pids) > MAX_PROCESSES or rss > MAX_RSS_GIB:
                    watchdog["killed"] = f"{len(pids)} processes, {rss:.1f} GiB"
                    _kill_all(pids)

        thread = threading.Thread(target=watch, daemon=True)
        thread.start()
        hang = False
        try:
            stdout, stderr = process.communicate(timeout=case.timeout_s)
        except subprocess.TimeoutExpired:
            hang = True
            _kill_all(_case_processes(marker))
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except OSError:
                pass
            stdout, stderr = process.communicate()
        elapsed = time.perf_counter() - start
        stop.set()
        thread.join()
        time.sleep(0.3)
        leftover = _case_processes(marker)
        _kill_all(leftover)
        err = stderr.decode("utf-8", "replace")
        out = stdout.decode("utf-8", "replace")
        code = process.returncode
        traceback = TRACEBACK in err or TRACEBACK in out
        error_line = any(line.lstrip().startswith("error:") for line in err.splitlines())
        clean_error = (not hang and code not in (0, None) and error_line and not traceback
                       and watchdog["killed"] is None)
        ok = not hang and code == 0 and not traceback and watchdog["killed"] is None
        if not hang and code not in (0, None) and not error_line and not traceback and watchdog["killed"] is None:
            traceback = code not in (130, 143, -9, -15)  # died without saying why: as bad as a traceback
        tmp_left = [str(p.relative_to(work)) for p in work.rglob("*.tmp")] + [
            str(p.relative_to(work)) for p in work.rglob(".*.tmp")]
        half_written = sorted(set(tmp_left))
        if code not in (0, None):
            half_written += [name for name in case.outputs if (work / name).exists()
                             and (work / name) not in inputs_before]
        injected = bool(case.injection_marker) and (work / case.injection_marker).exists()
        non_finite = _json_outputs_non_finite(work, inputs_before)
        unbounded = watchdog["killed"] is not None or (case.refuse_before_work and code != 0
                                                       and watchdog["trainers_started"])
        if case.expect == "error":
            passed = clean_error
        elif case.expect == "ok":
            passed = ok
        else:
            passed = clean_error or ok
        passed = passed and not (half_written or leftover or injected or non_finite or unbounded)
        last_error = next((line.strip() for line in reversed(err.splitlines()) if line.strip()), "")
        return {"id": case.id, "owner": case.owner, "expect": case.expect, "passed": passed, "exit_code": code,
                "seconds": round(elapsed, 2), "clean_error": clean_error, "ok": ok, "traceback": traceback, "hang": hang,
                "half_written": half_written, "orphans": len(leftover), "unbounded": unbounded,
                "watchdog": watchdog, "injection": injected, "non_finite_outputs": non_finite,
                "stderr_tail": last_error[-300:], "note": case.note}
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def summarise(results: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [r for r in results if not r["passed"]]
    return {
        "cases": len(results),
        "passed": len(results) - len(failed),
        "clean_errors": sum(r["clean_error"] for r in results),
        "ok_runs": sum(r["ok"] for r in results),
        "tracebacks": sum(r["traceback"] for r in results),
        "hangs": sum(r["hang"] for r in results),
        "half_written": sum(bool(r["half_written"]) for r in results),
        "orphans": sum(r["orphans"] > 0 for r in results),
        "unbounded": sum(bool(r["unbounded"]) for r in results),
        "injections": sum(r["injection"] for r in results),
        "non_finite_outputs": sum(bool(r["non_finite_outputs"]) for r in results),
        "failed": len(failed),
        "failed_by_owner": {owner: sum(r["owner"] == owner for r in failed) for owner in sorted({r["owner"] for r in results})},
        "median_seconds": sorted(r["seconds"] for r in results)[len(results) // 2] if results else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", action="store_true", help="only the quick subset (tests/test_bad_input.py)")
    parser.add_argument("--only", default="", help="only cases whose id starts with this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--output", type=Path, default=RESULTS / "bad_input.json")
    parser.add_argument("--keep", action="store_true", help="keep each case's folder")
    parser.add_argument("--list", action="store_true", help="list the case ids and stop")
    parser.add_argument("--owner", default=None, help="with --rerun-failed: only this owner's cases (files, trust)")
    parser.add_argument("--rerun-failed", action="store_true",
                        help="rerun the cases that failed in --output (after a fix) and update it; the JSON lists them")
    args = parser.parse_args(argv)
    if args.rerun_failed:
        return rerun_failed(args.output, args.jobs, args.owner)
    cases = corpus(fast=args.fast, with_plan=not args.fast)
    if args.only:
        cases = [c for c in cases if c.id.startswith(args.only)]
    if args.list:
        for case in cases:
            print(case.id, case.owner, case.expect)
        print(len(cases), "cases")
        return 0
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    results: list[dict[str, Any]] = []
    from _machine import machine
    from trainwise._io import atomic_write_text

    described = machine(max_processes_per_case=MAX_PROCESSES, max_rss_gib_per_case=MAX_RSS_GIB,
                        address_space_gib_per_process=ADDRESS_SPACE_GIB, jobs=args.jobs)
    write = not args.fast and not args.only

    def save(complete: bool) -> None:
        payload = {"benchmark": "bad_input", "started_at": started, "complete": complete, "note": OWNER_NOTE,
                   "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                   "machine": described, "summary": summarise(results), "cases": results}
        atomic_write_text(args.output, json.dumps(payload, indent=1, default=str) + "\n")

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for result in pool.map(lambda c: run_case(c, args.keep), cases):
            results.append(result)
            mark = "ok  " if result["passed"] else "FAIL"
            print(f"{mark} {result['id']} ({result['seconds']} s) {'' if result['passed'] else result['stderr_tail'][:160]}",
                  flush=True)
            if write and len(results) % 20 == 0:
                save(complete=False)  # a run cut short still leaves its results
    summary = summarise(results)
    if write:
        save(complete=True)
        print(f"wrote {args.output}")
    print(json.dumps(summary, indent=1))
    return 0 if summary["failed"] == 0 else 1


def rerun_failed(path: Path, jobs: int, owner: str | None = None) -> int:
    """Rerun the failed cases of an earlier full run (after fixing what they found), in place."""
    from trainwise._io import atomic_write_text

    payload = json.loads(path.read_text())
    failed = {r["id"] for r in payload["cases"] if not r["passed"]}
    cases = [c for c in corpus() if c.id in failed and (owner is None or c.owner == owner)]
    owners = {c.id: c.owner for c in corpus(with_plan=False)}
    for result in payload["cases"]:  # ownership as the corpus now states it
        result["owner"] = owners.get(result["id"], result["owner"])
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        fresh = {r["id"]: r for r in pool.map(run_case, cases)}
    for result in fresh.values():
        print(f"{'ok  ' if result['passed'] else 'FAIL'} {result['id']} {result['stderr_tail'][:160]}", flush=True)
    payload["cases"] = [fresh.get(r["id"], r) for r in payload["cases"]]
    payload["rerun_after_fix"] = {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                  "cases": sorted(fresh), "now_passing": sorted(i for i, r in fresh.items() if r["passed"])}
    payload["summary"] = summarise(payload["cases"])
    atomic_write_text(path, json.dumps(payload, indent=1, default=str) + "\n")
    print(json.dumps(payload["summary"], indent=1))
    return 0 if payload["summary"]["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
