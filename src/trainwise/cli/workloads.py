"""`trainwise workloads`: the reference workloads of the papers trainwise builds on."""

from __future__ import annotations

from trainwise.cli._app import console


def list_workloads() -> None:
    """List the reference workloads of the papers trainwise builds on."""
    from rich.table import Table

    from trainwise.workloads import WORKLOADS

    table = Table(title="Reference workloads")
    for column in ("name", "data", "batch", "epochs", "source", "description"):
        table.add_column(column)
    for spec in WORKLOADS.values():
        table.add_row(spec.name, f"{spec.data_kind}: {spec.data_description}", str(spec.default_batch_size),
                      str(spec.default_epochs), spec.seed_source, spec.description)
    console.print(table)
