"""`trainwise run`: the command's options → RunOptions → run_job → a table and RUN.json."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from trainwise.errors import TrainwiseError


def _fmt(value: float | None, unit: str = "s") -> str:
    if value is None:
        return "—"
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:,.1f} {unit}"


def result_table(result) -> Table:
    table = Table(title=f"trainwise run --engine {result.engine} (world size {result.world_size}; measured here)")
    table.add_column("rank")
    for column in ("iterations", "samples/s", "iteration", "compute", "all-reduce", "exposed comm", "idle", "data wait"):
        table.add_column(column, justify="right")
    for r in result.ranks:
        table.add_row(str(r.rank), str(r.iterations), _fmt(r.samples_per_s, "") if r.samples_per_s else "—",
                      _fmt(r.iteration_s), _fmt(r.compute_s), _fmt(r.allreduce_s), _fmt(r.exposed_comm_s),
                      _fmt(r.idle_s), _fmt(r.data_wait_s))
    return table


def summary_lines(result) -> list[str]:
    from rich.markup import escape

    lines = [f"throughput: {_fmt(result.throughput_samples_per_s, 'samples/s')} (all ranks, steady state)"]
    if result.granularity is not None:
        lines.append(f"measured granularity G = compute / communication = {result.granularity:.3g}")
    if result.hivemind is not None:
        h = result.hivemind
        # `rounds` counts a peer's epoch transitions (optimizer steps): a lone peer makes them too.
        # The rounds that averaged anything are the gradient-averaging rounds with a group.
        fell_back = f", {h.failed_averaging_rounds} fell back to local gradients" if h.failed_averaging_rounds else ""
        lines.append(f"hivemind: {h.averaging_rounds} gradient-averaging rounds with a group{fell_back} (median "
                     f"{_fmt(h.averaging_s)}), {h.rounds} optimizer steps (epoch transitions), T_calc {_fmt(h.t_calc_s)}, "
                     f"peers per step {h.peers_seen or '—'}")
        if h.averaging_rounds == 0:
            lines.append("[yellow]hivemind: the peers never averaged with a group: each trained on its own[/yellow]")
        if h.step_throughput_samples_per_s is not None:
            lines.append(f"hivemind progress: {_fmt(h.step_throughput_samples_per_s, 'samples/s')} trained (target batch × "
                         f"optimizer steps), {_fmt(h.epoch_throughput_samples_per_s, 'samples/s')} by hivemind's epoch count")
    if result.checkpoint is not None:
        c = result.checkpoint
        lines.append(f"checkpoints: {c.written} written to {c.directory} (median write {_fmt(c.median_write_s)})"
                     + (f"; resumed from {c.resumed_from}" if c.resumed_from else ""))
        for skipped in c.skipped_corrupt:
            lines.append(f"[yellow]skipped checkpoint {escape(skipped)} (not loaded)[/yellow]")
    stopped = next((code for code in result.exit_codes if code in (130, 143, -15)), None)
    if stopped is not None:
        how = "by Ctrl-C" if stopped == 130 else "by SIGTERM (a preemption notice)"
        newest = result.checkpoint and (result.checkpoint.last or result.checkpoint.resumed_from)
        if newest:
            lines.append(f"[yellow]stopped {how}; newest checkpoint {newest}: run the same command again to resume "
                         "from it[/yellow]")
        elif result.checkpoint is not None:
            lines.append(f"[yellow]stopped {how} before any checkpoint was written: a rerun starts from the "
                         "beginning[/yellow]")
        else:
            lines.append(f"[yellow]stopped {how}; without --checkpoint-dir a rerun starts from the beginning[/yellow]")
    lines += [f"note: {escape(note)}" for note in result.notes]
    return lines


def command_inputs(command: list[str]) -> tuple[str, ...]:
    """The words of the training command that may name its files (the script, data, a config): an
    output must not replace one. `--data=x.csv` names x.csv; check_output_path compares existing files only."""
    inputs = []
    for arg in command:
        if arg.startswith("-"):
            if "=" in arg:
                inputs.append(arg.split("=", 1)[1])
        else:
            inputs.append(arg)
    return tuple(inputs)


def run_command(
    ctx: typer.Context,
    engine: Annotated[str, typer.Option(help="local, ddp (torchrun) or hivemind")] = "local",
    nproc: Annotated[int, typer.Option(help="DDP: processes on this node")] = 1,
    nnodes: Annotated[int, typer.Option(help="DDP: number of nodes")] = 1,
    node_rank: Annotated[int, typer.Option(help="DDP: this node's rank")] = 0,
    master_addr: Annotated[str, typer.Option(help="DDP: address of node 0")] = "127.0.0.1",
    master_port: Annotated[Optional[int], typer.Option(help="DDP: port on node 0 (default: a free port, single node)")] = None,
    peers: Annotated[int, typer.Option(help="Hivemind: peers to start on this machine")] = 2,
    target_batch_size: Annotated[Optional[int], typer.Option(help="Hivemind: samples all peers accumulate per averaging round")] = None,
    initial_peers: Annotated[Optional[list[str]], typer.Option("--initial-peers", help="Hivemind: multiaddr of a running peer (repeatable); default: the first local peer")] = None,
    host: Annotated[Optional[str], typer.Option(help="Hivemind: address the DHT listens on (default loopback, or 0.0.0.0 with --initial-peers)")] = None,
    port: Annotated[int, typer.Option(help="Hivemind: the first local peer's DHT port (0: any)")] = 0,
    identity: Annotated[Optional[Path], typer.Option("--identity", help="Hivemind: private-key file for the first local peer (a fixed peer id others can dial with /p2p/<id>)")] = None,
    run_id: Annotated[str, typer.Option(help="Hivemind: run name shared by all peers")] = "trainwise",
    matchmaking_time: Annotated[float, typer.Option(help="Hivemind: matchmaking time, seconds (Erben et al.'s 5 s minimum)")] = 5.0,
    averaging_timeout: Annotated[float, typer.Option(help="Hivemind: averaging round timeout, seconds")] = 60.0,
    average_state_every: Annotated[int, typer.Option(help="Hivemind: average parameters with the group every N epochs (hivemind's default 1; each is a second matchmaking)")] = 1,
    checkpoint_dir: Annotated[Optional[str], typer.Option(help="Checkpoint here (local path or fsspec URL) and resume from the newest valid checkpoint")] = None,
    checkpoint_every_s: Annotated[Optional[float], typer.Option(help="Checkpoint interval, seconds (default: Young/Daly optimum sqrt(2 x write time x MTBF))")] = None,
    checkpoint_every_batches: Annotated[Optional[int], typer.Option(help="Checkpoint every N batches instead")] = None,
    interruptions_per_hour: Annotated[Optional[float], typer.Option(help="Expected interruptions per hour, for the optimum interval (default: the cost model's)")] = None,
    keep: Annotated[int, typer.Option(help="Checkpoints to keep")] = 3,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the RunResult JSON here")] = None,
    timeout: Annotated[Optional[float], typer.Option(help="Stop the job after this many seconds")] = None,
    tune_allocator: Annotated[bool, typer.Option(help="Opt in: launch with trainwise's glibc malloc settings (MALLOC_MMAP_THRESHOLD_/MALLOC_TRIM_THRESHOLD_=256 MiB; measured 20-24 % faster on two CPU workloads, 65 % slower on an LBFGS job: a change to the job); off by default so the job is measured as it runs; profile and run the same way for the prediction to hold")] = False,
    flush_denormal: Annotated[bool, typer.Option(help="Opt in: flush denormal floats to zero in the job (torch.set_flush_denormal; measured 13x faster on an LSTM, 6-11 % on two CPU workloads, within noise on a fourth: a change to the job's numerics); off by default so the job is measured as it runs; profile and run the same way for the prediction to hold")] = False,
) -> None:
    """Run `-- COMMAND...` (an unmodified PyTorch script) locally, under torchrun DDP or as Hivemind
    peers, instrumented like `trainwise profile --full`, with optional checkpoint/resume."""
    from rich.console import Console

    from trainwise.core.invocation import passthrough as given_passthrough
    from trainwise.run.options import CheckpointOptions, RunOptions

    passthrough = given_passthrough()
    if passthrough is None or ctx.args:
        raise TrainwiseError("missing `--` before the training command: use `trainwise run [OPTIONS] -- python train.py ARGS`")
    checkpoint = None
    if checkpoint_dir is not None:
        checkpoint = CheckpointOptions(directory=checkpoint_dir, every_s=checkpoint_every_s,
                                       every_batches=checkpoint_every_batches, keep=keep,
                                       interruptions_per_hour=interruptions_per_hour)
    elif checkpoint_every_s is not None or checkpoint_every_batches is not None:
        raise TrainwiseError("--checkpoint-every-s/--checkpoint-every-batches need --checkpoint-dir")
    options = RunOptions(engine=engine, nproc=nproc, nnodes=nnodes, node_rank=node_rank, master_addr=master_addr,
                         master_port=master_port, peers=peers, target_batch_size=target_batch_size,
                         initial_peers=list(initial_peers or []), host=host, port=port,
                         identity_path=None if identity is None else str(identity.resolve()), run_id=run_id,
                         matchmaking_time_s=matchmaking_time, averaging_timeout_s=averaging_timeout,
                         average_state_every=average_state_every,
                         checkpoint=checkpoint, timeout_s=timeout, tune_allocator=tune_allocator,
                         flush_denormal=flush_denormal)
    # Bounds and options before anything heavy is imported or started (run_job checks them again).
    options.validate()
    if output is not None:
        from trainwise._io import check_output_path

        # Before the job runs: a result that cannot be written is the whole run's measurements lost, and
        # `-o train.py` must not replace the script with JSON.
        check_output_path(output, "--output", inputs=command_inputs(passthrough) + ((str(identity),) if identity else ()))
    from trainwise.run.launcher import run_job

    result = run_job(options, passthrough)
    if output is not None:
        from trainwise._io import write_output_text

        write_output_text(output, result.to_json(), "--output")
    console = Console()
    console.print(result_table(result))
    for line in summary_lines(result):
        console.print(line)
    if output is not None:
        console.print(f"run result written to [bold]{output}[/bold]")
    codes = [c for c in result.exit_codes if c != 0]
    if 130 in codes:
        Console(stderr=True).print("[red]interrupted[/red]")
    if codes:
        # The job's own exit code (143: stopped by SIGTERM after checkpointing) is trainwise's.
        # (SystemExit, not typer.Exit: click swallows Exit's code when not in standalone mode)
        raise SystemExit(codes[0] if codes[0] > 0 else 128 - codes[0])
