"""Data-parallel training time: synchronous DDP and decentralised Hivemind (Erben et al., VLDB 2024).

Batch conventions (names say which): `per_worker_batch_size` is what one process/peer feeds its
model per step; `global_batch_size` = workers × per-worker batch × gradient accumulation is what
one optimizer step averages over (DDP); `target_batch_size` (TBS) is Hivemind's: the samples all
peers together accumulate before one averaging round ("hivemind epoch").

**DDP** (`predict_ddp`): one step on N workers =

    compute at the per-worker batch (forward + backward + optimizer; from a profile or the device model)
  + the exposed part of the gradient all-reduce
  + the wait for the slowest worker (straggler: the expected maximum of N workers' step times, from
    the measured per-step spread) + the framework's own per-step work (DDP's hooks and reducer,
    gloo's thread hand-offs: measured by `trainwise.predict.collective_probe.probe_ddp_overhead`).

The all-reduce runs in DDP's buckets (the first 1 MiB, then 25 MiB: `torch.distributed`'s
defaults), each bucket launched when its gradients are ready during backward and the buckets
reduced one after another (one communication stream). A ring all-reduce of b bytes costs
2(N−1)/N × b / bandwidth + 2(N−1) × latency; a (double binary) tree 2 × b / bandwidth +
2 log2(N) × latency; "auto" takes the cheaper per bucket. Inside one NVLink machine ("node", what `plan` uses)
NCCL's measured all-reduce is neither: a floor per call (launch included) plus the ring's bytes at the bus bandwidth
a group of N GPUs reaches, a fraction of the link's (`NODE_ALLREDUCE`). Gradients are assumed to
become ready uniformly (by bytes) over backward; `overlap` scales how much of that overlap is real
(1: GPU with its own communication stream; less where communication competes with compute for
the same CPU cores). N = 1 has no communication.

**Hivemind** (`predict_hivemind`): per hivemind epoch, the peers together compute TBS samples in
T_calc = TBS / Σ peer samples/s, then average in one round taking

    T_comm = max(averaging, matchmaking minimum 5 s − T_calc) (Hivemind waits for its group),
    averaging = max over peer pairs of 2·B/N / (pair bandwidth, one TCP stream: ≤ window/RTT) + 2·RTT,
                and over peers of 2(N−1)/N·B / min(peer NIC, `peer_throughput_cap_bps`),

with B the parameter bytes after compression (fp16: 2 bytes per parameter). Without delayed
parameter updates an epoch lasts T_calc + T_comm = max(T_calc, matchmaking) + averaging (Erben et al.
measures the two as additive): the round is pre-scheduled at the epoch's start and averages once
the TBS is reached. With them (hivemind.Optimizer(delay_optimizer_step=True,
delay_grad_averaging=True), `dpu_overlap` = 1) the rounds pipeline, and an epoch lasts

    max(T_calc, matchmaking + slowest RTT, averaging):

the all-reduce, optimizer step and state averaging of round k run in the background while the
peers compute epoch k+1, but an averager looks for one group at a time (hivemind 1.1.12
`Matchmaking.look_for_group` holds `lock_looking_for_group` until its group is assembled) and
declares each new group at least `min_matchmaking_time` ahead (`get_request_expiration_time`), so
groups form no closer than the matchmaking time, plus the round trip in which the followers learn
that the previous group was assembled. Measured here (benchmarks/data_parallel.py): 2 peers on
loopback with T_calc ≈ 0.3 s formed a group every 5.03 s with matchmaking_time 5 s. `dpu_overlap`
between 0 and 1 interpolates linearly between the two.
Granularity G = T_calc / T_comm; doubling the peers speeds up by at most (G + 1)/(G/2 + 1); the
throughput can never exceed TBS / T_comm; TBS beyond 64K is past what LAMB is known to train
(Erben et al. §3).

Costs (`hivemind_costs`): per-peer egress = bytes sent per round × rounds per hour × destination
split × the sending cloud's $/GB (`trainwise.predict.egress`), plus data loading from object
storage; $/h and $/1M samples = $/h ÷ (samples/s × 3600) × 10^6 (Erben et al.).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError
from trainwise.predict import egress as egress_mod
from trainwise.predict.topology import Link, NetworkModel, Site, seed_network

DDP_BUCKET_BYTES = 25 * 2**20          # torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25)
DDP_FIRST_BUCKET_BYTES = 1 * 2**20     # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
# Erben et al. §3: "a minimum matchmaking time of 5 seconds" (hivemind's DecentralizedAverager default;
# hivemind.Optimizer(matchmaking_time=...) defaults to 15 s in hivemind 1.1.12: pass what the run uses)
HIVEMIND_MATCHMAKING_MIN_S = 5.0
FP16_BYTES_PER_PARAMETER = 2.0         # Erben et al. §3: FP16 compression for peer-to-peer communication
LAMB_TBS_LIMIT = 65536                 # Erben et al. §3: LAMB works up to 64K
BACKWARD_FRACTION = 2.0 / 3.0          # backward ≈ 2 × forward FLOPs: 2/3 of a step's compute

# Where each intra-node link figure comes from when the catalog's interconnect text gives none.
INTRA_NODE_LATENCY_S = 5e-6            # NVLink/PCIe peer-to-peer launch + hop, order of NCCL's ~5 µs
# NCCL all-reduce inside one NVLink machine, per group size: (seconds of an all-reduce under 64 KiB, launch included;
# the bus bandwidth reached at 1 GiB as a fraction of the catalog's effective per-device link figure). XLA's measured
# table on an 8-GPU H100 SXM machine and an HGX B200 (benchmarks/data/xla_collectives.csv), geometric mean of the
# two; `benchmarks/collectives.py --fit` prints them. Fitted on one machine and tested on the other:
# docs/accuracy.md ("All-reduce on one machine").
NODE_ALLREDUCE = {2: (21.9e-6, 0.666), 4: (33.5e-6, 0.806), 8: (41.0e-6, 0.976)}
# its median |error| on DDP's bucket sizes over 8 GPUs, each machine with the other's constants
# (benchmarks/results/collectives.json `allreduce_median_abs_error`)
NODE_ALLREDUCE_HELD_OUT_ERROR = 0.177
LOOPBACK_NOTE = "measure it with `trainwise net probe` against a server on 127.0.0.1"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class WorkerCompute(_Frozen):
    """One worker's compute per step at its per-worker batch."""

    step_time_s: float = Field(gt=0, description="forward + backward + optimizer of one step, one worker, no communication")
    per_worker_batch_size: int = Field(gt=0)
    backward_fraction: float = Field(default=BACKWARD_FRACTION, ge=0, le=1,
                                     description="share of step_time_s in backward (when gradients become ready)")
    source: str = Field(default="given", description="measured here / imported / modelled ±x %")
    step_time_samples_s: tuple[float, ...] = Field(
        default=(), description="steady per-step times of one worker, as measured (empty: only step_time_s is known); "
                                "with them, a step's compute is their mean and a synchronous step waits for the "
                                "slowest of N workers' draws (`expected_slowest_step_s`)")

    @property
    def samples_per_s(self) -> float:
        return self.per_worker_batch_size / self.mean_step_s

    @property
    def mean_step_s(self) -> float:
        """What a throughput over many steps sees: the mean step (step_time_s without samples)."""
        return expected_maximum(self.step_time_samples_s, 1) if self.step_time_samples_s else self.step_time_s

    def expected_slowest_step_s(self, workers: int) -> float:
        """The expected compute of a synchronous step on `workers` workers: the slowest worker's.

        Each worker's steps vary (scheduling, data loading, garbage collection) independently of
        the others', and DDP's all-reduce waits for the last one, so a step lasts the maximum of N
        draws from the single worker's step-time distribution: exactly, over the empirical
        distribution of `step_time_samples_s`. Without samples no spread is known: step_time_s."""
        if not self.step_time_samples_s:
            return self.step_time_s
        return expected_maximum(self.step_time_samples_s, workers)


