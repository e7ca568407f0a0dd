"""The I/O around `trainwise plan --save/--history`, `trainwise launch` and `trainwise sweep`: the CLI
calls these with parsed options; the logic lives in the modules beside this one."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from trainwise._io import atomic_write_text, check_output_path
from trainwise.errors import TrainwiseError
from trainwise.launch import safety


# ------------------------------------------------------------------------------ plan --save / --history


def training_command(passthrough: list[str] | None, profile_paths: Sequence[Path], workload: str, epochs: int) -> list[str]:
    """The user's command after `--`; else the command the (first) profile measured; else the
    default workload at the plan's epochs."""
    if passthrough:
        return list(passthrough)
    if profile_paths:
        from trainwise.profile.schema import load_profile

        return list(load_profile(profile_paths[0]).command)
    from trainwise.workloads import command_for

    return command_for(workload, epochs=epochs)


def headline_epochs_for_command(passthrough: list[str], epochs: int | None, *, console: Console,
                                profile_paths: Sequence[Path] = ()) -> int | None:
    """The headline epoch count of a plan saved with a training command (`trainwise.predict.epochs`
    decides it, with every other epoch count)."""
    from trainwise.predict.epochs import decide_epochs
    from trainwise.profile.schema import load_profile

    profiles = [(str(path), load_profile(path)) for path in profile_paths] if epochs is None else []
    decision = decide_epochs(epochs=epochs, epoch_options=(), epoch_options_given=True, profiles=profiles,
                             command=passthrough)
    if decision.says:
        console.print(decision.says)
    return decision.headline


def _epochs(count: int) -> str:
    return f"{count} epoch" + ("" if count == 1 else "s")


def save_plan(result: Any, path: Path, *, catalog_name: str, passthrough: list[str] | None, profile_paths: Sequence[Path],
              workload: str, console: Console, **choices: Any) -> Path:
    from trainwise.catalog import load_catalog
    from trainwise.launch.plan_document import build_plan_document

    command = training_command(passthrough, profile_paths, workload, result.primary_epochs)
    document = build_plan_document(result, load_catalog(catalog_name), command=command,
                                   workload=None if profile_paths else workload,
                                   profile_path=str(profile_paths[0]) if profile_paths else None, **choices)
    check_launchable(document)
    if not passthrough:
        origin = (f"the command profile {profile_paths[0]} measured (its own epoch count)" if profile_paths
                  else f"the reference workload {workload} at {result.primary_epochs} epochs")
        document = document.model_copy(update={"notes": [*document.notes, f"training command: {origin}; give yours "
                                                                          "after `--` to run something else"]})
    try:
        written = document.save(path)
    except OSError as exc:  # checked up front; a disk that fills up meanwhile still gets one line
        raise TrainwiseError(f"cannot write --save {path} ({exc.strerror or exc}): choose a writable output path") from None
    p = document.prediction
    console.print(f"plan saved to [bold]{written}[/bold]: {document.offering.offering_id} "
                  f"({'spot' if document.offering.spot else 'on-demand'}), {document.nodes} node(s), engine "
                  f"{document.engine}, predicted {p.training_s:,.0f} s training / ${p.cost_usd:.4g}; time from: {p.time_source}")
    return written


def check_launchable(document: Any) -> None:
    """Refuse, before it is written, a plan `trainwise launch` would refuse: a spot plan on a cloud
    with no checkpoint bucket (a preempted run could not resume). Hivemind peers resume from the
    others, not from checkpoints (trainwise.launch.skypilot_task)."""
    offering = document.offering
    if offering.spot and document.engine != "hivemind" and not document.checkpoint_uri and offering.is_cloud:
        raise TrainwiseError(f"the best plan is a spot machine ({offering.offering_id}) and `trainwise launch` needs a "
                             "checkpoint bucket for it, so a preempted run resumes: add --checkpoint-uri s3://BUCKET/PATH "
                             "(or gs://...), or plan on-demand machines only with --no-spot")


def show_history(console: Console) -> None:
    from trainwise.launch.history import history_table, load_records, require_records

    records = require_records()
    console.print(history_table(records))
    _, problems = load_records()
    for line in problems:
        console.print(f"[dim]{line}[/dim]")


# ------------------------------------------------------------------------------ launch


