"""The unauthenticated deep-JSON flood of issue 20 item 2, replayed against the API as deployed
(gunicorn with deploy/gunicorn.conf.py): every answer is a 400 and the API's log stays bounded.

Before the fix each request wrote about 5 KB of traceback (4 threads for 30 s grew serve-1.log
from 60 KB to 17 MB). The replay is bounded: 4 threads for FLOOD_SECONDS.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from testbed.apiserver import GunicornServer, edge_api_env
from tests.support.data_world import World
from tests.support.figures import Figures

THREADS = 4
FLOOD_SECONDS = 10.0
DEEP = b"[" * 1000 + b"]" * 1000
LOG_BOUND = 16 * 1024  # bytes the API's own log may grow by under the whole flood


@pytest.fixture(scope="module")
def api(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GunicornServer]:
    """gunicorn as shipped (2 sync workers) on the module's world."""
    server = GunicornServer().start(edge_api_env(world.url), tmp_path_factory.mktemp("flood"))
    try:
        yield server
    finally:
        server.stop()


def _flood(port: int, until: float, statuses: Counter[int], lock: threading.Lock) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        while time.monotonic() < until:
            try:
                conn.request("POST", "/api/v2/auth/token", body=DEEP,
                             headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                conn.close()
                status = 0
            with lock:
                statuses[status] += 1
    finally:
        conn.close()


def test_deep_json_flood_leaves_the_log_bounded(api: GunicornServer, figures: Figures) -> None:
    before = api.stderr_path.stat().st_size
    access_before = api.access_log.stat().st_size if api.access_log.exists() else 0
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    until = time.monotonic() + FLOOD_SECONDS
    threads = [threading.Thread(target=_flood, args=(api.port, until, statuses, lock))
               for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(FLOOD_SECONDS + 30)
    grown = api.stderr_path.stat().st_size - before
    access_grown = api.access_log.stat().st_size - access_before
    total = sum(statuses.values())
    figures.record(
        "deep_json_flood_log_growth_bytes", grown, section="security",
        title=f"API log growth under the unauthenticated deep-JSON flood ({THREADS} threads, "
              f"{FLOOD_SECONDS:.0f} s, {total} requests, all 400; before the fix about 5 KB "
              f"per request)",
        target=f"< {LOG_BOUND} bytes",
        source="tests/serve/test_log_flood.py::test_deep_json_flood_leaves_the_log_bounded")
    figures.record(
        "deep_json_flood_access_log_bytes_each", round(access_grown / max(total, 1)),
        section="security",
        title="Access-log bytes per request under the same flood (bounded by rotation, "
              "docs/operations.md \"Log files\")",
        target="one line per request",
        source="tests/serve/test_log_flood.py::test_deep_json_flood_leaves_the_log_bounded")
    assert total > 100 and set(statuses) == {400}, statuses
    assert grown < LOG_BOUND, api.stderr_path.read_text()[-3000:]
    assert access_grown / total < 200
