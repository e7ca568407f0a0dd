"""Long chaos variant: kill -9 a checkpointing training job many times (a third of the kills aimed at
checkpoint writes), restart it each time, plant torn checkpoints, and check that the final weights are
bit-identical to an uninterrupted run of the same script without trainwise.

Writes benchmarks/results/chaos_resume.json (summary.bit_identical, summary.kills,
summary.kills_during_write, summary.resumed_from_corrupt = 0 expected).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import torch

from trainwise._io import atomic_write_text
from _machine import machine
from trainwise.run.chaos import run_chaos, run_uninterrupted

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = str(ROOT / "tests" / "scripts" / "chaos_train.py")
RESULTS = Path(__file__).parent / "results"


def plain_run(out: Path, args: list[str]) -> dict:
    if run_uninterrupted(SCRIPT, ["--out", str(out), *args]) != 0:
        raise SystemExit("the uninterrupted reference run failed")
    return torch.load(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=100)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--output", type=Path, default=RESULTS / "chaos_resume.json")
    args = parser.parse_args()
    script_args = ["--epochs", str(args.epochs), "--samples", "512", "--sleep", "0.01", "--width", "4096"]
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="tw-chaos-") as tmp:
        tmp_path = Path(tmp)
        reference = plain_run(tmp_path / "plain.pt", script_args)
        report = run_chaos(SCRIPT, ["--out", str(tmp_path / "chaos.pt"), *script_args], tmp_path / "ck", tmp_path / "work",
                           kills=args.kills, during_write=args.kills // 3, max_kill_s=0.6, every_batches=4, seed=7,
                           corrupt_newest_at=args.kills // 2)
        final = torch.load(tmp_path / "chaos.pt")
    identical = final.keys() == reference.keys() and all(torch.equal(final[k], reference[k]) for k in reference)
    torn = set(report.injected_corrupt)
    # The first attempt after the plant that got as far as loading: it must not resume from the torn file.
    plant = args.kills // 2
    after = [a for a in report.attempts if a.index > plant and (a.resumed_from or a.skipped_corrupt)]
    resumed_from_corrupt = int(bool(after) and after[0].resumed_from in torn)
    summary = {"bit_identical": identical, "kills": report.kills, "kills_during_write": report.kills_during_write,
               "attempts": len(report.attempts), "planted_corrupt": sorted(torn),
               "corrupt_final_files_seen": report.corrupt_final_files, "resumed_from_corrupt": resumed_from_corrupt,
               "seconds": time.time() - start}
    document = {"benchmark": "chaos_resume", "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": machine(),
                "summary": summary, "script_args": script_args, "attempts": [asdict(a) for a in report.attempts]}
    atomic_write_text(args.output, json.dumps(document, indent=1))
    print(json.dumps(summary))
    return 0 if identical and report.kills == args.kills and not report.corrupt_final_files else 1


if __name__ == "__main__":
    raise SystemExit(main())
