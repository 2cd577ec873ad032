"""Scratch PostgreSQL for the benchmarks: a throwaway server (unless one is named) and fresh
migrated databases on it, dropped afterwards."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from shared import migrate


@contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """A maintenance URL: of a throwaway PostgreSQL (TimescaleDB) unless `url` is given."""
    if url is not None:
        yield url
        return
    from tests.support.services import PostgresServer

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
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    db = f"{base}/{name}"
    try:
        with psycopg.connect(db, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
        migrate.upgrade(db)
        yield db
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def scratch_database(url: str | None, *, prefix: str) -> Iterator[str]:
    """A fresh migrated database on the server of `url`, or on a throwaway server."""
    with server_url(url) as admin, database(admin, prefix=prefix) as db:
        yield db
