"""One active ingester per MQTT session: a PostgreSQL advisory lock gates the broker connection.

Two ingesters with the same client id would take the broker session from each other over and
over (mosquitto disconnects the older connection on every takeover), and `$share` groups are
not at-least-once on mosquitto 2.0 (reliability plan, finding 4 and R14). So an ingester
connects to the broker only while it holds a session-level advisory lock keyed on its client id;
a second process started with the same id waits as a standby and takes over when the holder's
database session ends (process killed or exited).

The lock lives on its own connection. Before each commit the leader checks that connection is
still alive (a session lock is held exactly as long as its session); if it died (database
restart, session killed) the leader re-acquires at once, and steps down if a standby got there
first.
"""

from __future__ import annotations

import logging

import psycopg

log = logging.getLogger(__name__)


class LeadershipLost(Exception):
    """Another ingester holds the lock now; this one must not acknowledge anything more."""


class Leader:
    """The advisory lock of one client id, on a dedicated connection."""

    def __init__(self, database_url: str, client_id: str) -> None:
        self.database_url = database_url
        self.key = f"sds-ingest:{client_id}"
        self._conn: psycopg.Connection | None = None

    def try_acquire(self) -> bool:
        """Take the lock if it is free; True when this process holds it.

        OperationalError (database unreachable) propagates to the caller's retry loop.
        """
        self.release()
        conn = psycopg.connect(self.database_url, autocommit=True, connect_timeout=10,
                               application_name="sds-ingest-lock", keepalives=1,
                               keepalives_idle=10, keepalives_interval=5, keepalives_count=3)
        row = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                           (self.key,)).fetchone()
        if row and row[0]:
            self._conn = conn
            return True
        conn.close()
        return False

    def confirm(self) -> None:
        """Check the lock is still held, re-taking it after a lost session.

        Raises LeadershipLost when another process holds it, OperationalError when the
        database cannot be asked (the caller retries; nothing is acknowledged meanwhile).
        """
        if self._conn is not None and not self._conn.closed:
            try:
                self._conn.execute("SELECT 1")
                return
            except psycopg.OperationalError:
                log.warning("the leader lock's database session is gone; re-taking the lock")
        if not self.try_acquire():
            raise LeadershipLost(f"another ingester holds the lock {self.key!r}")

    def release(self) -> None:
        """Drop the lock (closing its session releases it)."""
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass
            self._conn = None
