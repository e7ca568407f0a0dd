"""CLI of the device model, as typer commands for the main `trainwise` app to register.

    from trainwise.predict.cli import device_app, validate_command
    app.add_typer(device_app, name="device")      # trainwise device characterise|predict|calibrate|measure
    app.command("validate")(validate_command)     # trainwise validate [--dataset FILE.csv] [--json]

`render_device_predictions(...)` prints the table `trainwise predict --accelerator V100 --count 1`
shows for a profile (see `predict_on_accelerator`). Heavy imports (torch, pandas) happen inside the
commands, so registering them costs nothing at start-up.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from trainwise.errors import TrainwiseError

console = Console()

device_app = typer.Typer(add_completion=False, no_args_is_help=True,
                         help="Device model: a training iteration's time on any catalog accelerator, without renting it.")


def _characterise(model: str, batch: int, precision: str, seq_len: int | None, image_size: int | None,
                  task: str | None, optimizer: str | None, memory_format: str) -> Any:
    from trainwise.predict.characterise import characterise_named

    _check_options_apply(model, seq_len, image_size, task)
    return characterise_named(model, batch, precision, seq_len, image_size=image_size, task=task, optimizer=optimizer,
                              memory_format=memory_format)


def _check_options_apply(model: str, seq_len: int | None, image_size: int | None, task: str | None) -> None:
    """An option the model's step does not take would be ignored without a word: refuse it."""
    if str(model).startswith("hf:"):
        if image_size is not None:
            raise TrainwiseError(f"--image-size applies to image models; {model} takes --seq-len (and --task)")
        return
    from trainwise.predict.characterise import _EXTRA_MODELS
    from trainwise.workloads import WORKLOADS

    given = [flag for flag, value in (("--seq-len", seq_len), ("--task", task)) if value is not None]
    if model in WORKLOADS or model in _EXTRA_MODELS:
        given += ["--image-size"] if image_size is not None else []
        if given:
            raise TrainwiseError(f"{model} has a fixed input: drop {' and '.join(given)}")
    elif given:
        verb = "applies" if len(given) == 1 else "apply"
        raise TrainwiseError(f"{' and '.join(given)} {verb} to hf: models; {model} (torchvision) takes --image-size")


def _load_characterisation(path: Path) -> tuple[Any, Any]:
    """(characterisation, the profile or None): a WorkloadCharacterisation JSON, or a Profile JSON
    that carries one."""
    from trainwise.core.workload import WorkloadCharacterisation
    from trainwise.userfiles import load_json

    data = load_json(path, "--from", allow_non_finite=True,
                     missing_hint="pass a profile (`trainwise profile -o FILE`) or a characterisation "
                     "(`trainwise device characterise MODEL --batch B -o FILE`)")
    if isinstance(data, dict) and data.get("format") == "trainwise.workload/1":
        return WorkloadCharacterisation.model_validate(data), None
    if isinstance(data, dict) and "schema_version" in data:
        from trainwise.predict.offerings import characterisation_of, characterisation_or_none
        from trainwise.profile.schema import load_profile

        profile = load_profile(path)
        # as `predict PROFILE -a` and the planner: a reference workload's profile without a trace is
        # characterised by name
        return characterisation_or_none(profile) or characterisation_of(profile), profile
    raise TrainwiseError(f"{path} is neither a workload characterisation (`trainwise device characterise -o`) "
                         "nor a trainwise profile")


ModelArg = Annotated[Optional[str], typer.Argument(help="torchvision builder (resnet50), hf:<config> (hf:roberta-base) or a trainwise workload")]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Per-device batch size")]
PrecisionOpt = Annotated[str, typer.Option(help="fp32, tf32, amp_fp16 or amp_bf16")]
SeqOpt = Annotated[Optional[int], typer.Option(help="Sequence length (hf: models; default 512, or the model's positions if fewer)")]
ImageOpt = Annotated[Optional[int], typer.Option(help="Input image size (torchvision models; default per model)")]
TaskOpt = Annotated[Optional[str], typer.Option(help="hf: head: mlm, mlm15, clm, qa, cls")]
OptimOpt = Annotated[Optional[str], typer.Option(help="sgd, sgd_momentum, adam, adamw, ... (default per model)")]
LayoutOpt = Annotated[str, typer.Option(help="nchw or nhwc (channels_last)")]


