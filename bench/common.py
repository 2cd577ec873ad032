"""Scratch PostgreSQL for the benchmarks: a throwaway server (unless one is named) and fresh
migrated databases on it, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from shared import db, migrate


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
