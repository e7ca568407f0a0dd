"""`trainwise net probe` on loopback: a real TCP server and client on this machine."""

from __future__ import annotations

import json

import pytest

from trainwise.cli import main
from trainwise.errors import TrainwiseError
from trainwise.predict import net_probe
from trainwise.predict.topology import Site, load_network


@pytest.fixture()
def server():
    srv, port = net_probe.start_server(0, "127.0.0.1")
    yield port
    srv.shutdown()
    srv.server_close()


def test_probe_loopback_measures_and_writes_an_override(server, tmp_path):
    entry = net_probe.probe("127.0.0.1", server, seconds=0.3, pings=10, local_name="here", remote_name="there")
    assert entry.bandwidth_bps > 1e8            # loopback moves far more than 100 Mb/s even on a busy machine
    assert 0 < entry.rtt_s < 0.05
    assert "measured by trainwise net probe" in entry.source
    out = tmp_path / "network.json"
    net_probe.write_entry(entry, out)
    net_probe.write_entry(entry, out)           # same pair again: replaced, not duplicated
    data = json.loads(out.read_text())
    assert len(data) == 1 and data[0]["a"] == "here"
    network = load_network(out)
    link = network.link(Site(name="here", cloud="on-premise", continent="eu"),
                        Site(name="there", cloud="on-premise", continent="eu"))
    assert link.bandwidth_bps == pytest.approx(entry.bandwidth_bps) and link.rtt_s == pytest.approx(entry.rtt_s)


def test_probe_cli(server, tmp_path, capsys):
    out = tmp_path / "net.json"
    code = main(["net", "probe", f"127.0.0.1:{server}", "--seconds", "0.2", "--pings", "5", "-o", str(out),
                 "--name", "a", "--remote-name", "b"])
    assert code == 0
    assert "Mb/s" in capsys.readouterr().out
    assert json.loads(out.read_text())[0]["b"] == "b"


def test_probe_errors_are_one_line(tmp_path, capsys):
    srv, port = net_probe.start_server(0, "127.0.0.1")
    srv.shutdown()
    srv.server_close()
    with pytest.raises(TrainwiseError, match="--serve"):
        net_probe.probe("127.0.0.1", port, seconds=0.1, pings=1)
    with pytest.raises(TrainwiseError, match="HOST:PORT"):
        net_probe.parse_target("nohost")
    with pytest.raises(TrainwiseError, match="port must be 1-65535"):
        net_probe.parse_target("nohost:99999")
    code = main(["net", "probe"])
    assert code == 2 and "error:" in capsys.readouterr().err


@pytest.mark.parametrize("args, fragment", [
    (["--serve", "99999"], "--serve 99999: the port must be 1-65535"),  # was an OverflowError traceback
    (["--serve", "-1"], "--serve -1: the port must be 1-65535"),
    (["--serve", "0", "--bind", "no.such.host.invalid"], "--bind takes an address of this host"),  # was "pick a free port"
])
def test_serve_with_a_bad_port_or_address_is_one_line_and_never_says_serving(capsys, args, fragment):
    code = main(["net", "probe", *args])
    captured = capsys.readouterr()
    assert code == 2 and "Traceback" not in captured.err and "serving" not in captured.out
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and fragment in errors[0], captured.err


def test_an_output_that_cannot_take_the_entry_is_refused_before_probing(tmp_path, capsys, monkeypatch):
    # `-o FOLDER` was an IsADirectoryError traceback, after the measurement
    def no_probe(*args, **kwargs):
        raise AssertionError("probed although the output could not take the entry")

    monkeypatch.setattr(net_probe, "probe", no_probe)
    not_json = tmp_path / "train.py"
    not_json.write_text("print('hi')\n")
    for output, fragment in ((tmp_path, "is a folder"), (not_json, "is not JSON")):
        code = main(["net", "probe", "127.0.0.1:5201", "-o", str(output)])
        err = capsys.readouterr().err
        errors = [line for line in err.splitlines() if line.startswith("error:")]
        assert code == 2 and "Traceback" not in err and len(errors) == 1 and fragment in errors[0], err
    assert not_json.read_text() == "print('hi')\n"
