"""Does a per-kernel source help the kernel model on the other sources' kernels? A leave-one-GPU-family-out check.

For each GPU family of the other sources' rows, the kernel model is fitted without that family twice — with and
without the rows of SOURCE (optionally only its operator --op) — and scored on the other sources' rows of the held-out
family: median |relative error| and the time-weighted systematic error per regime (`kernel_fit.systematic_error`,
what a training step's sum keeps). Per-kernel data only: no end-to-end step is read, so a source can be kept or left
out on this evidence without touching the held-out evaluation.

Run: .venv/bin/python tools/source_ablation.py vidur [--op add] [--dataset PATH] (about a minute on two cores).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from trainwise.predict import kernel_fit as kf
from trainwise.predict import kernel_model as km


def ablate(data: kf.KernelDataset, source: str, op: str | None, settings: dict) -> dict:
    import numpy as np

    sources, ops = np.array(data.sources), np.array(data.ops)
    candidate = (sources == source) & ((ops == op) if op else True)
    others = sources != source
    fams = np.array([km.family(g) for g in data.gpus])
    thin = np.arange(len(fams)) % kf.HOLDOUT_THIN == 0
    out: dict = {"by_family": {}}
    errors: dict[bool, list] = {False: [], True: []}
    for fam in sorted(set(fams[others])):
        test = (fams == fam) & others
        if test.sum() < 50:
            continue
        row: dict = {}
        for with_source in (False, True):
            held, pred = kf.predict_held_out(data, (fams != fam) & thin & (with_source | ~candidate), test, settings)
            err = np.abs(pred / held.latency - 1)
            errors[with_source].append(err)
            row["with" if with_source else "without"] = {
                "rows": len(held.gpus), "median_abs_error": round(float(np.median(err)), 4),
                "regime_bias": {r: round(b, 3) for r, b in kf.systematic_error(pred, held.latency,
                                                                                km.regimes(held.x, held.dtype_code)).items()}}
        out["by_family"][fam] = row
    for with_source, key in ((False, "without"), (True, "with")):
        out[f"median_abs_error_{key}"] = round(float(np.median(np.concatenate(errors[with_source]))), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="the `source` column value to test, e.g. vidur")
    ap.add_argument("--op", default=None, help="only this operator of the source (e.g. add)")
    ap.add_argument("--dataset", type=Path, default=km.DATASET_PATH, help="kernel_latency.csv to read")
    args = ap.parse_args(argv)
    if not args.dataset.is_file():
        print(f"error: {args.dataset} does not exist: give a kernel_latency.csv (--dataset)", file=sys.stderr)
        return 2
    data = kf.load_dataset(args.dataset)
    if args.source not in set(data.sources):
        print(f"error: no rows of source {args.source!r} in {args.dataset}: sources are "
              f"{', '.join(sorted(set(data.sources)))}", file=sys.stderr)
        return 2
    settings = km.load_kernel_model().meta["settings"]
    print(json.dumps({"source": args.source, "op": args.op, "settings": settings,
                      **ablate(data, args.source, args.op, settings)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