@device_app.command("characterise")
def characterise_command(
    model: ModelArg = None,
    batch: BatchOpt = None,
    precision: PrecisionOpt = "fp32",
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    task: TaskOpt = None,
    optimizer: OptimOpt = None,
    memory_format: LayoutOpt = "nchw",
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the characterisation JSON here")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the totals as JSON")] = False,
) -> None:
    """Trace one training step of MODEL on the meta device: FLOPs, bytes, parameters, memory."""
    if model is None or batch is None:
        raise TrainwiseError("give a model and --batch, e.g. `trainwise device characterise resnet50 --batch 256`")
    from trainwise._io import check_output_path, write_output_text

    if output is not None:
        check_output_path(output, "--output")  # before the trace; a folder was an IsADirectoryError traceback
    char = _characterise(model, batch, precision, seq_len, image_size, task, optimizer, memory_format)
    if output is not None:
        write_output_text(output, char.model_dump_json(), "--output")
    totals = {"model": char.model, "per_device_batch": char.per_device_batch, "precision": char.precision,
              "parameters": char.parameters, "gradient_bytes": char.gradient_bytes,
              "flops_forward": char.total_flops("forward"), "flops_backward": char.total_flops("backward"),
              "flops_step": char.total_flops(), "bytes_step": char.total_bytes(), "kernels": char.kernel_launches,
              "activation_bytes": char.activation_bytes, "memory_bytes": char.memory_breakdown(1)["total"],
              "unsupported_ops": char.unsupported_ops, "trace_seconds": char.trace_seconds}
    if json_out:
        typer.echo(json.dumps(totals, indent=1))
        return
    from rich.table import Table

    table = Table(title=f"{char.model}: one training step at batch {char.per_device_batch} ({char.precision})")
    table.add_column("category")
    table.add_column("GFLOPs", justify="right")
    table.add_column("GB moved", justify="right")
    table.add_column("kernels", justify="right")
    for cat, v in sorted(char.by_category().items(), key=lambda kv: -kv[1]["flops"]):
        table.add_row(cat, f"{v['flops'] / 1e9:,.1f}", f"{v['bytes'] / 1e9:,.2f}", f"{int(v['calls']):,}")
    console.print(table)
    mem = char.memory_breakdown(1)
    console.print(f"parameters {char.parameters:,} ({char.gradient_bytes / 2**20:,.0f} MiB of fp32 gradients); "
                  f"forward {char.total_flops('forward') / char.per_device_batch / 1e9:,.2f} GFLOPs/sample; "
                  f"memory ~{mem['total'] / 2**30:,.1f} GiB per device (activations {char.activation_bytes / 2**30:,.1f} GiB); "
                  f"traced in {char.trace_seconds:.1f} s")
    if char.unsupported_ops:
        console.print(f"[yellow]no cost rule for: {', '.join(char.unsupported_ops)} (modelled as memory-bound)[/yellow]")
    if output is not None:
        console.print(f"characterisation written to [bold]{output}[/bold]")


