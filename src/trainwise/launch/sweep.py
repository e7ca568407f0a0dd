"""`trainwise sweep`: Malta's methodology 2 automated — a short profile (`trainwise profile`, k
iterations) of the same job on every candidate, the profiles fed to the planner as measured
profiles, and what the sweep cost against profiling every candidate by full training.

Candidates:
- local targets: this machine restricted to N threads (`local:1`, `local:2`): `OMP_NUM_THREADS` /
  `MKL_NUM_THREADS` (torch's intra-op pool follows them; the profile records `torch_threads`) and,
  where `taskset` exists, pinned to the first N CPUs. Local targets run one after another: run side
  by side they would share the same cores and each would time the other's interference.
- cloud offerings (`aws/use1-az1/p3.2xlarge`, `…:spot`): one SkyPilot cluster per candidate, in
  parallel, running `trainwise profile` and writing the profile to a results bucket; each cluster is
  torn down when its profile is written (`down=True`, then `sky.down`).

Malta's comparison (Table 5.14 of her dissertation): MNIST on six AWS VMs cost 19.21 $ run to completion
everywhere, 7.27 $ with methodology 1 and 2.62 $ with methodology 2. `compare_costs` is that
arithmetic; the sweep reports it for its own candidates with the full-training cost predicted from
the measured profiles.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from trainwise.errors import TrainwiseError
from trainwise.launch import safety
from trainwise.launch.local_backend import TRAINWISE_CLI, local_command
from trainwise.profile.schema import Profile, load_profile

LOCAL_PREFIX = "local"


@dataclass(frozen=True)
class Candidate:
    name: str
    kind: str                      # "local" | "cloud"
    threads: int | None = None
    offering_id: str | None = None
    spot: bool = False

    @property
    def local_offering_id(self) -> str:
        return f"local/{self.name}"


@dataclass
class CandidateResult:
    candidate: Candidate
    profile_path: Path | None
    profile: Profile | None
    sweep_s: float                 # what the candidate was occupied for (launcher-measured)
    price_per_hour: float
    price_source: str
    sweep_cost_usd: float
    full_training_s: float | None = None
    full_training_cost_usd: float | None = None
    status: str = "measured"
    notes: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------ the seed's arithmetic


@dataclass(frozen=True)
class CostRow:
    name: str
    full_training_usd: float
    sweep_usd: float


def compare_costs(rows: Sequence[CostRow]) -> dict[str, float]:
    """Totals of profiling every candidate by full training vs by the sweep, and the saving."""
    full = sum(r.full_training_usd for r in rows)
    sweep = sum(r.sweep_usd for r in rows)
    return {"full_training_usd": full, "sweep_usd": sweep, "saving_fraction": 1 - sweep / full if full > 0 else 0.0,
            "ratio": full / sweep if sweep > 0 else math.inf}


# Malta Table 5.14, MNIST: cost of finding the best VM with no methodology (every VM run
# to completion), methodology 1 and methodology 2, USD.
MALTA_TABLE_5_14 = (
    ("p2.xlarge", 0.51, 0.51, 0.0009),
    ("p2.8xlarge", 2.11, 0.62, 0.33),
    ("p2.16xlarge", 7.65, 2.30, 0.88),
    ("p3.2xlarge", 0.55, 0.20, 0.002),
    ("p3.8xlarge", 2.00, 0.80, 0.38),
    ("p3.16xlarge", 6.39, 2.84, 1.02),
)
MALTA_TOTALS = {"none": 19.21, "methodology_1": 7.27, "methodology_2": 2.62}


# ------------------------------------------------------------------------------ candidates


def parse_candidates(specs: Sequence[str], catalog: Any | None = None) -> list[Candidate]:
    """`local:1`, `local:2` (threads) and catalog offering ids (`aws/use1-az1/p3.2xlarge[:spot]`);
    comma-separated or repeated."""
    items = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    if not items:
        raise TrainwiseError("--candidates is empty: give e.g. local:1,local:2 or aws/use1-az1/p3.2xlarge")
    out: list[Candidate] = []
    for item in items:
        safety.no_control_characters(item, "candidate")
        if item.startswith(f"{LOCAL_PREFIX}:"):
            value = item.split(":", 1)[1].removeprefix("threads=")
            if not value.isdigit() or int(value) < 1:
                raise TrainwiseError(f"candidate {item!r}: a local target is local:N with N >= 1 threads, e.g. local:2")
            threads = int(value)
            cores = os.cpu_count() or 1
            if threads > cores:
                raise TrainwiseError(f"candidate {item!r}: this machine has {cores} logical CPUs; use at most local:{cores}")
            out.append(Candidate(name=f"local-{threads}t", kind="local", threads=threads))
            continue
        offering_id, _, market = item.partition(":")
        if market not in ("", "spot", "on-demand"):
            raise TrainwiseError(f"candidate {item!r}: the suffix after ':' is spot or on-demand")
        if catalog is None:
            from trainwise.catalog import load_catalog

            catalog = load_catalog("current")
        frame = catalog.offerings
        if not (frame["offering_id"] == offering_id).any():
            from trainwise.catalog import names

            near = names.suggest(offering_id, frame["offering_id"].dropna().tolist())
            hint = f"did you mean {', '.join(near)}?" if near else "find ids with `trainwise catalog search`"
            raise TrainwiseError(f"candidate {offering_id!r} is not in the {catalog.name} catalog: {hint}")
        out.append(Candidate(name=safety.name_from(f"sweep-{offering_id.replace('/', '-')}"), kind="cloud",
                             offering_id=offering_id, spot=market == "spot"))
    names_ = [c.name for c in out]
    if len(set(names_)) != len(names_):
        raise TrainwiseError(f"--candidates lists the same target twice ({', '.join(names_)}): list each once")
    return out


# ------------------------------------------------------------------------------ local targets


def local_profile_argv(candidate: Candidate, command: Sequence[str], output: Path, *, iterations: int,
                       max_seconds: float, workload: str | None) -> tuple[list[str], dict[str, str]]:
    argv = [*TRAINWISE_CLI, "profile", "-k", str(iterations), "--max-seconds", f"{max_seconds:g}", "-o", str(output)]
    if workload:
        argv += ["--workload", workload]
    argv += ["--", *local_command(list(command))]
    taskset = shutil.which("taskset")
    if taskset and candidate.threads:
        argv = [taskset, "-c", f"0-{candidate.threads - 1}", *argv]
    env = dict(os.environ)
    threads = str(candidate.threads)
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads})
    return argv, env


def run_local_target(candidate: Candidate, command: Sequence[str], out_dir: Path, *, iterations: int,
                     max_seconds: float, workload: str | None, price_per_hour: float, price_source: str,
                     timeout_s: float | None = None) -> CandidateResult:
    import subprocess

    output = out_dir / f"{candidate.name}.profile.json"
    argv, env = local_profile_argv(candidate, command, output, iterations=iterations, max_seconds=max_seconds,
                                   workload=workload)
    log = out_dir / f"{candidate.name}.log"
    t0 = time.perf_counter()
    with log.open("wb") as handle:
        try:
            code = subprocess.run(argv, env=env, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout_s,
                                  check=False).returncode
        except subprocess.TimeoutExpired:
            code = 124
    elapsed = time.perf_counter() - t0
    cost = elapsed / 3600 * price_per_hour
    if code != 0 or not output.is_file():
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
        return CandidateResult(candidate, None, None, elapsed, price_per_hour, price_source, cost,
                               status=f"failed (exit {code}: {tail[0][:160]}; log {log})")
    profile = load_profile(output)
    notes = []
    if profile.environment.torch_threads != candidate.threads:
        notes.append(f"asked for {candidate.threads} thread(s), the job ran with {profile.environment.torch_threads}")
    return CandidateResult(candidate, output, profile, elapsed, price_per_hour, price_source, cost, notes=notes)


# ------------------------------------------------------------------------------ cloud candidates


def cloud_profile_task(candidate: Candidate, command: Sequence[str], results_uri: str, *, iterations: int,
                       max_seconds: float, workload: str | None, catalog: Any, trainwise_spec: str,
                       workdir: str | None = None, trainwise_wheel: tuple[str, str] | None = None) -> dict[str, Any]:
    """The SkyPilot task that profiles `command` on one cloud candidate and writes the profile to
    the results bucket; `workdir` (synced to the cluster) when the command runs local files;
    `trainwise_wheel` (cluster path, local path) uploads the wheel `trainwise_spec` installs."""
    frame = catalog.offerings
    row = frame[frame["offering_id"] == candidate.offering_id].iloc[0]
    resources: dict[str, Any] = {"cloud": row["cloud"], "region": row["region"], "use_spot": candidate.spot,
                                 "disk_size": 100}
    if row["cloud"] == "gcp" and isinstance(row["zone"], str):
        resources["zone"] = row["zone"]
    accelerator = row["source_accelerator"] if isinstance(row["source_accelerator"], str) else None
    if accelerator and accelerator.lower().startswith("tpu-"):
        resources["accelerators"] = {accelerator: 1}
    else:
        resources["instance_type"] = row["instance_type"]
        if accelerator and float(row["accelerator_count"]) > 0:
            count = float(row["accelerator_count"])
            resources["accelerators"] = {accelerator: int(count) if count.is_integer() else count}
    results_uri = safety.check_uri(results_uri, "--results-uri", bucket_only=True)
    output = f"/trainwise/results/{candidate.name}.profile.json"
    argv: list[str] = ["trainwise", "profile", "-k", str(iterations), "--max-seconds", f"{max_seconds:g}", "-o", output]
    if workload:
        argv += ["--workload", workload]
    argv += ["--", *command]
    return {
        "name": candidate.name,
        **({"workdir": safety.no_control_characters(workdir, "workdir")} if workdir is not None else {}),
        "num_nodes": 1,
        "resources": resources,
        "envs": {"TRAINWISE_SWEEP_CANDIDATE": candidate.name},
        "file_mounts": {"/trainwise/results": {"source": results_uri, "mode": "MOUNT"},
                        **(dict([trainwise_wheel]) if trainwise_wheel else {})},
        "setup": "set -euo pipefail\n" + safety.quote_argv(["python", "-m", "pip", "install", trainwise_spec]) + "\n",
        "run": "set -euo pipefail\n" + safety.quote_argv(argv) + "\n",
    }


def run_cloud_candidates(candidates: Sequence[Candidate], configs: dict[str, dict[str, Any]], results_uri: str,
                         out_dir: Path, catalog: Any) -> list[CandidateResult]:
    """Launch every cloud candidate in parallel with SkyPilot, fetch its profile, tear it down."""
    from trainwise.launch import staging
    from trainwise.launch.skypilot_task import skypilot_installed, validate_with_skypilot

    if not skypilot_installed():
        raise TrainwiseError("cloud candidates need SkyPilot: pip install 'skypilot[aws,gcp]==0.14.1' and run "
                             "`sky check`; or write the tasks only with --dry-run")
    import sky

    from trainwise.launch.sky_backend import enabled_clouds

    enabled = enabled_clouds()
    frame = catalog.offerings.set_index("offering_id")
    for candidate in candidates:
        cloud = str(frame.loc[candidate.offering_id, "cloud"])
        if cloud not in enabled:
            raise TrainwiseError(f"candidate {candidate.offering_id}: cloud {cloud} is not enabled in SkyPilot (enabled: "
                                 f"{', '.join(sorted(enabled)) or 'none'}): set up its credentials and run `sky check {cloud}`")

    def one(candidate: Candidate) -> CandidateResult:
        row = frame.loc[candidate.offering_id]
        price = float(row["spot_price_per_hour"] if candidate.spot else row["price_per_hour"])
        source = f"catalog {row['catalog']}, {row['price_date']} snapshot"
        task = validate_with_skypilot(configs[candidate.name])
        t0 = time.perf_counter()
        try:
            job_id, _ = sky.stream_and_get(sky.launch(task, cluster_name=candidate.name, down=True))
            # the launch request returns once the job is submitted: follow it to its end
            exit_code = sky.tail_logs(candidate.name, job_id, follow=True)
            if exit_code != 0:
                raise TrainwiseError(f"the profile on {candidate.offering_id} exited with code {exit_code}: "
                                     f"`sky logs {candidate.name}` while the cluster is up")
        finally:
            try:
                sky.stream_and_get(sky.down(candidate.name))
            except Exception:  # already down (down=True) is the normal case
                pass
        elapsed = time.perf_counter() - t0
        target = out_dir / f"{candidate.name}.profile.json"
        staging.copy_tree(f"{results_uri.rstrip('/')}/{candidate.name}.profile.json", str(target), what="fetching profile")
        # Billed from launch to teardown as measured here, at the candidate's catalog price.
        return CandidateResult(candidate, target, load_profile(target), elapsed, price, source, elapsed / 3600 * price)

    with ThreadPoolExecutor(max_workers=max(1, len(candidates))) as pool:
        return list(pool.map(one, candidates))


# ------------------------------------------------------------------------------ plan from the sweep


def targets_source(mapping: dict[str, str]):
    """A planner runtime source: each local target's profile prices only its own target offering."""
    from trainwise.plan import runtime

    def sweep_targets(offerings: pd.DataFrame, context: runtime.RuntimeContext) -> pd.DataFrame:
        rows = [(int(idx), label) for label, offering_id in mapping.items()
                for idx in offerings.index[offerings["offering_id"] == offering_id]]
        matches = pd.DataFrame(rows, columns=["offering_row", "profile"])
        provenance = {label: f"measured here by the sweep ({offering_id})" for label, offering_id in mapping.items()}
        return runtime._attach(matches, context, provenance, "sweep")

    return sweep_targets


