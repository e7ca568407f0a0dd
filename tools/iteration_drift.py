"""How one client loop's step time moves over a whole run: the loop under `trainwise profile --full`, its
per-iteration times cut into twentieths of the run, each twentieth's median printed and written as JSON.

A host check before judging same-machine accuracy: a sampled profile sees seconds of steps, and on a host
whose speed wanders over tens of seconds (the 2-core VM; the lent GPU machines' CPUs, 2026-11-27) it is off by
what the host did in them. Several copies pinned one core each show the wander under load.
Run: PYTHONPATH=src:benchmarks .venv/bin/python tools/iteration_drift.py LOOP SCALE OUT.json
(LOOP as in benchmarks/client_scripts.py; e.g. `taskset -c 0 ... gradient_accumulation 10 /tmp/alone.json`)
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from client_scripts import LOOPS, command  # noqa: E402

from trainwise.profile.runner import ProfileOptions, run_profile  # noqa: E402

PARTS = 20


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[1] not in LOOPS:
        sys.exit(f"usage: iteration_drift.py LOOP SCALE OUT.json, LOOP one of {', '.join(sorted(LOOPS))}")
    name, scale, out = sys.argv[1], float(sys.argv[2]), Path(sys.argv[3])
    if not 0 < scale <= 100:
        sys.exit("error: SCALE must be in (0, 100]")
    with tempfile.TemporaryDirectory() as work:
        started = time.time()
        profile = run_profile(command(name, scale, work), ProfileOptions(
            mode="full", characterise=False, host_noise=False, flush_denormal=False), quiet=True)
        wall_s = time.time() - started
    walls = [i.wall_s for i in profile.iterations]
    n = len(walls)
    parts = [statistics.median(walls[k * n // PARTS:(k + 1) * n // PARTS]) for k in range(PARTS)] if n >= PARTS else []
    result = {"loop": name, "scale": scale, "wall_s": wall_s, "init_s": profile.init.total_s, "iterations": n,
              "mean_step_s": statistics.mean(walls) if walls else None, "part_median_step_s": parts,
              "validation_s": sum(v.wall_s for v in profile.validations)}
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(name, f"{wall_s:.1f} s", f"init {profile.init.total_s:.1f} s", "mean step",
          f"{result['mean_step_s'] * 1e3:.3f} ms" if walls else "-", "twentieths (ms)",
          [round(p * 1e3, 2) for p in parts], flush=True)


if __name__ == "__main__":
    main()
