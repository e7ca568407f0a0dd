"""The command groups other packages define, wired into `trainwise` (each module stays light: the
heavy libraries are imported by the commands themselves)."""

from __future__ import annotations

from trainwise.catalog.cli import catalog_app
from trainwise.cli._app import app
from trainwise.launch.cli import launch_command, sweep_command
from trainwise.pipeline.cli import pipeline_app
from trainwise.predict.cli import device_app, validate_command
from trainwise.predict.net_cli import net_app
from trainwise.run.command import run_command

app.add_typer(catalog_app, name="catalog")
app.add_typer(device_app, name="device")
app.command("validate")(validate_command)
app.command("launch")(launch_command)
app.command("sweep")(sweep_command)
app.add_typer(net_app, name="net")
app.add_typer(pipeline_app, name="pipeline")
app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(run_command)
