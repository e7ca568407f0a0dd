"""`trainwise net probe`: thin typer wiring of trainwise.predict.net_probe.

    from trainwise.predict.net_cli import net_app
    app.add_typer(net_app, name="net")      # trainwise net probe --serve PORT | HOST:PORT [-o network.json]
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from trainwise.errors import TrainwiseError

console = Console()
net_app = typer.Typer(add_completion=False, no_args_is_help=True,
                      help="Network between training peers: measure bandwidth and RTT for the data-parallel model.")


@net_app.command("probe")
def probe_command(
    target: Annotated[Optional[str], typer.Argument(help="HOST:PORT of a probe server (omit with --serve)")] = None,
    serve: Annotated[Optional[int], typer.Option("--serve", help="Serve probes on this TCP port until Ctrl-C")] = None,
    bind: Annotated[str, typer.Option(help="Address to listen on with --serve")] = "0.0.0.0",
    seconds: Annotated[float, typer.Option(help="Seconds per bandwidth direction")] = 1.0,
    pings: Annotated[int, typer.Option(help="Round trips for the RTT median")] = 20,
    output: Annotated[Path, typer.Option("--output", "-o", help="Network file to merge the measured pair into")] = Path("network.json"),
    name: Annotated[Optional[str], typer.Option(help="Site name of this host in the network file (default: hostname)")] = None,
    remote_name: Annotated[Optional[str], typer.Option(help="Site name of the other host (default: HOST)")] = None,
) -> None:
    """Measure bandwidth and RTT to HOST:PORT and write a pair entry usable as --network override."""
    from trainwise.predict import net_probe

    if serve is not None:
        if target:
            raise TrainwiseError("give either --serve PORT or HOST:PORT, not both")
        # printed once listening: a bad port or address is an error, not a "serving" line and then one
        net_probe.serve(serve, bind, on_listening=lambda: console.print(
            f"serving trainwise net probes on {bind}:{serve} (Ctrl-C to stop)"))
        return
    if not target:
        raise TrainwiseError("give HOST:PORT of a probe server, or --serve PORT to be one")
    host, port = net_probe.parse_target(target)
    net_probe.existing_entries(output)  # a folder or a non-network file is refused before the measurement
    entry = net_probe.probe(host, port, seconds=seconds, pings=pings, local_name=name, remote_name=remote_name)
    path = net_probe.write_entry(entry, output)
    console.print(f"{entry.a} <-> {entry.b}: {entry.bandwidth_bps / 1e6:,.1f} Mb/s, RTT {entry.rtt_s * 1e3:.3f} ms "
                  f"(measured here) -> {path}")
