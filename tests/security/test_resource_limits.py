"""Resource limits (reliability plan S6) on the data endpoint, through the real app and database.

- `limit` values 0, -1, 1, max, max+1, 10^12, abc, 1.5: the valid ones are served, the others
  a 400 naming `limit` (the collections /devices, /locations and /locations/summary are covered
  by tests/access/test_models.py::test_bad_paging_parameters_are_400).
- A page at the maximum `limit` over 12,000 stored readings: its p95 latency is recorded.
- A century-wide `start_time`..`end_time`: served in pages with `X-Cursor-Next`, never all at once.
- A real /data query cancelled by `statement_timeout`: a JSON 503 with Retry-After, in bounded
  time; the same request with the normal timeout is a 200 (the control).
- The per-key rate limit is tests/access/test_rate_limit.py and test_gunicorn.py; bodies over
  MAX_CONTENT_LENGTH are tests/security/test_misconfig.py::test_oversized_bodies_are_a_json_413.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from serve.args import MAX_LIMIT
from tests.support.access_world import World, apikey, seed
from tests.support.apps import close_app, make_app
from tests.support.readings import insert_readings, series

ROWS = 12_000
_server_errors = {"requests": 0, "5xx": 0}


@pytest.fixture(scope="module")
def big_world(module_db: str) -> World:
    """The seeded world plus ROWS five-minute readings of A's device, ending an hour ago."""
    world = seed(module_db)
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    end -= timedelta(minutes=end.minute % 5)
    with psycopg.connect(module_db) as conn:
        # ROWS readings before `end`; tair counts 21..29, 20 back from it.
        insert_readings(conn, world.dev_a, world.loc_a, series(
            end - timedelta(minutes=5 * ROWS), n=ROWS, tair=lambda i, _t: 20 + (ROWS - i) % 10,
            rh=0.5, precip=0.1))
        conn.commit()
    with psycopg.connect(module_db, autocommit=True) as conn:
        conn.execute("ANALYZE calibrated")
    return world


@pytest.fixture(scope="module")
def big_app(big_world: World) -> Iterator[Flask]:
    application = make_app(big_world.url)
    yield application
    close_app(application)


def _get(client: FlaskClient, world: World, **params: Any) -> Any:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    r = client.get(f"/api/v2/data/calibrated?device={world.dev_a}&{query}",
                   headers=apikey(world.keys["data"]))
    _server_errors["requests"] += 1
    _server_errors["5xx"] += r.status_code >= 500
    return r


def _since(days: int) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize("value, served", [
    ("0", False), ("-1", False), ("1", True), (str(MAX_LIMIT), True),
    (str(MAX_LIMIT + 1), False), (str(10**12), False), ("abc", False), ("1.5", False)])
def test_limit_values(big_app: Flask, big_world: World, value: str, served: bool) -> None:
    r = _get(big_app.test_client(), big_world, start_time=_since(60), limit=value)
    if served:
        assert r.status_code == 200, r.get_data()[:300]
        assert len(r.get_json()) == int(value)
        assert r.headers.get("X-Cursor-Next")  # more rows remain: the next page is offered
    else:
        assert r.status_code == 400, r.get_data()[:300]
        body = r.get_json()
        assert body["code"] == 400 and "limit" in body["message"] and "limit" in body["errors"]


def test_century_wide_window_is_paged(big_app: Flask, big_world: World) -> None:
    """100 years up to now: a 400, or (documented) one page of the row cap with a cursor."""
    r = _get(big_app.test_client(), big_world, start_time=_since(36525), end_time=_since(0))
    assert r.status_code in (200, 400), r.get_data()[:300]
    if r.status_code == 200:
        assert len(r.get_json()) == 2050  # the table's row cap, not all 12,000 rows
        assert r.headers["X-Cursor-Next"]


def test_p95_latency_at_max_limit(big_app: Flask, big_world: World, figures: Any) -> None:
    client = big_app.test_client()
    _get(client, big_world, start_time=_since(60), limit=MAX_LIMIT)  # warm-up
    samples = []
    for _ in range(20):
        t0 = time.perf_counter()
        r = _get(client, big_world, start_time=_since(60), limit=MAX_LIMIT)
        samples.append(time.perf_counter() - t0)
        assert r.status_code == 200 and len(r.get_json()) == MAX_LIMIT
    samples.sort()
    p95 = samples[int(0.95 * len(samples)) - 1]
    figures.record("s6_p95_ms_at_max_limit", round(p95 * 1e3, 1), section="security",
                   title=f"S6 p95 latency (ms) of a /data JSON page at the maximum limit "
                         f"({MAX_LIMIT} rows, in-process, 20 requests; median "
                         f"{statistics.median(samples) * 1e3:.1f})",
                   target="recorded", source="tests/security/test_resource_limits.py")


def test_slow_query_is_cancelled_as_a_json_503(big_world: World) -> None:
    params = {"start_time": _since(60), "limit": MAX_LIMIT}
    control = make_app(big_world.url)
    try:
        assert _get(control.test_client(), big_world, **params).status_code == 200
    finally:
        close_app(control)
    # A statement held past its limit: another session locks `calibrated`, so the data query
    # waits (statement_timeout counts lock waits) while the credential checks, which never read
    # that table, pass. A lock instead of a tiny limit keeps this independent of machine load.
    app = make_app(big_world.url, statement_timeout_ms=1000)
    try:
        client = app.test_client()
        assert client.get(f"/api/v2/devices/{big_world.dev_a}",
                          headers=apikey(big_world.keys["all"])).status_code == 200
        with psycopg.connect(big_world.url) as blocker:
            blocker.execute("LOCK TABLE calibrated IN ACCESS EXCLUSIVE MODE")
            t0 = time.monotonic()
            r = client.get(f"/api/v2/data/calibrated?device={big_world.dev_a}"
                           f"&start_time={params['start_time']}&limit={MAX_LIMIT}",
                           headers=apikey(big_world.keys["data"]))
            elapsed = time.monotonic() - t0
            blocker.rollback()
        assert r.status_code in (503, 504), r.get_data()[:300]
        body = r.get_json()
        assert body["code"] == r.status_code and "cancelled" in body["message"]
        assert r.headers["Retry-After"] and 0.9 < elapsed < 10
        # Only that statement was cut: the same app and credential serve afterwards.
        assert _get(client, big_world, **params).status_code == 200
    finally:
        close_app(app)


def test_no_5xx_outside_the_deliberate_timeout(figures: Any) -> None:
    """Runs after the module's other tests: every /data answer they got (the deliberate
    statement timeout excluded) was below 500."""
    if _server_errors["requests"] < 25:
        pytest.skip("the module's other tests did not run in this session")
    figures.record("s6_5xx", f"{_server_errors['5xx']} of {_server_errors['requests']}",
                   section="security",
                   title="S6 5xx answers to limit probes, wide windows and max-limit pages",
                   target="0", source="tests/security/test_resource_limits.py")
    assert _server_errors["5xx"] == 0
