"""The edge meters heavy pages by the API's reading of numbers (issue 30 item 5).

deploy/nginx/nginx.conf counts a GET of /api/v2/data/ as heavy when its `limit` is more than
2,400 rows, or when a number the API reads is not plain ASCII digits to the edge (`+10000`,
`%31%30000`, `1e4`, full-width digits), a parameter name carries a `%`, or `limit` comes twice:
before, only plain digits were counted and every other spelling passed unmetered. At most 2
heavy pages are in flight through the edge; the next is the edge's JSON 503 at once (a count
of requests in flight, not a rate: a lone client paging one page after another never waits).

The API behind the edge is a stub that answers at once, or holds a request until the test
lets it go, so what reaches it is exactly what the edge let through.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from testbed.services import NginxEdge

DATA = "/api/v2/data/calibrated?device=D1"


class _Upstream(ThreadingHTTPServer):
    """Records each request's path; holds those with `hold=1` until `release` is set."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.lock = threading.Condition()
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    server: _Upstream

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        with self.server.lock:
            self.server.seen.append(self.path)
            self.server.lock.notify_all()
        if "hold=1" in self.path:
            self.server.release.wait(30)
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[tuple[NginxEdge, _Upstream]]:
    upstream = _Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    server = NginxEdge().start([f"127.0.0.1:{upstream.server_address[1]}"], tmp_path / "edge")
    try:
        yield server, upstream
    finally:
        upstream.release.set()
        server.stop()
        upstream.shutdown()
        upstream.server_close()


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.read()
    finally:
        conn.close()


HEAVY = ["limit=10000", "limit=2401", "limit=%2B10000", "limit=+10000", "limit=%2010000",
         "limit=10_000", "limit=1e4", "limit=%31%30%30%30%30", "limit=%EF%BC%91%EF%BC%90",
         "limit=abc", "points=%2B100", "points=1e3", "%6Cimit=10000", "li%6D%69t=10000",
         "limit=5&limit=10000", "LIMIT=5&limit=10000", "limit=5&x=1&Limit=10000"]
LIGHT = ["limit=2400", "limit=0100", "limit=", "", "points=1000", "interval=1d&points=",
         "limitx=10000"]


def test_the_edge_meters_every_spelling_the_api_does_not_read_as_small(
        edge: tuple[NginxEdge, _Upstream]) -> None:
    server, upstream = edge
    holders = [threading.Thread(target=_get, args=(server.port, f"{DATA}&limit=10000&hold=1"))
               for _ in range(2)]
    for t in holders:
        t.start()
    with upstream.lock:
        assert upstream.lock.wait_for(lambda: len(upstream.seen) == 2, timeout=20), (
            upstream.seen)
    try:
        for i, query in enumerate(HEAVY):
            status, body = _get(server.port, f"{DATA}&{query}&n={i}")
            assert status == 503 and b'"code":503' in body, (query, status, body)
        assert not [p for p in upstream.seen if "n=" in p], upstream.seen  # none got through
        for i, query in enumerate(LIGHT):
            status, _body = _get(server.port, f"{DATA}&{query}&m={i}")
            assert status == 200, (query, status)
        # Other routes are never metered here: the API's listings are no heavy pages.
        assert _get(server.port, "/api/v2/devices?limit=10000")[0] == 200
        assert _get(server.port, "/api/v2/devices?limit=%2B10000")[0] == 200
    finally:
        upstream.release.set()
        for t in holders:
            t.join(30)
