"""Reads through a hot standby (SDS_DATABASE_READ_URL): `/data` pages come from the standby
while it is at most SDS_READ_MAX_STALENESS seconds behind and from the primary past that, and
`X-Read-Source` says which and why; credential bookkeeping always writes to the primary. A
real primary and a real standby fed by streaming replication (testbed/postgres.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import psycopg
import pytest
from flask import Flask

from people import accounts
from serve.pool import CHECK_EVERY, ReadRouter, read_router
from shared import places
from shared.config import Settings
from testbed.database import as_role
from testbed.postgres import PostgresServer
from tests.support.apps import close_app
from tests.support.databases import migrate_database
from tests.support.ingesting import wait_for
from tests.support.readings import insert_readings, series

T0 = datetime(2025, 3, 1, tzinfo=UTC)
BOUND = 2.0  # seconds of staleness allowed in these tests


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory, processes: None,
         ) -> Iterator[tuple[PostgresServer, PostgresServer, str]]:
    """A primary with a seeded database and its hot standby; yields both and the API key."""
    base = tmp_path_factory.mktemp("replica")
    primary = PostgresServer().start(base / "primary")
    standby = PostgresServer()
    try:
        url = migrate_database(primary.create_database("api"))
        with psycopg.connect(url) as c:
            org = accounts.create_org(c, name="Replica Org")
            uid = accounts.create_user(c, org=org, email="r@example.org",
                                       password="replica-password-1")
            key = accounts.create_api_key(c, user=uid, scopes=["data:read"])["apikey"]
            places.register_device(c, org=org, name="R1")
            c.commit()
        standby.start_standby(primary, base / "standby")
        with psycopg.connect(url) as c:  # replayed by the standby
            insert_readings(c, "R1", None, series(T0, n=100, tair=20))
        yield primary, standby, key
    finally:
        standby.cleanup()
        primary.cleanup()


@pytest.fixture
def app(pair: tuple[PostgresServer, PostgresServer, str]) -> Iterator[Flask]:
    from serve import create_app

    primary, standby, _key = pair
    application = create_app(Settings(
        database_url=as_role(primary.dsn("api")),
        database_read_url=as_role(standby.dsn("api")),
        read_max_staleness=BOUND, metrics_port=0, aggregate_metrics_port=0, db_pool_min=1,
        db_pool_max=2, cursor_secret="replica", api_rate_limit=1000))
    try:
        yield application
    finally:
        close_app(application)


def _replay(standby: PostgresServer, pause: bool) -> None:
    with psycopg.connect(standby.dsn("api"), autocommit=True) as c:
        c.execute("SELECT pg_wal_replay_pause()" if pause else "SELECT pg_wal_replay_resume()")


def _caught_up(primary: PostgresServer, standby: PostgresServer) -> None:
    with psycopg.connect(primary.dsn("api"), autocommit=True) as c:
        lsn = c.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]

    def replayed() -> bool:
        with psycopg.connect(standby.dsn("api"), autocommit=True) as c:
            row = c.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()
            return bool(row and row[0])

    wait_for(replayed, 20, what="the standby to catch up")


def _get(app: Flask, key: str) -> tuple[str, int, Any]:
    """(X-Read-Source, rows, last time) of a /data page of R1 from T0."""
    r = app.test_client().get(
        "/api/v2/data/calibrated?device=R1&limit=1000&start_time=2025-03-01T00:00:00Z"
        "&end_time=2025-03-03T00:00:00Z", headers={"Authorization": f"Apikey {key}"})
    assert r.status_code == 200, r.get_data(as_text=True)
    body = r.get_json()
    assert "X-Read-Source" in r.headers["Access-Control-Expose-Headers"]
    return r.headers["X-Read-Source"], len(body), body[-1]["time"] if body else None


def _router(app: Flask) -> ReadRouter:
    router = read_router(app)
    assert router is not None, "the app has a read URL"
    return router


def test_a_measurement_is_reused_until_it_ages_or_is_forgotten() -> None:
    """Pure: the router asks the standby once per CHECK_EVERY, and again at once after
    forget(); the age of a reused measurement is added to its lag."""
    now = [100.0]
    measured: list[float] = []

    class Router(ReadRouter):
        def measure(self) -> tuple[float | None, str]:
            measured.append(now[0])
            return 0.5, "standby 0.5 s behind"

    primary, standby = cast(Any, object()), cast(Any, object())  # never used: no real measure
    router = Router(primary, standby, max_staleness=10, clock=lambda: now[0])
    assert router.choose().header == "standby; lag=0.5"
    now[0] += CHECK_EVERY / 2
    assert router.choose().header == f"standby; lag={0.5 + CHECK_EVERY / 2:.1f}"
    assert measured == [100.0]
    router.forget()
    assert router.choose().pool is standby
    assert measured == [100.0, now[0]]
    now[0] += CHECK_EVERY
    router.choose()
    assert len(measured) == 3


def test_reads_come_from_the_standby_and_fall_back_past_the_staleness_bound(
    app: Flask, pair: tuple[PostgresServer, PostgresServer, str],
) -> None:
    primary, standby, key = pair
    _caught_up(primary, standby)
    source, rows, _last = _get(app, key)
    assert source.startswith("standby; lag=") and rows == 100

    # Replay paused, then a new reading on the primary: still within the bound the standby
    # answers, without it (the proof the page was read there).
    _replay(standby, pause=True)
    try:
        with psycopg.connect(primary.dsn("api")) as c:
            insert_readings(c, "R1", None, [{"time": T0 + timedelta(days=1), "tair": 21}])
        _router(app).forget()  # measure now, not in up to 1 s
        source, rows, _last = _get(app, key)
        assert source.startswith("standby") and rows == 100, source

        # Past the bound the primary answers, with the new row, and the header says why.
        time.sleep(BOUND + 0.5)
        source, rows, last = _get(app, key)
        assert source.startswith('primary; reason="standby ') and "behind, limit 2 s" in source
        assert rows == 101 and last == "2025-03-02T00:00:00Z"
    finally:
        _replay(standby, pause=False)
    _caught_up(primary, standby)
    time.sleep(1.1)  # the last measurement is reused for up to a second
    source, rows, _last = _get(app, key)
    assert source.startswith("standby") and rows == 101, source


def test_an_idle_primary_does_not_make_a_current_standby_look_stale(
    app: Flask, pair: tuple[PostgresServer, PostgresServer, str],
) -> None:
    """The replay timestamp ages on an idle primary although nothing is missing: the check
    compares WAL positions, so after twice the bound of quiet the standby still answers (each
    request's own last_seen write included)."""
    primary, standby, key = pair
    _caught_up(primary, standby)
    time.sleep(2 * BOUND + 1.1)
    with psycopg.connect(standby.dsn("api")) as c:
        idle = c.execute("SELECT extract(epoch FROM now() - pg_last_xact_replay_timestamp())"
                         ).fetchone()[0]
    assert idle > BOUND  # what a timestamp-only check would have called stale
    for _ in range(3):
        source, _rows, _last = _get(app, key)
        assert source.startswith("standby"), source
        time.sleep(1.1)


def test_writes_go_to_the_primary_and_a_lost_standby_falls_back(
    app: Flask, pair: tuple[PostgresServer, PostgresServer, str],
) -> None:
    primary, standby, key = pair
    _get(app, key)
    with psycopg.connect(primary.dsn("api")) as c:
        seen = c.execute("SELECT last_seen FROM api_keys").fetchone()[0]
    assert seen is not None  # the credential check wrote to the primary (a standby refuses)
    router = _router(app)
    standby.stop()
    try:
        router.forget()
        source, rows, _last = _get(app, key)
        assert source == 'primary; reason="standby unreachable"' and rows >= 100
    finally:
        standby.restart()


def test_updated_since_reads_the_primary(
    app: Flask, pair: tuple[PostgresServer, PostgresServer, str],
) -> None:
    """The watermark of an updated_since listing is the primary's oldest running writer; the
    standby may lack rows stamped before it, so such a listing reads the primary."""
    primary, standby, key = pair
    with psycopg.connect(primary.dsn("api")) as c:
        c.execute("INSERT INTO hourly (time, device, tair) VALUES (%s, 'R1', 20)", (T0,))
    _caught_up(primary, standby)
    time.sleep(1.1)  # a row is listed once the watermark (1 s behind) has passed its stamp
    r = app.test_client().get(
        "/api/v2/data/hourly?device=R1&updated_since=2000-01-01",
        headers={"Authorization": f"Apikey {key}"})
    assert r.status_code == 200, r.get_data(as_text=True)
    assert r.headers["X-Read-Source"] == 'primary; reason="updated_since reads the primary"'
    assert len(r.get_json()) == 1 and "X-Updated-Since-Next" in r.headers
