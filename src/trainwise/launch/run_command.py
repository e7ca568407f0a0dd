"""The `trainwise run` command line for a plan (issue 6's execution command), for one node.

The same argument list serves both backends: the local backend passes it to `subprocess` as a list
(never a shell string); the SkyPilot task joins it with `safety.quote_argv`, where the only unquoted
parts are trainwise's own references to SkyPilot's environment (`$SKYPILOT_NODE_RANK`, …).

    trainwise run --engine {local,ddp,hivemind} [--nproc N] [--nnodes M --node-rank R --master-addr A
        --master-port P] [--peers N --target-batch-size B --initial-peers MULTIADDR]
        [--checkpoint-dir URI] [--output RUN.json] -- python train.py ARGS
"""

from __future__ import annotations

from collections.abc import Sequence

from trainwise.launch.plan_document import PlanDocument
from trainwise.launch.safety import ShellExpr

MASTER_PORT = 29500
HIVEMIND_PORT = 31337
# SkyPilot's per-node environment (https://docs.skypilot.co: "Environment variables").
NODE_RANK = ShellExpr('"${SKYPILOT_NODE_RANK}"')
NUM_NODES = ShellExpr('"${SKYPILOT_NUM_NODES}"')
HEAD_IP = ShellExpr('"${TRAINWISE_HEAD_IP}"')
# Shell lines trainwise writes before the command (fixed text, no user input).
HEAD_IP_LINE = 'TRAINWISE_HEAD_IP="$(echo "${SKYPILOT_NODE_IPS}" | head -n1)"'
# Hivemind across nodes: the head's first peer listens on a fixed port on every interface; the
# other nodes bootstrap from it. (libp2p needs the head's peer id in that address: see the README's
# launch section for what `trainwise run` must provide.)
INITIAL_PEERS_LINES = (
    f'TRAINWISE_PEER_ARGS=(--host 0.0.0.0 --port {HIVEMIND_PORT})',
    'if [ "${SKYPILOT_NODE_RANK}" != "0" ]; then',
    f'  TRAINWISE_PEER_ARGS=(--initial-peers "/ip4/${{TRAINWISE_HEAD_IP}}/tcp/{HIVEMIND_PORT}")',
    'fi',
)


def run_argv(plan: PlanDocument, *, command: Sequence[str], checkpoint_dir: str | None, output: str | ShellExpr | None,
             program: Sequence[str] = ("trainwise",), multinode: bool = False) -> list[str | ShellExpr]:
    """`trainwise run …` for this plan. With `multinode`, node rank, node count and the head
    address come from SkyPilot's environment; otherwise the run is on one node."""
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
    if checkpoint_dir is not None:
        argv += ["--checkpoint-dir", checkpoint_dir]
    if output is not None:
        argv += ["--output", output]
    argv += ["--", *command]
    return argv