def expected_maximum(samples: Sequence[float], draws: int) -> float:
    """E[max of `draws` independent draws] from the empirical distribution of `samples`:
    Σ x_(i) · ((i/m)^draws − ((i−1)/m)^draws) over the sorted samples (draws = 1: the mean)."""
    if draws < 1:
        raise TrainwiseError(f"draws must be at least 1 (got {draws})")
    ordered = sorted(samples)
    m = len(ordered)
    if m == 0:
        raise TrainwiseError("no samples to take an expected maximum of")
    return sum(x * (((i + 1) / m) ** draws - (i / m) ** draws) for i, x in enumerate(ordered))


class LinkSpec(_Frozen):
    """The link an all-reduce runs over."""

    bandwidth_bps: float = Field(gt=0, description="bits per second per worker")
    latency_s: float = Field(default=0.0, ge=0, description="one-way latency per message")
    source: str = ""

    @classmethod
    def from_link(cls, link: Link) -> LinkSpec:
        return cls(bandwidth_bps=link.bandwidth_bps, latency_s=link.rtt_s / 2.0, source=link.source)


class DDPPrediction(_Frozen):
    workers: int
    per_worker_batch_size: int
    gradient_accumulation: int
    global_batch_size: int
    compute_s: float = Field(description="compute per optimizer step (all micro-batches): the mean worker's plus straggler_s")
    allreduce_s: float = Field(description="the whole gradient all-reduce if nothing overlapped it")
    exposed_communication_s: float = Field(description="the part of the all-reduce not hidden behind backward")
    step_time_s: float
    samples_per_s: float = Field(description="global samples per second")
    granularity: float = Field(description="compute_s / allreduce_s (inf for one worker)")
    speedup: float = Field(description="samples/s over one worker at the same per-worker batch")
    scaling_efficiency: float = Field(description="speedup / workers")
    buckets: int
    algorithm: str
    straggler_s: float = Field(default=0.0, description="how much longer the slowest of the workers' compute takes "
                                                         "than the mean worker's, per optimizer step")
    per_step_overhead_s: float = Field(default=0.0, description="synchronous data parallelism's own work per step "
                                                                 "beyond compute and the all-reduce's bytes (given)")
    notes: list[str] = Field(default_factory=list)
    source: str


