"""`trainwise predict PROFILE...`: the full training time, on the profiled machine or another accelerator."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from trainwise.cli._app import console, given, parse_int_list
from trainwise.errors import TrainwiseError
from trainwise.predict.cli import LINK_HELP


def predict(
    ctx: typer.Context,
    profiles: Annotated[list[Path], typer.Argument(help="Profile JSON file(s), e.g. one per batch size")],
    epochs: Annotated[Optional[int], typer.Option(help="Epochs of the full run")] = None,
    epoch_options: Annotated[str, typer.Option(help="Epoch counts to tabulate when --epochs is not given (Malta methodology 2; default: the script's own epoch count when the profile read it, else 5,10,20)")] = "5,10,20",
    epochs_from: Annotated[Optional[Path], typer.Option(help="Methodology 1: take the epochs from a --full profile of a run with early stopping")] = None,
    estimator: Annotated[str, typer.Option(help="trainwise (default), eq5.4, eq5.3, averaged, eq5.1, eq4.1, or all")] = "trainwise",
    iterations_per_epoch: Annotated[Optional[int], typer.Option(help="Override the iterations per epoch")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Also write the predictions as JSON")] = None,
    accelerators: Annotated[Optional[list[str]], typer.Option("--accelerator", "-a", help="Predict on this catalog accelerator instead (device model): the step and the whole run, e.g. V100; one (several: `trainwise device predict -a A -a B`)")] = None,
    count: Annotated[int, typer.Option("--count", "-n", help="With --accelerator: number of accelerators (data parallel)")] = 1,
    link: Annotated[Optional[str], typer.Option("--link", help=LINK_HELP)] = None,
) -> None:
    """Predict the full training time on the machine each profile was taken on (or, with --accelerator,
    on another accelerator from the device model: the step and the whole run)."""
    from trainwise._io import check_output_path, write_output_text
    from trainwise.core.profile import slice_note
    from trainwise.predict.epochs import DEFAULT_EPOCH_OPTIONS, decide_epochs
    from trainwise.predict.same_machine import ESTIMATORS, predict_total
    from trainwise.profile.schema import load_profile
    from trainwise.report.terminal import prediction_table, print_flips, print_notes

    if accelerators and len(set(accelerators)) > 1:  # click would keep the last one silently
        raise TrainwiseError(f"--accelerator given {len(accelerators)} times: `trainwise predict` takes one; compare "
                             "several steps with `trainwise device predict --from PROFILE -a A100 -a L4`, or rank them with "
                             "`trainwise plan --profile PROFILE`")
    accelerator = accelerators[0] if accelerators else None
    if accelerator is None and (count != 1 or link is not None):
        raise TrainwiseError("--count and --link describe the accelerators of --accelerator: add --accelerator NAME "
                             "(e.g. -a V100), or drop them")
    if accelerator is not None:
        from trainwise.predict.offerings import check_link_count

        check_link_count(link, count)
    if accelerator is not None and estimator != "trainwise":
        raise TrainwiseError("--estimator picks a same-machine estimator; with --accelerator the device model predicts "
                             "the step: drop --estimator")
    if count < 1:
        raise TrainwiseError(f"--count must be at least 1 (got {count})")
    if iterations_per_epoch is not None and iterations_per_epoch < 1:
        raise TrainwiseError(f"--iterations-per-epoch must be at least 1 (got {iterations_per_epoch})")
    if json_out is not None:
        check_output_path(json_out, "--json", inputs=tuple(profiles) + ((epochs_from,) if epochs_from else ()))
    if epochs is not None and epochs_from is not None:
        raise TrainwiseError("--epochs and --epochs-from both give the epoch count: pass one of them")
    if epochs_from is not None and not epochs_from.exists():
        # load_profile's own hint records a sampled profile; this one must be a complete run.
        raise TrainwiseError(f"--epochs-from {epochs_from} does not exist: record the complete run with "
                             f"`trainwise profile --full -o {epochs_from} -- python train.py`")
    options = parse_int_list(epoch_options, "--epoch-options") if given(ctx, "epoch_options") else DEFAULT_EPOCH_OPTIONS
    loaded = [(path, load_profile(path)) for path in profiles]
    decision = decide_epochs(epochs=epochs, epoch_options=options, epoch_options_given=given(ctx, "epoch_options"),
                             profiles=[(str(path), prof) for path, prof in loaded],
                             epochs_from=load_profile(epochs_from) if epochs_from is not None else None, what="epochs",
                             iterations_per_epoch=iterations_per_epoch)
    if decision.says:
        console.print(decision.says)
    if iterations_per_epoch is None:
        iterations_per_epoch = decision.iterations_per_epoch  # a step budget spread over the epochs it begins
    epoch_list = decision.counts
    from trainwise.plan.bounds import check_predict_request  # before any prediction: 10^8 devices, 10^12 epochs
    check_predict_request(count=count, epochs=epoch_list, profiles=[prof for _, prof in loaded])
    if accelerator is not None:
        from trainwise.predict.cli import predict_on_accelerator

        predict_on_accelerator(loaded, accelerator, count, epoch_list, console, link=link,
                               iterations_per_epoch=iterations_per_epoch, json_out=json_out)
        return
    estimators = list(ESTIMATORS) if estimator == "all" else [estimator]
    rows = []
    skipped: list[str] = []
    for path, prof in loaded:
        label = f"{path.stem} (batch {prof.dataset.global_batch_size})"
        for name in estimators:
            for n_epochs in epoch_list:
                try:
                    rows.append((label, prof, predict_total(prof, n_epochs, name, iterations_per_epoch)))
                except TrainwiseError as exc:
                    if estimator != "all":
                        raise
                    skipped.append(f"{name}: {exc}")
                    break
    console.print(prediction_table(rows))
    for path, prof in loaded:
        if slice_note(prof.notes):
            console.print(f"[yellow]⚠ {path.name} is the small slice `trainwise plan` profiles a reference workload on "
                          f"(batch {prof.dataset.global_batch_size}): this is that slice trained in full here, not the "
                          "full-size job, whose time `trainwise plan` models[/yellow]")
    print_notes(console, rows)
    print_flips(console, rows)
    for line in sorted(set(skipped)):
        console.print(f"[dim]skipped {line}[/dim]")
    if json_out is not None:
        payload = [{"profile": label, "estimator": p.estimator, "epochs": p.epochs, "iterations_per_epoch": p.iterations_per_epoch,
                    "predicted_s": p.total_s, "low_s": p.low_s, "high_s": p.high_s, "breakdown_s": p.breakdown_s,
                    "provenance": "modelled from a measured profile", "note": p.note} for label, _, p in rows]
        from trainwise.userfiles import json_text

        write_output_text(json_out, json_text(payload, "--json"), "--json")
        console.print(f"predictions written to [bold]{json_out}[/bold]")
