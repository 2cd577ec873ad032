"""The edge (deploy/nginx/nginx.conf) in front of gunicorn, both as shipped, on free ports.

Slow clients cannot exhaust the API through it (issue 11, finding 2, with the direct-gunicorn
negative control), every error it or gunicorn answers itself is the JSON error body, JSON and
CSV pages are gzipped, and both access logs escape control characters from the URL.
"""

from __future__ import annotations

import gzip
import http.client
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.apiserver import GunicornServer, edge_api_env
from testbed.nginx import NginxEdge
from tests.support.data_world import D4_ROWS, World
from tests.support.figures import Figures
from tests.support.ingesting import wait_for
from tests.support.slowclients import SlowHeaders, percentile, probe

SLOW_CONNECTIONS = 50
SLOW_INTERVAL = 2.0  # a request line, then one header line every 2 s
ATTACK_SECONDS = 14.0  # longer than nginx's 10 s client_header_timeout: clients are cut, reopen
P99_BOUND = 0.100


@pytest.fixture(scope="module")
def api(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornServer]:
    """gunicorn (2 sync workers, deploy/gunicorn.conf.py) on the module's world."""
    server = GunicornServer().start(edge_api_env(world.url), tmp_path_factory.mktemp("api"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def edge(api: GunicornServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NginxEdge]:
    """The shipped nginx edge in front of `api`."""
    server = NginxEdge().start([f"127.0.0.1:{api.port}"], tmp_path_factory.mktemp("edge"))
    try:
        yield server
    finally:
        server.stop()


def raw(port: int, data: bytes, timeout: float = 10) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes, read one answer (until Content-Length or the server closes): status,
    headers, body."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        answer = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
            head, sep, body = answer.partition(b"\r\n\r\n")
            length = [line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if sep and length and len(body) >= int(length[0]):
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip()
               for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, body


def get(port: int, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, http.client.HTTPMessage, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def assert_json_error(status: int, headers: dict[str, str], body: bytes, code: int) -> dict:
    """The documented error body: {code, status, message}, served as JSON, never HTML."""
    assert status == code, (status, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    doc = json.loads(body)
    assert doc["code"] == code and doc["message"] and isinstance(doc["status"], str), doc
    return doc


# ---- finding 2: slow clients ---------------------------------------------------------------


def test_slow_header_clients_leave_health_answering_through_the_edge(
        edge: NginxEdge, figures: Figures) -> None:
    with SlowHeaders(edge.port, connections=SLOW_CONNECTIONS, interval=SLOW_INTERVAL) as attack:
        assert attack.opened >= SLOW_CONNECTIONS
        # A probe every 20 ms: about 500, so p99 is not one scheduling hiccup of a shared CPU.
        latencies = probe(edge.port, "/api/v2/health", seconds=ATTACK_SECONDS, pause=0.02)
    failed = sum(1 for v in latencies if v is None)
    ok = [v for v in latencies if v is not None]
    p99 = percentile(ok, 99) if ok else float("inf")
    figures.record(
        "edge_slow_header_health_p99_ms", round(p99 * 1000, 1), section="security",
        title=f"/api/v2/health p99 through the edge under {SLOW_CONNECTIONS} slow-header "
              f"connections ({len(latencies)} probes, {failed} failed)",
        target=f"< {P99_BOUND * 1000:.0f} ms, 0 failed",
        source="tests/serve/test_edge.py::test_slow_header_clients_leave_health_answering_"
               "through_the_edge")
    # nginx's client_header_timeout (10 s) cut the slow clients, which then reopened.
    assert attack.closed_by_server >= SLOW_CONNECTIONS, attack.closed_by_server
    assert failed == 0 and len(ok) >= 50, latencies
    assert p99 < P99_BOUND, f"p99 {p99 * 1000:.1f} ms"


def test_negative_control_slow_headers_exhaust_gunicorn_alone(
        world: World, tmp_path: Path, figures: Figures) -> None:
    """The same attack straight at gunicorn's 2 sync workers: health stops answering."""
    direct = GunicornServer().start(edge_api_env(world.url), tmp_path)
    try:
        before = probe(direct.port, "/api/v2/health", seconds=1)
        assert before and all(v is not None for v in before)
        with SlowHeaders(direct.port, connections=SLOW_CONNECTIONS, interval=SLOW_INTERVAL):
            during = probe(direct.port, "/api/v2/health", seconds=8, timeout=1.0)
        failed = sum(1 for v in during if v is None)
        figures.record(
            "edge_negative_control_direct_failed_pct", round(100 * failed / len(during), 1),
            section="security",
            title=f"Negative control: /api/v2/health probes failing (1 s timeout) straight at "
                  f"gunicorn under the same {SLOW_CONNECTIONS} slow-header connections",
            target="most fail (no edge)",
            source="tests/serve/test_edge.py::test_negative_control_slow_headers_exhaust_"
                   "gunicorn_alone")
        assert failed >= 0.8 * len(during), during
    finally:
        direct.stop()


# ---- error answers are JSON ----------------------------------------------------------------


@pytest.mark.parametrize(("request_bytes", "code"), [
    (b"GARBAGE\r\n\r\n", 400),
    (b"GET /api/v2/health HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host
    (b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    (b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431),
    (b"POST /api/v2/auth/token HTTP/1.1\r\nHost: x\r\nContent-Length: 2000000\r\n\r\n", 413),
    (b"GET / HTTP/2.0\r\nHost: x\r\n\r\n", 505),
    (b"POST /api/v2/auth/token HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 501),
    (b"GET /_edge/400 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 404),
], ids=["garbage", "no-host", "uri-too-long", "header-too-long", "body-too-large",
        "http2-line", "transfer-encoding", "error-page-itself"])
def test_edge_errors_are_the_json_error_body(edge: NginxEdge, request_bytes: bytes,
                                             code: int) -> None:
    status, headers, body = raw(edge.port, request_bytes)
    assert_json_error(status, headers, body, code)
    assert headers.get("x-content-type-options") == "nosniff"


def test_gunicorns_own_errors_are_json_directly_and_through_the_edge(
        api: GunicornServer, edge: NginxEdge) -> None:
    # Direct: a malformed request line gunicorn refuses before the app.
    doc = assert_json_error(*raw(api.port, b"GARBAGE\r\n\r\n"), 400)
    assert "GARBAGE" in doc["message"]
    # A request line over limit_request_line: gunicorn's own 414, as JSON. (Through the edge
    # the same line meets the edge's equal limit first: test_the_edge_and_gunicorn_share_...)
    doc = assert_json_error(*raw(api.port, _line_of(LINE_LIMIT + 1)), 414)
    assert "8190" in doc["message"]
    # More header fields than gunicorn's limit of 100, which the edge passes on.
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(120))
    for port in (api.port, edge.port):
        assert_json_error(*raw(port, b"GET /api/v2/health HTTP/1.1\r\nHost: x\r\n" + many
                               + b"\r\n"), 431)


@pytest.mark.usefixtures("processes")
def test_no_api_instance_is_a_json_502(tmp_path: Path) -> None:
    from testbed.process import free_port

    dead = NginxEdge().start([f"127.0.0.1:{free_port()}"], tmp_path)
    try:
        status, headers, body = get(dead.port, "/api/v2/health")
        assert_json_error(status, {k.lower(): v for k, v in headers.items()}, body, 502)
        assert headers["Retry-After"] == "5"
    finally:
        dead.stop()


def test_app_errors_pass_through_unchanged(edge: NginxEdge, world: World) -> None:
    status, headers, body = get(edge.port, "/api/v2/data/calibrated?device=D4&limit=0",
                                world.headers())
    doc = assert_json_error(status, {k.lower(): v for k, v in headers.items()}, body, 400)
    assert "limit" in doc["message"]
    status, _, body = get(edge.port, "/api/v2/nope", world.headers())
    assert status == 404 and json.loads(body)["code"] == 404


# ---- gzip ------------------------------------------------------------------------------------


@pytest.mark.parametrize("accept", ["application/json", "text/csv"])
def test_pages_are_gzipped_when_the_client_accepts(edge: NginxEdge, world: World,
                                                   accept: str) -> None:
    page = f"/api/v2/data/calibrated?device=D4&start_time=2024-07-01&limit={D4_ROWS}"
    _, plain_headers, plain = get(edge.port, page, world.headers(Accept=accept))
    assert "Content-Encoding" not in plain_headers
    status, headers, body = get(edge.port, page,
                                world.headers(Accept=accept, **{"Accept-Encoding": "gzip"}))
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in headers["Vary"]
    assert gzip.decompress(body) == plain and len(body) < len(plain) / 4


# ---- access logs -----------------------------------------------------------------------------


def _wait_line(path: Path, needle: str) -> list[str]:
    return list(wait_for(lambda: [line for line in path.read_text(errors="replace").splitlines()
                                  if needle in line], 10, what=f"a line with {needle!r} in {path}"))


def test_access_logs_escape_control_characters(api: GunicornServer, edge: NginxEdge,
                                               figures: Figures) -> None:
    """CR, LF, NUL and tab decoded from the URL do not reach either log raw (finding 5)."""
    evil = "/api/v2/forged%0d%0a127.0.0.1%20-%20-%20FAKE%09line%00end%22q"
    get(api.port, evil)  # straight at gunicorn (its own log)
    get(edge.port, "/api/v2/viaedge%0d%0aFAKE%09line%22q")  # nginx refuses %00 in a path
    api_lines = _wait_line(api.access_log, "/api/v2/forged")
    assert len(api_lines) == 1, api_lines
    assert "\\x0D\\x0A127.0.0.1 - - FAKE\\x09line\\x00end\\x22q" in api_lines[0]
    edge_lines = _wait_line(edge.access_log, "/api/v2/viaedge")
    assert len(edge_lines) == 1 and "\\x0D\\x0AFAKE\\x09line\\x22q" in edge_lines[0], edge_lines
    # The request through the edge also reached gunicorn: its log line is escaped too.
    assert len(_wait_line(api.access_log, "/api/v2/viaedge")) == 1
    for text in (api.access_log.read_text(), edge.access_log.read_text()):
        assert "\x00" not in text and "\r" not in text and "\t" not in text
        assert not any(line.startswith("FAKE") or line.startswith("127.0.0.1 - - FAKE")
                       for line in text.splitlines())
    figures.record("access_log_control_chars_raw", 0, section="security",
                   title="Raw CR, LF, NUL or tab from the URL in gunicorn's and nginx's access "
                         "logs (escaped as \\xHH)", target="0",
                   source="tests/serve/test_edge.py::test_access_logs_escape_control_characters")


def test_settled_page_revalidates_through_the_gzipping_edge(edge: NginxEdge, world: World) -> None:
    """nginx weakens the ETag when it gzips; the API compares If-None-Match weakly: 304."""
    page = "/api/v2/data/calibrated?device=D4&start_time=2024-07-01&end_time=2024-07-05"
    gz = {"Accept-Encoding": "gzip"}
    status, headers, body = get(edge.port, page, world.headers(**gz))
    assert status == 200 and headers["Content-Encoding"] == "gzip"
    etag = headers["ETag"]
    assert etag.startswith('W/"')
    status, headers, body = get(edge.port, page, world.headers(**gz, **{"If-None-Match": etag}))
    # (A 304 has no body to gzip: its ETag comes back strong; clients compare weakly.)
    assert status == 304 and body == b"" and headers["ETag"] == etag.removeprefix("W/")
    # Keep-alive to clients: several requests on one connection.
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=30)
    try:
        for _ in range(3):
            conn.request("GET", "/api/v2/health")
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read() == b'{"status":"ok"}'
            assert resp.headers.get("Connection", "keep-alive").lower() != "close"
    finally:
        conn.close()


# ---- issue 20 item 5: TRACE, and one request-line limit -----------------------------------


def test_trace_through_the_edge_is_the_json_405(edge: NginxEdge) -> None:
    status, headers, body = raw(edge.port, b"TRACE / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert_json_error(status, headers, body, 405)
    assert "GET" in headers["allow"]
    status, headers, body = raw(edge.port, b"TRACE /api/v2/health HTTP/1.1\r\nHost: x\r\n"
                                           b"Max-Forwards: 0\r\n\r\n")
    assert_json_error(status, headers, body, 405)


LINE_LIMIT = 8190  # request-line bytes before CRLF that both the edge and gunicorn accept


def _line_of(length: int) -> bytes:
    """A GET request line of exactly `length` bytes (CRLF not counted)."""
    line = b"GET /" + b"a" * (length - len("GET / HTTP/1.1")) + b" HTTP/1.1"
    assert len(line) == length
    return line + b"\r\nHost: x\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("length", [LINE_LIMIT - 1, LINE_LIMIT, LINE_LIMIT + 1, 4094, 4095])
def test_the_edge_and_gunicorn_share_one_request_line_limit(
        edge: NginxEdge, api: GunicornServer, length: int) -> None:
    """Up to 8,190 bytes both pass the line on (the API answers 404 for the made-up path);
    one byte more, both answer the JSON 414. gunicorn's default was 4,094."""
    for port in (edge.port, api.port):
        status, headers, body = raw(port, _line_of(length))
        if length <= LINE_LIMIT:
            assert_json_error(status, headers, body, 404)
        else:
            assert status == 414, (port, status, body[:200])
            assert headers["content-type"].startswith("application/json")


def test_the_edge_serves_versioned_static_files_itself(edge: NginxEdge,
                                                       api: GunicornServer) -> None:
    """A page's scripts and styles come from nginx (no gunicorn worker; the access log names
    no upstream), gzipped, typed for the browser's module loader, cached for a year; files it
    does not have, unversioned and old links go on to the API, which answers as before."""
    from serve.web import assets

    version = assets.version()
    files = (("device.js", "text/javascript"), ("js/api.js", "text/javascript"),
             ("dashboard.css", "text/css"), ("vendor/uPlot.iife.min.js", "text/javascript"))
    for name, content_type in files:
        conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
        conn.request("GET", f"/dashboard/static/v-{version}/{name}",
                     headers={"Accept-Encoding": "gzip"})
        r = conn.getresponse()
        body = r.read()
        conn.close()
        assert r.status == 200, (name, r.status)
        assert r.getheader("Content-Type", "").startswith(content_type), name
        assert r.getheader("Cache-Control") == assets.VERSIONED_CACHE, name
        assert r.getheader("Content-Encoding") == "gzip", name
        assert gzip.decompress(body) == (assets.STATIC / name).read_bytes(), name
        line = _wait_line(edge.access_log, f"/dashboard/static/v-{version}/{name}")[-1]
        assert "upstream=- -" in line, line
    # Not on disk: the API's JSON 404; no version or an old one: the API's caching rules.
    conn = http.client.HTTPConnection("127.0.0.1", edge.port, timeout=10)
    for path, status, cache in ((f"/dashboard/static/v-{version}/nope.js", 404, None),
                                ("/dashboard/static/device.js", 200, "max-age=3600"),
                                ("/dashboard/static/v-000000000000/device.js", 200, "no-cache")):
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        assert r.status == status, (path, r.status)
        if cache:
            assert cache in r.getheader("Cache-Control", ""), path
        assert _wait_line(api.access_log, path), path
    conn.close()
