"""NLP reference pipeline (PRESTO's NLP): HTML text files → strip HTML → BPE tokens → embedding lookup.

The generator writes HTML documents from a synthetic Zipf-distributed vocabulary and trains a small
byte-level BPE tokenizer (the `tokenizers` library) on the stripped corpus, saved as tokenizer.json
next to the documents. The embedding table is a fixed seeded float32 matrix (a frozen embedding layer).
"""

from __future__ import annotations

import html
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from trainwise.optional import require
from trainwise.pipeline.spec import FileSource, Pipeline, Sample, Step

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # DataLoader workers fork after the tokenizer is loaded
TOKENIZER_FILE = "tokenizer.json"
VOCAB_SIZE = 4000
EMBEDDING_DIM = 256
MAX_TOKENS = 512
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_SYLLABLES = ("ka", "lo", "mi", "ne", "tra", "vis", "on", "el", "ur", "po", "sen", "dar", "qui", "ba", "ro", "te", "fi", "gal")


def _vocabulary(rng: np.random.Generator, size: int = 3000) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(_SYLLABLES, size=int(rng.integers(1, 4)))))
    return sorted(words)


def _document(rng: np.random.Generator, words: list[str], weights: np.ndarray) -> str:
    parts = ["<html><head><title>doc</title></head><body>"]
    for _ in range(int(rng.integers(3, 9))):
        sentence = " ".join(rng.choice(words, size=int(rng.integers(20, 80)), p=weights))
        if rng.random() < 0.4:
            sentence = sentence.replace(" ", " <b>", 1) + "</b>"
        if rng.random() < 0.3:
            sentence += f' <a href="https://example.org/{rng.integers(1e6)}">link &amp; more</a>'
        parts.append(f"<p class=\"c{rng.integers(5)}\">{sentence}.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def strip(text: str) -> str:
    return _SPACE.sub(" ", html.unescape(_TAG.sub(" ", text))).strip()


def generate(directory: str | Path, count: int, seed: int = 0) -> list[Path]:
    require("tokenizers", "the reference NLP pipeline")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    words = _vocabulary(rng)
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    weights = (1 / ranks ** 1.1) / (1 / ranks ** 1.1).sum()
    paths, corpus = [], []
    for i in range(count):
        document = _document(rng, words, weights)
        path = root / f"doc{i:06d}.html"
        path.write_text(document, encoding="utf-8")
        paths.append(path)
        corpus.append(strip(document))
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=["[UNK]"], show_progress=False))
    tokenizer.save(str(root.parent / f"{root.name}-{TOKENIZER_FILE}"))
    return paths


@lru_cache(maxsize=4)
def _tokenizer(path: str):
    require("tokenizers", "the reference NLP pipeline")
    from tokenizers import Tokenizer

    return Tokenizer.from_file(path)


@lru_cache(maxsize=1)
def _embedding_table() -> np.ndarray:
    return np.random.default_rng(1234).standard_normal((VOCAB_SIZE, EMBEDDING_DIM)).astype(np.float32)


def html_strip(sample: Sample) -> Sample:
    return {"__key__": sample["__key__"], "text": strip(sample["data"].decode("utf-8"))}


def make_tokenize(tokenizer_path: str | Path) -> Step:
    path = str(tokenizer_path)

    def tokenize(sample: Sample) -> Sample:
        ids = _tokenizer(path).encode(sample["text"]).ids[:MAX_TOKENS]
        return {"__key__": sample["__key__"], "tokens": np.asarray(ids, dtype=np.int32)}

    return Step("bpe_tokenize", tokenize)


def embed(sample: Sample) -> Sample:
    return {"__key__": sample["__key__"], "embedding": _embedding_table()[sample["tokens"]]}


def pipeline(directory: str | Path) -> Pipeline:
    root = Path(directory)
    return Pipeline("nlp", FileSource.from_directory(root, "*.html"),
                    [Step("html_strip", html_strip), make_tokenize(root.parent / f"{root.name}-{TOKENIZER_FILE}"), Step("embed", embed)],
                    description="HTML → strip → BPE tokens (tokenizers) → embedding lookup float32")