@device_app.command("measure")
def measure_command(
    model: ModelArg = None,
    batch: BatchOpt = None,
    precision: PrecisionOpt = "fp32",
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    task: TaskOpt = None,
    optimizer: OptimOpt = None,
    memory_format: LayoutOpt = "nchw",
    device: Annotated[str, typer.Option(help="torch device to train on: cuda (default), cuda:1, cpu")] = "cuda",
    accelerator: Annotated[Optional[str], typer.Option(help="Catalog name of the device (default: from its CUDA name)")] = None,
    seconds: Annotated[float, typer.Option(help="Seconds of timed steps (after the warm-up)")] = 3.0,
    warmup: Annotated[int, typer.Option(help="Warm-up steps (cuDNN autotuning, allocator growth)")] = 10,
    csv_out: Annotated[Optional[Path], typer.Option("--csv", help="Append the measurement as a row of a validation CSV (created with its header)")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the measurement as JSON")] = False,
) -> None:
    """Train MODEL for real on this machine's GPU (the step the device model traces) and report samples/s with spread."""
    from trainwise.predict import measure as me

    from trainwise.catalog import load_catalog

    if model is None or batch is None:
        raise TrainwiseError("give a model and --batch, e.g. `trainwise device measure resnet50 --batch 256 --precision amp_fp16`")
    # everything that can be refused is refused before minutes of measuring
    catalog = load_catalog()
    name = catalog.accelerator(accelerator).name if accelerator else None
    if csv_out is not None:
        if name is None and device == "cpu":
            raise TrainwiseError("a CPU measurement has no catalog accelerator: pass --accelerator NAME")
        me.check_validation_csv(csv_out)
    m = me.measure_throughput(model, batch, precision, seq_len=seq_len, image_size=image_size, optimizer=optimizer,
                              task=task, memory_format=memory_format, device=device, warmup_steps=warmup,
                              min_run_time_s=seconds)
    if name is None and m.device_name != "cpu":
        name = me.accelerator_of_device_name(m.device_name, catalog)
    if csv_out is not None:
        me.append_validation_row(csv_out, me.to_validation_row(m, name, f"measured by trainwise device measure on a {m.device_name}"))
    modelled = None
    if name is not None and m.device != "cpu":  # the device model's prediction for the same step, beside the measurement
        from trainwise.predict import device_model as dm

        char = _characterise(model, batch, precision, seq_len, image_size, task, optimizer, memory_format)
        modelled = dm.predict_iteration(char, catalog.accelerator(name), 1, m.precision)
    if json_out:
        payload = m.model_dump()
        if modelled is not None:
            payload["modelled"] = {"accelerator": name, "samples_per_s": modelled.samples_per_s,
                                   "relative_error_band": modelled.relative_error,
                                   "error": modelled.samples_per_s / m.samples_per_s - 1, "notes": modelled.notes}
        typer.echo(json.dumps(payload, indent=1))
        return
    spread = m.step_time_s_iqr / m.step_time_s_median if m.step_time_s_median else 0.0
    memory = f", peak {m.peak_memory_bytes / 2**30:.1f} GiB" if m.peak_memory_bytes else ""
    console.print(f"{m.model} batch {m.per_device_batch} {m.precision} on {m.device_name}: "
                  f"[bold]{m.samples_per_s:,.1f} samples/s[/bold] (step {m.step_time_s_median * 1e3:.2f} ms, IQR {spread:.1%}, "
                  f"{len(m.step_time_s_blocks)} blocks of {m.steps_per_block}{memory}; source: measured here)")
    if modelled is not None:
        console.print(f"device model for {name}: {modelled.samples_per_s:,.1f} samples/s (modelled ±{modelled.relative_error:.0%}), "
                      f"{modelled.samples_per_s / m.samples_per_s - 1:+.1%} from the measurement"
                      + (f"; {modelled.notes[0]}" if modelled.notes else ""))
    if csv_out is not None:
        console.print(f"row appended to [bold]{csv_out}[/bold] (check it with `trainwise validate --dataset {csv_out}`)")


LINK_HELP = ("With --count > 1: how gradients travel between the devices: auto (NVLink where the accelerator has it, "
             "else PCIe), nvlink, pcie, or host (peer-to-peer disabled, e.g. NCCL_P2P_DISABLE=1: through host memory)")


def render_device_predictions(preds: list[Any], title: str, out: Console | None = None) -> None:
    from rich.table import Table

    out = out or console
    table = Table(title=title)
    for col in ("accelerator", "n", "iteration", "samples/s", "band", "memory", "notes"):
        table.add_column(col, justify="right" if col in ("n", "iteration", "samples/s") else "left")
    for p in preds:
        mem = f"{p.memory_required_gib:.1f}/{p.memory_available_gib:.0f} GiB" if p.memory_available_gib else f"{p.memory_required_gib:.1f} GiB"
        if not p.fits_memory:
            mem = f"[red]OOM {mem}[/red]"
        table.add_row(p.accelerator, str(p.count), f"{p.iteration_s * 1000:,.1f} ms", f"{p.samples_per_s:,.1f}",
                      p.provenance, mem, textwrap.shorten("; ".join(n for n in p.notes if not n.startswith("out of memory")),
                                                          120, placeholder=" …"))  # whole words; --json has them all
    out.print(table)


def predict_on_accelerator(loaded: list[tuple[Path, Any]], accelerator: str, count: int, epoch_list: list[int],
                           out: Console | None = None, *, link: str | None = None,
                           iterations_per_epoch: int | None = None, json_out: Path | None = None) -> list[dict[str, Any]]:
    """What `trainwise predict PROFILE --accelerator V100 [--count N] [--epochs E]` runs: the modelled
    step on the accelerator(s), and the whole run for each epoch count (trainwise.predict.offerings.device_full_run)."""
    from rich.table import Table

    from trainwise._io import write_output_text
    from trainwise.predict.device_model import host_overhead_from_profile
    from trainwise.predict.offerings import (characterisation_of, characterisation_or_none, device_full_run,
                                             device_iterations_per_epoch, device_predictions,
                                             measured_samples_per_iteration)
    from trainwise.catalog import load_catalog
    from trainwise.predict.same_machine import predict_total
    from trainwise.predict.transfer import transfer_from_profile
    from trainwise.core.units import format_duration

    out = out or console
    payload = []
    catalog = load_catalog()
    for path, profile in loaded:
        char = characterisation_or_none(profile) or characterisation_of(profile)
        pred = device_predictions(char, accelerator, count, host_overhead_from_profile(profile), link=link)[0]
        moved = transfer_from_profile(profile, char, pred, catalog)  # a GPU profile of the same family
        pred, how = (moved, "transferred") if moved is not None else (pred, "modelled")
        render_device_predictions([pred], f"{path.name}: {how} iteration on {count} × {pred.accelerator}", out)
        if profile.cpu_only_command:
            out.print(f"[yellow]{path.name}: the command never asks torch for an accelerator, so as profiled it would run "
                      f"on the CPU of a {pred.accelerator} machine too; these times are for it with its model on the "
                      "accelerator (give the script its GPU flag)[/yellow]")
        steps = iterations_per_epoch or device_iterations_per_epoch(profile, char, count)
        # the measured iteration's samples (all micro-batches of an accumulated step) against the traced step's
        measured_samples = measured_samples_per_iteration(profile, char)
        runs = [device_full_run(profile, pred, n_epochs,
                                predict_total(profile, n_epochs).breakdown_s.get("validation_s", 0.0), steps,
                                samples_per_step=(float(measured_samples), float(char.per_device_batch)))
                for n_epochs in epoch_list]
        passes = (f": {char.passes_per_step} passes of {char.traced_batch} a step" if char.passes_per_step > 1 else "")
        table = Table(title=f"{path.name}: whole run on {count} × {pred.accelerator} (batch {char.per_device_batch} per "
                            f"device{passes})",
                      caption=f"init: measured in the profile; iterations: {pred.provenance}; validation: the profile's, "
                              "scaled by the modelled speed-up and split over the devices")
        for column in ("epochs", "iterations/epoch", "init", "iterations", "validation", "total", "band"):
            table.add_column(column, justify="right")
        for run in runs:
            table.add_row(str(run.epochs), f"{run.iterations_per_epoch:,}", format_duration(run.init_s),
                          format_duration(run.iterations_s), format_duration(run.validation_s),
                          format_duration(run.total_s), f"{format_duration(run.low_s)}–{format_duration(run.high_s)}")
        if not pred.fits_memory:  # said before the times, which are for a run that would not start
            out.print(f"[red]the model does not fit: needs ~{pred.memory_required_gib:.1f} GiB per device, "
                      f"{pred.accelerator} has ~{pred.memory_available_gib:.1f} GiB usable — the run would fail; "
                      "the times below assume it fitted[/red]")
        out.print(table)
        payload.append({"profile": path.stem, "accelerator": pred.accelerator, "count": count,
                        "provenance": f"{pred.provenance} (device model from a measured profile)",
                        "iteration": pred.model_dump(mode="json"),
                        "runs": [{"epochs": r.epochs, "iterations_per_epoch": r.iterations_per_epoch,
                                  "predicted_s": r.total_s, "low_s": r.low_s, "high_s": r.high_s,
                                  "breakdown_s": {"init_s": r.init_s, "iterations_s": r.iterations_s,
                                                  "validation_s": r.validation_s}} for r in runs]})
    if json_out is not None:
        write_output_text(json_out, json.dumps(payload, indent=1), "--json")
        out.print(f"predictions written to [bold]{json_out}[/bold]")
    return payload


@device_app.command("predict")
def predict_command(
    model: ModelArg = None,
    batch: BatchOpt = None,
    precision: PrecisionOpt = "fp32",
    seq_len: SeqOpt = None,
    image_size: ImageOpt = None,
    task: TaskOpt = None,
    optimizer: OptimOpt = None,
    memory_format: LayoutOpt = "nchw",
    source: Annotated[Optional[Path], typer.Option("--from", help="A characterisation JSON or a profile JSON instead of MODEL")] = None,
    accelerator: Annotated[Optional[list[str]], typer.Option("--accelerator", "-a", help="Catalog accelerator (any alias); repeatable (-a A100 -a L4); default: all")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="Accelerators (data parallel, per-device batch fixed)")] = 1,
    host_overhead: Annotated[Optional[float], typer.Option(help="Per-iteration host seconds not hidden by the device (data wait); default: the data wait measured in a --from profile, else 0")] = None,
    link: Annotated[Optional[str], typer.Option("--link", help=LINK_HELP)] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the predictions as JSON")] = False,
) -> None:
    """Predict one training iteration of a model (or a profile) on catalog accelerators."""
    from trainwise.predict.device_model import check_host_overhead, host_overhead_from_profile
    from trainwise.predict.offerings import check_link_count, device_predictions

    check_link_count(link, count)  # before tracing the model (seconds)
    if host_overhead is not None:
        check_host_overhead(host_overhead)
    profile = None
    if source is not None:
        char, profile = _load_characterisation(source)
    elif model is not None and batch is not None:
        char = _characterise(model, batch, precision, seq_len, image_size, task, optimizer, memory_format)
    else:
        raise TrainwiseError("give MODEL and --batch (e.g. `trainwise device predict resnet50 --batch 256 -a V100`) "
                             "or --from a characterisation/profile JSON")
    measured_wait = host_overhead is None and profile is not None
    if host_overhead is None:
        # A profile measured its data wait, which a faster accelerator does not remove: the same
        # default as `trainwise predict PROFILE -a X` and the planner, so the three agree.
        host_overhead = host_overhead_from_profile(profile) if profile is not None else 0.0
    if accelerator:  # each named one, in the order given (an unknown name is refused with the nearest ones)
        preds = [p for name in dict.fromkeys(accelerator)
                 for p in device_predictions(char, name, count, host_overhead, link=link)]
    else:
        preds = device_predictions(char, None, count, host_overhead, link=link)
    if measured_wait:  # a GPU profile: its own family's GPUs from the measured step, as predict and plan do
        from trainwise.catalog import load_catalog
        from trainwise.predict.transfer import transfer_from_profile

        catalog = load_catalog()
        preds = [transfer_from_profile(profile, char, p, catalog) or p for p in preds]
        if not accelerator:
            preds.sort(key=lambda p: p.iteration_s)
    if json_out:
        typer.echo(json.dumps([p.model_dump(mode="json") for p in preds], indent=1))
        return
    render_device_predictions(preds, f"{char.model} at batch {char.per_device_batch} per device ({char.precision})")


