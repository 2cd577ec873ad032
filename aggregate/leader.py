"""Single active scheduler: a PostgreSQL session advisory lock held on a dedicated connection.

A standby polls `pg_try_advisory_lock` and becomes leader within one poll interval after the
leader's session ends (process killed, connection dropped, or `pg_terminate_backend`). Jobs
re-check inside their own transaction that the lock is still held by this process's lock
session (`guard`), so a leader that lost its lock mid-run rolls back instead of committing.
"""

from __future__ import annotations

import logging
import threading

import psycopg

from shared.locks import Leadership, LeadershipLost, SessionLock

log = logging.getLogger(__name__)

# The lock's name (shared.locks turns it into the advisory key; `sds aggregate status` finds
# the leader by it).
LOCK_NAME = "sds-aggregate-scheduler"

__all__ = ["LOCK_NAME", "LeaderLock", "LeadershipLost"]


class LeaderLock:
    """The scheduler lock on its own autocommit session (shared.locks.Leadership): a standby
    polls for it; the leader's jobs guard their commits with it."""

    def __init__(self, url: str, *, name: str = "sds-aggregate-leader",
                 lock: str = LOCK_NAME) -> None:
        self.url = url
        self.name = name
        # Keepalives: a silently dead network path ends the session (and frees the lock) in
        # about 20 s instead of the kernel's two hours.
        self.lock = SessionLock(url, lock, application_name=name, keepalive_probes=2)
        self.leadership = Leadership(self.lock)

    @property
    def backend_pid(self) -> int | None:
        """Server pid of the lock session while this process is leader."""
        return self.leadership.pid

    def try_acquire(self) -> bool:
        """Take the lock if free; True when this process is (now) the leader."""
        was = self.leadership.held()
        try:
            taken = self.leadership.try_acquire()
        except psycopg.OperationalError as exc:
            log.warning("leader lock: cannot reach the database: %s", exc)
            self.leadership.release()
            return False
        if taken and not was:
            log.info("leader lock taken (backend pid %s)", self.leadership.pid)
        return taken

    def wait(self, stop: threading.Event, *, poll: float) -> bool:
        """Block until leader (True) or until `stop` is set (False)."""
        while not stop.is_set():
            if self.try_acquire():
                return True
            stop.wait(poll)
        return False

    def alive(self) -> bool:
        """True while the lock session still answers and still holds the lock."""
        return self.leadership.alive()

    def guard(self, conn: psycopg.Connection) -> None:
        """Raise LeadershipLost unless our lock session still holds the lock (checked on the
        job's own connection, inside its transaction)."""
        self.leadership.guard(conn)

    def release(self) -> None:
        """Give the lock up and close the lock session."""
        self.leadership.release(unlock=True)
