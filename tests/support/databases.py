"""Test databases: provision one as deployed, clone one from the provisioned template, or run a
server of a test's own. The roles, owner, extensions and migrating role come from
testbed/database.py, the same files deploy/services.sh uses; the URLs handed to tests are the
deployment's login role's (`sds`, no superuser), as the shipped processes connect."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from testbed import database
from testbed.database import as_role, with_dbname
from testbed.postgres import PostgresServer

__all__ = ["as_role", "clone_template", "migrate_database", "own_postgres", "with_dbname"]


def migrate_database(url: str) -> str:
    """Provision the database of `url` (a superuser URL) as deploy/services.sh and
    `deploy/run.sh` do; returns the login role's URL of it, the one tests should use."""
    return database.provision(url)


@contextmanager
def clone_template(admin_url: str, template_url: str, *, prefix: str) -> Iterator[str]:
    """A database `<prefix><random>` cloned from the template database, owned by the login
    role; yields the login role's URL of it and drops it afterwards."""
    name = prefix + uuid.uuid4().hex[:12]
    template = urlsplit(template_url).path.lstrip("/")
    url = database.clone(admin_url, template, name)
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def own_postgres(base: Path, *, durable: bool) -> Iterator[tuple[PostgresServer, str]]:
    """A PostgreSQL of one test's own (so it can be stopped or crashed) with a database
    `ingest` provisioned as deployed; yields the server and the login role's URL. Removed
    afterwards."""
    server = PostgresServer().start(base, durable=durable)
    try:
        yield server, database.create(server.dsn("postgres"), "ingest")
    finally:
        server.cleanup()
