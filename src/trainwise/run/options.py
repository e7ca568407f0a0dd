"""What `trainwise run` was asked to do, validated with one-line errors."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Literal

from trainwise.errors import TrainwiseError
from trainwise.run.identity import has_peer_id, peer_id_of

Engine = Literal["local", "ddp", "hivemind"]
ENGINES = ("local", "ddp", "hivemind")
# Exit code of a job stopped by Ctrl-C (SIGINT to `trainwise run`), after it checkpointed.
INTERRUPTED_EXIT = 128 + signal.SIGINT


@dataclass
class CheckpointOptions:
    directory: str
    every_s: float | None = None  # None: the Young/Daly optimum from the measured write time
    every_batches: int | None = None
    keep: int = 3
    interruptions_per_hour: float | None = None  # None: the cost model's default (trainwise.core.costs)

    def validate(self) -> None:
        from trainwise.bounds import check_number

        # NaN passed `<= 0` and then never compared due: no checkpoint was written, and the run said success
        check_number(self.every_s, "--checkpoint-every-s", positive=True, unit="seconds between checkpoints")
        check_number(self.interruptions_per_hour, "--interruptions-per-hour", non_negative=True)
        if self.every_batches is not None and self.every_batches < 1:
            raise TrainwiseError(f"--checkpoint-every-batches must be at least 1 (got {self.every_batches})")
        if self.every_s is not None and self.every_batches is not None:
            raise TrainwiseError("give --checkpoint-every-s or --checkpoint-every-batches, not both")
        if self.keep < 1:
            raise TrainwiseError(f"--keep must be at least 1 (got {self.keep})")
        if self.interruptions_per_hour is not None and self.interruptions_per_hour < 0:
            raise TrainwiseError("--interruptions-per-hour must be >= 0")
        if not self.directory.strip():
            raise TrainwiseError("--checkpoint-dir is empty: give a folder or a bucket URL, e.g. ./checkpoints or s3://bucket/run")
        from trainwise.run.checkpoint import CheckpointStore
        from trainwise.run.checkpoint_key import load_key

        load_key()  # created (or its problem named) here, before any rank needs it
        # Before launching: a job whose checkpoints cannot be written would run unprotected.
        store = CheckpointStore(self.directory, self.keep)
        store.check_writable()
        store.check_resumable()

    def as_config(self) -> dict:
        return {"dir": self.directory, "every_s": self.every_s, "every_batches": self.every_batches,
                "keep": self.keep, "interruptions_per_hour": self.interruptions_per_hour}


@dataclass
class RunOptions:
    engine: Engine = "local"
    # DDP (torchrun)
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a free port (single node)
    # Hivemind
    peers: int = 2
    target_batch_size: int | None = None
    initial_peers: list[str] = field(default_factory=list)
    run_id: str = "trainwise"
    host: str | None = None  # the address each peer's DHT listens on (None: loopback, or all interfaces with --initial-peers)
    port: int = 0  # the first local peer's DHT port (0: any free port)
    # The first local peer's private-key file (a deterministic peer id, so other hosts can dial
    # /ip4/HOST/tcp/PORT/p2p/<peer id> before it starts); None: a random identity.
    identity_path: str | None = None
    matchmaking_time_s: float = 5.0  # hivemind's matchmaking minimum (the seed's 5 s)
    averaging_timeout_s: float = 60.0
    # hivemind.Optimizer(average_state_every=): average parameters with the group every this many
    # epochs (hivemind's default 1). Each state round is a second matchmaking beside the gradient
    # round's; see the README's data-parallel section for what that costs on a small host.
    average_state_every: int = 1
    # Peers joining late / leaving early (tests, benchmarks): seconds after the first peer started.
    peer_start_delay_s: list[float] = field(default_factory=list)
    peer_stop_after_s: list[float | None] = field(default_factory=list)
    # Per-peer command prefix (e.g. `ip netns exec NS`) and DHT host, for link emulation.
    peer_prefix: list[list[str]] = field(default_factory=list)
    peer_hosts: list[str] = field(default_factory=list)
    # A prefix for the launched command (e.g. `ip netns exec NS`) and extra environment (local, ddp).
    prefix: list[str] = field(default_factory=list)
    extra_env: dict[str, str] = field(default_factory=dict)
    # trainwise's glibc malloc settings (trainwise.allocator), opt-in as for `trainwise profile`.
    tune_allocator: bool = False
    # Denormals flushed to zero (trainwise.denormals): opt-in, as for `trainwise profile`.
    flush_denormal: bool = False
    checkpoint: CheckpointOptions | None = None
    timeout_s: float | None = None
    # Benchmarks: SIGTERM the job this many seconds after `expected_ranks` ranks trained a step.
    stop_after_started_s: float | None = None
    expected_ranks: int | None = None
    quiet: bool = False

    def validate(self) -> None:
        from trainwise.bounds import MAX_NODES, check_count, check_number, check_processes_per_node

        if self.engine not in ENGINES:
            raise TrainwiseError(f"unknown engine {self.engine!r}: use one of {', '.join(ENGINES)}")
        if self.nproc < 1 or self.nnodes < 1:
            raise TrainwiseError(f"--nproc and --nnodes must be at least 1 (got {self.nproc}, {self.nnodes})")
        if not 0 <= self.node_rank < self.nnodes:
            raise TrainwiseError(f"--node-rank must be in [0, {self.nnodes}) (got {self.node_rank})")
        if self.master_port is not None and not 0 < self.master_port < 65536:
            raise TrainwiseError(f"--master-port must be a TCP port, 1-65535 (got {self.master_port})")
        if self.engine == "ddp" and self.nnodes > 1 and self.master_port is None:
            raise TrainwiseError("multi-node DDP needs --master-addr and --master-port (the same on every node)")
        if self.engine != "ddp" and (self.nproc != 1 or self.nnodes != 1):
            raise TrainwiseError("--nproc/--nnodes apply to --engine ddp only")
        check_count(self.nnodes, "--nnodes", MAX_NODES, "machines")
        # NaN passed `<= 0`: `--timeout nan` stopped the job at once
        check_number(self.timeout_s, "--timeout", positive=True, unit="seconds")
        check_number(self.matchmaking_time_s, "--matchmaking-time", positive=True)
        check_number(self.averaging_timeout_s, "--averaging-timeout", positive=True)
        # Every process this node starts, before any starts: --nproc 100000 ran the machine out of memory.
        if self.engine == "ddp":
            check_processes_per_node(self.nproc, "--nproc")
        elif self.engine == "hivemind" and self.peers >= 1:
            check_processes_per_node(self.peers, "--peers")
        if self.engine == "hivemind":
            if self.peers < 1:
                raise TrainwiseError(f"--peers must be at least 1 (got {self.peers})")
            if self.target_batch_size is None or self.target_batch_size < 1:
                raise TrainwiseError("--engine hivemind needs --target-batch-size B (samples all peers accumulate per averaging round)")
            if self.checkpoint is not None:
                raise TrainwiseError("--checkpoint-dir is not used with --engine hivemind: a peer that (re)joins loads the state from the other peers")
            if not 0 <= self.port < 65536:
                raise TrainwiseError(f"--port must be a TCP port (got {self.port})")
            for addr in self.initial_peers:
                if not addr.startswith("/"):
                    raise TrainwiseError(f"--initial-peers takes multiaddrs such as /ip4/10.0.0.1/tcp/31337/p2p/Qm... (got {addr!r})")
                if not has_peer_id(addr):
                    raise TrainwiseError(f"--initial-peers {addr}: libp2p needs the peer id, /p2p/<peer id> at the end: "
                                         "start that peer with --identity FILE and append /p2p/ plus the id "
                                         "trainwise.run.identity.peer_id_of(FILE) gives (or the address it prints)")
            if self.identity_path is not None:
                peer_id_of(self.identity_path)  # a clear error now for a missing or malformed key file
        elif self.identity_path is not None:
            raise TrainwiseError("--identity applies to --engine hivemind only")
        else:
            # `trainwise run --peers 3 -- …` without --engine hivemind used to train one local process
            # and say nothing: a Hivemind option given to another engine is a mistake to name.
            given = [name for name, value, default in (("--peers", self.peers, 2), ("--target-batch-size", self.target_batch_size, None),
                                                       ("--initial-peers", self.initial_peers, []), ("--host", self.host, None),
                                                       ("--port", self.port, 0)) if value != default]
            if given:
                verb, pronoun = ("applies", "it") if len(given) == 1 else ("apply", "them")
                raise TrainwiseError(f"{', '.join(given)} {verb} to --engine hivemind only: add --engine hivemind, or drop "
                                     f"{pronoun} for --engine {self.engine}")
        if self.matchmaking_time_s <= 0 or self.averaging_timeout_s <= 0:
            raise TrainwiseError("matchmaking time and averaging timeout must be positive")
        if self.average_state_every < 1:
            raise TrainwiseError(f"--average-state-every must be at least 1 epoch (got {self.average_state_every})")
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise TrainwiseError(f"--timeout must be positive (got {self.timeout_s})")
        if self.checkpoint is not None:
            self.checkpoint.validate()

    @property
    def world_size(self) -> int:
        if self.engine == "ddp":
            return self.nproc * self.nnodes
        if self.engine == "hivemind":
            return self.peers
        return 1
