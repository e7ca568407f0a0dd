"""`trainwise host-noise`: measure how much this host's speed wanders."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from trainwise.cli._app import console


def host_noise_command(
    seconds: Annotated[float, typer.Option(help="How long to probe (at least 40; longer sees more of the host's moods)")] = 180.0,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write here instead of the trainwise cache (profiles attach only the cached one)")] = None,
) -> None:
    """Measure how much this host's speed wanders (a fixed probe, one thread); profiles taken here then carry it and predictions widen their band by it."""
    from rich.progress import Progress

    from trainwise.profile import host_noise

    host_noise.check_seconds(seconds)  # before minutes of probing, not after
    if output is not None:
        from trainwise._io import check_output_path

        check_output_path(output, "--output")  # likewise: a folder was refused only after the probe
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task("probing this host's speed", total=seconds)
        noise = host_noise.measure(seconds, on_progress=lambda done: progress.update(task, completed=done))
    path = host_noise.save(noise, output)
    for name, levels in (("compute", noise.compute), ("memory", noise.memory)):
        strays = ", ".join(f"{w.window_s} s ±{w.p90:.1%}" for w in levels.windows)
        console.print(f"{name}: p90/p10 level {levels.p90_over_p10:.2f}, one level lasts ~{levels.correlation_length_s} s; "
                      f"90th-percentile stray of a window: {strays}")
    console.print(f"wrote {path}")
    carried, _ = host_noise.load_for_host(noise.hostname) if output is None else (None, None)
    if carried is not None and carried.measurements > 1:
        console.print(f"profiles on this host carry {carried.describe()}: 3 s windows ±{carried.stray_fraction(3.0):.1%}")
