"""Training scripts nobody here wrote: the PyTorch examples repository's, profiled unmodified, then run for real.

Needs a checkout of github.com/pytorch/examples (`--examples DIR`; nothing of it is copied into trainwise).
The scripts that train offline on a CPU in minutes:
- `word_language_model/main.py`: an LSTM language model updated by hand (no torch.optim, no DataLoader),
  validation by model.eval() + no_grad, the whole model pickled with torch.save after an improving epoch;
- `dcgan/main.py --dataset fake`: two models, two Adam optimizers, a DataLoader with two workers, images and
  both models saved every epoch, the epoch count in --niter.
(time_sequence_prediction's LBFGS takes minutes per step on a 2-core CPU and its torch.load needs
weights_only=False on torch >= 2.6; mnist, vae and the others download their data.)
For each: `trainwise profile` with the defaults (the epoch count read from the script's flag), the same-machine
prediction of the whole run, then the plain run (`python main.py ARGS` in the script's folder, no trainwise),
whose launch → exit wall time is the truth. Nothing is fitted to these runs.

Writes benchmarks/results/public_examples.json; `summary`: profiled_fraction, median_abs_error, max_abs_error,
profiling_cost_fraction (median).
Run: .venv/bin/python benchmarks/public_examples.py --examples PATH/TO/examples [--size 1.0] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from trainwise._io import atomic_write_text
from trainwise.profile.runner import ProfileOptions
from _machine import machine
from client_scripts import accuracy_summary, print_row, profile_then_run

RESULTS = Path(__file__).parent / "results"


def word_language_model(folder: Path, size: float, scratch: str) -> list[str]:
    # a small LSTM (64 units) so that an epoch of wikitext-2 takes minutes on a CPU, not an hour
    return ["main.py", "--epochs", str(max(1, round(2 * size))), "--emsize", "64", "--nhid", "64",
            "--data", str(folder / "data" / "wikitext-2"), "--save", str(Path(scratch) / "model.pt")]


def dcgan(folder: Path, size: float, scratch: str) -> list[str]:
    return ["main.py", "--dataset", "fake", "--niter", str(max(1, round(8 * size))), "--outf", scratch,
            "--manualSeed", "1"]


EXAMPLES = {"word_language_model": word_language_model, "dcgan": dcgan}
REQUIRED = {"word_language_model": ["main.py", "data/wikitext-2/train.txt", "data/wikitext-2/valid.txt",
                                    "data/wikitext-2/test.txt"], "dcgan": ["main.py"]}


def measure(name: str, examples: Path, size: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainwise-examples-") as scratch:
        argv = [sys.executable, *EXAMPLES[name](examples / name, size, scratch)]
        row: dict = {"example": name, "command": argv[1:], "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        # the scripts read and write relative to their folder, as their READMEs run them
        return profile_then_run(row, argv, ProfileOptions(), name, cwd=examples / name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=Path, required=True, help="a checkout of github.com/pytorch/examples")
    parser.add_argument("--size", type=float, default=1.0, help="multiplies each script's epoch count")
    parser.add_argument("--only", nargs="*", choices=sorted(EXAMPLES), help="these examples only")
    parser.add_argument("--note", default="", help="a sentence kept in the results (how and where it ran)")
    parser.add_argument("--results", type=Path, default=RESULTS / "public_examples.json", help="where to write the JSON")
    args = parser.parse_args()
    names = args.only or list(EXAMPLES)
    missing = [f"{n}/{f}" for n in names for f in REQUIRED[n] if not (args.examples / n / f).is_file()]
    if missing:
        sys.exit(f"error: {args.examples} lacks {', '.join(missing)}: give --examples a checkout of "
                 "github.com/pytorch/examples (with its wikitext-2 data)")
    if not 0 < args.size <= 20:
        sys.exit("error: --size must be in (0, 20]")
    started = time.time()
    rows = []
    for name in names:
        print(f"{name} ...", flush=True)
        row = measure(name, args.examples.resolve(), args.size)
        rows.append(row)
        print_row(row)
    summary = {**accuracy_summary(rows), "examples": len(rows)}
    try:
        commit = subprocess.run(["git", "-C", str(args.examples), "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None  # not a git checkout: say which commit in --note
    result = {"benchmark": "public_examples", "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "summary": summary, "rows": rows, "size": args.size, "examples_commit": commit,
              "benchmark_wall_s": time.time() - started, "run_notes": args.note}
    args.results.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.results, json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
