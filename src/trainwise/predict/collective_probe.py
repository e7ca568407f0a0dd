"""Measure what one all-reduce costs with a real torch.distributed backend on this host.

`trainwise net probe` measures a TCP link; DDP's gradient all-reduce costs more than the link alone
where the collective library adds per-call work: gloo on CPU copies, reduces and synchronises in
software, and a call pays a fixed software latency that the wire's RTT does not show (on loopback,
tens to hundreds of microseconds against a ~30 µs RTT). This probe starts `world_size` processes
(the gloo backend over loopback by default, as `trainwise run --engine ddp` does on CPU), times
`repeats` all-reduces of float32 tensors of several sizes after a warm-up, and fits

    t(n bytes) = latency_s + n / bytes_per_s          (least squares on the per-size medians)

which `as_link()` turns into the `LinkSpec` the ring model of `trainwise.predict.data_parallel`
takes (the ring's 2(N−1)/N factor and 2(N−1) latency steps are divided back out, so predicting
the probe's own sizes returns its measurements). Every figure is "measured here".
"""

from __future__ import annotations

import os
import socket
import statistics
import time
from collections.abc import Sequence

from pydantic import BaseModel, Field

from trainwise.errors import TrainwiseError
from trainwise.predict.data_parallel import LinkSpec

DEFAULT_SIZES_BYTES = (4 * 2**10, 256 * 2**10, 2 * 2**20, 8 * 2**20)
# one-way wire latencies per ring step: data one way, the "buffer free" notification back
GLOO_WIRE_LATENCIES_PER_STEP = 2.0


class AllreducePoint(BaseModel):
    nbytes: int
    median_s: float
    spread_s: float = Field(description="interquartile range of the timed calls")


class CollectiveFit(BaseModel):
    backend: str
    world_size: int
    points: list[AllreducePoint]
    latency_s: float = Field(description="fixed cost of one all-reduce call (fitted intercept)")
    bytes_per_s: float = Field(description="all-reduce payload bytes per second (fitted slope⁻¹)")
    source: str

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s

    def as_link(self) -> LinkSpec:
        """The ring model's link that reproduces this fit: t = 2(N−1)/N·n/bw + 2(N−1)·lat."""
        n = self.world_size
        ring = 2.0 * (n - 1) / n
        return LinkSpec(bandwidth_bps=self.bytes_per_s * ring * 8.0, latency_s=self.latency_s / (2.0 * (n - 1)),
                        source=self.source)

    def over(self, wire: LinkSpec) -> LinkSpec:
        """The collective's software cost measured here (loopback) in series with a slower wire:
        per-byte times add (1/bw = 1/bw_wire + 1/bw_software), so do per-step latencies. A gloo
        ring step costs a full round trip of the wire, not one way: before a rank writes into its
        neighbour's buffer again it waits for the neighbour's notification that the buffer is free."""
        software = self.as_link()
        bandwidth = 1.0 / (1.0 / wire.bandwidth_bps + 1.0 / software.bandwidth_bps)
        per_step_wire_s = GLOO_WIRE_LATENCIES_PER_STEP * wire.latency_s if self.backend == "gloo" else wire.latency_s
        return LinkSpec(bandwidth_bps=bandwidth, latency_s=per_step_wire_s + software.latency_s,
                        source=f"{wire.source}; plus the collective's own cost ({self.source})")


