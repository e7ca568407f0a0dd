"""`trainwise pipeline profile SPEC` and `trainwise pipeline apply SPEC --strategy ID` (thin wiring)."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from trainwise.errors import TrainwiseError

pipeline_app = typer.Typer(no_args_is_help=True, help="Input-pipeline strategies (PRESTO): what to preprocess offline, in which "
                                                      "format, compressed or not, cached or not.")
console = Console()
SPEC_HELP = "A reference pipeline (cv, nlp, audio, nilm: data generated under --data-dir) or module:function / file.py:function returning a Pipeline"


def _list(text: str, what: str) -> list[str]:
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values:
        raise TrainwiseError(f"{what} is empty: give comma-separated values")
    return values


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in _list(text, what)]
    except ValueError:
        raise TrainwiseError(f"{what} must be comma-separated whole numbers (got {text!r})") from None
    if any(v < 0 for v in values):
        raise TrainwiseError(f"{what} must not be negative (got {text!r})")
    return values


def _positive(values: list[int], what: str) -> list[int]:
    if any(v < 1 for v in values):
        raise TrainwiseError(f"{what} must be at least 1 (got {','.join(map(str, values))})")
    return values


def _weights(text: str) -> tuple[float, float, float]:
    try:
        values = tuple(float(v) for v in _list(text, "--weights"))
    except ValueError:
        raise TrainwiseError(f"--weights must be three numbers w_p,w_s,w_t (got {text!r}), e.g. 0,0,1 or 1,0,1") from None
    if len(values) != 3:
        raise TrainwiseError(f"--weights must be three numbers w_p,w_s,w_t (got {text!r})")
    return values  # type: ignore[return-value]


def _spec_source(spec: str) -> Path | None:
    """The source file a `file.py:function` or `module:function` SPEC names, if it can be found without
    running it: an output must not replace the pipeline's own code."""
    target, sep, _ = spec.rpartition(":")
    if not sep:
        return None
    if target.endswith(".py"):
        return Path(target)
    import importlib.util

    try:
        found = importlib.util.find_spec(target)
    except (ImportError, ValueError):  # load_spec names the problem
        return None
    return Path(found.origin) if found is not None and found.origin and found.has_location else None


