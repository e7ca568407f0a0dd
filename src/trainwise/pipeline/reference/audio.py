"""Audio reference pipeline (PRESTO's FLAC/ASR): FLAC/WAV → waveform → log-mel spectrogram → time mask.

Mel spectrogram: 16 kHz audio, 20 ms Hann window (320 samples, FFT 512), 10 ms hop (160 samples),
80 mel bands (HTK mel scale, triangular filters), log(power + 1e-6): the same frames as torch.stft
(centred, reflect padding, periodic Hann window centred in the FFT frame), computed with numpy's FFT
and a numpy filterbank (torchaudio is not a dependency). Why not torch.stft: torch's CPU FFT runs in
MKL, whose per-thread allocation accounting is not fork-safe. Once the profiler had run the step in
reader threads, a DataLoader worker process forked afterwards spun for ever in MKL's allocator
(py-spy, 2026-11-25: mm_account_ptr_by_tid < mkl_serv_malloc < DftiCreateDescriptor, 100 % CPU for
20+ minutes, reproduced 4 times within minutes; MKL_DISABLE_FAST_MM=1 did not prevent it). numpy's
pocketfft keeps no such state. Version 2 of the step (version 1 used torch.stft; same output to
float32 rounding). The online step is a SpecAugment-style random time mask (not deterministic).
The generator writes real FLAC and WAV files with `soundfile`.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np

from trainwise.optional import require
from trainwise.pipeline.spec import FileSource, Pipeline, Sample, Step

SAMPLE_RATE = 16_000
WINDOW = 320  # 20 ms
HOP = 160  # 10 ms
N_FFT = 512
N_MELS = 80


def generate(directory: str | Path, count: int, seed: int = 0, flac_fraction: float = 0.6) -> list[Path]:
    require("soundfile", "the reference audio pipeline")
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
    require("soundfile", "the reference audio pipeline")
    import soundfile

    wave, rate = soundfile.read(io.BytesIO(sample["data"]), dtype="float32", always_2d=False)
    if rate != SAMPLE_RATE:
        raise ValueError(f"sample rate {rate} Hz, the pipeline expects {SAMPLE_RATE} Hz")
    if wave.ndim > 1:
        wave = wave.mean(axis=1)
    return {"__key__": sample["__key__"], "waveform": np.ascontiguousarray(wave)}


@lru_cache(maxsize=1)
def fft_window() -> np.ndarray:
    """The periodic Hann window of WINDOW samples, centred in an N_FFT frame (as torch.stft pads it)."""
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(WINDOW) / WINDOW)
    left = (N_FFT - WINDOW) // 2
    return np.pad(hann, (left, N_FFT - WINDOW - left)).astype(np.float32)


def power_spectrogram(wave: np.ndarray) -> np.ndarray:
    """|STFT|² as (N_FFT // 2 + 1, frames): frames centred on every HOP-th sample, reflect-padded ends."""
    padded = np.pad(wave, N_FFT // 2, mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP] * fft_window()
    spectrum = np.fft.rfft(frames, axis=1)
    return (spectrum.real ** 2 + spectrum.imag ** 2).T


def log_mel(sample: Sample) -> Sample:
    power = power_spectrogram(np.asarray(sample["waveform"], dtype=np.float32))
    mel = mel_filterbank() @ power
    return {"__key__": sample["__key__"], "mel": np.log(mel + 1e-6).astype(np.float32)}


def time_mask(sample: Sample) -> Sample:
    mel = sample["mel"].copy()
    rng = np.random.default_rng()
    width = int(rng.integers(0, min(30, mel.shape[1]) + 1))
    start = int(rng.integers(0, mel.shape[1] - width + 1))
    mel[:, start:start + width] = mel.mean()
    return {"__key__": sample["__key__"], "mel": mel}


STEPS = (Step("decode", decode), Step("log_mel", log_mel, version="2"), Step("time_mask", time_mask, deterministic=False))


def pipeline(directory: str | Path) -> Pipeline:
    return Pipeline("audio", FileSource.from_directory(directory), list(STEPS),
                    description="FLAC/WAV → waveform → log-mel 20 ms/10 ms/80 bins → random time mask (online)")
