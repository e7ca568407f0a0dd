"""NILM-like reference pipeline: float64 two-channel (voltage, current) HDF5 → 10 s windows → aggregates.

The generator writes HDF5 files (h5py) of 1 kHz two-channel float64 signals (a 50 Hz mains voltage and
the current of a mix of switching appliances with harmonics). A sample is one 10 s window of one file
(the source lists the windows); the steps read the window and aggregate it per mains cycle (20 ms):
RMS voltage, RMS current, active power P, reactive power Q = sqrt(S² − P²) and the cumulative energy
(cumsum of P), as float32 (PRESTO's NILM pipeline ends at 0.012 MB per sample; this one at 10 kB).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from trainwise.optional import require
from trainwise.pipeline.spec import Pipeline, Sample, SequenceSource, Step

SAMPLE_RATE = 1000
MAINS_HZ = 50
WINDOW_S = 10
FILE_SECONDS = 60
DATASET = "signals"


def generate(directory: str | Path, windows: int, seed: int = 0) -> list[Path]:
    require("h5py", "the reference NILM pipeline")
    import h5py

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    per_file = FILE_SECONDS // WINDOW_S
    paths = []
    for i in range(-(-windows // per_file)):
        seconds = FILE_SECONDS if (i + 1) * per_file <= windows else (windows - i * per_file) * WINDOW_S
        t = np.arange(seconds * SAMPLE_RATE) / SAMPLE_RATE
        voltage = 230 * np.sqrt(2) * np.sin(2 * np.pi * MAINS_HZ * t) + rng.normal(0, 1.0, t.size)
        current = np.zeros_like(t)
        for _ in range(int(rng.integers(2, 6))):  # appliances switching on and off
            on = rng.uniform(0, seconds, size=2)
            active = (t >= on.min()) & (t < on.max())
            amp, shift = rng.uniform(0.5, 8), rng.uniform(-0.8, 0.8)
            wave = amp * np.sin(2 * np.pi * MAINS_HZ * t - shift) + amp * 0.2 * np.sin(2 * np.pi * 3 * MAINS_HZ * t)
            current += active * wave
        current += rng.normal(0, 0.05, t.size)
        path = root / f"house{i:05d}.h5"
        with h5py.File(path, "w") as handle:
            handle.create_dataset(DATASET, data=np.stack([voltage, current], axis=1).astype(np.float64))
            handle.attrs["sample_rate_hz"] = SAMPLE_RATE
        paths.append(path)
    return paths


def windows_of(directory: str | Path) -> tuple[list[dict], list[Path]]:
    require("h5py", "the reference NILM pipeline")
    import h5py

    files = sorted(Path(directory).glob("*.h5"))
    items = []
    for path in files:
        with h5py.File(path, "r") as handle:
            length = handle[DATASET].shape[0]
        for start in range(0, length - WINDOW_S * SAMPLE_RATE + 1, WINDOW_S * SAMPLE_RATE):
            items.append({"__key__": f"{path.stem}_{start}", "path": str(path), "start": start})
    return items, files


def read_window(sample: Sample) -> Sample:
    require("h5py", "the reference NILM pipeline")
    import h5py

    start = int(sample["start"])
    with h5py.File(sample["path"], "r") as handle:
        window = handle[DATASET][start:start + WINDOW_S * SAMPLE_RATE]
    return {"__key__": sample["__key__"], "signals": np.ascontiguousarray(window.T)}


def aggregate(sample: Sample) -> Sample:
    voltage, current = sample["signals"]
    per_cycle = SAMPLE_RATE // MAINS_HZ
    v = voltage.reshape(-1, per_cycle)
    i = current.reshape(-1, per_cycle)
    v_rms, i_rms = np.sqrt((v * v).mean(axis=1)), np.sqrt((i * i).mean(axis=1))
    active = (v * i).mean(axis=1)
    reactive = np.sqrt(np.maximum(0.0, (v_rms * i_rms) ** 2 - active ** 2))
    energy = np.cumsum(active) / MAINS_HZ  # joules since the window start
    features = np.stack([v_rms, i_rms, active, reactive, energy], axis=1).astype(np.float32)
    return {"__key__": sample["__key__"], "aggregates": features}


STEPS = (Step("read_window", read_window), Step("aggregate", aggregate))


def pipeline(directory: str | Path) -> Pipeline:
    items, files = windows_of(directory)
    source = SequenceSource(items, storage_bytes=sum(p.stat().st_size for p in files), files=files, name=f"nilm-windows:{directory}")
    return Pipeline("nilm", source, list(STEPS), description="HDF5 float64 V/I → 10 s windows → per-cycle RMS, P, Q, cumulative energy")
