"""A preprocessing strategy (PRESTO, Erben et al., SIGMOD 2022): where to split, how to store, how to read back.

Split m: steps 1..m offline (once), m+1..n online (every epoch). `materialised=False` is the naive
PyTorch pipeline: the source files are read and every step runs online. The storage part (split,
format, compression, shard count) decides what is written; the online part (workers, worker kind,
cache mode) only how it is read, so strategies that share a storage part share one materialisation.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainwise.errors import TrainwiseError
from trainwise.pipeline.spec import Pipeline

Format = Literal["npy", "safetensors"]
Compression = Literal["none", "gzip", "zstd", "lz4"]
CacheMode = Literal["none", "page", "app"]
WorkerKind = Literal["process", "thread"]
FORMATS: tuple[str, ...] = ("npy", "safetensors")
COMPRESSIONS: tuple[str, ...] = ("none", "gzip", "zstd", "lz4")
CACHE_MODES: tuple[str, ...] = ("none", "page", "app")
_ID = re.compile(r"^(?:online|m(?P<split>\d+)-(?P<fmt>npy|st)-(?P<comp>none|gzip|zstd|lz4)-s(?P<shards>\d+))"
                 r"-w(?P<workers>\d+)(?P<kind>[pt])-(?P<cache>none|page|app)$")


class Strategy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    materialised: bool = True
    split: int = Field(ge=0, description="steps 1..split run offline")
    format: Format = "npy"
    compression: Compression = "none"
    shards: int = Field(default=4, ge=1)
    workers: int = Field(default=2, ge=0, description="DataLoader num_workers (processes) or reader threads")
    worker_kind: WorkerKind = "process"
    cache: CacheMode = "none"

    @property
    def id(self) -> str:
        online = f"w{self.workers}{self.worker_kind[0]}-{self.cache}"
        if not self.materialised:
            return f"online-{online}"
        fmt = "st" if self.format == "safetensors" else "npy"
        return f"m{self.split}-{fmt}-{self.compression}-s{self.shards}-{online}"

    @property
    def storage_id(self) -> str:
        """The part of the id that decides what is written."""
        return "online" if not self.materialised else self.id.rsplit("-w", 1)[0]

    @classmethod
    def parse(cls, strategy_id: str) -> "Strategy":
        match = _ID.match(strategy_id.strip())
        if not match:
            raise TrainwiseError(f"cannot read strategy id {strategy_id!r}: expected e.g. m2-npy-zstd-s4-w2p-app or online-w2p-none "
                                 "(ids are listed by `trainwise pipeline profile`)")
        g = match.groupdict()
        kind = "process" if g["kind"] == "p" else "thread"
        if g["split"] is None:
            return cls(materialised=False, split=0, workers=int(g["workers"]), worker_kind=kind, cache=g["cache"])
        if int(g["shards"]) < 1:
            # the only field the id's pattern lets out of range (its other numbers may be 0)
            raise TrainwiseError(f"strategy id {strategy_id!r} has s{g['shards']}: a materialised strategy needs at least "
                                 "one shard, e.g. s1 or s4")
        return cls(split=int(g["split"]), format="safetensors" if g["fmt"] == "st" else "npy", compression=g["comp"],
                   shards=int(g["shards"]), workers=int(g["workers"]), worker_kind=kind, cache=g["cache"])

    def check(self, pipeline: Pipeline) -> None:
        """Reject splits past a non-deterministic step (before anything is written)."""
        if not self.materialised:
            if self.split != 0:
                raise TrainwiseError("an online (not materialised) strategy has split 0")
            return
        pipeline.check_split(self.split)


def storage_hash(pipeline: Pipeline, strategy: Strategy) -> str:
    """What a materialisation depends on: source, offline steps (names + versions), storage options."""
    payload = {"pipeline": pipeline.name, "source": pipeline.source.fingerprint(), "steps": pipeline.steps_signature(strategy.split),
               "split": strategy.split, "format": strategy.format, "compression": strategy.compression, "shards": strategy.shards,
               # 2: numpy scalars stored as .npy, not JSON (a strategy materialised before is rebuilt, not
               # resumed into a mix of both)
               "layout": 2}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


def enumerate_strategies(pipeline: Pipeline, *, splits: Iterable[int] | None = None, formats: Sequence[str] = ("npy",),
                         compressions: Sequence[str] = COMPRESSIONS, shards: Sequence[int] = (4,), workers: Sequence[int] = (2,),
                         worker_kinds: Sequence[str] = ("process",), caches: Sequence[str] = CACHE_MODES,
                         include_online: bool = True) -> list[Strategy]:
    """Every combination allowed by the pipeline (splits past a non-deterministic step are left out)."""
    for value, allowed, what in ((formats, FORMATS, "format"), (compressions, COMPRESSIONS, "compression"), (caches, CACHE_MODES, "cache mode"),
                                 (worker_kinds, ("process", "thread"), "worker kind")):
        bad = [v for v in value if v not in allowed]
        if bad:
            raise TrainwiseError(f"unknown {what} {bad[0]!r}: use one of {', '.join(allowed)}")
    chosen = list(range(pipeline.max_offline_split + 1)) if splits is None else sorted(set(splits))
    for split in chosen:
        pipeline.check_split(split)
    out: list[Strategy] = []
    online_parts = list(itertools.product(workers, worker_kinds, caches))
    if include_online:
        # The naive pipeline is a plain map-style Dataset in a DataLoader: worker processes, no
        # application cache of raw items (what a user writing a plain Dataset does), so none/page only.
        out += list(dict.fromkeys(Strategy(materialised=False, split=0, workers=w, worker_kind="process", cache=c)
                                  for w, _, c in online_parts if c != "app"))
    for split, fmt, comp, n_shards in itertools.product(chosen, formats, compressions, shards):
        # 0 workers reads in the main process whatever the kind: one strategy, not one per kind
        out += [Strategy(split=split, format=fmt, compression=comp, shards=n_shards, workers=w, worker_kind=k if w else "process",
                         cache=c) for w, k, c in online_parts]
    return list(dict.fromkeys(out))