def _free_port() -> int:
    # not trainwise.run.launcher.free_port: predict sits upstream of run (profile -> predict -> run)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, backend: str, sizes: Sequence[int], repeats: int,
            queue) -> None:  # pragma: no cover - runs in spawned processes
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        results = {}
        for nbytes in sizes:
            tensor = torch.ones(max(1, nbytes // 4), dtype=torch.float32)
            for _ in range(3):  # warm-up: connections, buffers
                dist.all_reduce(tensor)
            times = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(tensor)
                times.append(time.perf_counter() - start)
            results[nbytes] = times
        if rank == 0:
            queue.put(results)
    finally:
        dist.destroy_process_group()


def _run_ranks(worker, world_size: int, args: tuple, what: str, timeout_s: float, backend: str):
    """Start `world_size` spawned ranks of `worker(rank, world_size, port, backend, *args, queue)` and
    return what rank 0 puts on the queue."""
    import torch.multiprocessing as mp

    context = mp.get_context("spawn")
    queue = context.Queue()
    port = _free_port()
    processes = [context.Process(target=worker, args=(r, world_size, port, backend, *args, queue), daemon=True)
                 for r in range(world_size)]
    for p in processes:
        p.start()
    try:
        return queue.get(timeout=timeout_s)
    except Exception as exc:  # queue.Empty: a worker failed or hung
        raise TrainwiseError(f"the {backend} {what} with {world_size} processes did not finish in "
                             f"{timeout_s:g} s: check that torch.distributed's {backend} backend works here") from exc
    finally:
        for p in processes:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()


def probe_allreduce(world_size: int = 2, sizes_bytes: Sequence[int] = DEFAULT_SIZES_BYTES, *, backend: str = "gloo",
                    repeats: int = 30, timeout_s: float = 120.0) -> CollectiveFit:
    """Time all-reduces among `world_size` local processes and fit latency + bytes/s (see the module)."""
    if world_size < 2:
        raise TrainwiseError(f"an all-reduce probe needs at least 2 processes (got {world_size})")
    if repeats < 3 or not sizes_bytes or min(sizes_bytes) <= 0:
        raise TrainwiseError("an all-reduce probe needs positive sizes and at least 3 repeats")
    import numpy as np

    results = _run_ranks(_worker, world_size, (list(sizes_bytes), repeats), "all-reduce probe", timeout_s, backend)
    points = []
    for nbytes in sizes_bytes:
        q1, median, q3 = statistics.quantiles(results[nbytes], n=4)
        points.append(AllreducePoint(nbytes=int(nbytes), median_s=median, spread_s=max(0.0, q3 - q1)))
    x = np.array([p.nbytes for p in points], dtype=float)
    y = np.array([p.median_s for p in points])
    # weights 1/t: relative residuals, so the 4 KiB calls fix the latency as much as the 8 MiB
    # calls fix the bandwidth (unweighted, the largest size dominates and the intercept is noise)
    slope, intercept = np.polyfit(x, y, 1, w=1.0 / y)
    slope = max(float(slope), 1e-12)
    intercept = max(float(intercept), 0.0)
    source = (f"measured here: {repeats} × {backend} all-reduce among {world_size} local processes per size "
              f"({', '.join(f'{p.nbytes / 2**10:g} KiB' for p in points)}), median per size, least-squares latency + bytes/s")
    return CollectiveFit(backend=backend, world_size=world_size, points=points, latency_s=intercept,
                         bytes_per_s=1.0 / slope, source=source)


# ------------------------------------------------------------------- DDP's own per-step work

# A model so small that its step is almost all framework: 2 layers, 73 parameters (292 B of gradients).
_TINY_IN, _TINY_HIDDEN, _TINY_BATCH = 16, 4, 64


class DDPOverhead(BaseModel):
    """What wrapping a step in DistributedDataParallel costs beyond its compute and its all-reduce."""

    backend: str
    world_size: int
    plain_step_s: float = Field(description="mean step of the tiny model, not wrapped (median over the pairs)")
    ddp_step_s: float = Field(description="mean step of the same model under DDP (median over the pairs)")
    allreduce_s: float = Field(description="one all-reduce of the tiny model's gradient bytes, timed as "
                                           "probe_allreduce times it (median)")
    pair_deltas_s: list[float] = Field(description="DDP − plain mean step of each interleaved pair of blocks")
    per_step_s: float = Field(description="median pair delta − allreduce_s (≥ 0): the per-step overhead that "
                                          "trainwise.predict.data_parallel.predict_ddp adds (per_step_overhead_s) "
                                          "to an all-reduce modelled with its latency")
    source: str

    @property
    def step_delta_s(self) -> float:
        """DDP's whole fixed cost per step, its tiny all-reduce included (median pair delta): the
        per-step overhead to use with an all-reduce modelled by bytes alone (latency 0), so that one
        measurement fixes the per-step cost rather than the sum of two (the all-reduce probe's
        small-message latency moves by ±0.5 ms between probes here)."""
        return statistics.median(self.pair_deltas_s)


def _ddp_worker(rank: int, world_size: int, port: int, backend: str, pairs: int, steps: int,
                queue) -> None:  # pragma: no cover - runs in spawned processes
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        torch.manual_seed(0)

        def tiny() -> torch.nn.Module:
            return torch.nn.Sequential(torch.nn.Linear(_TINY_IN, _TINY_HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(_TINY_HIDDEN, 1))

        plain = tiny()
        wrapped = DistributedDataParallel(tiny())
        inputs, targets = torch.randn(_TINY_BATCH, _TINY_IN), torch.randn(_TINY_BATCH, 1)
        gradient = torch.zeros(sum(p.numel() for p in plain.parameters()))

        def block(model: torch.nn.Module) -> float:
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            dist.barrier()
            times = []
            for _ in range(steps):
                start = time.perf_counter()
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(inputs), targets).backward()
                optimizer.step()
                times.append(time.perf_counter() - start)
            steady = times[len(times) // 5:]  # the first steps warm caches and DDP's bucket rebuild
            return statistics.fmean(steady)

        block(wrapped)  # warm-up: connections, DDP's first-iteration bucket rebuild
        deltas, plains, ddps = [], [], []
        for i in range(pairs):
            # alternate which comes first: a drift of the host's speed then cancels in the median
            first, second = (plain, wrapped) if i % 2 == 0 else (wrapped, plain)
            a, b = block(first), block(second)
            plain_s, ddp_s = (a, b) if first is plain else (b, a)
            plains.append(plain_s)
            ddps.append(ddp_s)
            deltas.append(ddp_s - plain_s)
        allreduce = []
        for _ in range(steps // 4):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(gradient)
            allreduce.append(time.perf_counter() - start)
        if rank == 0:
            queue.put({"plain": plains, "ddp": ddps, "deltas": deltas, "allreduce": allreduce})
    finally:
        dist.destroy_process_group()


def probe_ddp_overhead(world_size: int = 2, *, backend: str = "gloo", pairs: int = 4, steps: int = 400,
                       timeout_s: float = 180.0) -> DDPOverhead:
    """Measure DDP's own work per step on this host: `world_size` local processes train a 73-parameter
    model plain and wrapped in DistributedDataParallel, in `pairs` interleaved blocks of `steps` steps;
    the wrapped step's extra time, less one all-reduce of its gradient (which predict_ddp already
    counts), is the per-step overhead. Its compute is negligible, so what is left is the framework:
    DDP's forward bookkeeping, autograd hooks and reducer, and, on CPU, handing each bucket to the
    communication thread and waiting for it (with gloo here ~1-2 ms against a ~0.6 ms all-reduce).
    Every figure is "measured here"."""
    if world_size < 2:
        raise TrainwiseError(f"a DDP overhead probe needs at least 2 processes (got {world_size})")
    if pairs < 1 or steps < 20:
        raise TrainwiseError("a DDP overhead probe needs at least 1 pair of blocks of at least 20 steps")
    results = _run_ranks(_ddp_worker, world_size, (pairs, steps), "DDP overhead probe", timeout_s, backend)
    allreduce = statistics.median(results["allreduce"])
    delta = statistics.median(results["deltas"])
    source = (f"measured here: {pairs} interleaved pairs of {steps}-step blocks, a 73-parameter model plain and under "
              f"DistributedDataParallel ({backend}, {world_size} local processes), mean step per block")
    return DDPOverhead(backend=backend, world_size=world_size, plain_step_s=statistics.median(results["plain"]),
                       ddp_step_s=statistics.median(results["ddp"]), allreduce_s=allreduce,
                       pair_deltas_s=list(results["deltas"]), per_step_s=max(0.0, delta - allreduce), source=source)