WRITE_ELSEWHERE = "use --output PATH to write the fit elsewhere (or --no-write to fit without saving)"


@device_app.command("calibrate")
def calibrate_command(
    add: Annotated[Optional[list[Path]], typer.Option("--add", help="Also fit these measurement CSVs (e.g. rows from `trainwise device measure --csv`); repeatable")] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the fit here (required with --add: the packaged fit stays the published one); use it with TRAINWISE_DEVICE_PARAMS=PATH")] = None,
    loo: Annotated[bool, typer.Option("--loo/--no-loo", help="Leave-one-model-out: honest errors and the bands (slow: one fit per model)")] = True,
    write: Annotated[bool, typer.Option(help="Without --output: write the fit to the packaged device_model_params.json")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the leave-one-model-out summary as JSON")] = False,
) -> None:
    """Re-fit the device model on the packaged calibration set, plus your own measurements (--add)."""
    from trainwise.predict import calibration as cal
    from trainwise.predict import device_params as dp
    from trainwise.predict.calibration_eval import summarise_errors

    added = list(add or [])
    if added and output is None:
        raise TrainwiseError("--add needs --output PATH: your rows make your own fit, the packaged one stays as published")
    for path in added:
        if not path.is_file():
            raise TrainwiseError(f"--add {path}: no such file")
    target = output if output is not None else (dp.PARAMS_PATH if write else None)
    if target is not None:
        from trainwise._io import check_output_path

        # before the fit (minutes with --loo): the fit is only written at the end
        if output is not None:
            check_output_path(output, "--output", inputs=tuple(added))
        else:  # the packaged file, which an installed (site-packages) trainwise may not let anyone write
            check_output_path(target, "the packaged fit", fix=WRITE_ELSEWHERE)
    if not json_out:
        # The fit prints nothing until it ends: say up front how long it takes, so a silent terminal
        # is not taken for a hang (with --loo it is one fit per calibration model, minutes on 2 cores).
        console.print("fitting the device model once" + (" and once per held-out model (leave-one-model-out: "
                      "several minutes; --no-loo fits once)" if loo else " (about a minute)") + "…")
    params, loo_res = cal.fit_calibration(added, with_loo=loo)
    if target is not None:
        try:
            cal.save_params(params, target)
        except OSError as exc:  # the destination changed during the fit
            raise TrainwiseError(f"cannot write the fit to {target} ({exc.strerror or exc}): "
                                 f"{'choose a writable output path' if output is not None else WRITE_ELSEWHERE}") from None
    summary = summarise_errors(loo_res.errors) if loo_res is not None else None
    if json_out:
        typer.echo(json.dumps({"loo_group": "model" if summary else None, **(summary or {}),
                               "rows": params.fitted_on.get("calibration_rows"), "added": [str(p) for p in added],
                               "written": str(target) if target else None}, indent=1))
        return
    if summary:
        console.print(f"leave-one-model-out over {summary['rows']} rows: median |error| {summary['median_abs_error']:.1%}, "
                      f"90th percentile {summary['p90_abs_error']:.1%}")
    else:
        console.print(f"fitted on {params.fitted_on.get('calibration_rows')} rows (no leave-one-model-out: bands kept from the packaged fit)")
    if target is not None:
        console.print(f"parameters written to [bold]{target}[/bold]" +
                      (f"; use them with {dp.PARAMS_ENV}={target}" if output is not None else ""))


def validate_command(
    dataset: Annotated[Optional[Path], typer.Option("--dataset", help="CSV: model,accelerator,count,per_device_batch,precision,samples_per_s,source (+ optional columns), or a packaged set: validation (default), calibration, measured-h100")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the report (summary + per-row results) as JSON")] = False,
    params: Annotated[Optional[Path], typer.Option(help="Device-model parameters JSON (default: the packaged fit)")] = None,
) -> None:
    """Compare device-model predictions with measured throughputs listed in a CSV."""
    from trainwise.predict import measurements as meas
    from trainwise.predict.device_params import load_params
    from trainwise.predict.validate import report_table, summary_lines, validate_dataset

    path = dataset or meas.VALIDATION_CSV
    if dataset is not None and not dataset.exists() and str(dataset) in meas.PACKAGED_DATASETS:
        path = meas.PACKAGED_DATASETS[str(dataset)]
    report = validate_dataset(path, params=load_params(params) if params else None)
    if json_out:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=1))
        return
    console.print(report_table(report))
    for line in summary_lines(report):
        console.print(line)
