"""The CPU time a hypervisor gave to other guests while the job ran ("steal" in Linux's /proc/stat): on a virtual
machine, the share of its CPUs it did not get. On the 2-core VM the 1-s windows of a fixed torch workload ranked
with their steal share (Spearman 0.89 over 180 windows, 2026-11-29): the slow periods of a shared host are, for
the most part, periods of steal. Standard library only: the agent runs in the user's environment.
"""

from __future__ import annotations

from typing import NamedTuple

PROC_STAT = "/proc/stat"
# Steal worth a word in a profile and its prediction: above the 0.5 % median of the VM's quiet 1-s windows
NOTEWORTHY_STEAL = 0.01


class CpuCounters(NamedTuple):
    total_jiffies: int  # user + nice + system + idle + iowait + irq + softirq + steal, all CPUs
    steal_jiffies: int


def read_counters(path: str = PROC_STAT) -> CpuCounters | None:
    """The aggregate line of /proc/stat; None off Linux or when it cannot be read (a diagnostic, never an error)."""
    try:
        with open(path, encoding="ascii") as handle:
            fields = handle.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    try:
        values = [int(v) for v in fields[1:9]]  # guest time is already counted in user time
    except ValueError:
        return None
    return CpuCounters(sum(values), values[7])


def steal_fraction(before: CpuCounters | None, after: CpuCounters | None) -> float | None:
    """The share of the CPUs' time stolen between two readings; None without both or with no time between."""
    if before is None or after is None:
        return None
    total = after.total_jiffies - before.total_jiffies
    if total <= 0:
        return None
    return min(1.0, max(0.0, (after.steal_jiffies - before.steal_jiffies) / total))
