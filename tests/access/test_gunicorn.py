"""Access through the real server: gunicorn with two workers, as deploy/run.sh starts it.

Checks what only a real server shows: throttling and the request rate limit shared by both
workers (S7, S6), repeated
Authorization headers as gunicorn delivers them, and the access log free of `?apikey=` keys."""

from __future__ import annotations

import base64
import http.client
import os
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from testbed.apiserver import GunicornServer
from tests.support.access_world import World, seed
from tests.support.ingesting import wait_for

RATE_LIMIT = 20  # requests per API key per window for this module's server


class Server:
    """A running gunicorn on 127.0.0.1."""

    def __init__(self, port: int, log_dir: Path, pid: int) -> None:
        self.port = port
        self.log_dir = log_dir
        self.pid = pid  # the gunicorn master

    def request(self, method: str, path: str, headers: list[tuple[str, str]] | None = None,
                body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
        """One request on a fresh connection (so successive ones may reach either worker)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.putrequest(method, path)
            for name, value in headers or []:
                conn.putheader(name, value)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()


@pytest.fixture(scope="module")
def gunicorn_world(module_db: str) -> World:
    """The seeded world for the server module."""
    return seed(module_db)


@pytest.fixture(scope="module")
def server(gunicorn_world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """gunicorn -c deploy/gunicorn.conf.py serve.wsgi:app, two workers, this module's database."""
    api = GunicornServer().start(
        {"SDS_DATABASE_URL": gunicorn_world.url, "SDS_LOGIN_MAX_FAILURES": "4",
         "SDS_APIKEY_QUERY_ENABLED": "true", "SDS_API_RATE_LIMIT": str(RATE_LIMIT),
         "SDS_API_RATE_WINDOW": "600"},
        tmp_path_factory.mktemp("gunicorn-logs"))
    try:
        yield Server(api.port, api.base_dir, api.pid)
    finally:
        api.stop()


def _basic(email: str, password: str) -> tuple[str, str]:
    return ("Authorization", "Basic " + base64.b64encode(f"{email}:{password}".encode()).decode())


def test_api_key_and_challenge_over_http(server: Server, gunicorn_world: World) -> None:
    status, headers, body = server.request(
        "GET", "/api/v2/devices", [("Authorization", f"apikey {gunicorn_world.keys['devices']}")])
    assert status == 200 and b"A000101" in body
    status, headers, body = server.request("GET", "/api/v2/devices")
    assert status == 401 and headers["www-authenticate"].startswith("Basic")
    assert headers["content-type"].startswith("application/json")


def test_throttle_holds_across_both_workers(server: Server) -> None:
    wrong = _basic("a2@a.example", "wrong-password-x")
    statuses = [server.request("GET", "/api/v2/devices", [wrong])[0] for _ in range(8)]
    # 4 failures allowed in the window, whichever worker counted them; the rest are 429.
    assert statuses == [401] * 4 + [429] * 4, statuses
    status, headers, _ = server.request(
        "GET", "/api/v2/devices", [_basic("a2@a.example", "a2-battery-staple")])
    assert status == 429 and int(headers["retry-after"]) > 0


def test_repeated_authorization_headers_are_refused(server: Server,
                                                    gunicorn_world: World) -> None:
    status, _, body = server.request("GET", "/api/v2/devices", [
        ("Authorization", f"Apikey {gunicorn_world.keys['devices']}"),
        ("Authorization", f"Bearer {gunicorn_world.tokens['live']}")])
    assert status == 400, body
    assert gunicorn_world.keys["devices"].encode() not in body


def test_query_key_works_and_stays_out_of_the_access_log(server: Server,
                                                        gunicorn_world: World) -> None:
    key = gunicorn_world.keys["locations"]
    status, headers, _ = server.request("GET", f"/api/v2/locations/summary?apikey={key}")
    assert status == 200 and "sunset" in headers and "deprecation" in headers
    log = server.log_dir / "access.log"
    wait_for(lambda: "/api/v2/locations/summary" in (log.read_text() if log.exists() else ""),
             10, what="the request in the access log")
    text = log.read_text() + (server.log_dir / "stderr.log").read_text()
    for secret in gunicorn_world.secrets():
        assert secret not in text


def _worker_ports(master: int) -> dict[int, int]:
    """{local TCP port: gunicorn worker pid} for the workers' open sockets (from /proc: a
    worker's database connections are told apart by their client port)."""
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    inodes: dict[str, int] = {}
    for pid in map(int, children):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue  # closed meanwhile
            if target.startswith("socket:["):
                inodes[target[8:-1]] = pid
    ports: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports[int(fields[1].rsplit(":", 1)[1], 16)] = inodes[fields[9]]
    return ports


def _workers_active_since(server: Server, url: str, since: object) -> set[int]:
    """Worker pids whose database connections ran a statement after `since`."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT client_port FROM pg_stat_activity WHERE application_name = 'sds-serve'"
            " AND datname = current_database() AND state_change >= %s", (since,)).fetchall()
    ports = _worker_ports(server.pid)
    return {ports[port] for (port,) in rows if port in ports}


def test_rate_limit_holds_across_both_workers(server: Server, gunicorn_world: World) -> None:
    """One key's budget is counted in the database, so the two workers together allow exactly
    RATE_LIMIT requests; requests continue until both workers are seen serving the key."""
    key = [("Authorization", f"Apikey {gunicorn_world.keys['all']}")]
    with psycopg.connect(gunicorn_world.url) as conn:
        since = conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
    results = [server.request("GET", "/api/v2/devices", key) for _ in range(RATE_LIMIT + 5)]
    workers = _workers_active_since(server, gunicorn_world.url, since)
    # Bounded: with fresh connections both sync workers take requests within a few tries.
    while len(workers) < 2 and len(results) < 200:
        results += [server.request("GET", "/api/v2/devices", key) for _ in range(5)]
        workers = _workers_active_since(server, gunicorn_world.url, since)
    assert len(workers) == 2, "only one worker served the key"
    statuses = [status for status, _, _ in results]
    assert statuses == [200] * RATE_LIMIT + [429] * (len(results) - RATE_LIMIT), statuses
    _, headers, body = results[-1]
    assert 0 < int(headers["retry-after"]) <= 600
    assert headers["content-type"].startswith("application/json") and b'"code":429' in body
    # Another key of the same user is unaffected.
    other = [("Authorization", f"Apikey {gunicorn_world.keys['devices']}")]
    assert server.request("GET", "/api/v2/devices", other)[0] == 200
