"""`trainwise catalog ...`: show, search, list regions of and refresh the price catalog (registered in trainwise.cli)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from trainwise.errors import TrainwiseError

catalog_app = typer.Typer(no_args_is_help=True, help="Cloud offerings x prices: show, search, regions, import, accelerators.")
console = Console()

CatalogOpt = Annotated[str, typer.Option("--catalog", "-c", help="current, packaged, seed-2021, or a path (import dir, .toml/.yaml, SkyPilot .csv)")]
UserOpt = Annotated[Optional[list[Path]], typer.Option("--user", help="Merge user offerings from this TOML/YAML file")]


def _load(name: str, user: list[Path] | None):  # type: ignore[no-untyped-def]
    from trainwise.catalog import load_catalog, load_user_offerings

    catalog = load_catalog(name)
    for path in user or []:
        catalog = catalog.merged_with(load_user_offerings(path, catalog.accelerators))
    return catalog


def _money(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.4g}" if value < 1 else f"{value:,.2f}"


def _num(value: float) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:g}"


@catalog_app.command()
def show(catalog_name: CatalogOpt = "current", user: UserOpt = None) -> None:
    """Summarise a catalog: snapshot date, origin, offerings per cloud and accelerator, quirks handled."""
    catalog = _load(catalog_name, user)
    frame = catalog.offerings
    console.print(f"[bold]{catalog.name}[/bold]: prices as of [bold]{catalog.snapshot_date}[/bold]")
    console.print(f"origin: {catalog.origin}")
    console.print(f"source: {catalog.source}", highlight=False)
    table = Table(title=f"{len(frame)} offerings", caption=catalog.caption)
    for column in ("cloud", "regions", "offerings", "priced on-demand", "with spot", "accelerators"):
        table.add_column(column, justify="right" if column in ("regions", "offerings", "priced on-demand", "with spot") else "left")
    for cloud, rows in frame.groupby("cloud", sort=True):
        accelerators = ", ".join(sorted(rows["accelerator"].dropna().unique()))
        table.add_row(str(cloud), str(rows["region"].nunique()), str(len(rows)), str(int(rows["price_per_hour"].notna().sum())),
                      str(int(rows["spot_price_per_hour"].notna().sum())), accelerators)
    console.print(table)
    for caveat in catalog.caveats:
        console.print(f"[dim]- {caveat}[/dim]", highlight=False)
    used = frame["notes"].dropna().str.split(";").explode().value_counts()
    if len(used):
        console.print("quirks handled (offerings affected):")
        for code, count in used.items():
            if code:
                console.print(f"  {count:>5}  {catalog.notes.get(code, code)}", highlight=False)


@catalog_app.command()
def search(
    cloud: Annotated[Optional[str], typer.Option(help="aws, gcp, azure, lambda, ...")] = None,
    region: Annotated[Optional[str], typer.Option(help="Region or zone, or a prefix such as us-")] = None,
    accelerator: Annotated[Optional[str], typer.Option("--accelerator", "-a", help="Accelerator name, e.g. V100, A100-80GB, TPU-v3")] = None,
    max_price: Annotated[Optional[float], typer.Option(help="Highest USD/h (spot price with --spot)")] = None,
    spot: Annotated[bool, typer.Option("--spot", help="Rank by spot/preemptible price; only offerings with one")] = False,
    min_memory: Annotated[Optional[float], typer.Option(help="Minimum accelerator memory per device, GiB")] = None,
    instance_type: Annotated[Optional[str], typer.Option(help="Exact instance type")] = None,
    per_region: Annotated[bool, typer.Option("--per-region", help="One row per region: its cheapest zone")] = False,
    limit: Annotated[int, typer.Option(help="Rows to show (0: all)")] = 30,
    catalog_name: CatalogOpt = "current",
    user: UserOpt = None,
) -> None:
    """List offerings matching the filters, cheapest first."""
    if limit < 0:
        raise TrainwiseError(f"--limit must be >= 0 rows, 0 showing all (got {limit})")
    catalog = _load(catalog_name, user)
    rows = catalog.search(cloud=cloud, region=region, accelerator=accelerator, max_price=max_price, spot=spot,
                          min_accelerator_memory_gib=min_memory, instance_type=instance_type)
    if per_region:
        key = "spot_price_per_hour" if spot else "price_per_hour"
        rows = rows.drop_duplicates(["cloud", "region", "instance_type", "accelerator", "accelerator_count"]).sort_values(
            key, na_position="last", kind="stable")
    total = len(rows)
    shown = rows if limit <= 0 else rows.head(limit)
    more = f"; {total - len(shown)} more (--limit 0 shows all)" if total > len(shown) else ""
    table = Table(title=f"{total} offerings", caption=f"{catalog.caption}; USD per hour for the whole offering{more}")
    with_zone = bool(shown["zone"].notna().any())
    with_kind = shown["kind"].nunique() > 1
    columns = ["cloud", "region"] + (["zone"] if with_zone else []) + ["instance type", "accelerator", "n", "GiB/dev",
                                                                      "vCPU", "on-demand $/h", "spot $/h"]
    for column in columns + (["kind"] if with_kind else []):
        numeric = column in ("n", "GiB/dev", "vCPU", "on-demand $/h", "spot $/h")
        table.add_column(column, justify="right" if numeric else "left", no_wrap=numeric or column == "instance type")
    for row in shown.itertuples(index=False):
        cells = [row.cloud, row.region if isinstance(row.region, str) else "-"]
        if with_zone:
            cells.append(row.zone if isinstance(row.zone, str) else "-")
        cells += [row.instance_type, row.accelerator if isinstance(row.accelerator, str) else "-", _num(row.accelerator_count),
                  _num(row.accelerator_memory_gib), _num(row.vcpus), _money(row.price_per_hour), _money(row.spot_price_per_hour)]
        if with_kind:
            cells.append(row.kind)
        table.add_row(*cells)
    console.print(table)


@catalog_app.command()
def regions(
    cloud: Annotated[Optional[str], typer.Option(help="Only this cloud: aws, gcp, azure, lambda, ...")] = None,
    catalog_name: CatalogOpt = "current",
    user: UserOpt = None,
) -> None:
    """List each cloud's regions (the names --region takes) with their continent, zones, offerings and accelerators."""
    catalog = _load(catalog_name, user)
    summary = catalog.region_summary(cloud)
    table = Table(title=f"{len(summary)} regions", caption=f"{catalog.caption}; continent: as `plan --local-continent` names it")
    for column in ("cloud", "region", "continent", "zones", "offerings", "with spot", "accelerators"):
        # the region is the name to type: never cut; the accelerator list wraps instead
        table.add_column(column, justify="right" if column in ("zones", "offerings", "with spot") else "left",
                         no_wrap=column == "region", overflow="fold", min_width=max(summary["region"].str.len(), default=6) if column == "region" else None)
    for row in summary.itertuples(index=False):
        table.add_row(row.cloud, row.region, row.continent or "-", str(row.zones), str(row.offerings), str(row.with_spot),
                      row.accelerators or "-")
    console.print(table)


