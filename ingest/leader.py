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

The lock is a lease: its session runs with `idle_session_timeout` = SDS_INGEST_LOCK_TIMEOUT, and
the ingester confirms it several times per lease. A leader that is frozen (SIGSTOP, a stalled
VM) or cut off from the database stops confirming, PostgreSQL ends its lock session after the
lease, and a standby takes over. `confirmed_at` is the monotonic time at which the last
successful confirmation was sent: while less than a lease has passed since then, the session
cannot have been ended for idleness. Once another process holds the lock, this one never takes
it back (`lost`): it steps down for good, and its supervisor starts it again as a standby.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from shared.locks import Leadership, LeadershipLost, SessionLock

log = logging.getLogger(__name__)

__all__ = ["Leader", "LeadershipLost"]


class Leader:
    """The advisory lock of one client id, on a dedicated session (shared.locks.Leadership;
    thread-safe)."""

    def __init__(self, database_url: str, client_id: str, *, lease: float = 30.0) -> None:
        self.database_url = database_url
        self.key = f"sds-ingest:{client_id}"
        self.lease = lease
        # idle_session_timeout = lease makes the lock a lease: a holder silent for that long
        # loses its session, and with it the lock.
        self.lock = SessionLock(database_url, self.key, application_name="sds-ingest-lock",
                                lease=lease, keepalive_probes=3)
        self.leadership = Leadership(self.lock)
        self.lost = False
        self._mutex = threading.RLock()

    @property
    def confirmed_at(self) -> float:
        """time.monotonic() of the last confirmation sent (-inf: none)."""
        return self.leadership.confirmed_at

    def connections(self) -> list[psycopg.Connection | None]:
        """Every session a call of this object may be blocked on (for the watchdog to break):
        the held lock's, and a lock attempt's while it waits for its answer."""
        return self.leadership.connections()

    def try_acquire(self) -> bool:
        """Take the lock on a new session if it is free; True when this process holds it.

        OperationalError (database unreachable) propagates to the caller's retry loop.
        """
        with self._mutex:
            self.leadership.release()
            return self.leadership.try_acquire()

    def confirm(self) -> None:
        """Check the lock is still held, re-taking it after a lost session.

        Raises LeadershipLost when another process holds it (and from then on), OperationalError
        when the database cannot be asked (the caller retries; nothing is acknowledged
        meanwhile).
        """
        with self._mutex:
            if self.lost:
                raise LeadershipLost(f"another ingester took the lock {self.key!r}")
            if self.leadership.held():
                if self.leadership.ping():
                    return
                log.warning("the leader lock's database session is gone; re-taking the lock")
            if not self.try_acquire():
                self.lost = True
                raise LeadershipLost(f"another ingester holds the lock {self.key!r}")

    def fresh(self) -> bool:
        """True while the last confirmation is recent enough (half a lease) to rely on."""
        return not self.lost and time.monotonic() - self.confirmed_at < self.lease / 2

    def release(self) -> None:
        """Drop the lock (closing its session releases it)."""
        with self._mutex:
            self.leadership.release()
