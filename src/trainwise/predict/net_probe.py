"""`trainwise net probe`: measure bandwidth and round-trip time between this host and another.

One side serves (`serve` / `--serve PORT`), the other probes (`probe("HOST", PORT)`), over plain TCP:

- RTT: a connection with TCP_NODELAY exchanges `pings` 8-byte messages; the median round trip;
- upload: the client streams 1 MiB chunks for `seconds`, half-closes, the server answers with the
  bytes it received and the time between its first and last byte (the server's clock: no
  client-side buffering in the figure);
- download: the server streams for `seconds`, the client counts.

Each stream is one TCP connection, like Hivemind's one stream per peer pair, so the figure
includes the window/RTT cap a single stream meets on long links. The result is a pair entry
(`a`, `b`, `bandwidth_bps` = the slower direction, `rtt_s`, `source`) that `trainwise.predict.
topology.load_network` takes as an override; `write_entry` merges it into a JSON list atomically.
"""

from __future__ import annotations

import datetime as _dt
import json
import socket
import socketserver
import statistics
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from trainwise._io import check_output_path, write_output_text
from trainwise.errors import TrainwiseError
from trainwise.predict.topology import PairLink

CHUNK = 1 << 20
_HEADER = 16


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        conn: socket.socket = self.request
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        header = _recv_exact(conn, _HEADER)
        if not header:
            return
        mode, _, arg = header.decode("ascii", "replace").strip().partition(" ")
        if mode == "PING":
            while True:
                message = _recv_exact(conn, 8)
                if len(message) < 8:
                    return
                conn.sendall(message)
        elif mode == "UP":
            received, elapsed = _drain(conn)
            conn.sendall(struct.pack("!Qd", received, elapsed))
        elif mode == "DOWN":
            seconds = float(arg or 1.0)
            payload = b"\0" * CHUNK
            end = time.perf_counter() + seconds
            try:
                while time.perf_counter() < end:
                    conn.sendall(payload)
            except OSError:
                return


class ProbeServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def _listen(port: int, host: str) -> ProbeServer:
    # Checked here: socket.bind raises OverflowError (a traceback) for a port outside 0-65535.
    if not 0 <= port < 65536:
        raise TrainwiseError(f"--serve {port}: the port must be 1-65535 (0: any free port)")
    try:
        return ProbeServer((host, port), _Handler)
    except socket.gaierror as exc:
        raise TrainwiseError(f"cannot listen on {host}:{port} ({exc.strerror}): --bind takes an address of this host, "
                             "e.g. 0.0.0.0 (all interfaces)") from None
    except OSError as exc:
        raise TrainwiseError(f"cannot listen on {host}:{port} ({exc.strerror}): pick a free port") from None


def start_server(port: int = 0, host: str = "127.0.0.1") -> tuple[ProbeServer, int]:
    """A probe server in a background thread; returns it (call .shutdown()) and its port."""
    server = _listen(port, host)
    thread = threading.Thread(target=server.serve_forever, name="trainwise-net-probe", daemon=True)
    thread.start()
    return server, server.server_address[1]


def serve(port: int, host: str = "0.0.0.0", on_listening: Callable[[], None] | None = None) -> None:
    """Serve probes until interrupted (the `--serve PORT` mode); `on_listening` is called once bound."""
    server = _listen(port, host)
    if on_listening is not None:
        on_listening()
    with server:
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        data = conn.recv(n - len(out))
        if not data:
            break
        out += data
    return bytes(out)


def _drain(conn: socket.socket) -> tuple[int, float]:
    """Read until the peer closes: (bytes received, seconds from the first to the last chunk — the
    first chunk's arrival starts the clock, so connection set-up is not counted as transfer)."""
    received, first, last = 0, None, None
    while True:
        data = conn.recv(CHUNK)
        if not data:
            break
        now = time.perf_counter()
        first = now if first is None else first
        last = now
        received += len(data)
    return received, (last - first) if first is not None and last is not None else 0.0


