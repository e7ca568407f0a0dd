"""The all-reduce probe: a real gloo all-reduce among 2 local processes, and the ring link it implies."""

from __future__ import annotations

import pytest

from trainwise.errors import TrainwiseError
from trainwise.predict.collective_probe import AllreducePoint, CollectiveFit, probe_allreduce
from trainwise.predict.data_parallel import LinkSpec, allreduce_time_s


def _fit(latency_s: float, bytes_per_s: float, world_size: int = 2) -> CollectiveFit:
    return CollectiveFit(backend="gloo", world_size=world_size, points=[AllreducePoint(nbytes=1, median_s=1, spread_s=0)],
                         latency_s=latency_s, bytes_per_s=bytes_per_s, source="given")


@pytest.mark.parametrize("world_size", [2, 3, 8])
def test_the_ring_link_reproduces_the_fit(world_size):
    fit = _fit(200e-6, 300e6, world_size)
    for nbytes in (1_000, 1_000_000, 50_000_000):
        assert allreduce_time_s(nbytes, world_size, fit.as_link(), "ring") == pytest.approx(fit.time_s(nbytes), rel=1e-9)


def test_a_slower_wire_adds_its_time_to_the_collective_cost():
    fit = _fit(200e-6, 300e6)
    wire = LinkSpec(bandwidth_bps=100e6, latency_s=0.025, source="emulated")
    combined = fit.over(wire)
    nbytes = 4_800_000
    # gloo: each of the ring's 2(N-1) steps waits a round trip (data out, buffer-free notification back)
    expected = allreduce_time_s(nbytes, 2, wire) + 2 * wire.latency_s + fit.time_s(nbytes)
    assert allreduce_time_s(nbytes, 2, combined) == pytest.approx(expected, rel=1e-9)
    assert "emulated" in combined.source and "given" in combined.source


@pytest.mark.long
def test_probe_measures_a_real_gloo_allreduce():
    fit = probe_allreduce(2, (4096, 1 << 20), repeats=5)
    assert fit.backend == "gloo" and len(fit.points) == 2
    assert all(p.median_s > 0 for p in fit.points)
    assert fit.points[1].median_s > 0 and fit.bytes_per_s > 0 and fit.latency_s >= 0
    assert fit.source.startswith("measured here")


def test_probe_rejects_a_single_process():
    with pytest.raises(TrainwiseError, match="at least 2 processes"):
        probe_allreduce(1)


def test_concurrent_buckets_pay_the_latency_once_per_step():
    from trainwise.predict.data_parallel import WorkerCompute, bucket_sizes, predict_ddp

    link = LinkSpec(bandwidth_bps=100e6, latency_s=0.025)
    compute = WorkerCompute(step_time_s=0.08, per_worker_batch_size=32)
    gradient_bytes = 4_800_000
    buckets = len(bucket_sizes(gradient_bytes))
    assert buckets == 2
    serial = predict_ddp(compute, gradient_bytes, 2, link, overlap=0.0)
    concurrent = predict_ddp(compute, gradient_bytes, 2, link, overlap=0.0, concurrent_buckets=True)
    one_latency = allreduce_time_s(1, 2, link) - allreduce_time_s(1, 2, LinkSpec(bandwidth_bps=100e6))
    assert serial.allreduce_s - concurrent.allreduce_s == pytest.approx((buckets - 1) * one_latency, rel=1e-6)
    assert concurrent.step_time_s < serial.step_time_s


# long: two gloo processes timed against each other; on a loaded 2-core host the DDP step can time faster than
# the plain one (the bucket arithmetic above and the real all-reduce probe stay in the default run).
@pytest.mark.long
def test_ddp_overhead_probe_measures_ddps_own_work_beyond_the_allreduce():
    from trainwise.predict.collective_probe import probe_ddp_overhead

    overhead = probe_ddp_overhead(2, pairs=2, steps=60)
    assert overhead.backend == "gloo" and len(overhead.pair_deltas_s) == 2
    assert overhead.plain_step_s > 0 and overhead.allreduce_s > 0
    # DDP adds at least its all-reduce to every step of a 73-parameter model
    assert overhead.ddp_step_s > overhead.plain_step_s
    assert overhead.per_step_s == pytest.approx(max(0.0, sorted(overhead.pair_deltas_s)[0] / 2
                                                    + sorted(overhead.pair_deltas_s)[1] / 2 - overhead.allreduce_s))
    assert overhead.source.startswith("measured here")
    with pytest.raises(TrainwiseError, match="at least 2 processes"):
        probe_ddp_overhead(1)
