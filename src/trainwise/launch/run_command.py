"""The `trainwise run` command line for a plan (issue 6's execution command), for one node.

The same argument list serves both backends: the local backend passes it to `subprocess` as a list
(never a shell string); the SkyPilot task joins it with `safety.quote_argv`, where the only unquoted
parts are trainwise's own references to SkyPilot's environment (`$SKYPILOT_NODE_RANK`, …).

    trainwise run --engine {local,ddp,hivemind} [--nproc N] [--nnodes M --node-rank R --master-addr A
        --master-port P] [--peers N --target-batch-size B --initial-peers MULTIADDR/p2p/ID | --identity KEY]
        [--checkpoint-dir URI (local, ddp)] [--output RUN.json] -- python train.py ARGS
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from trainwise.errors import TrainwiseError
from trainwise.launch.plan_document import PlanDocument
from trainwise.launch.safety import ShellExpr

MASTER_PORT = 29500
HIVEMIND_PORT = 31337
# SkyPilot's per-node environment (https://docs.skypilot.co: "Environment variables").
NODE_RANK = ShellExpr('"${SKYPILOT_NODE_RANK}"')
NUM_NODES = ShellExpr('"${SKYPILOT_NUM_NODES}"')
HEAD_IP = ShellExpr('"${TRAINWISE_HEAD_IP}"')
# Shell lines trainwise writes before the command (fixed text, no user input). The first line of the node list by
# parameter expansion, not `echo | head -n1`: under pipefail, head exiting before echo's last write failed the
# node's script with SIGPIPE (exit 141) now and then.
HEAD_IP_LINE = 'TRAINWISE_HEAD_IP="${SKYPILOT_NODE_IPS%%$\'\\n\'*}"'
# Hivemind across nodes: the head's first peer listens on a fixed port on every interface with an
# identity (private key) written at launch time, so its peer id — which libp2p requires at the end
# of a bootstrap address — is known before any node starts; the other nodes dial
# /ip4/HEAD/tcp/31337/p2p/<peer id>.
HEAD_IDENTITY_PATH = "/trainwise/hivemind/head.key"


@dataclass(frozen=True)
class HeadIdentity:
    """The head peer's identity for one launch: the key file on the launching machine (SkyPilot
    uploads it) and the peer id it gives."""

    local_path: str
    peer_id: str


def head_identity_path(task_path: Path) -> Path:
    """Where `trainwise launch` keeps the head's key: next to the task YAML."""
    return task_path.with_name(f"{task_path.name.removesuffix('.yaml')}.hivemind-head.key")


def write_head_identity(task_path: Path) -> HeadIdentity:
    """A fresh head identity for this launch (0600, written atomically; never printed)."""
    from trainwise.run.identity import generate_identity

    path = head_identity_path(task_path).resolve()
    return HeadIdentity(local_path=str(path), peer_id=generate_identity(path))


def initial_peers_lines(head: HeadIdentity) -> tuple[str, ...]:
    """Shell lines (fixed text and a checked base58 peer id) setting TRAINWISE_PEER_ARGS per node."""
    from trainwise.run.identity import PEER_ID_PATTERN

    if not PEER_ID_PATTERN.match(head.peer_id):
        raise TrainwiseError(f"head peer id {head.peer_id!r} is not a base58 libp2p peer id: regenerate the identity")
    return (
        f'TRAINWISE_PEER_ARGS=(--host 0.0.0.0 --port {HIVEMIND_PORT} --identity {HEAD_IDENTITY_PATH})',
        'if [ "${SKYPILOT_NODE_RANK}" != "0" ]; then',
        f'  TRAINWISE_PEER_ARGS=(--initial-peers "/ip4/${{TRAINWISE_HEAD_IP}}/tcp/{HIVEMIND_PORT}/p2p/{head.peer_id}")',
        'fi',
    )

def run_argv(plan: PlanDocument, *, command: Sequence[str], checkpoint_dir: str | None, output: str | ShellExpr | None,
             program: Sequence[str] = ("trainwise",), multinode: bool = False) -> list[str | ShellExpr]:
    """`trainwise run …` for this plan. With `multinode`, node rank, node count and the head
    address come from SkyPilot's environment; otherwise the run is on one node. `checkpoint_dir`
    applies to the local and DDP engines only (see below)."""
    argv: list[str | ShellExpr] = [*program, "run", "--engine", plan.engine]
    if plan.engine == "ddp":
        argv += ["--nproc", str(plan.processes_per_node)]
        if multinode:
            argv += ["--nnodes", NUM_NODES, "--node-rank", NODE_RANK, "--master-addr", HEAD_IP,
                     "--master-port", str(MASTER_PORT)]
    elif plan.engine == "hivemind":
        argv += ["--peers", str(plan.processes_per_node), "--target-batch-size", str(plan.target_batch_size)]
        if multinode:
            argv.append(ShellExpr('"${TRAINWISE_PEER_ARGS[@]}"'))
    if checkpoint_dir is not None and plan.engine != "hivemind":
        # Hivemind peers keep no checkpoints: a peer that (re)joins downloads the current state from
        # the other peers, and `trainwise run` refuses --checkpoint-dir with --engine hivemind. Both
        # backends build their command here, so neither can pass it.
        argv += ["--checkpoint-dir", checkpoint_dir]
    if output is not None:
        argv += ["--output", output]
    argv += ["--", *command]
    return argv
