"""The host-level probe beside a profile's sampled steps, run by the launcher, not in the job.

The probe (trainwise.profile.host_noise.probe_level_s) allocates and frees a 16-MB vector and 256-KB matmul
results and sets torch's thread count: inside the job that raised glibc malloc's dynamic mmap threshold (a
freed mmapped chunk raises it to the chunk's size), so the job's later activations came from the heap instead
of fresh pages — pytorch/examples' Siamese network took 8.8 k minor page faults a step after it instead of
19.4 k, and its profiled step read 206-220 ms where the plain run's was 237-264 ms. A profiler must not change
the job: the job asks the launcher over a Unix socket and waits (observer time) while the launcher probes in
its own process, on the same host.
"""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

REQUEST_TIMEOUT_S = 30.0  # the launcher's first probe imports torch (1-3 s); a probe is at most 5 s


class LevelProbeService:
    """A Unix socket in `workdir` answering "probe SECONDS" with the level in seconds, one thread per job
    connection; a context manager that removes the socket when the profile ends."""

    def __init__(self, workdir: str | os.PathLike) -> None:
        self.path = str(Path(workdir) / "level.sock")
        self._server: socket.socket | None = None
        self._lock = threading.Lock()  # one probe at a time: two at once would measure each other

    def __enter__(self) -> "LevelProbeService":
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(8)
        threading.Thread(target=self._accept, name="trainwise-level-probe", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        Path(self.path).unlink(missing_ok=True)

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # closed: the profile ended
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection: socket.socket) -> None:
        with connection, connection.makefile("rw") as stream:
            for line in stream:
                try:
                    seconds = float(line.split()[1])
                    if not 0 < seconds <= 5:
                        raise ValueError(f"probe seconds out of range: {seconds}")
                    with self._lock:
                        from trainwise.profile.host_noise import probe_level_s

                        answer = repr(probe_level_s(seconds))
                except Exception as exc:  # noqa: BLE001 - the job hears the reason, the profile keeps going
                    answer = f"error {exc}".replace("\n", " ")
                stream.write(answer + "\n")
                stream.flush()


def remote_probe_level_s(path: str, seconds: float) -> float:
    """In the job (standard library only): the launcher's probe of this host's level now."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(REQUEST_TIMEOUT_S)
        client.connect(path)
        client.sendall(f"probe {seconds!r}\n".encode())
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = client.recv(256)
            if not chunk:
                raise ConnectionError("the launcher closed the level probe")
            answer += chunk
    text = answer.decode().strip()
    if text.startswith("error"):
        raise RuntimeError(text[len("error "):])
    return float(text)
