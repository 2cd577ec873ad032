"""Test databases: migrate one, clone one from the migrated template, or run a server of a
test's own. One place for the create / migrate / drop steps the fixtures share."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from shared import migrate
from testbed.services import PostgresServer


def with_dbname(url: str, dbname: str) -> str:
    """`url` pointing at database `dbname` on the same server."""
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


def migrate_database(url: str) -> None:
    """Create the TimescaleDB extension (as the superuser tests connect as) and migrate."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS timescaledb")
    migrate.upgrade(url)


@contextmanager
def clone_template(admin_url: str, template_url: str, *, prefix: str) -> Iterator[str]:
    """A database `<prefix><random>` cloned from the template database; dropped afterwards."""
    name = prefix + uuid.uuid4().hex[:12]
    template = urlsplit(template_url).path.lstrip("/")
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield with_dbname(admin_url, name)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def own_postgres(base: Path, *, durable: bool) -> Iterator[tuple[PostgresServer, str]]:
    """A PostgreSQL of one test's own (so it can be stopped or crashed) with a migrated
    database `ingest`; removed afterwards."""
    server = PostgresServer().start(base, durable=durable)
    try:
        url = server.create_database("ingest")
        migrate_database(url)
        yield server, url
    finally:
        server.cleanup()