def local_target_offerings(results: Sequence[CandidateResult]) -> list[Any]:
    from trainwise.catalog.model import Offering

    offerings = []
    for r in results:
        if r.candidate.kind != "local":
            continue
        offerings.append(Offering(catalog="sweep", offering_id=r.candidate.local_offering_id, cloud="local",
                                  region="this machine", instance_type=f"this machine, {r.candidate.threads} thread(s)",
                                  kind="on_premise", billing="per_second", min_billed_seconds=0.0,
                                  price_per_hour=r.price_per_hour, price_date="assumed", source=r.price_source))
    return offerings


def plan_from_sweep(results: Sequence[CandidateResult], catalog: Any, *, epochs: Sequence[int],
                    objective: Any | None = None) -> Any:
    from trainwise.plan.planner import plan
    from trainwise.plan.runtime import DEFAULT_SOURCES

    measured = [r for r in results if r.profile is not None]
    if not measured:
        raise TrainwiseError("no candidate produced a profile: see the logs in the sweep directory")
    profiles = [(r.candidate.name, r.profile) for r in measured]
    mapping = {r.candidate.name: r.candidate.local_offering_id for r in measured if r.candidate.kind == "local"}
    sources = (targets_source(mapping), *DEFAULT_SOURCES) if mapping else DEFAULT_SOURCES
    locals_ = local_target_offerings(measured)
    return plan(profiles, catalog, objective, epoch_options=epochs, local_offering=locals_ or None, sources=sources)


def fill_full_training_costs(results: Sequence[CandidateResult], epochs: int, provisioning_s: float = 0.0) -> None:
    """What profiling each candidate by full training (Malta's "no methodology") would cost: the
    measured profile's predicted full run (trainwise estimator) × the candidate's price."""
    from trainwise.predict.same_machine import predict_total

    for r in results:
        if r.profile is None:
            continue
        prediction = predict_total(r.profile, epochs, "trainwise")
        boot = provisioning_s if r.candidate.kind == "cloud" else 0.0
        r.full_training_s = prediction.total_s + boot
        r.full_training_cost_usd = r.full_training_s / 3600 * r.price_per_hour


def local_price() -> tuple[float, str]:
    from trainwise.plan.inputs import default_local_offering

    offering = default_local_offering()
    return float(offering.price_per_hour or 0.0), "assumed (trainwise's amortised workstation; see `trainwise plan` assumptions)"

