"""The edge meters heavy pages by the API's reading of numbers (issue 30 item 5).

deploy/nginx/nginx.conf counts a GET of /api/v2/data/ as heavy when its `limit` is more than
2,400 rows, when it asks for aggregates (`interval=`, `points=`: priced by the API, from their
window), or when a number the API reads is not plain ASCII digits to the edge (`+10000`,
`%31%30000`, `1e4`, full-width digits), a parameter name carries a `%`, or `limit` comes twice:
before, only plain digits were counted and every other spelling passed unmetered. The shipped
config is run with its access log also naming each request's heavy-page key, in front of a stub
API that answers at once.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from testbed.nginx import NginxEdge
from tests.support.ingesting import wait_for

# Starts an nginx edge of its own: never a quick test.
pytestmark = pytest.mark.usefixtures("processes")

DATA = "/api/v2/data/calibrated?device=D1"


class _Upstream(ThreadingHTTPServer):
    """Answers every request at once with an empty JSON page."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = b"[]"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def edge(tmp_path: Path) -> Iterator[NginxEdge]:
    """The shipped edge whose access log lines end with ` key=<the heavy-page key>`."""
    upstream = _Upstream()
    thread = threading.Thread(target=upstream.serve_forever, daemon=True)
    thread.start()
    server = NginxEdge().start([f"127.0.0.1:{upstream.server_address[1]}"], tmp_path / "edge")
    try:
        conf = server.conf_path.read_text()
        marked = conf.replace("'$upstream_status';", "'$upstream_status key=$sds_heavy_page';")
        assert marked != conf
        server.conf_path.write_text(marked)
        server.stop()
        server._launch()
        yield server
    finally:
        server.stop()
        upstream.shutdown()
        upstream.server_close()


def _key(server: NginxEdge, path: str) -> str:
    """The heavy-page key the edge gave `path` (GET), from its access log."""
    before = len(_lines(server))
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
    try:
        conn.request("GET", path)
        assert conn.getresponse().read() == b"[]"
    finally:
        conn.close()
    # nginx writes the line once the answer is sent (its log phase): wait for it.
    lines = wait_for(lambda: len(now := _lines(server)) != before and now, 10, every=0.01,
                     what="the access log line")
    return lines[-1].rsplit(" key=", 1)[1]


def _lines(server: NginxEdge) -> list[str]:
    log = server.access_log
    return log.read_text().splitlines() if log.exists() else []


HEAVY = ["limit=10000", "limit=2401", "limit=%2B10000", "limit=+10000", "limit=%2010000",
         "limit=10_000", "limit=1e4", "limit=%31%30%30%30%30", "limit=%EF%BC%91%EF%BC%90",
         "limit=abc", "%6Cimit=10000", "li%6D%69t=10000", "limit=5&limit=10000",
         "LIMIT=5&limit=10000", "limit=5&x=1&Limit=10000",
         # Aggregates cost their window's readings, which only the API reads.
         "points=1000", "points=%2B100", "interval=1d", "interval=1h&limit=10",
         "interval=1d&points="]
LIGHT = ["limit=2400", "limit=0100", "limit=", "x=1", "limitx=10000", "points=", "interval="]


def test_the_edge_meters_every_spelling_the_api_does_not_read_as_small(
        edge: NginxEdge) -> None:
    for query in HEAVY:
        assert _key(edge, f"{DATA}&{query}") == "heavy", query
    for query in LIGHT:
        assert _key(edge, f"{DATA}&{query}") in ("", "-"), query
    # Other routes are never metered here: the API's listings are no heavy pages.
    assert _key(edge, "/api/v2/devices?limit=10000") in ("", "-")
    assert _key(edge, "/api/v2/devices?limit=%2B10000") in ("", "-")