@contextmanager
def _writing(target: Path) -> Iterator[None]:
    """An OS error while writing the task or its head key is one line: check_output_path cannot
    foresee everything (a disk that fills up, a place that refuses new files whatever its mode says)."""
    try:
        yield
    except OSError as exc:
        raise TrainwiseError(f"cannot write --output {target} ({exc.strerror or exc}): choose a writable output "
                             "path") from None



def launch(plan_path: Path, *, dry_run: bool, backend: str, output: Path | None, workdir: str | None,
           trainwise_spec: str | None, work_dir: Path, timeout_s: float | None, console: Console,
           validator: str = "auto", keep_cluster: bool = False) -> None:
    from trainwise.launch.plan_document import load_plan

    plan = load_plan(plan_path)
    if keep_cluster and (backend != "sky" or dry_run or plan.offering.spot):
        raise TrainwiseError("--keep-cluster keeps an on-demand SkyPilot cluster up after its job: "
                             + ("a managed spot job always ends its cluster; re-plan with --model-uri/--checkpoint-uri"
                                if plan.offering.spot else "drop it" + (" with --dry-run (the task you launch "
                                "yourself is not torn down unless you ask)" if dry_run else " with --backend local")))
    if backend == "local":
        from trainwise.launch.local_backend import run_local

        if dry_run:
            raise TrainwiseError("--dry-run writes a SkyPilot task; with --backend local there is nothing to write: "
                                 "drop --dry-run to run here")
        record = run_local(plan, work_dir=work_dir, console=console, timeout_s=timeout_s)
        error = record.relative_error
        console.print(f"run [bold]{record.run_id}[/bold] finished with {record.executed_with}: measured "
                      f"{record.measured_training_s:.1f} s training vs predicted {record.predicted.training_s:.1f} s "
                      f"({'—' if error is None else f'{error:+.1%}'}); measured cost {record.measured_cost_usd:.5f} $ "
                      f"at {record.price_per_hour:.4f} $/h ({record.price_source})")
        if record.model_location:
            console.print(f"model: {record.model_location} ({len(record.model_files)} file(s), SHA-256 verified)")
        console.print(f"run record: {plan.model_uri.rstrip('/') + '/' + record.run_id + '/run-record.json' if plan.model_uri else 'history only'}")
        for note in record.notes:
            console.print(f"[yellow]note:[/yellow] {note}")
        return
    if backend != "sky":
        raise TrainwiseError(f"--backend {backend}: use sky (SkyPilot, the default) or local")
    from trainwise.launch.skypilot_task import dump_yaml, local_files_in_command, needs_head_identity, task_config, validate

    # Before anything is written (the head key, the task): a folder, an unwritable place or the plan
    # itself (`-o plan.json`) is refused here, not after validation or as a traceback.
    target = check_output_path(output or plan_path.with_suffix(".sky.yaml"), "--output",
                               inputs=(plan_path, *([plan.requirements] if plan.requirements else [])))
    if not dry_run:
        from trainwise.launch.sky_backend import missing_for_launch
        from trainwise.launch.skypilot_task import keeps_nothing

        if keeps_nothing(plan) and not keep_cluster:
            # The launch tears the cluster down when the job ends (a managed spot job always does):
            # a paid-for model that was never written anywhere else would go with it.
            raise TrainwiseError(
                f"plan {plan.name} writes nothing outside its cluster, which is torn down when the job ends: the "
                "trained model and the run records would be lost; re-plan with --model-uri s3://BUCKET/PATH (or gs://...)"
                + ("" if plan.offering.spot else ", or launch with --keep-cluster and copy them off yourself"))

        missing = missing_for_launch(plan)
        if missing is not None:
            raise TrainwiseError(missing)
    if workdir is None:
        local_files = local_files_in_command(plan.command)
        if local_files:
            # Without a workdir the cluster would not have the script the command runs.
            workdir = "."
            console.print(f"workdir: . (the command names {', '.join(local_files)} here; SkyPilot syncs this directory, "
                          "minus .gitignore/.skyignore; pass --code-dir to sync another)")
    head_identity = None
    if needs_head_identity(plan):
        from trainwise.launch.run_command import HIVEMIND_PORT, write_head_identity

        # A fresh key per launch; it must exist before validation (SkyPilot checks mount sources).
        with _writing(target):
            head_identity = write_head_identity(target)
    try:
        config = task_config(plan, workdir=workdir, trainwise_spec=trainwise_spec, head_identity=head_identity)
        text = dump_yaml(config)
        how = validate(config, validator)
        with _writing(target):
            atomic_write_text(target, text)
    except BaseException:
        if head_identity is not None:
            Path(head_identity.local_path).unlink(missing_ok=True)
        raise
    console.print(f"SkyPilot task written to [bold]{target}[/bold], {how}")
    if head_identity is not None:
        console.print(f"Hivemind head identity (private key, mode 0600, mounted at the head): {head_identity.local_path}; "
                      f"other nodes join /ip4/<head>/tcp/{HIVEMIND_PORT}/p2p/{head_identity.peer_id}")
    if dry_run:
        # The checkpoint key is not in the task: SkyPilot's --secret passes it (from this shell's environment).
        secret = (" --secret TRAINWISE_CHECKPOINT_KEY (set it to your checkpoint key first, see docs/guide/launching.md)"
                  if plan.checkpoint_uri else "")
        console.print(f"dry run: launch it with `sky {'jobs launch' if plan.offering.spot else 'launch'} {target}{secret}` "
                      f"or `trainwise launch {plan_path}`")
        return
    from trainwise.launch.sky_backend import launch_with_skypilot

    console.print(launch_with_skypilot(plan, config, keep_cluster=keep_cluster))


