"""Session advisory locks: the one key scheme and the one lock session behind every lock that
makes a process the only one doing something (the ingester of an MQTT session, the rollup
scheduler, the migrator).

A lock is named by text (`sds-ingest:<client id>`, ...); its key is the first 8 bytes of the
name's SHA-256 as a signed bigint, computed here so every process, the CLI and the tests agree
without asking the database. It is a session lock on a dedicated autocommit connection: held
exactly as long as that session lives, so a killed holder frees it. What to do about a lost or
busy lock (wait, step down, re-take) is the caller's policy.
"""

from __future__ import annotations

import hashlib
from typing import cast

import psycopg

from shared import db
from shared.config import Settings

# Backends holding the bigint advisory key %(key)s: pg_locks shows such a key as classid =
# high half, objid = low half (both unsigned), objsubid = 1; the shift puts the sign back.
_HOLDERS = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
            " AND ((classid::bigint << 32) | objid::bigint) = %(key)s")


def lock_key(name: str) -> int:
    """The advisory lock key of `name` (a signed 64-bit integer, stable across processes)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class SessionLock:
    """The named advisory lock and the sessions that hold it (no state of its own: callers
    keep the connection that holds it)."""

    def __init__(self, target: Settings | str, name: str, *, application_name: str,
                 lease: float | None = None, keepalive_probes: int = 3) -> None:
        self.target = target
        self.name = name
        self.key = lock_key(name)
        self.application_name = application_name
        self.lease = lease
        self.keepalive_probes = keepalive_probes

    def connect(self) -> psycopg.Connection:
        """A new autocommit session for holding the lock. With a lease, the session runs with
        idle_session_timeout = lease: a holder silent for that long loses its session, and
        with it the lock (PostgreSQL 14 or later)."""
        server = ({"idle_session_timeout": max(1, int(self.lease * 1000))}
                  if self.lease is not None else None)
        return db.connect(self.target, name=self.application_name, autocommit=True,
                          connect_timeout=10, keepalive_probes=self.keepalive_probes,
                          server=server)

    def try_lock(self, conn: psycopg.Connection) -> int | None:
        """Take the lock on `conn` if it is free: the session's backend pid when taken."""
        row = conn.execute("SELECT pg_try_advisory_lock(%s), pg_backend_pid()",
                           (self.key,)).fetchone()
        return cast(int, row[1]) if row and row[0] else None

    def lock(self, conn: psycopg.Connection) -> None:
        """Take the lock on `conn`, waiting for it as long as it takes."""
        conn.execute("SELECT pg_advisory_lock(%s)", (self.key,))

    def unlock(self, conn: psycopg.Connection) -> None:
        """Give the lock up on the session that holds it."""
        conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,))

    def held_by(self, conn: psycopg.Connection, pid: int | None = None) -> bool:
        """True when backend `pid` (default: `conn`'s own session) holds the lock; asked on
        `conn`, so a job can check inside its own transaction."""
        if pid is None:
            pid = conn.info.backend_pid
        return pid in holders(conn, self.name)


def holders(conn: psycopg.Connection, name: str) -> list[int]:
    """Server pids of the sessions holding the lock `name` (at most one)."""
    return [row[0] for row in conn.execute(_HOLDERS, {"key": lock_key(name)}).fetchall()]
