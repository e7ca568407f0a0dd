"""The seed workloads' SYNTHETIC data generators, in NumPy only (no torch), so that the PyTorch
workloads and their Keras ports (any Keras backend) train on exactly the same rows.

See `trainwise.workloads.nn_twins_mlp` and `trainwise.workloads.rnn_sa_lstm` for what the data
imitates and the seed sections it follows.
"""

from __future__ import annotations

import numpy as np

# NN-TWINS (Künas' thesis §4.1): 5 metrics, 3 access-pattern classes.
NUM_FEATURES = 5
NUM_CLASSES = 3
# RNN-SA (Künas' thesis §4.2)
VOCAB_SIZE = 20_000
SEQ_LEN = 300
# Disjoint id ranges of "sentiment words" (frequent-ish ids, as sentiment words are).
POSITIVE_WORDS = (50, 250)
NEGATIVE_WORDS = (250, 450)


def synth_access_patterns(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` raw (untransformed) observations with 5 metrics and their class (0, 1, 2)."""
    y = rng.integers(0, NUM_CLASSES, size=n)
    size = np.exp(rng.uniform(np.log(1024), np.log(16 * 2**20), size=n))  # bytes
    spread_lo = rng.uniform(0.3, 1.0, size=n)
    spread_hi = rng.uniform(1.0, 3.0, size=n)
    procs = rng.integers(8, 513, size=n).astype(np.float64)
    n_files = np.where(y == 0, procs * rng.uniform(0.9, 1.0, size=n), rng.integers(1, 4, size=n))
    contiguous_gap = size * rng.exponential(0.05, size=n)  # almost back-to-back requests
    strided_gap = (procs - 1) * size * rng.uniform(0.8, 1.2, size=n)
    distance = np.where(y == 2, strided_gap, contiguous_gap)
    x = np.stack([size * spread_lo, size, size * spread_hi, n_files, distance], axis=1)
    x *= rng.lognormal(0.0, 0.1, size=x.shape)  # measurement noise
    flip = rng.random(n) < 0.01  # 1 % label noise
    y = np.where(flip, rng.integers(0, NUM_CLASSES, size=n), y)
    return x, y.astype(np.int64)


def synth_reviews(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` pre-padded int32 token sequences (n x 300) and float32 labels (1 = positive)."""
    labels = rng.integers(0, 2, size=n)
    lengths = np.clip(np.rint(rng.lognormal(np.log(120), 0.6, size=n)), 10, SEQ_LEN).astype(np.int64)
    words = np.exp(rng.uniform(0.0, np.log(VOCAB_SIZE - 1), size=(n, SEQ_LEN))).astype(np.int64)
    words = np.clip(words, 1, VOCAB_SIZE - 1)
    # sentiment words: 6 % of positions from the review's own polarity, 2 % from the other
    u = rng.random((n, SEQ_LEN))
    own_lo = np.where(labels == 1, POSITIVE_WORDS[0], NEGATIVE_WORDS[0])[:, None]
    other_lo = np.where(labels == 1, NEGATIVE_WORDS[0], POSITIVE_WORDS[0])[:, None]
    span = POSITIVE_WORDS[1] - POSITIVE_WORDS[0]
    offsets = rng.integers(0, span, size=(n, SEQ_LEN))
    words = np.where(u < 0.06, own_lo + offsets, words)
    words = np.where((u >= 0.06) & (u < 0.08), other_lo + offsets, words)
    # pre-padding (Keras pad_sequences default): the last `length` positions hold the review
    positions = np.arange(SEQ_LEN)[None, :]
    words = np.where(positions >= SEQ_LEN - lengths[:, None], words, 0)
    return words.astype(np.int32), labels.astype(np.float32)
