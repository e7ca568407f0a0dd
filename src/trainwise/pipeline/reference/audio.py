"""Audio reference pipeline (PRESTO's FLAC/ASR): FLAC/WAV → waveform → log-mel spectrogram → time mask.

Mel spectrogram: 16 kHz audio, 20 ms Hann window (320 samples, FFT 512), 10 ms hop (160 samples),
80 mel bands (HTK mel scale, triangular filters), log(power + 1e-6), computed with torch.stft and a
numpy filterbank (torchaudio is not a dependency). The online step is a SpecAugment-style random
time mask (not deterministic). The generator writes real FLAC and WAV files with `soundfile`.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np

from trainwise.pipeline.spec import FileSource, Pipeline, Sample, Step

SAMPLE_RATE = 16_000
WINDOW = 320  # 20 ms
HOP = 160  # 10 ms
N_FFT = 512
N_MELS = 80


def generate(directory: str | Path, count: int, seed: int = 0, flac_fraction: float = 0.6) -> list[Path]:
    import soundfile

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i in range(count):
        seconds = rng.uniform(2.0, 4.0)
        t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
        pitch = rng.uniform(100, 300) * (1 + 0.2 * np.sin(2 * np.pi * rng.uniform(0.2, 2) * t))
        phase = 2 * np.pi * np.cumsum(pitch) / SAMPLE_RATE
        wave = sum(rng.uniform(0.05, 0.3) / h * np.sin(h * phase) for h in range(1, 6))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(1, 4) * t) ** 2
        wave = (wave * envelope + rng.normal(0, 0.01, size=t.size)).astype(np.float32)
        path = root / (f"utt{i:06d}.flac" if rng.random() < flac_fraction else f"utt{i:06d}.wav")
        soundfile.write(path, wave, SAMPLE_RATE, subtype="PCM_16")
        paths.append(path)
    return paths


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (10 ** (mel / 2595.0) - 1.0)


@lru_cache(maxsize=1)
def mel_filterbank() -> np.ndarray:
    """(N_MELS, N_FFT // 2 + 1) triangular filters on the HTK mel scale, 0 Hz to Nyquist."""
    bins = np.linspace(0, SAMPLE_RATE / 2, N_FFT // 2 + 1)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array(0.0)), _hz_to_mel(np.array(SAMPLE_RATE / 2)), N_MELS + 2))
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)


def decode(sample: Sample) -> Sample:
    import soundfile

    wave, rate = soundfile.read(io.BytesIO(sample["data"]), dtype="float32", always_2d=False)
    if rate != SAMPLE_RATE:
        raise ValueError(f"sample rate {rate} Hz, the pipeline expects {SAMPLE_RATE} Hz")
    if wave.ndim > 1:
        wave = wave.mean(axis=1)
    return {"__key__": sample["__key__"], "waveform": np.ascontiguousarray(wave)}


def log_mel(sample: Sample) -> Sample:
    import torch

    wave = torch.from_numpy(sample["waveform"])
    spec = torch.stft(wave, n_fft=N_FFT, hop_length=HOP, win_length=WINDOW, window=torch.hann_window(WINDOW),
                      center=True, return_complex=True)
    power = spec.abs().pow(2).numpy()
    mel = mel_filterbank() @ power
    return {"__key__": sample["__key__"], "mel": np.log(mel + 1e-6).astype(np.float32)}


def time_mask(sample: Sample) -> Sample:
    mel = sample["mel"].copy()
    rng = np.random.default_rng()
    width = int(rng.integers(0, min(30, mel.shape[1]) + 1))
    start = int(rng.integers(0, mel.shape[1] - width + 1))
    mel[:, start:start + width] = mel.mean()
    return {"__key__": sample["__key__"], "mel": mel}


STEPS = (Step("decode", decode), Step("log_mel", log_mel), Step("time_mask", time_mask, deterministic=False))


def pipeline(directory: str | Path) -> Pipeline:
    return Pipeline("audio", FileSource.from_directory(directory), list(STEPS),
                    description="FLAC/WAV → waveform → log-mel 20 ms/10 ms/80 bins → random time mask (online)")