def bucket_sizes(gradient_bytes: int, bucket_bytes: int = DDP_BUCKET_BYTES,
                 first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES) -> list[int]:
    """DDP's buckets in launch order: a small first bucket, then `bucket_bytes` each."""
    if gradient_bytes <= 0:
        return []
    sizes = [min(first_bucket_bytes, gradient_bytes)]
    left = gradient_bytes - sizes[0]
    while left > 0:
        sizes.append(min(bucket_bytes, left))
        left -= sizes[-1]
    return sizes


def node_allreduce_terms(workers: int, table: dict[int, tuple[float, float]] | None = None) -> tuple[float, float]:
    """(floor seconds, bus-bandwidth fraction) of an all-reduce over `workers` GPUs of one NVLink machine: the
    measured group sizes' values, log2-interpolated between them, the largest group's beyond it."""
    table = table or NODE_ALLREDUCE
    sizes = sorted(table)
    k = min(max(workers, sizes[0]), sizes[-1])
    lo = max(s for s in sizes if s <= k)
    hi = min(s for s in sizes if s >= k)
    if lo == hi:
        return table[lo]
    w = (math.log2(k) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return tuple(a + w * (b - a) for a, b in zip(table[lo], table[hi]))  # type: ignore[return-value]


def allreduce_time_s(nbytes: float, workers: int, link: LinkSpec,
                     algorithm: Literal["ring", "tree", "auto", "node"] = "ring") -> float:
    """One all-reduce of `nbytes` over `workers` (ring, double binary tree, or NCCL inside one NVLink machine;
    see the module docstring)."""
    if workers <= 1 or nbytes <= 0:
        return 0.0
    bytes_per_s = link.bandwidth_bps / 8.0
    if algorithm == "node":
        floor_s, efficiency = node_allreduce_terms(workers)
        return floor_s + 2.0 * (workers - 1) / workers * nbytes / (bytes_per_s * efficiency)
    ring = 2.0 * (workers - 1) / workers * nbytes / bytes_per_s + 2.0 * (workers - 1) * link.latency_s
    tree = 2.0 * nbytes / bytes_per_s + 2.0 * math.ceil(math.log2(workers)) * link.latency_s
    if algorithm == "ring":
        return ring
    if algorithm == "tree":
        return tree
    if algorithm == "auto":
        return min(ring, tree)
    raise TrainwiseError(f"unknown all-reduce algorithm {algorithm!r}: use ring, tree, auto or node")


def predict_ddp(compute: WorkerCompute, gradient_bytes: int, workers: int, link: LinkSpec, *,
                gradient_accumulation: int = 1, bucket_bytes: int = DDP_BUCKET_BYTES,
                first_bucket_bytes: int = DDP_FIRST_BUCKET_BYTES,
                algorithm: Literal["ring", "tree", "auto", "node"] = "ring", overlap: float = 1.0,
                concurrent_buckets: bool = False, per_step_overhead_s: float = 0.0) -> DDPPrediction:
    """Synchronous data-parallel step on `workers` identical workers (weak scaling: the per-worker
    batch is fixed, the global batch grows with N). See the module docstring for the model.

    `concurrent_buckets`: the buckets' all-reduces are in flight together (gloo: each on its own
    buffers and threads), so they share the bandwidth but pay the latency once per step, not once
    per bucket (measured here over 100 Mb/s + 50 ms: the buckets' in-flight times summed to 0.73 s
    against 0.45 s of exposed communication). False: one stream reduces them one after another
    (NCCL), each paying its latency.

    The compute of a step is the mean worker's plus, when the worker's per-step times are known
    (`WorkerCompute.step_time_samples_s`), the straggler time: the slowest of N workers' expected
    step minus the mean one (× √accumulation: only the last micro-step synchronises, and the sum of
    g independent micro-steps spreads √g times as wide). `per_step_overhead_s` is the framework's
    own work per synchronised step that neither the compute nor the all-reduce's bytes show (DDP's
    autograd hooks and reducer, waking the communication thread, the ranks' handshake): on a GPU
    with NCCL tens of microseconds, on CPU with gloo ~1-2 ms (measure it with
    `trainwise.predict.collective_probe.probe_ddp_overhead`). Both are 0 for one worker.

    Example — DDP with 2 processes on this CPU, single-process step 0.12 s at batch 32, 1.2 MB of
    fp32 gradients, loopback measured at 8 Gb/s with 20 µs latency:

        predict_ddp(WorkerCompute(step_time_s=0.12, per_worker_batch_size=32), 1_200_000, 2,
                    LinkSpec(bandwidth_bps=8e9, latency_s=20e-6), overlap=0.0)
    """
    if workers < 1:
        raise TrainwiseError(f"workers must be at least 1 (got {workers})")
    if gradient_accumulation < 1:
        raise TrainwiseError(f"gradient accumulation must be at least 1 (got {gradient_accumulation})")
    if gradient_bytes < 0:
        raise TrainwiseError(f"gradient bytes must be non-negative (got {gradient_bytes})")
    if not 0.0 <= overlap <= 1.0:
        raise TrainwiseError(f"overlap must be within [0, 1] (got {overlap})")
    if per_step_overhead_s < 0:
        raise TrainwiseError(f"the per-step overhead must be non-negative (got {per_step_overhead_s} s)")
    step = compute.mean_step_s
    straggler = 0.0
    if workers > 1:
        straggler = (compute.expected_slowest_step_s(workers) - step) * math.sqrt(gradient_accumulation)
    else:
        per_step_overhead_s = 0.0
    single_compute_s = step * gradient_accumulation
    compute_s = single_compute_s + straggler
    sizes = bucket_sizes(gradient_bytes, bucket_bytes, first_bucket_bytes) if workers > 1 else []
    if concurrent_buckets and sizes:
        wire_only = link.model_copy(update={"latency_s": 0.0})
        latency = allreduce_time_s(1, workers, link, algorithm) - allreduce_time_s(1, workers, wire_only, algorithm)
        times = [allreduce_time_s(b, workers, wire_only, algorithm) for b in sizes]
        times[-1] += latency  # the last bucket's completion waits out the (shared) latency
    else:
        times = [allreduce_time_s(b, workers, link, algorithm) for b in sizes]
    total_comm = sum(times)
    # Timeline of the last micro-step (DDP syncs only on it; no_sync before): buckets become ready
    # over backward, one communication stream reduces them in order.
    backward = step * compute.backward_fraction
    forward_end = compute_s - backward  # earlier micro-steps + forward (+ optimizer, counted here)
    finish, ready_bytes = forward_end, 0
    for size, t in zip(sizes, times):
        ready_bytes += size
        ready = forward_end + backward * ready_bytes / gradient_bytes
        finish = max(finish, ready) + t
    pipelined_exposed = max(0.0, finish - compute_s) if sizes else 0.0
    exposed = overlap * pipelined_exposed + (1.0 - overlap) * total_comm
    step_time = compute_s + exposed + per_step_overhead_s
    global_batch = workers * compute.per_worker_batch_size * gradient_accumulation
    samples = global_batch / step_time
    single = compute.per_worker_batch_size * gradient_accumulation / single_compute_s
    notes = []
    granularity = compute_s / total_comm if total_comm > 0 else math.inf
    if granularity < 1:
        notes.append(f"communication-bound: the all-reduce ({total_comm:.3g} s) takes longer than the compute "
                     f"({compute_s:.3g} s), G = {granularity:.2f} < 1")
    return DDPPrediction(workers=workers, per_worker_batch_size=compute.per_worker_batch_size,
                         gradient_accumulation=gradient_accumulation, global_batch_size=global_batch,
                         compute_s=compute_s, allreduce_s=total_comm, exposed_communication_s=exposed,
                         step_time_s=step_time, samples_per_s=samples, granularity=granularity,
                         speedup=samples / single, scaling_efficiency=samples / single / workers, buckets=len(sizes),
                         algorithm=algorithm, straggler_s=straggler, per_step_overhead_s=per_step_overhead_s, notes=notes,
                         source=f"modelled: compute {compute.source}; link {link.bandwidth_bps / 1e9:.3g} Gb/s"
                                + (f" ({link.source})" if link.source else ""))


# ------------------------------------------------------------------------------------ Hivemind


class HivemindPeer(_Frozen):
    """One Hivemind peer: its compute rate at its local batch, where it is, what it costs."""

    name: str
    samples_per_s: float = Field(gt=0, description="this peer's training throughput alone (no communication)")
    site: Site
    nic_bandwidth_bps: float | None = Field(default=None, gt=0, description="None: the network model's intra-cloud figure")
    price_per_hour: float = Field(default=0.0, ge=0, description="the VM's $/h (0 for hardware already paid for)")
    per_peer_batch_size: int | None = Field(default=None, gt=0, description="local batch per step (for accumulation steps)")
    source: str = "given"


class HivemindPrediction(_Frozen):
    peers: int
    target_batch_size: int
    calc_s: float = Field(description="T_calc: time for all peers together to accumulate the TBS")
    averaging_s: float = Field(description="all-reduce time of one round over the group's links")
    matchmaking_wait_s: float = Field(description="time the round waits for the 5 s matchmaking minimum")
    comm_s: float = Field(description="T_comm = averaging + matchmaking wait")
    matchmaking_period_s: float = Field(default=0.0, description="closest spacing of two groups: matchmaking + slowest RTT")
    epoch_s: float = Field(description="one hivemind epoch: (1 − dpu_overlap) × (T_calc + T_comm) + dpu_overlap × "
                                       "max(T_calc, matchmaking period, averaging)")
    samples_per_s: float
    per_peer_samples_per_s: list[float] = Field(description="each peer's contribution to the global rate")
    accumulation_steps_per_round: list[float | None] = Field(
        description="local steps each peer accumulates before a round (TBS share / per-peer batch; None without a batch)")
    granularity: float = Field(description="G = T_calc / T_comm")
    doubling_speedup_bound: float = Field(description="(G + 1) / (G/2 + 1): best speedup from doubling the peers")
    throughput_bound_samples_per_s: float = Field(
        description="TBS / T_comm (Erben et al.; with delayed updates TBS / max(matchmaking period, averaging)): "
                    "no number of peers gets past it")
    bytes_sent_per_peer_per_round: float
    rounds_per_hour: float
    slowest_pair: str
    slowest_pair_bandwidth_bps: float
    notes: list[str] = Field(default_factory=list)
    source: str


def granularity(calc_s: float, comm_s: float) -> float:
    """G = T_calc / T_comm (Erben et al.): the ratio of calculation to communication time."""
    if calc_s < 0 or comm_s < 0:
        raise TrainwiseError("calculation and communication times must be non-negative")
    return math.inf if comm_s == 0 else calc_s / comm_s


def doubling_speedup_bound(g: float) -> float:
    """Best speedup from doubling the peers at granularity G: compute halves, communication stays,
    (G + 1)/(G/2 + 1) — 1.33× at G = 1, 1.83× at G = 10 (Erben et al.)."""
    if g < 0:
        raise TrainwiseError(f"granularity must be non-negative (got {g})")
    return 2.0 if math.isinf(g) else (g + 1.0) / (g / 2.0 + 1.0)


def usd_per_million_samples(usd_per_hour: float, samples_per_s: float) -> float:
    """$/1M samples = $/h ÷ (samples/s × 3600) × 10^6 (Erben et al.)."""
    if samples_per_s <= 0:
        raise TrainwiseError(f"throughput must be positive to price samples (got {samples_per_s} samples/s)")
    return usd_per_hour / (samples_per_s * 3600.0) * 1e6


def predict_hivemind(peers: Sequence[HivemindPeer], parameter_count: int, target_batch_size: int, *,
                     network: NetworkModel | None = None, bytes_per_parameter: float = FP16_BYTES_PER_PARAMETER,
                     matchmaking_min_s: float = HIVEMIND_MATCHMAKING_MIN_S, dpu_overlap: float = 0.0,
                     streams_per_pair: int = 1, peer_throughput_cap_bps: float | None = None,
                     round_overhead_s: float = 0.0, state_average_every: int | None = None) -> HivemindPrediction:
    """One Hivemind group (see the module docstring). `peer_throughput_cap_bps` caps what one peer
    can push through Hivemind's averaging (its p2p daemon, compression and CPU), independent of the
    network: Erben et al. §4 saw at most 1.1 Gb/s per peer on a 7 Gb/s network; None: no cap.
    `round_overhead_s` is a fixed cost per round (e.g. the optimizer step on CPU with offloading).
    `state_average_every`: hivemind.Optimizer also averages the parameters every this many epochs
    (its `average_state_every`, default 1), the same bytes again: counted in each peer's traffic
    (egress) as 1/k of a gradient round per round; its time is not modelled (on a 2-core host it
    disturbs the gradient rounds: benchmarks/hivemind_state_averaging.py). None: gradient rounds
    only, the seed's arithmetic.

    Example — 3 peers on one host at 40 samples/s each, a 11.7M-parameter model, TBS 512, links
    of 100 Mb/s and 50 ms RTT:

        net = NetworkModel(levels={"same_zone": Link(bandwidth_bps=1e8, rtt_s=0.05)}, tcp_window_bytes=4e6)
        site = Site(name="here", cloud="on-premise", continent="eu")
        predict_hivemind([HivemindPeer(name=f"p{i}", samples_per_s=40, site=site) for i in range(3)],
                         11_700_000, 512, network=net)
    """
    if not peers:
        raise TrainwiseError("a Hivemind group needs at least one peer")
    if target_batch_size <= 0:
        raise TrainwiseError(f"target batch size must be positive (got {target_batch_size})")
    if parameter_count < 0:
        raise TrainwiseError(f"parameter count must be non-negative (got {parameter_count})")
    if not 0.0 <= dpu_overlap <= 1.0:
        raise TrainwiseError(f"dpu_overlap must be within [0, 1] (got {dpu_overlap})")
    if state_average_every is not None and state_average_every < 1:
        raise TrainwiseError(f"state averaging period must be at least 1 epoch (got {state_average_every})")
    names = [p.name for p in peers]
    if len(set(names)) != len(names):
        raise TrainwiseError(f"peer names must be unique (got {names})")
    network = network or seed_network()
    n = len(peers)
    total_rate = sum(p.samples_per_s for p in peers)
    calc_s = target_batch_size / total_rate
    model_bytes = parameter_count * bytes_per_parameter
    notes: list[str] = []
    slowest, slowest_bw = "", math.inf
    averaging = slowest_rtt = 0.0
    if n > 1 and model_bytes > 0:
        for i in range(n):
            for j in range(i + 1, n):
                link = network.link(peers[i].site, peers[j].site)
                slowest_rtt = max(slowest_rtt, link.rtt_s)
                bw = network.effective_bandwidth_bps(link, streams_per_pair)
                if bw < slowest_bw:
                    slowest, slowest_bw = f"{peers[i].name} - {peers[j].name}", bw
                    if bw < link.bandwidth_bps:
                        slowest += (f" ({link.bandwidth_bps / 1e6:.0f} Mb/s capped to {bw / 1e6:.0f} Mb/s by one TCP "
                                    f"stream at {link.rtt_s * 1e3:.0f} ms RTT)")
                pair_s = 2.0 * model_bytes / n * 8.0 / bw + 2.0 * link.rtt_s
                averaging = max(averaging, pair_s)
        for p in peers:
            nic = p.nic_bandwidth_bps or network.link(p.site, p.site).bandwidth_bps
            if peer_throughput_cap_bps is not None:
                nic = min(nic, peer_throughput_cap_bps)
            averaging = max(averaging, 2.0 * (n - 1) / n * model_bytes * 8.0 / nic)
        averaging += round_overhead_s
    wait = max(0.0, matchmaking_min_s - calc_s) if n > 1 else 0.0
    comm_s = averaging + wait
    matchmaking_period = matchmaking_min_s + slowest_rtt if n > 1 else 0.0
    serial = calc_s + comm_s  # = max(T_calc, matchmaking) + averaging
    pipelined = max(calc_s, matchmaking_period, averaging)  # delayed updates: see the module docstring
    epoch_s = (1.0 - dpu_overlap) * serial + dpu_overlap * pipelined
    bound_comm_s = (1.0 - dpu_overlap) * comm_s + dpu_overlap * max(matchmaking_period, averaging)
    samples = target_batch_size / epoch_s
    g = granularity(calc_s, comm_s)
    if n > 1 and g < 1:
        notes.append(f"communication-bound: G = {g:.2f} < 1 — more peers will not help; raise the TBS or use faster links")
    if wait > 0:
        notes.append(f"the peers reach the TBS in {calc_s:.2f} s, under the {matchmaking_min_s:g} s matchmaking minimum: "
                     "each round waits for its group")
    if target_batch_size > LAMB_TBS_LIMIT:
        notes.append(f"TBS {target_batch_size} is beyond the ~64K that LAMB is known to train well (Erben et al. §3)")
    sent = 2.0 * (n - 1) / n * model_bytes if n > 1 else 0.0
    if state_average_every is not None and n > 1:
        sent *= 1.0 + 1.0 / state_average_every
        notes.append(f"parameter averaging every {state_average_every} epoch(s) adds {1.0 / state_average_every:.0%} to "
                     "each round's traffic (counted in egress; its time is not modelled)")
    return HivemindPrediction(
        peers=n, target_batch_size=target_batch_size, calc_s=calc_s, averaging_s=averaging, matchmaking_wait_s=wait,
        comm_s=comm_s, matchmaking_period_s=matchmaking_period, epoch_s=epoch_s, samples_per_s=samples,
        per_peer_samples_per_s=[p.samples_per_s * calc_s / epoch_s for p in peers],
        accumulation_steps_per_round=[p.samples_per_s * calc_s / p.per_peer_batch_size if p.per_peer_batch_size else None
                                      for p in peers], granularity=g,
        doubling_speedup_bound=doubling_speedup_bound(g),
        throughput_bound_samples_per_s=(math.inf if bound_comm_s == 0 else target_batch_size / bound_comm_s),
        bytes_sent_per_peer_per_round=sent, rounds_per_hour=3600.0 / epoch_s, slowest_pair=slowest,
        slowest_pair_bandwidth_bps=slowest_bw if math.isfinite(slowest_bw) else 0.0, notes=notes,
        source="modelled (Hivemind: Erben et al.'s granularity model, VLDB 2024); peers: "
               + "; ".join(dict.fromkeys(p.source for p in peers)))


def transfer_measured_throughput(measured_samples_per_s: float, target_batch_size: int, parameter_count: int,
                                 measured_sites: Sequence[Site], new_sites: Sequence[Site], *,
                                 network: NetworkModel | None = None,
                                 bytes_per_parameter: float = FP16_BYTES_PER_PARAMETER,
                                 streams_per_pair: int = 1) -> float:
    """Samples/s of the same Hivemind job and peer count on another network, from one measured run:
    the measured epoch (TBS / samples/s, which holds every overhead the model does not know) plus the
    modelled change in averaging time between the two placements. Erben et al.'s B/C experiments are
    reproduced this way from its A runs (tests/test_data_parallel.py)."""
    if len(measured_sites) != len(new_sites):
        raise TrainwiseError(f"the placements must have the same number of peers ({len(measured_sites)} vs {len(new_sites)})")
    if measured_samples_per_s <= 0:
        raise TrainwiseError(f"the measured throughput must be positive (got {measured_samples_per_s})")

    def averaging(sites: Sequence[Site]) -> float:
        group = [HivemindPeer(name=f"{s.name}#{i}", samples_per_s=1.0, site=s) for i, s in enumerate(sites)]
        return predict_hivemind(group, parameter_count, 1, network=network, bytes_per_parameter=bytes_per_parameter,
                                matchmaking_min_s=0.0, streams_per_pair=streams_per_pair).averaging_s

    epoch = target_batch_size / measured_samples_per_s + averaging(new_sites) - averaging(measured_sites)
    return target_batch_size / epoch


class PeerCost(_Frozen):
    name: str
    cloud: str
    vm_usd_per_hour: float
    egress_gb_per_hour: float
    egress_split: dict[str, float]
    egress_usd_per_hour: float
    data_loading_usd_per_hour: float


class GroupCost(_Frozen):
    peers: list[PeerCost]
    vm_usd_per_hour: float
    egress_usd_per_hour: float
    data_loading_usd_per_hour: float
    total_usd_per_hour: float
    samples_per_s: float
    usd_per_1m_samples: float
    egress_share: float = Field(description="egress / total $/h")
    source: str


def hivemind_costs(peers: Sequence[HivemindPeer], prediction: HivemindPrediction, egress_prices: pd.DataFrame | None,
                   *, bytes_per_sample: float = 0.0,
                   object_storage_usd_per_gb: float = egress_mod.OBJECT_STORAGE_USD_PER_GB) -> GroupCost:
    """$/h of a Hivemind group: VM prices + each peer's egress (bytes per round × rounds per hour ×
    its destination split × its cloud's $/GB) + data loading from object storage."""
    sites = [p.site for p in peers]
    gb_per_hour = prediction.bytes_sent_per_peer_per_round * prediction.rounds_per_hour / 1e9
    rows = []
    for i, p in enumerate(peers):
        split = egress_mod.destination_split(sites, i)
        egress_usd = egress_mod.egress_usd_per_hour(gb_per_hour, split, p.site.cloud, egress_prices) if split else 0.0
        loading = egress_mod.data_loading_usd_per_hour(prediction.per_peer_samples_per_s[i], bytes_per_sample,
                                                       object_storage_usd_per_gb)
        rows.append(PeerCost(name=p.name, cloud=p.site.cloud, vm_usd_per_hour=p.price_per_hour,
                             egress_gb_per_hour=gb_per_hour if split else 0.0, egress_split=split,
                             egress_usd_per_hour=egress_usd, data_loading_usd_per_hour=loading))
    vm = sum(r.vm_usd_per_hour for r in rows)
    egress_total = sum(r.egress_usd_per_hour for r in rows)
    loading_total = sum(r.data_loading_usd_per_hour for r in rows)
    total = vm + egress_total + loading_total
    return GroupCost(peers=rows, vm_usd_per_hour=vm, egress_usd_per_hour=egress_total,
                     data_loading_usd_per_hour=loading_total, total_usd_per_hour=total,
                     samples_per_s=prediction.samples_per_s,
                     usd_per_1m_samples=usd_per_million_samples(total, prediction.samples_per_s),
                     egress_share=egress_total / total if total > 0 else 0.0,
                     source="modelled: VM prices given; egress Erben et al. Table 1 via the catalog; data loading "
                            f"{object_storage_usd_per_gb:g} $/GB ({egress_mod.OBJECT_STORAGE_SOURCE})")


# ---------------------------------------------------------------------------- compute sources


def compute_from_profile(profile: object) -> WorkerCompute:
    """A worker's compute from a measured profile: the steady-state iteration time (data wait
    included: each worker loads its own data) at the profile's global batch as the per-worker batch,
    with the steady iterations' own times (their spread is what a synchronous step waits out)."""
    from trainwise.profile.schema import as_iterations, steady_positions

    steady = getattr(profile, "steady_state")
    dataset = getattr(profile, "dataset")
    env = getattr(profile, "environment")
    if steady.iteration.mean_s <= 0 or dataset.global_batch_size <= 0:
        raise TrainwiseError("the profile has no steady-state iteration time or batch size: re-profile the job")
    iterations = getattr(profile, "iterations", None) or []
    its = as_iterations(iterations)
    walls = its.column("wall_s")
    samples = tuple(walls[i] for i in steady_positions(its)[1]) if its else ()
    return WorkerCompute(step_time_s=steady.iteration.mean_s, per_worker_batch_size=dataset.global_batch_size,
                         step_time_samples_s=samples if samples and min(samples) > 0 else (),
                         source=f"measured on {env.hostname}")


def intra_node_link(accelerator: object) -> LinkSpec:
    """NVLink/PCIe link of one multi-accelerator machine from the catalog's interconnect text
    (trainwise.predict.accelerator_features.link_bandwidth_gbs: the effective all-reduce GB/s per device)."""
    from trainwise.predict.accelerator_features import link_bandwidth_gbs

    gbs = link_bandwidth_gbs(accelerator)
    text = getattr(accelerator, "interconnect", None) or "no interconnect in the catalog: PCIe Gen3 assumed"
    return LinkSpec(bandwidth_bps=gbs * 8e9, latency_s=INTRA_NODE_LATENCY_S,
                    source=f"{getattr(accelerator, 'name', '?')} interconnect: {text} -> {gbs:g} GB/s effective")


def inter_node_link(cloud: str, network: NetworkModel | None = None) -> LinkSpec:
    """Instance network between nodes of one cloud zone (Erben et al. Table 5 intra-cloud figures)."""
    network = network or seed_network()
    site = Site(name="node", cloud=cloud, region="r", zone="z", continent="us")
    return LinkSpec.from_link(network.link(site, site))