@pipeline_app.command("profile")
def profile_command(
    spec: Annotated[str, typer.Argument(help=SPEC_HELP)],
    data_dir: Annotated[Path, typer.Option(help="Where reference data is generated")] = Path("trainwise-pipeline-data"),
    size: Annotated[str, typer.Option(help="Reference data size: tiny, small, medium, large or a sample count")] = "small",
    output_dir: Annotated[Path, typer.Option(help="Where strategies are materialised")] = Path("trainwise-pipeline-out"),
    sample: Annotated[Optional[int], typer.Option("--sample", help="Profile N samples and extrapolate to the full dataset")] = None,
    splits: Annotated[Optional[str], typer.Option(help="Split positions to try, e.g. 0,2,3 (default: every allowed one)")] = None,
    compression: Annotated[str, typer.Option(help="Compressions: none,gzip,zstd,lz4")] = "none,zstd",
    formats: Annotated[str, typer.Option(help="Tensor formats: npy,safetensors")] = "npy",
    shards: Annotated[str, typer.Option(help="Shard counts")] = "4",
    workers: Annotated[str, typer.Option(help="Online workers (DataLoader num_workers or threads)")] = "0,2",
    worker_kinds: Annotated[str, typer.Option(help="process,thread")] = "process",
    cache: Annotated[str, typer.Option(help="Cache modes: none (evict the page cache every epoch), page, app")] = "none,page,app",
    weights: Annotated[str, typer.Option(help="PRESTO weights w_p,w_s,w_t (offline time, storage, throughput); deadline example 1,0,1")] = "0,0,1",
    required_sps: Annotated[Optional[float], typer.Option(help="Samples/s the accelerator consumes: strategies slower than this are excluded")] = None,
    training_profile: Annotated[Optional[Path], typer.Option(help="A training profile (trainwise profile) to derive --required-sps from, with --accelerator")] = None,
    accelerator: Annotated[Optional[str], typer.Option(help="With --training-profile: the accelerator to keep up with, e.g. A100")] = None,
    cloud_prices: Annotated[bool, typer.Option("--cloud-prices", help="Rank by offline compute + storage cost (catalog prices) and throughput")] = False,
    catalog: Annotated[str, typer.Option(help="Price catalog for --cloud-prices")] = "current",
    min_seconds: Annotated[float, typer.Option(help="Measure each strategy for at least this long (whole epochs)")] = 0.5,
    confirm_rounds: Annotated[int, typer.Option(help="Re-time the strategies within 10 % of the fastest this many more times, "
                                                     "interleaved, and rank them by the median of those side-by-side timings (0: one timing each)")] = 3,
    skip_errors: Annotated[bool, typer.Option("--skip-errors", help="Skip and count samples a step fails on")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the profile and the choice as JSON")] = None,
) -> None:
    """Profile strategies of SPEC (offline time p, storage s, throughput t through a real DataLoader) and pick one."""
    from trainwise._io import check_output_folder, check_output_path, write_output_text
    from trainwise.pipeline.profiler import confirm_leaders, measure_read_bandwidth, profile_pipeline
    from trainwise.pipeline.resolve import load_spec
    from trainwise.pipeline.select import cloud_prices_from_catalog, required_samples_per_s, select
    from trainwise.pipeline.strategy import enumerate_strategies

    from trainwise.pipeline.bounds import check_profile_options

    warnings.filterwarnings("ignore", message=".*worker processes in total.*")
    chosen_weights = _weights(weights)
    worker_counts, shard_counts = _ints(workers, "--workers"), _positive(_ints(shards, "--shards"), "--shards")
    # Every number and bound before the profiling (tens of seconds), not after it.
    check_profile_options(weights=chosen_weights, required_sps=required_sps, workers=worker_counts, shards=shard_counts,
                          confirm_rounds=confirm_rounds, min_seconds=min_seconds, spec=spec, size=size, sample=sample)
    if (training_profile is None) != (accelerator is None):
        raise TrainwiseError("--training-profile and --accelerator go together (or give --required-sps)")
    # Before the profiling (minutes): its results must have somewhere to go, and --json must not
    # replace the pipeline's source or the training profile.
    check_output_folder(output_dir, "--output-dir")
    if json_out is not None:
        check_output_path(json_out, "--json", inputs=tuple(p for p in (_spec_source(spec), training_profile) if p is not None))
    if training_profile is not None:
        if required_sps is not None:
            raise TrainwiseError("give either --required-sps or --training-profile/--accelerator, not both")
        required_sps = required_samples_per_s(training_profile, accelerator)  # type: ignore[arg-type]
        console.print(f"required throughput: {required_sps:.0f} samples/s (modelled by the device model for {accelerator})")
    pipeline = load_spec(spec, data_dir=data_dir, size=size)
    if skip_errors:
        pipeline = dataclasses.replace(pipeline, skip_online_errors=True)
    strategies = enumerate_strategies(pipeline, splits=_ints(splits, "--splits") if splits else None, formats=_list(formats, "--formats"),
                                      compressions=_list(compression, "--compression"), shards=shard_counts,
                                      workers=worker_counts, worker_kinds=_list(worker_kinds, "--worker-kinds"),
                                      caches=_list(cache, "--cache"))
    bandwidth = measure_read_bandwidth(output_dir, 128 << 20)
    with console.status("profiling") as status:
        profile = profile_pipeline(pipeline, strategies, output_dir, sample_n=sample, min_seconds=min_seconds, bandwidth=bandwidth,
                                   skip_errors=skip_errors, progress=lambda text: status.update(f"profiling: {text}"))
        if confirm_rounds > 0:
            profile = confirm_leaders(pipeline, profile, output_dir, rounds=confirm_rounds, min_seconds=min_seconds,
                                      progress=lambda text: status.update(f"re-timing the leaders: {text}"))
    prices = cloud_prices_from_catalog(catalog) if cloud_prices else None
    selection = select(profile, chosen_weights, required_samples_per_s=required_sps, prices=prices)
    scores = dict(selection.ranking)
    measured = ("measured here; p, s for the full dataset" if str(profile.extrapolation).startswith("none")
                else "measured here on a sample; p, s extrapolated to the full dataset, see below")
    table = Table(title=f"{pipeline.name}: {len(profile.results)} strategies ({measured})")
    id_width = max((len(r.strategy_id) for r in profile.results), default=8)
    cells = {
        "strategy": lambda r: r.strategy_id, "stored after": lambda r: r.split_name,
        "t samples/s": lambda r: f"{r.throughput_sps:.1f}",
        "bound/s": lambda r: "-" if r.bound_sps is None else f"{r.bound_sps:.0f}",
        "s MB": lambda r: f"{r.storage_bytes_full / 1e6:.2f}", "p s": lambda r: f"{r.offline_s_full:.2f}",
        "B/sample": lambda r: f"{r.bytes_per_sample:.0f}", "CPU %": lambda r: f"{r.cpu_percent:.0f}",
        "score": lambda r: f"{scores[r.strategy_id]:.3f}" if r.strategy_id in scores else "excluded",
    }
    # The strategy id is what the user copies into `apply --strategy` and the metrics are the point:
    # on a narrow terminal the secondary columns go (`--json` has them all) rather than cutting either.
    shown = list(cells) if console.width >= id_width + 80 else ["strategy", "t samples/s", "s MB", "p s", "score"]
    for column in shown:
        table.add_column(column, justify="left" if column in ("strategy", "stored after") else "right",
                         no_wrap=column == "strategy", min_width=id_width if column == "strategy" else None)
    for r in sorted(profile.results, key=lambda r: -scores.get(r.strategy_id, -1)):
        table.add_row(*(cells[column](r) for column in shown))
    console.print(table)
    console.print(f"extrapolation: {profile.extrapolation}")
    console.print(f"read bandwidth measured here: disk {bandwidth.disk_bytes_per_s / 1e6:.0f} MB/s, page cache "
                  f"{bandwidth.page_cache_bytes_per_s / 1e6:.0f} MB/s (bound = bandwidth / bytes per sample)")
    if prices is not None:
        console.print("prices: " + "; ".join(f"{k}: {v}" for k, v in prices.sources.items()))
    # A note shared by several strategies is printed once, naming them (or how many).
    by_note: dict[str, list[str]] = {}
    for r in profile.results:
        for n in r.notes:
            by_note.setdefault(n, []).append(r.strategy_id)
    strategy_notes = [f"{n} ({ids[0] if len(ids) == 1 else f'{len(ids)} strategies'})" for n, ids in by_note.items()]
    for note in selection.notes + strategy_notes[:5]:
        console.print(f"[yellow]note:[/yellow] {note}")
    console.print(f"best ({selection.objective}, weights {selection.weights}): [bold]{selection.best.strategy_id}[/bold] "
                  f"{selection.best.throughput_sps:.0f} samples/s" + ("" if selection.keeps_up is None else
                                                                       f"; keeps up with {required_sps:.0f}/s: {selection.keeps_up}"))
    console.print(f"materialise it: trainwise pipeline apply {spec} --strategy {selection.best.strategy_id} --output-dir {output_dir}"
                  + (f" --data-dir {data_dir} --size {size}" if ":" not in spec else ""))
    if json_out is not None:
        write_output_text(json_out, '{"profile": ' + profile.model_dump_json(indent=1) + ', "selection": '
                          + selection.model_dump_json(indent=1) + "}", "--json")
        console.print(f"profile written to [bold]{json_out}[/bold]")


@pipeline_app.command("apply")
def apply_command(
    spec: Annotated[str, typer.Argument(help=SPEC_HELP)],
    strategy: Annotated[str, typer.Option("--strategy", help="Strategy id from `trainwise pipeline profile`, e.g. m2-npy-zstd-s4-w2p-app")],
    data_dir: Annotated[Path, typer.Option(help="Where reference data is generated")] = Path("trainwise-pipeline-data"),
    size: Annotated[str, typer.Option(help="Reference data size: tiny, small, medium, large or a sample count")] = "small",
    output_dir: Annotated[Path, typer.Option(help="Where the strategy is materialised")] = Path("trainwise-pipeline-out"),
    rebuild: Annotated[bool, typer.Option("--rebuild", help="Discard earlier shards of this strategy and rebuild")] = False,
    skip_errors: Annotated[bool, typer.Option("--skip-errors", help="Skip and count samples a step fails on")] = False,
) -> None:
    """Materialise SPEC's offline part for --strategy (resumable; manifest written last) and print how to load it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from trainwise.pipeline.loader import make_dataloader
    from trainwise.pipeline.materialise import materialise
    from trainwise.pipeline.resolve import load_spec
    from trainwise.pipeline.strategy import Strategy

    from trainwise._io import check_output_folder

    from trainwise.pipeline.bounds import check_reference_size, check_workers

    chosen = Strategy.parse(strategy)
    check_reference_size(spec, size)
    check_workers([getattr(chosen, "workers", 0)])
    check_output_folder(output_dir, "--output-dir")  # before the materialisation, not at its first shard
    pipeline = load_spec(spec, data_dir=data_dir, size=size)
    chosen.check(pipeline)
    if chosen.materialised:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=console) as bar:
            task = bar.add_task(f"materialising {chosen.storage_id}", total=len(pipeline.source))
            directory, manifest = materialise(pipeline, chosen, output_dir, rebuild=rebuild, skip_errors=skip_errors,
                                              progress=lambda n: bar.advance(task, n))
        console.print(f"{manifest.samples} samples, {manifest.bytes / 1e6:.1f} MB in {len(manifest.shards)} shards at {directory} "
                      f"(offline {manifest.offline_seconds:.1f} s, measured here)")
        if manifest.skipped_count:
            console.print(f"[yellow]skipped {manifest.skipped_count} samples[/yellow] by step: {manifest.skipped_by_step} (listed in the manifest)")
    loader = make_dataloader(pipeline, chosen, output_dir)  # checks the shards against the manifest
    del loader
    source = (f'load_spec("{spec}", data_dir="{data_dir}", size="{size}")' if ":" not in spec else f'load_spec("{spec}")')
    console.print("use it:\n"
                  "    from trainwise.pipeline import load_spec, make_dataloader\n"
                  f"    pipeline = {source}\n"
                  f'    loader = make_dataloader(pipeline, "{chosen.id}", "{output_dir}")  # a torch DataLoader, one sample per item\n'
                  "    for sample in loader: ...", highlight=False, soft_wrap=True)
