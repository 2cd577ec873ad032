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

from shared import db
from shared.locks import SessionLock

log = logging.getLogger(__name__)

# The lock's name (shared.locks turns it into the advisory key; `sds aggregate status` finds
# the leader by it).
LOCK_NAME = "sds-aggregate-scheduler"


class LeadershipLost(RuntimeError):
    """This process no longer holds the scheduler lock; its work must not commit."""


class LeaderLock:
    """The scheduler lock on its own autocommit connection."""

    def __init__(self, url: str, *, name: str = "sds-aggregate-leader",
                 lock: str = LOCK_NAME) -> None:
        self.url = url
        self.name = name
        # Keepalives: a silently dead network path ends the session (and frees the lock) in
        # about 20 s instead of the kernel's two hours.
        self.lock = SessionLock(url, lock, application_name=name, keepalive_probes=2)
        self._conn: psycopg.Connection | None = None
        self._pid: int | None = None
        self._mutex = threading.Lock()

    @property
    def backend_pid(self) -> int | None:
        """Server pid of the lock session while this process is leader."""
        return self._pid

    def try_acquire(self) -> bool:
        """Take the lock if free; True when this process is (now) the leader."""
        with self._mutex:
            if self._conn is not None and not self._conn.closed and self._pid is not None:
                return True
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = self.lock.connect()
                pid = self.lock.try_lock(self._conn)
            except psycopg.OperationalError as exc:
                log.warning("leader lock: cannot reach the database: %s", exc)
                self._drop()
                return False
            if pid is not None:
                self._pid = pid
                log.info("leader lock taken (backend pid %s)", self._pid)
                return True
            return False

    def wait(self, stop: threading.Event, *, poll: float) -> bool:
        """Block until leader (True) or until `stop` is set (False)."""
        while not stop.is_set():
            if self.try_acquire():
                return True
            stop.wait(poll)
        return False

    def alive(self) -> bool:
        """True while the lock session still answers and still holds the lock."""
        with self._mutex:
            if self._conn is None or self._pid is None:
                return False
            try:
                held = self.lock.held_by(self._conn)
            except psycopg.Error as exc:
                log.warning("leader lock session lost: %s", exc)
                self._drop()
                return False
            if not held:
                self._drop()
                return False
            return True

    def guard(self, conn: psycopg.Connection) -> None:
        """Raise LeadershipLost unless our lock session still holds the lock (checked on the
        job's own connection, inside its transaction)."""
        pid = self._pid
        if pid is None:
            raise LeadershipLost("not the leader")
        if not self.lock.held_by(conn, pid):
            raise LeadershipLost("scheduler lock no longer held by this process")

    def release(self) -> None:
        """Give the lock up and close the lock session."""
        with self._mutex:
            if self._conn is not None and not self._conn.closed and self._pid is not None:
                try:
                    self.lock.unlock(self._conn)
                except psycopg.Error:
                    pass
            self._drop()

    def _drop(self) -> None:
        db.close_quietly(self._conn)
        self._conn = None
        self._pid = None
