"""Slow-header clients ("slowloris") and a latency probe, for the edge tests, 127.0.0.1 only.

    with SlowHeaders(port, connections=50, interval=2.0):
        latencies = probe(port, "/api/v2/health", seconds=12)

Each slow client sends a request line, then one header line every `interval` seconds and never
ends its header; a connection the server closes is opened again, so the pressure stays at
`connections` for as long as the context is open. Everything stops when it exits.
"""

from __future__ import annotations

import http.client
import math
import socket
import threading
import time
from types import TracebackType

from testbed.process import poll


class SlowHeaders:
    """`connections` slow-header clients against 127.0.0.1:port, run by one thread."""

    def __init__(self, port: int, *, connections: int = 50, interval: float = 2.0,
                 path: str = "/api/v2/health") -> None:
        self.port = port
        self.connections = connections
        self.interval = interval
        self.path = path
        self.opened = 0  # connections opened in total (reopened ones included)
        self.closed_by_server = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slow-headers", daemon=True)
        self._socks: list[socket.socket | None] = []

    def __enter__(self) -> SlowHeaders:
        self._thread.start()
        # Let every connection be open and started before the caller measures.
        poll(lambda: self.opened >= self.connections, 10, 0.05)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _open(self) -> socket.socket | None:
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            s.sendall(f"GET {self.path} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            s.setblocking(False)
            self.opened += 1
            return s
        except OSError:
            return None

    def _run(self) -> None:
        self._socks = [self._open() for _ in range(self.connections)]
        n = 0
        try:
            while not self._stop.wait(self.interval):
                n += 1
                for i, s in enumerate(self._socks):
                    if s is not None and self._alive(s):
                        try:
                            s.send(f"X-Slow-{n}: {'a' * 8}\r\n".encode())
                            continue
                        except OSError:
                            pass
                    if s is not None:
                        self.closed_by_server += 1
                        s.close()
                    self._socks[i] = self._open()
        finally:
            for s in self._socks:
                if s is not None:
                    s.close()

    @staticmethod
    def _alive(s: socket.socket) -> bool:
        """False once the server closed or reset the connection (readable: EOF or an answer)."""
        try:
            s.recv(4096)
        except BlockingIOError:
            return True  # nothing to read: still waiting for the rest of our header
        except OSError:
            return False
        return False  # EOF or an answer: the server is done with this connection


def probe(port: int, path: str, *, seconds: float, pause: float = 0.05,
          timeout: float = 2.0) -> list[float | None]:
    """GET path on fresh connections for `seconds`: each latency in seconds, None for a failure
    (refused, reset, timed out after `timeout`, or not 200)."""
    out: list[float | None] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", path)
            resp = conn.getresponse()
            resp.read()
            out.append(time.monotonic() - t0 if resp.status == 200 else None)
        except OSError:
            out.append(None)
        finally:
            conn.close()
        time.sleep(pause)
    return out


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by nearest rank."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]
