"""Ordered SQL migrations (`sds db upgrade`): apply each pending file of shared/migrations/
(`NNNN_name.sql`) in its own transaction and record it in `schema_migrations` with a checksum,
so an edited migration is caught."""

from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from importlib import resources

import psycopg

from admin import context
from shared.locks import SessionLock

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# One migrator at a time (shared.locks; the lock is taken on the migrating session itself).
_LOCK_NAME = "sds-migrate"


@dataclass(frozen=True, slots=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """SHA-256 of the file's text."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


class MigrationError(Exception):
    """An applied migration no longer matches its file, or a migration failed."""


def available() -> list[Migration]:
    """All migration files shipped with the package, in version order."""
    found = []
    for entry in resources.files("shared.migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text()))
    return sorted(found, key=lambda mig: mig.version)


def _ensure_table(conn: psycopg.Connection) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version    integer PRIMARY KEY,
               name       text NOT NULL,
               checksum   text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )


def applied(conn: psycopg.Connection) -> dict[int, tuple[str, str]]:
    """{version: (name, checksum)} of migrations already applied."""
    exists = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not exists or not exists[0]:
        return {}
    rows = conn.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()
    return {v: (n, c) for v, n, c in rows}


def upgrade(conninfo: str) -> list[Migration]:
    """Apply every pending migration; return those applied (empty when up to date)."""
    done: list[Migration] = []
    lock = SessionLock(conninfo, _LOCK_NAME, application_name="sds-migrate")
    with context.plain_connection(conninfo, name="sds-migrate", autocommit=True) as conn:
        lock.lock(conn)
        try:
            _ensure_table(conn)
            have = applied(conn)
            for mig in available():
                if mig.version in have:
                    name, checksum = have[mig.version]
                    if checksum != mig.checksum:
                        raise MigrationError(
                            f"migration {mig.version:04d}_{name} was changed after it was "
                            "applied; add a new migration instead of editing an old one")
                    continue
                log.info("applying migration %04d_%s", mig.version, mig.name)
                try:
                    with conn.transaction():
                        conn.execute(mig.sql)  # trusted file text
                        conn.execute(
                            "INSERT INTO schema_migrations (version, name, checksum)"
                            " VALUES (%s, %s, %s)",
                            (mig.version, mig.name, mig.checksum),
                        )
                except psycopg.Error as exc:
                    raise MigrationError(
                        f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc
                done.append(mig)
        finally:
            lock.unlock(conn)
    return done


def timescaledb_version(conn: psycopg.Connection) -> str | None:
    """The installed TimescaleDB extension version, or None without it."""
    row = conn.execute(
        "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'").fetchone()
    return row[0] if row else None
