"""Scratch servers for the benchmarks: a throwaway PostgreSQL (unless one is named) and fresh
migrated databases on it, dropped afterwards; or a durable PostgreSQL and mosquitto pair."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from shared import db, migrate

if TYPE_CHECKING:
    from testbed.services import MosquittoBroker, PostgresServer


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """A maintenance URL: of a throwaway PostgreSQL (TimescaleDB) unless `url` is given."""
    if url is not None:
        yield url
        return
    from testbed.services import PostgresServer

    server = PostgresServer().start()
    try:
        yield server.dsn("postgres")
    finally:
        server.cleanup()


@contextmanager
def database(admin_url: str, *, prefix: str) -> Iterator[str]:
    """A fresh migrated database named `<prefix>_<random>` on the server of `admin_url`."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    base = admin_url.rpartition("/")[0]
    with db.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = f"{base}/{name}"
    try:
        with db.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
        migrate.upgrade(url)
        yield url
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
    from testbed.services import MosquittoBroker, PostgresServer

    pg = PostgresServer().start(base / "pg", durable=True)
    url = pg.create_database("bench")
    with db.connect(url, autocommit=True) as c:
        c.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
    migrate.upgrade(url)
    return pg, url, MosquittoBroker().start(base / "mqtt", durable=True)