def _connect(host: str, port: int, mode: str, timeout_s: float) -> socket.socket:
    try:
        conn = socket.create_connection((host, port), timeout=timeout_s)
    except OSError as exc:
        raise TrainwiseError(f"cannot reach a probe server at {host}:{port} ({exc.strerror or exc}): start one there "
                             f"with `trainwise net probe --serve {port}`") from exc
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn.sendall(mode.encode("ascii").ljust(_HEADER))
    return conn


def parse_target(target: str) -> tuple[str, int]:
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise TrainwiseError(f"probe target {target!r} must be HOST:PORT (e.g. 10.0.0.2:5201)")
    if not 0 < int(port) < 65536:
        raise TrainwiseError(f"probe target {target!r}: the port must be 1-65535")
    return host.strip("[]"), int(port)


def probe(host: str, port: int, *, seconds: float = 1.0, pings: int = 20, timeout_s: float = 10.0,
          local_name: str | None = None, remote_name: str | None = None) -> PairLink:
    """Measure RTT, upload and download against a probe server; the pair entry for the network file."""
    if seconds <= 0 or pings <= 0:
        raise TrainwiseError("probe needs a positive duration and ping count")
    with _connect(host, port, "PING", timeout_s) as conn:
        rtts = []
        for i in range(pings + 1):
            start = time.perf_counter()
            conn.sendall(struct.pack("!Q", i))
            if len(_recv_exact(conn, 8)) < 8:
                raise TrainwiseError(f"the probe server at {host}:{port} closed the connection during the ping test")
            if i:  # the first exchange warms up the path
                rtts.append(time.perf_counter() - start)
    rtt = statistics.median(rtts)
    with _connect(host, port, "UP", timeout_s) as conn:
        payload = b"\0" * CHUNK
        end = time.perf_counter() + seconds
        sent = 0
        while time.perf_counter() < end:
            conn.sendall(payload)
            sent += len(payload)
        conn.shutdown(socket.SHUT_WR)
        reply = _recv_exact(conn, 16)
        if len(reply) < 16:
            raise TrainwiseError(f"the probe server at {host}:{port} did not report the upload")
        received, elapsed = struct.unpack("!Qd", reply)
    upload = received * 8.0 / elapsed if elapsed > 0 else 0.0
    with _connect(host, port, f"DOWN {seconds:g}", timeout_s) as conn:
        got, elapsed = _drain(conn)
    download = got * 8.0 / elapsed if elapsed > 0 else 0.0
    if upload <= 0 or download <= 0:
        raise TrainwiseError(f"the probe to {host}:{port} moved no data: check the server and any firewall in between")
    bandwidth = min(upload, download)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    a = local_name or socket.gethostname()
    b = remote_name or host
    source = (f"measured by trainwise net probe {stamp} from {a} to {host}:{port}: one TCP stream, upload "
              f"{upload / 1e6:.1f} Mb/s, download {download / 1e6:.1f} Mb/s over {seconds:g} s each, median RTT of "
              f"{pings} pings {rtt * 1e3:.3f} ms")
    return PairLink(a=a, b=b, bandwidth_bps=bandwidth, rtt_s=rtt, source=source)


def existing_entries(path: str | Path) -> list[dict]:
    """The pair entries already in the network file at `path` (none when it does not exist yet); a
    one-line error when it cannot take the new one. Called before probing too: a folder or a file
    that is not a network file is refused before the measurement, not after it."""
    p = Path(path)
    check_output_path(p, "--output")
    if not p.is_file():
        return []
    try:
        existing = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise TrainwiseError(f"--output {p} cannot be read ({type(exc).__name__}): choose another --output") from None
    except json.JSONDecodeError as exc:
        raise TrainwiseError(f"{p} is not JSON ({exc.msg}): remove it or choose another --output") from None
    if not isinstance(existing, list):
        raise TrainwiseError(f"{p} is not a list of pair entries: choose another --output")
    return existing


def write_entry(entry: PairLink, path: str | Path) -> Path:
    """Merge `entry` into the JSON list at `path` (replacing an entry for the same pair), atomically."""
    pair = {entry.a, entry.b}
    entries = [e for e in existing_entries(path) if {e.get("a"), e.get("b")} != pair]
    entries.append(entry.model_dump())
    return write_output_text(path, json.dumps(entries, indent=2) + "\n", "--output")
