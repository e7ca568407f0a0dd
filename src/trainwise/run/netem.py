"""Emulated wide-area links between peers on one machine (tests and benchmarks; needs root).

Each peer gets its own Linux network namespace with one address, 10.77.<net>.<i+1>/24. The peers'
namespaces are joined by a small user-space router: a TUN device per namespace, all held open by one
router process that reads every IP packet a namespace sends, holds it for the one-way delay
(RTT / 2) and writes it into the destination namespace's TUN device. The bandwidth limit is a
`tc tbf` qdisc on each TUN device (egress). Nothing leaves the machine: the namespaces have no
other interface and no route out.

Why not a veth pair + netem: this kernel has no `sch_netem` (tc answers "Specified qdisc kind is
unknown"). Why an IP-level relay rather than a TCP relay: gloo (DDP) and libp2p (Hivemind) open
connections to addresses the peers learn from each other, which a TCP relay on a fixed port would not
see; at the IP level every connection passes through the delay.

The TUN MTU is 65000 so that the router handles ~200 packets/s at 100 Mb/s: Python's per-packet cost
stays far below the link's.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import select
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass, field

from trainwise.errors import TrainwiseError

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
MTU = 65000


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise TrainwiseError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}; link emulation needs root and iproute2")


def _netns_exec(ns: str, *args: str) -> None:
    result = subprocess.run(["ip", "netns", "exec", ns, *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise TrainwiseError(f"`{' '.join(args)}` in namespace {ns} failed: {result.stderr.strip()}")


def open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def route_forever(fds_by_address: dict[bytes, int], one_way_delay_s: float) -> None:
    """Forward IPv4 packets between TUN devices by destination address, each after the delay."""
    fds = list(fds_by_address.values())
    pending: list[tuple[float, int, int, bytes]] = []
    sequence = 0
    while True:
        now = time.monotonic()
        while pending and pending[0][0] <= now:
            _, _, out, packet = heapq.heappop(pending)
            try:
                os.write(out, packet)
            except OSError:
                pass  # the destination's qdisc is full: a dropped packet, as on a real link
        timeout = max(0.0, pending[0][0] - time.monotonic()) if pending else 1.0
        readable, _, _ = select.select(fds, [], [], timeout)
        arrival = time.monotonic()
        for fd in readable:
            try:
                packet = os.read(fd, MTU + 100)
            except OSError:
                continue
            if len(packet) < 20 or packet[0] >> 4 != 4:
                continue  # only IPv4 is routed
            out = fds_by_address.get(packet[16:20])
            if out is None:
                continue
            sequence += 1
            heapq.heappush(pending, (arrival + one_way_delay_s, sequence, out, packet))


@dataclass
class EmulatedNetwork:
    """`peers` namespaces, `rate_mbit` per peer's egress (None: unlimited), `rtt_ms` round trip."""

    peers: int
    rate_mbit: float | None = 100.0
    rtt_ms: float = 50.0
    net: int = 77
    prefix: str = "twp"
    namespaces: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    _router: subprocess.Popen | None = None

    def address(self, index: int) -> str:
        return f"10.{self.net}.0.{index + 1}"

    def exec_prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.namespaces[index]]

    def __enter__(self) -> "EmulatedNetwork":
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
            raise TrainwiseError("link emulation needs root with iproute2 (ip, tc)")
        tag = f"{self.prefix}{os.getpid() % 10000}"
        self.namespaces = [f"{tag}n{i}" for i in range(self.peers)]
        self.devices = [f"{tag}t{i}" for i in range(self.peers)]
        try:
            for ns in self.namespaces:
                _ip("netns", "add", ns)
                _netns_exec(ns, "ip", "link", "set", "lo", "up")
            args = [sys.executable, "-m", "trainwise.run.netem", "--delay-s", str(self.rtt_ms / 2000.0)]
            for i, (ns, dev) in enumerate(zip(self.namespaces, self.devices)):
                args += ["--device", f"{dev}={self.address(i)}={ns}"]
            self._router = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, start_new_session=True)
            line = self._router.stdout.readline()  # the router says "ready" once the devices exist
            if line.strip() != "ready":
                raise TrainwiseError(f"the link emulator's router did not start ({line.strip() or 'no output'})")
            for i, (ns, dev) in enumerate(zip(self.namespaces, self.devices)):
                _netns_exec(ns, "ip", "addr", "add", f"{self.address(i)}/24", "dev", dev)
                _netns_exec(ns, "ip", "link", "set", dev, "mtu", str(MTU), "up")
                if self.rate_mbit is not None:
                    # burst must hold at least one packet; the queue holds up to 2 s of traffic.
                    _netns_exec(ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{self.rate_mbit}mbit",
                                "burst", str(2 * MTU), "latency", "2s")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._router is not None and self._router.poll() is None:
            os.killpg(self._router.pid, signal.SIGTERM)
            self._router.wait(timeout=10)
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def _router_main(argv: list[str]) -> None:
    import argparse
    import socket

    parser = argparse.ArgumentParser(description="trainwise link emulator: delaying IP router between namespaces")
    parser.add_argument("--delay-s", type=float, required=True)
    parser.add_argument("--device", action="append", required=True, help="NAME=ADDRESS=NAMESPACE")
    args = parser.parse_args(argv)
    fds: dict[bytes, int] = {}
    for spec in args.device:
        name, address, namespace = spec.split("=")
        fd = open_tun(name)
        # The device was created in this (root) namespace; moving it keeps this descriptor working.
        _ip("link", "set", name, "netns", namespace)
        fds[socket.inet_aton(address)] = fd
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    route_forever(fds, args.delay_s)


if __name__ == "__main__":
    _router_main(sys.argv[1:])