# ------------------------------------------------------------------------------ sweep


def sweep(*, candidates: Sequence[str], command: list[str] | None, workload: str, iterations: int, max_seconds: float,
          epochs: int, out_dir: Path, results_uri: str | None, dry_run: bool, trainwise_spec: str | None,
          provisioning_minutes: float, timeout_s: float | None, console: Console,
          validator: str = "auto") -> dict[str, Any]:
    from trainwise.catalog import load_catalog
    from trainwise.launch import sweep as sw
    from trainwise.workloads import command_for

    catalog = load_catalog("current")
    parsed = sw.parse_candidates(candidates, catalog)
    if epochs < 1:
        raise TrainwiseError(f"--epochs must be at least 1 (got {epochs})")
    if iterations < 1:
        raise TrainwiseError(f"--iterations must be at least 1 (got {iterations})")
    job = list(command) if command else command_for(workload)
    job_workload = None if command else workload
    cloud = [c for c in parsed if c.kind == "cloud"]
    local = [c for c in parsed if c.kind == "local"]
    if cloud and not results_uri:  # checked before anything is created
        raise TrainwiseError("cloud candidates write their profiles to a bucket: add --results-uri s3://BUCKET/PATH")
    from trainwise._io import check_output_folder

    check_output_folder(out_dir, "--out-dir")  # a file there was a FileExistsError traceback
    out_dir.mkdir(parents=True, exist_ok=True)
    configs: dict[str, dict[str, Any]] = {}
    if cloud:
        from trainwise.launch.plan_document import portable_command
        from trainwise.launch.skypilot_task import dump_yaml, validate

        from trainwise.launch.package import trainwise_package

        package = trainwise_package(trainwise_spec, out_dir)
        spec = package.requirement()
        from trainwise.launch.skypilot_task import local_files_in_command

        local_files = local_files_in_command(portable_command(job))
        if local_files and cloud:
            console.print(f"workdir: . (the command names {', '.join(local_files)} here; SkyPilot syncs this directory, "
                          "minus .gitignore/.skyignore, to each candidate)")
        for candidate in cloud:
            config = sw.cloud_profile_task(candidate, portable_command(job), results_uri, iterations=iterations,
                                           max_seconds=max_seconds, workload=job_workload, catalog=catalog,
                                           trainwise_spec=spec, workdir="." if local_files else None,
                                           trainwise_wheel=(package.mount_path, str(package.wheel)) if package.wheel else None)
            how = validate(config, validator, catalog)
            configs[candidate.name] = config
            path = atomic_write_text(out_dir / f"{candidate.name}.sky.yaml", dump_yaml(config))
            console.print(f"sweep task for {candidate.offering_id}: [bold]{path}[/bold], {how}")
    if dry_run:
        console.print("dry run: cloud sweep tasks written, nothing launched" + (
            "; local targets are not run in a dry run" if local else ""))
        return {"dry_run": True, "tasks": sorted(configs)}
    price, price_source = sw.local_price()
    results: list[sw.CandidateResult] = []
    for candidate in local:
        console.print(f"profiling on local target {candidate.name} ({candidate.threads} thread(s)), k={iterations}…")
        results.append(sw.run_local_target(candidate, job, out_dir, iterations=iterations, max_seconds=max_seconds,
                                           workload=job_workload, price_per_hour=price, price_source=price_source,
                                           timeout_s=timeout_s))
    if cloud:
        results += sw.run_cloud_candidates(cloud, configs, results_uri or "", out_dir, catalog)
    sw.fill_full_training_costs(results, epochs, provisioning_s=provisioning_minutes * 60)
    measured = [r for r in results if r.profile is not None]
    comparison = sw.compare_costs([sw.CostRow(r.candidate.name, r.full_training_cost_usd or 0.0, r.sweep_cost_usd)
                                   for r in measured])
    table = Table(title=f"Sweep: {len(results)} candidate(s), k={iterations} iterations, planned {epochs} epochs")
    for column in ("candidate", "threads / offering", "status", "iteration (measured)", "sweep time", "sweep $",
                   f"full training ({epochs} ep, predicted)", "full-training $"):
        table.add_column(column)
    for r in results:
        iteration = f"{r.profile.steady_state.iteration.mean_s * 1000:.1f} ms" if r.profile else "—"
        table.add_row(r.candidate.name, str(r.candidate.threads or r.candidate.offering_id), r.status, iteration,
                      f"{r.sweep_s:.1f} s", f"{r.sweep_cost_usd:.6f}",
                      "—" if r.full_training_s is None else f"{r.full_training_s:.1f} s",
                      "—" if r.full_training_cost_usd is None else f"{r.full_training_cost_usd:.6f}")
    console.print(table)
    console.print(f"sweep cost {comparison['sweep_usd']:.6f} $ vs profiling every candidate by full training "
                  f"{comparison['full_training_usd']:.6f} $ ({comparison['saving_fraction']:.1%} saved); prices: "
                  f"{price_source if local else 'catalog'}; full-training cost modelled from the measured profiles "
                  "(trainwise estimator). Malta, Table 5.14, for comparison: 19.21 $ vs 2.62 $.")
    if measured and comparison["sweep_usd"] >= comparison["full_training_usd"]:
        console.print("[yellow]note:[/yellow] here the sweep cost more than training to completion everywhere would: the "
                      "job is too short for short profiles to pay off (they pay off as full runs grow; Malta)")
    summary: dict[str, Any] = {"candidates": [], "comparison": comparison, "epochs": epochs, "iterations": iterations}
    for r in results:
        summary["candidates"].append({
            "name": r.candidate.name, "kind": r.candidate.kind, "threads": r.candidate.threads,
            "offering_id": r.candidate.offering_id, "spot": r.candidate.spot, "status": r.status,
            "profile": str(r.profile_path) if r.profile_path else None,
            "torch_threads": r.profile.environment.torch_threads if r.profile else None,
            "iteration_mean_s": r.profile.steady_state.iteration.mean_s if r.profile else None,
            "sweep_s": r.sweep_s, "sweep_cost_usd": r.sweep_cost_usd, "price_per_hour": r.price_per_hour,
            "price_source": r.price_source, "full_training_s_predicted": r.full_training_s,
            "full_training_cost_usd_predicted": r.full_training_cost_usd, "notes": r.notes})
    if measured:
        result = sw.plan_from_sweep(results, catalog, epochs=[epochs])
        best = result.best
        summary["plan_best"] = {"offering_id": str(best["offering_id"]), "wall_s": float(best["wall_s"]),
                                "total_cost": float(best["total_cost"]), "time_source": str(best["time_provenance"])}
        # How the measured local targets themselves ranked (the best may be a catalog offering).
        primary = result.primary
        local_rows = primary[primary["offering_id"].astype(str).str.startswith("local/")]
        summary["plan_local"] = [{"offering_id": str(row["offering_id"]), "rank": int(row["rank"]),
                                  "wall_s": float(row["wall_s"]), "total_cost": float(row["total_cost"]),
                                  "time_source": str(row["time_provenance"])} for _, row in local_rows.iterrows()]
        console.print(f"plan from the sweep's measured profiles: best {best['offering_id']} ({best['market']}), "
                      f"{best['wall_s']:.1f} s, {best['total_cost']:.6f} $ — {best['time_provenance']}")
    text = json.dumps(summary, indent=1, default=str)
    safety.assert_no_secrets([text], "the sweep summary")
    path = atomic_write_text(out_dir / "sweep.json", text + "\n")
    console.print(f"sweep summary: [bold]{path}[/bold]; profiles: {out_dir}/*.profile.json (pass them to "
                  "`trainwise plan --profile`)")
    return summary
