"""Where training peers are and how fast they talk: sites, links, the network model.

A `Site` is one machine's location (cloud, region, zone, continent; `cloud="on-premise"` for your
own hardware). A `NetworkModel` answers `link(a, b)` — bandwidth and round-trip time between two
sites — from, most specific first:

1. an explicit pair naming both sites (by site name or `cloud:region`): used as is (a measurement,
   e.g. written by `trainwise net probe`);
2. otherwise the worst (lowest bandwidth, highest RTT) of the matching coarse pairs (cloud–cloud,
   cloud–continent, continent–continent) and the level default (same zone / region / continent /
   inter-continent; within one cloud, that cloud's intra-cloud figure).

The packaged defaults (`data/network_seed.json`) are Erben et al.'s measurements (VLDB 2024,
§3–6), each with its source; values the seed does not state say "assumed" or "estimated".
`load_network(path)` overlays a user file of the same shape (or a bare list of pair entries).

A single TCP stream cannot carry more than window / RTT (Erben et al. §6: 50–80 Mb/s at ~300 ms even
on a 500 Mb/s uplink); `effective_bandwidth_bps` applies that cap. Hivemind opens one stream per
peer pair (Erben et al. §6), so the cap applies per pair.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainwise.errors import TrainwiseError

SEED_NETWORK_PATH = Path(__file__).parent / "data" / "network_seed.json"
from trainwise.core.geography import _PREFIXES, CONTINENTS, continent_of  # noqa: F401 - re-exported


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Link(_Frozen):
    """One direction-agnostic link: sustained bandwidth and round-trip time."""

    bandwidth_bps: float = Field(gt=0, description="bits per second")
    rtt_s: float = Field(ge=0, description="round-trip time, seconds")
    source: str = ""

    @property
    def one_way_latency_s(self) -> float:
        return self.rtt_s / 2.0


class PairLink(Link):
    a: str = Field(description="site name, 'cloud:region', cloud, or continent")
    b: str


class Site(_Frozen):
    """Where one peer runs."""

    name: str
    cloud: str = Field(description="gcp, aws, azure, lambda, on-premise, …")
    region: str = ""
    zone: str = ""
    continent: str = Field(description=f"one of {', '.join(CONTINENTS)}")

    def keys(self) -> list[tuple[int, str]]:
        """(specificity, key) this site answers to; 0 is most specific."""
        out = [(0, self.name.lower())]
        if self.region:
            out.append((0, f"{self.cloud}:{self.region}".lower()))
        out += [(1, self.cloud.lower()), (2, self.continent.lower())]
        return out


class NetworkModel(_Frozen):
    description: str = ""
    tcp_window_bytes: float = Field(default=2.5e6, gt=0)
    tcp_window_source: str = ""
    levels: dict[str, Link] = Field(default_factory=dict,
                                    description="same_zone, same_region, same_continent, inter_continent")
    clouds: dict[str, Link] = Field(default_factory=dict, description="intra-cloud link per cloud")
    pairs: tuple[PairLink, ...] = ()

    def link(self, a: Site, b: Site) -> Link:
        """Bandwidth and RTT between two sites (see the module docstring for the order)."""
        keys_a, keys_b = a.keys(), b.keys()
        exact, coarse = [], []
        for pair in reversed(self.pairs):  # later entries (overrides) first
            pa, pb = pair.a.lower(), pair.b.lower()
            for ka, kb in ((pa, pb), (pb, pa)):
                spec_a = next((s for s, k in keys_a if k == ka), None)
                spec_b = next((s for s, k in keys_b if k == kb), None)
                if spec_a is None or spec_b is None:
                    continue
                (exact if spec_a == 0 and spec_b == 0 else coarse).append(pair)
                break
        if exact:
            p = exact[0]
            return Link(bandwidth_bps=p.bandwidth_bps, rtt_s=p.rtt_s, source=p.source)
        candidates: list[Link] = []
        replaces_level = False
        # cloud-to-cloud pairs describe clouds in one area (seed Table 5); across continents the
        # continent pair governs, so a cloud pair only joins when the continents match. A
        # continent-continent or cloud-cloud pair replaces the level default; a cloud-continent
        # pair (on-premise to a region) adds a constraint to it.
        for pair in coarse:
            ends = {pair.a.lower(), pair.b.lower()}
            clouds = ends <= {a.cloud.lower(), b.cloud.lower()} and len(ends) == 2
            continents = ends <= set(CONTINENTS)
            if clouds and a.continent != b.continent:
                continue
            replaces_level |= clouds or continents
            candidates.append(pair)
        if not replaces_level:
            candidates.append(self._level(a, b))
        bandwidth = min(c.bandwidth_bps for c in candidates)
        rtt = max(c.rtt_s for c in candidates)
        sources = [c.source for c in candidates if c.bandwidth_bps == bandwidth or c.rtt_s == rtt]
        return Link(bandwidth_bps=bandwidth, rtt_s=rtt, source="; ".join(dict.fromkeys(s for s in sources if s)))

    def _level(self, a: Site, b: Site) -> Link:
        same_cloud = a.cloud.lower() == b.cloud.lower()
        if a.continent != b.continent:
            name = "inter_continent"
        elif same_cloud and a.region == b.region and a.zone == b.zone:
            name = "same_zone"
        elif same_cloud and a.region == b.region:
            name = "same_region"
        else:
            name = "same_continent"
        if name in ("same_zone", "same_region") and a.cloud.lower() in self.clouds:
            return self.clouds[a.cloud.lower()]
        if name not in self.levels:
            raise TrainwiseError(f"the network model has no {name!r} level: add it to the network file "
                                 f"(levels.{name}: bandwidth_bps, rtt_s)")
        return self.levels[name]

    def effective_bandwidth_bps(self, link: Link, streams: int = 1) -> float:
        """What `streams` TCP streams can carry on `link`: min(bandwidth, streams × window / RTT)."""
        if link.rtt_s <= 0:
            return link.bandwidth_bps
        return min(link.bandwidth_bps, streams * self.tcp_window_bytes * 8.0 / link.rtt_s)

    def with_pairs(self, pairs: list[PairLink]) -> NetworkModel:
        return self.model_copy(update={"pairs": tuple(self.pairs) + tuple(pairs)})


def uniform_network(bandwidth_bps: float, rtt_s: float, source: str = "given",
                    tcp_window_bytes: float = 2.5e6) -> NetworkModel:
    """Every pair of sites joined by the same link: an emulated or measured LAN/loopback setting
    (e.g. `uniform_network(100e6, 0.05, "tc tbf 100 Mb/s + 50 ms relay")`)."""
    link = Link(bandwidth_bps=bandwidth_bps, rtt_s=rtt_s, source=source)
    return NetworkModel(description=f"uniform: {source}", tcp_window_bytes=tcp_window_bytes,
                        levels={name: link for name in ("same_zone", "same_region", "same_continent", "inter_continent")})


@lru_cache(maxsize=1)
def seed_network() -> NetworkModel:
    """The packaged defaults from Erben et al. (VLDB 2024)."""
    return NetworkModel.model_validate(json.loads(SEED_NETWORK_PATH.read_text(encoding="utf-8")))


def load_network(path: str | Path | None = None, base: NetworkModel | None = None) -> NetworkModel:
    """The seed defaults overlaid with a user file (JSON or YAML): either a full network model
    (its levels, clouds and window replace the defaults', its pairs are appended) or a list of pair
    entries `{a, b, bandwidth_bps, rtt_s, source}` as `trainwise net probe` writes."""
    base = base or seed_network()
    if path is None:
        return base
    from trainwise.userfiles import load_yaml

    p = Path(path)
    # YAML reads JSON too; the reader bounds size, depth, aliases and integers, and names bad bytes
    data: Any = load_yaml(p, "network file", missing_hint=f"write one with `trainwise net probe HOST:PORT -o {p}`")
    try:
        if isinstance(data, list):
            return base.with_pairs([PairLink.model_validate(entry) for entry in data])
        if isinstance(data, dict) and set(data) <= {"pairs"}:
            return base.with_pairs([PairLink.model_validate(entry) for entry in data.get("pairs", [])])
        if isinstance(data, dict):
            user = NetworkModel.model_validate(data)
            return NetworkModel(description=user.description or base.description,
                                tcp_window_bytes=data.get("tcp_window_bytes", base.tcp_window_bytes),
                                tcp_window_source=user.tcp_window_source or base.tcp_window_source,
                                levels={**base.levels, **user.levels}, clouds={**base.clouds, **user.clouds},
                                pairs=tuple(base.pairs) + tuple(user.pairs))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise TrainwiseError(f"network file {p}: {where}: {first['msg']} (entries need a, b, bandwidth_bps > 0, rtt_s >= 0)") from exc
    raise TrainwiseError(f"network file {p} must hold a mapping (levels/clouds/pairs) or a list of pair entries")
