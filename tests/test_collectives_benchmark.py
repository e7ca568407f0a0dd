"""XLA's collective table read from a serialized proto, and the all-reduce evaluation on it (no GPU)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from benchmark_modules import load_benchmark

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("xla_collectives", ROOT / "tools" / "xla_collectives.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _profile(op: str, elements: int, groups: int, per_group: int, throughput: int) -> bytes:
    shape = _field(2, 11) + _field(3, _varint(elements))  # F32, packed dimensions
    iota = _field(1, groups) + _field(2, per_group) + _field(3, _varint(8)) + _field(4, _varint(0))
    instruction = _field(1, b"_") + _field(2, op.encode()) + _field(3, shape) + _field(92, iota)
    return _field(1, instruction) + _field(3, b"f" * 32) + _field(6, throughput)


def _table(key: str, profiles: list[bytes]) -> bytes:
    value = b"".join(_field(1, p) for p in profiles)
    return _field(2, _field(1, key.encode()) + _field(2, value))


def test_collective_table_read_from_a_serialized_proto(tmp_path):
    """Each kept machine's all-reduce/reduce-scatter rows at tensor bytes / throughput (a reduce-scatter's shape is
    its output: the table's size is k times it); collective permutes and machines the catalog lacks left out."""
    tool = _tool()
    h100 = _table("sm_90", [_profile("all-reduce", 1 << 20, 1, 8, 200_000_000_000),
                            _profile("reduce-scatter", 1 << 17, 1, 8, 100_000_000_000),
                            _profile("collective-permute", 1 << 20, 1, 8, 50_000_000_000)])
    amd = _table("gfx942", [_profile("all-reduce", 1 << 20, 1, 8, 100_000_000_000)])
    blob = tmp_path / "plugin.so"
    blob.write_bytes(b"\x7fELF junk\0" + amd + b"\0\0" + h100 + b"\0tail")
    rows = tool.read_rows(blob)
    assert [(r["gpu"], r["op"], r["groups"], r["devices_per_group"], r["bytes"]) for r in rows] == [
        ("H100", "all-reduce", 1, 8, 4 << 20), ("H100", "reduce-scatter", 1, 8, 4 << 20)]
    assert float(rows[0]["time_us"]) == pytest.approx((4 << 20) / 2e11 * 1e6, rel=1e-3)
    blob.write_bytes(b"no table")
    with pytest.raises(ValueError, match="no collective table"):
        tool.read_rows(blob)


def test_allreduce_evaluation_on_the_packaged_table():
    """Every packaged all-reduce gets the plan's and the device model's prediction; the headline covers the DDP
    bucket sizes on all eight GPUs of both machines, and the bus bandwidth is read at 1 GiB."""
    bench = load_benchmark("collectives")
    rows = bench.load_rows()
    assert {r["gpu"] for r in rows} == {"H100", "B200"} and {r["devices_per_group"] for r in rows} == {2, 4, 8}
    result = bench.evaluate(rows)
    summary = result["summary"]
    assert summary["allreduce_rows"] == 14  # 1-100 MiB, powers of two: 7 sizes x 2 machines
    assert all(math.isfinite(r["node_held_out_error"]) and r["measured_s"] > 0 for r in result["rows"])
    # held out: each machine's constants come from the other machine alone
    assert summary["allreduce_median_abs_error"] is not None and "other machine" in summary["allreduce_method"]
    assert set(summary["busbw_gbs_at_1gib"]) == {"H100", "B200"}
    # the measured bus bandwidth of a 1-GiB all-reduce over eight GPUs is an NVLink machine's, not a PCIe one's
    assert all(bw > 200 for bw in summary["busbw_gbs_at_1gib"].values())


def test_node_allreduce_terms_interpolate_between_measured_group_sizes():
    """Group sizes between the measured ones are log2-interpolated; beyond them the nearest measured one holds; the
    node all-reduce is the floor plus the ring's bytes at the group's bus-bandwidth fraction."""
    from trainwise.predict import data_parallel as dp

    table = {2: (20e-6, 0.6), 4: (30e-6, 0.8), 8: (40e-6, 1.0)}
    assert dp.node_allreduce_terms(4, table) == (30e-6, 0.8)
    floor_s, fraction = dp.node_allreduce_terms(3, table)
    w = math.log2(3) - 1
    assert floor_s == pytest.approx(20e-6 + w * 10e-6) and fraction == pytest.approx(0.6 + w * 0.2)
    assert dp.node_allreduce_terms(16, table) == (40e-6, 1.0) and dp.node_allreduce_terms(1, table) == (20e-6, 0.6)
    link = dp.LinkSpec(bandwidth_bps=8e9 * 100)  # 100 GB/s
    floor_s, fraction = dp.node_allreduce_terms(8)
    assert dp.allreduce_time_s(1e9, 8, link, "node") == pytest.approx(floor_s + 1.75 * 1e9 / (100e9 * fraction))
    assert dp.allreduce_time_s(1e9, 1, link, "node") == 0.0


def test_shipped_node_constants_are_the_fit_on_the_packaged_table():
    """data_parallel.NODE_ALLREDUCE is what `benchmarks/collectives.py --fit` gives on the packaged table (both
    machines), so the constants can be rebuilt; the held-out figures fit each machine on the other alone."""
    from trainwise.catalog import load_catalog
    from trainwise.predict import data_parallel as dp

    bench = load_benchmark("collectives")
    assert bench.fit_node(bench.load_rows(), {"H100", "B200"}, load_catalog()) == dp.NODE_ALLREDUCE


def test_the_held_out_error_plans_quote_is_the_benchmarks():
    """The ±x % a DDP plan inside one machine quotes for its all-reduce is the current held-out result."""
    import json

    from benchmark_modules import BENCHMARKS
    from trainwise.predict import data_parallel as dp

    summary = json.loads((BENCHMARKS / "results" / "collectives.json").read_text(encoding="utf-8"))["summary"]
    assert dp.NODE_ALLREDUCE_HELD_OUT_ERROR == pytest.approx(summary["allreduce_median_abs_error"], abs=5e-4)
