"""Scratch servers for the benchmarks: a throwaway PostgreSQL (unless one is named) and fresh
migrated databases on it, dropped afterwards; or a durable PostgreSQL and mosquitto pair."""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared import db

if TYPE_CHECKING:
    from testbed.mosquitto import MosquittoBroker
    from testbed.postgres import PostgresServer


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """A maintenance URL: of a throwaway PostgreSQL (TimescaleDB) unless `url` is given."""
    if url is not None:
        yield url
        return
    from testbed.postgres import PostgresServer

    server = PostgresServer().start()
    try:
        yield server.dsn("postgres")
    finally:
        server.cleanup()


@contextmanager
def database(admin_url: str, *, prefix: str) -> Iterator[str]:
    """A fresh database named `<prefix>_<random>` on the server of `admin_url` (a superuser's),
    provisioned as deployed (testbed/database.py: the login role `sds` owns and migrates it);
    yields the login role's URL."""
    from testbed import database as provisioning

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    try:
        yield provisioning.create(admin_url, name)
    finally:
        with db.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def scratch_database(url: str | None, *, prefix: str) -> Iterator[str]:
    """A fresh migrated database on the server of `url`, or on a throwaway server."""
    with server_url(url) as admin, database(admin, prefix=prefix) as fresh:
        yield fresh


def durable_servers(base: Path) -> tuple[PostgresServer, str, MosquittoBroker]:
    """A PostgreSQL with durable settings and a migrated database `bench`, and a mosquitto with
    the shipped durable.conf, under `base`: (server, database URL, broker). The caller cleans
    both up."""
    from testbed import database as provisioning
    from testbed.mosquitto import MosquittoBroker
    from testbed.postgres import PostgresServer

    pg = PostgresServer().start(base / "pg", durable=True)
    url = provisioning.create(pg.dsn("postgres"), "bench")
    return pg, url, MosquittoBroker().start(base / "mqtt", durable=True)


def median_get(client: Any, url: str, headers: dict[str, str], runs: int) -> tuple[float, bytes]:
    """Median milliseconds of `runs` GETs of `url` through a Flask test client (each must
    answer 200) and the last body."""
    times, body = [], b""
    for _ in range(runs):
        t0 = time.perf_counter()
        got = client.get(url, headers=headers)
        body = got.get_data()
        times.append(time.perf_counter() - t0)
        assert got.status_code == 200, body[:300]
    return statistics.median(times) * 1000, body