@catalog_app.command("import")
def import_(
    paths: Annotated[list[Path], typer.Argument(help="SkyPilot catalog CSVs, e.g. ~/.sky/catalogs/v8/aws/vms.csv")],
    cloud: Annotated[Optional[str], typer.Option(help="The files' cloud when the name does not say (aws, gcp, azure, lambda)")] = None,
    skip_unknown_accelerators: Annotated[bool, typer.Option("--skip-unknown-accelerators", help="Drop rows whose accelerator has no spec instead of failing")] = False,
) -> None:
    """Validate SkyPilot catalog files and store them as your `current` catalog."""
    from trainwise.catalog.importer import import_skypilot

    result = import_skypilot(paths, cloud=cloud, skip_unknown=skip_unknown_accelerators)
    for name, info in sorted(result.clouds.items()):
        details = "; ".join(f"{k}: {v}" for k, v in info["counts"].items() if k != "offerings")
        console.print(f"{name}: {info['offerings']} offerings from {info['file']} (prices of {info['price_date']})"
                      + (f" [dim]({details})[/dim]" if details else ""), highlight=False)
    console.print(f"stored in [bold]{result.directory}[/bold]; `current` now reads it ({result.catalog.caption})", highlight=False)


@catalog_app.command()
def accelerators(catalog_name: CatalogOpt = "current") -> None:
    """List accelerator specs (dense peaks per unit) and which clouds offer each."""
    catalog = _load(catalog_name, None)
    offered = catalog.offerings.groupby("accelerator")["cloud"].agg(lambda s: ", ".join(sorted(set(s))))
    table = Table(title="Accelerators", caption=f"{catalog.caption}; specs from accelerators.csv (vendor datasheets), dense peaks")
    for column in ("name", "unit", "memory GiB", "GB/s", "fp32 TF", "tf32 TF", "fp16/bf16 TF", "fp8 TF", "SMs",
                   "L2 MiB", "offered on"):
        table.add_column(column, justify="left" if column in ("name", "unit", "offered on") else "right")
    for spec in sorted(catalog.accelerators.values(), key=lambda a: (a.kind, a.name)):
        half = max([v for v in (spec.fp16_tflops, spec.bf16_tflops) if v is not None], default=None)
        sms = _num(spec.cores) if spec.kind == "gpu" else "-"  # TPU and Trainium cores are not SMs
        table.add_row(spec.name, spec.granularity.replace("_", " "), _num(spec.memory_gib), _num(spec.memory_bw_gbs),
                      _num(spec.fp32_tflops), _num(spec.tf32_tflops), _num(half), _num(spec.fp8_tflops), sms,
                      _num(spec.l2_cache_mib), offered.get(spec.name, "-"))
    console.print(table)
