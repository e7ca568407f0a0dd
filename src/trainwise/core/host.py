"""What this host is, as a profile and a host-noise measurement name it (standard library only)."""

from __future__ import annotations

import platform


def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo`), else what `platform` knows of the processor."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
