"""The hypervisor's steal share (/proc/stat) over the sampled steps: read, recorded, shown and said in the prediction."""

from __future__ import annotations

import pytest

from trainwise.agent import cpu_steal
from trainwise.predict.same_machine import trainwise_estimate

from test_same_machine import make


def test_the_aggregate_line_gives_all_time_and_steal(tmp_path):
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text("cpu  100 0 50 800 10 0 5 35 20 0\ncpu0 50 0 25 400 5 0 2 18 10 0\n")
    assert cpu_steal.read_counters(str(stat)) == cpu_steal.CpuCounters(1000, 35)  # guest time is in user time
    later = cpu_steal.CpuCounters(1200, 85)
    assert cpu_steal.steal_fraction(cpu_steal.CpuCounters(1000, 35), later) == pytest.approx(0.25)
    assert cpu_steal.steal_fraction(None, later) is None
    assert cpu_steal.steal_fraction(later, later) is None  # no time between the readings


def test_an_unreadable_or_foreign_stat_file_is_no_reading(tmp_path):
    assert cpu_steal.read_counters(str(tmp_path / "missing")) is None
    (tmp_path / "stat").write_text("intr 1 2 3\n")
    assert cpu_steal.read_counters(str(tmp_path / "stat")) is None
    (tmp_path / "stat").write_text("cpu  1 2 x 4 5 6 7 8\n")
    assert cpu_steal.read_counters(str(tmp_path / "stat")) is None


def test_this_machine_reads_its_counters_when_it_is_linux():
    import sys

    counters = cpu_steal.read_counters()
    if not sys.platform.startswith("linux"):
        assert counters is None
        return
    assert counters is not None and 0 <= counters.steal_jiffies <= counters.total_jiffies


def test_steal_during_the_sample_is_said_in_the_prediction_and_the_profile_table():
    from rich.console import Console

    from trainwise.report.terminal import profile_table

    profile = make([0.1] * 30, init_s=3.0)
    quiet = trainwise_estimate(profile.model_copy(update={"sample_cpu_steal": 0.004}), epochs=10)
    assert "steal" not in quiet.note
    stolen = profile.model_copy(update={"sample_cpu_steal": 0.12})
    estimate = trainwise_estimate(stolen, epochs=10)
    assert "took 12.0% of this VM's CPU during the sampled steps" in estimate.note
    assert estimate.total_s == pytest.approx(quiet.total_s)  # said, not corrected: the run's share is unknown
    console = Console(width=200, record=True)
    console.print(profile_table(stolen))
    text = console.export_text()
    assert "CPU steal" in text and "12.0%" in text
    console = Console(width=200, record=True)
    console.print(profile_table(profile))
    assert "CPU steal" not in console.export_text()
