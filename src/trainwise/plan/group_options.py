"""What data-parallel configurations `plan()` ranks: the options (node counts, Hivemind target batch,
network, user-defined groups) and the group file they are read from."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainwise.errors import TrainwiseError
from trainwise.plan.objectives import check_option_number
from trainwise.predict.topology import CONTINENTS, NetworkModel, load_network, seed_network

# Hivemind's costs beyond moving bytes, fitted to Erben et al.'s intra-zone A-8 runs (8 x T4, TBS 32K):
# CONV (G 5.19 at 261.9 samples/s) and RoBERTa-XLM (G 1.15 at 575.1 samples/s) spend 20.2 s and 26.5 s
# per round communicating where the links alone need ~1-2.5 s (a fixed ~19-24 s: matchmaking, the
# CPU-offloaded optimizer step, state sync), and their peers compute at 48 % and 64 % of a standalone
# T4 (81.9 and 209 samples/s). Planning uses the middle of each; pass your own from a measured run.
HIVEMIND_ROUND_OVERHEAD_S = 20.0
HIVEMIND_COMPUTE_EFFICIENCY = 0.55


class PeerSpec(BaseModel):
    """Members of a user-defined Hivemind group: `count` machines of `offering` (an offering_id, or
    "local" for this machine), optionally placed elsewhere than the offering's region."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    offering: str
    count: int = Field(default=1, ge=1)
    continent: str | None = None
    region: str | None = None
    zone: str | None = None


class GroupSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    peers: tuple[PeerSpec, ...] = Field(min_length=1)


class DistributedOptions(BaseModel):
    """What data-parallel configurations `plan()` considers, and the assumptions behind them."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    node_counts: tuple[int, ...] = Field(default=(2, 4, 8), description="N for N × machine groups")
    hivemind: bool = Field(default=True, description="also Hivemind groups (one zone, geo, hybrid)")
    target_batch_size: int | None = Field(default=None, gt=0, description="Hivemind TBS; None: the profile's global batch")
    groups: tuple[GroupSpec, ...] = ()
    network: NetworkModel | None = Field(default=None, description="None: the packaged defaults (Erben et al.'s measurements)")
    local_continent: str = Field(default="eu", description="where this machine is (hybrid groups)")
    bytes_per_sample: float = Field(default=0.0, ge=0, description="training data streamed per sample (object storage)")
    peer_throughput_cap_bps: float | None = Field(default=None, gt=0, description="cap on one peer's averaging rate")
    dpu_overlap: float = Field(default=0.0, ge=0, le=1)
    hivemind_round_overhead_s: float = Field(default=HIVEMIND_ROUND_OVERHEAD_S, ge=0)
    hivemind_average_state_every: int | None = Field(
        default=None, ge=1, description="count parameter averaging every N epochs in the peers' traffic "
                                        "(`trainwise run --average-state-every`); None: gradient rounds only (as Erben et al. measured)")
    hivemind_compute_efficiency: float = Field(default=HIVEMIND_COMPUTE_EFFICIENCY, gt=0, le=1,
                                               description="a peer's compute rate under Hivemind / standalone")

    def net(self) -> NetworkModel:
        return self.network or seed_network()


def options_from_cli(nodes: Sequence[int] | None = None, target_batch_size: int | None = None,
                     network_path: str | Path | None = None, groups_path: str | Path | None = None,
                     bytes_per_sample: float | None = None, local_continent: str | None = None,
                     hivemind: bool = True, average_state_every: int | None = None) -> DistributedOptions:
    update: dict[str, Any] = {"hivemind": hivemind}
    if average_state_every is not None:
        update["hivemind_average_state_every"] = average_state_every
    if nodes:
        if any(n < 2 for n in nodes):
            raise TrainwiseError(f"--nodes must be whole numbers of at least 2 (got {list(nodes)})")
        update["node_counts"] = tuple(sorted(set(int(n) for n in nodes)))
    if target_batch_size is not None:
        update["target_batch_size"] = target_batch_size
    if network_path is not None:
        update["network"] = load_network(network_path)
    if groups_path is not None:
        update["groups"] = load_groups(groups_path)
    if bytes_per_sample is not None:
        check_option_number(bytes_per_sample, "--bytes-per-sample", "bytes", maximum=1e12)  # 1 TB a sample
        update["bytes_per_sample"] = bytes_per_sample
    if local_continent is not None:
        update["local_continent"] = _local_continent(local_continent)
    try:
        return DistributedOptions(**update)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise TrainwiseError(f"distributed options: {'.'.join(map(str, first['loc']))}: {first['msg']}") from exc


def _local_continent(value: str) -> str:
    """A continent code of the network model: any other places this machine nowhere, and every hybrid
    group (this machine + cloud peers on its continent) silently drops out of the plan."""
    name = value.strip().lower()
    if name not in CONTINENTS:
        import difflib

        near = difflib.get_close_matches(name, CONTINENTS, n=1, cutoff=0.6)
        hint = f"did you mean {near[0]}? " if near else ""
        raise TrainwiseError(f"--local-continent {value}: no such continent: {hint}use one of {', '.join(CONTINENTS)}")
    return name


def load_groups(path: str | Path) -> tuple[GroupSpec, ...]:
    """Hivemind groups from YAML/JSON: a list of {name, peers: [{offering, count, continent?, region?}]}."""
    from trainwise.userfiles import load_yaml

    p = Path(path)
    # the bounded reader: size, UTF-8 (bad byte named), nesting, aliases and integer length
    data = load_yaml(p, "group file", missing_hint="write a YAML list of {name, peers: [{offering, count}]}")
    if not data:  # an empty file planned no groups and said nothing
        raise TrainwiseError(f"group file {p} holds no groups: write a YAML list of {{name, peers: [{{offering, count}}]}}")
    try:
        items = data.get("groups", data) if isinstance(data, dict) else data
        groups = tuple(GroupSpec.model_validate(item) for item in items or [])
    except (yaml.YAMLError, ValidationError, TypeError, AttributeError) as exc:
        raise TrainwiseError(f"group file {p}: not a list of {{name, peers: [{{offering, count}}]}} groups ({exc.__class__.__name__}): "
                             "fix it") from exc
    from trainwise.plan.bounds import check_group_counts

    check_group_counts(groups, f"group file {p}")  # before ranking: `count: 100000000` grew memory without end
    for group in groups:
        for peer in group.peers:
            if peer.continent is not None and peer.continent not in CONTINENTS:
                # an unknown one would place the peer nowhere on the network model
                raise TrainwiseError(f"group file {p}, group {group.name}: continent {peer.continent!r} is not one of "
                                     f"{', '.join(CONTINENTS)}")
    return groups
