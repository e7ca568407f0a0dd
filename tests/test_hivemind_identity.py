"""Hivemind across hosts: a deterministic head identity, its peer id computed without a daemon, and
the full `/ip4/HOST/tcp/PORT/p2p/<peer id>` address `trainwise launch` gives the other nodes — checked
against real hivemind DHTs on loopback and a real `trainwise run` peer."""

from __future__ import annotations

import json
import stat
import subprocess
import sys

import pytest
from rich.console import Console

from launch_helpers import four_plans
from trainwise.errors import TrainwiseError
from trainwise.launch.run_command import HIVEMIND_PORT, head_identity_path
from trainwise.run.identity import generate_identity, has_peer_id, peer_id_of
from trainwise.run.launcher import free_port
from trainwise.run.options import RunOptions

hivemind = pytest.importorskip("hivemind")
from hivemind.utils.timed_storage import get_dht_time  # noqa: E402

OPTIMIZER_ONLY = """
import torch
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""


def test_identity_file_is_private_and_its_peer_id_is_the_one_a_real_dht_reports(tmp_path):
    key = tmp_path / "head.key"
    peer_id = generate_identity(key)
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["head.key"]  # no temporary file left behind
    assert peer_id_of(key) == peer_id and has_peer_id(f"/ip4/10.0.0.1/tcp/31337/p2p/{peer_id}")

    port = free_port()
    head = hivemind.DHT(start=True, host_maddrs=[f"/ip4/127.0.0.1/tcp/{port}"], identity_path=str(key))
    try:
        assert head.peer_id.to_base58() == peer_id
        # The address a launcher builds before the head starts is enough for a second peer to join.
        joiner = hivemind.DHT(start=True, host_maddrs=["/ip4/127.0.0.1/tcp/0"],
                              initial_peers=[f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id}"])
        try:
            assert joiner.store("trainwise-identity-test", "joined", get_dht_time() + 60)
            found = head.get("trainwise-identity-test", latest=True)
            assert found is not None and found.value == "joined"
        finally:
            joiner.shutdown()
    finally:
        head.shutdown()


def test_bad_identity_and_bare_addresses_are_one_line_errors(tmp_path):
    # the fix for a first manual start (no `trainwise launch` to write the key) is named too
    with pytest.raises(TrainwiseError, match=r"does not exist: .*create one with trainwise.run.identity.generate_identity"):
        peer_id_of(tmp_path / "missing.key")
    (tmp_path / "junk.key").write_bytes(b"not a key")
    with pytest.raises(TrainwiseError, match="not a libp2p private key"):
        peer_id_of(tmp_path / "junk.key")
    bare = RunOptions(engine="hivemind", target_batch_size=64, initial_peers=[f"/ip4/10.0.0.1/tcp/{HIVEMIND_PORT}"])
    with pytest.raises(TrainwiseError, match=r"/p2p/<peer id>.*--identity"):
        bare.validate()
    with pytest.raises(TrainwiseError, match="--engine hivemind only"):
        RunOptions(engine="local", identity_path=str(tmp_path / "junk.key")).validate()
    with pytest.raises(TrainwiseError, match="not a libp2p private key"):
        RunOptions(engine="hivemind", target_batch_size=64, identity_path=str(tmp_path / "junk.key")).validate()


def test_launch_writes_a_fresh_private_head_key_next_to_the_task_and_never_prints_it(tmp_path):
    from trainwise.launch.command import launch

    plan_path = four_plans()["hivemind"].save(tmp_path / "hivemind.plan.json")
    peer_ids = []
    for attempt in range(2):
        console = Console(record=True, width=400)
        launch(plan_path, dry_run=True, backend="sky", output=None, workdir=None, trainwise_spec=None,
               work_dir=tmp_path, timeout_s=None, console=console, validator="packaged")
        task = plan_path.with_suffix(".sky.yaml")
        key = head_identity_path(task)
        assert key.name == "hivemind.plan.sky.hivemind-head.key" and stat.S_IMODE(key.stat().st_mode) == 0o600
        peer_id = peer_id_of(key)
        text = task.read_text()
        assert f"/p2p/{peer_id}" in text and str(key) in text
        printed = console.export_text()
        assert peer_id in printed and key.read_bytes().hex() not in printed
        peer_ids.append(peer_id)
    assert peer_ids[0] != peer_ids[1]  # a fresh identity per launch


@pytest.mark.slow
@pytest.mark.long
def test_trainwise_run_peer_takes_the_identity(tmp_path):
    """`trainwise run --engine hivemind --identity KEY`: the peer it starts is reachable at the
    address computed from the key alone (the one other nodes are given)."""
    key = tmp_path / "head.key"
    peer_id = generate_identity(key)
    script = tmp_path / "optimizer_only.py"
    script.write_text(OPTIMIZER_ONLY)
    port = free_port()
    done = subprocess.run([sys.executable, "-c", "from trainwise.cli import run; run()", "run", "--engine", "hivemind",
                           "--peers", "1", "--target-batch-size", "64", "--host", "127.0.0.1", "--port", str(port),
                           "--identity", str(key), "--output", str(tmp_path / "run.json"), "--timeout", "120", "--",
                           sys.executable, str(script)], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"/ip4/127.0.0.1/tcp/{port}/p2p/{peer_id}" in done.stderr
    assert json.loads((tmp_path / "run.json").read_text())["exit_codes"] == [0]
    assert key.read_bytes().hex() not in done.stdout + done.stderr


def test_local_backend_runs_the_nodes_as_peers_of_one_run_that_bootstrap_from_peer_zero(tmp_path):
    """Here the nodes of a multi-node Hivemind plan are local peers of one `trainwise run`: peer 0
    publishes its own full /p2p/ address to the others, so no launch-time identity is involved."""
    from trainwise.launch.local_backend import executor_argv

    plan = four_plans()["hivemind"]
    argv, how = executor_argv(plan, command=["python", "train.py"], checkpoint_dir=None, run_dir=tmp_path, use_run=True)
    assert argv[3:9] == ["run", "--engine", "hivemind", "--peers", str(plan.nodes * plan.processes_per_node),
                         "--target-batch-size"]
    assert "--initial-peers" not in argv and "--identity" not in argv and how == "trainwise run --engine hivemind"
