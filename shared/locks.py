"""Session advisory locks: the one key scheme and the one lock session behind every lock that
makes a process the only one doing something (the ingester of an MQTT session, the rollup
scheduler, the migrator).

A lock is named by text (`sds-ingest:<client id>`, ...); its key is the first 8 bytes of the
name's SHA-256 as a signed bigint, computed here so every process, the CLI and the tests agree
without asking the database. It is a session lock on a dedicated autocommit connection: held
exactly as long as that session lives, so a killed holder frees it. `Leadership` is the one
helper of a process that leads by holding a lock (its session, confirming it, guarding a
commit, the one `LeadershipLost`), for the ingester, the rollup scheduler and the alert
evaluator; what to do about a lost or busy lock (wait, step down, re-take) is the caller's
policy.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from datetime import datetime
from typing import NamedTuple, cast

import psycopg
from psycopg import sql

from shared import db
from shared.config import Settings

log = logging.getLogger(__name__)

# Backends holding the bigint advisory key %(key)s: pg_locks shows such a key as classid =
# high half, objid = low half (both unsigned), objsubid = 1; the shift puts the sign back.
_HOLDERS = ("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted"
            " AND ((classid::bigint << 32) | objid::bigint) = %(key)s")
# End the session (pid, backend_start) if it still holds the key: the two together name one
# session, so a recycled pid is never taken for it. Waits up to %(wait)s ms for it to exit
# (PostgreSQL 14+), which is when its session locks are freed.
_END_STALE = sql.SQL("SELECT pg_terminate_backend(a.pid, %(wait)s) FROM pg_stat_activity a"
                     " WHERE a.pid = %(pid)s AND a.backend_start = %(started)s"
                     " AND a.pid IN ({holders})").format(holders=sql.SQL(_HOLDERS))
# How long a lock attempt waits for this process's stale session to exit once told to end.
STALE_END_WAIT_MS = 5000


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
        held = self.take(conn)
        return held.pid if held else None

    def take(self, conn: psycopg.Connection) -> Holder | None:
        """Take the lock on `conn` if it is free: the holding session's identity when taken."""
        row = conn.execute(
            "SELECT pg_try_advisory_lock(%s), pg_backend_pid(),"
            " (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid())",
            (self.key,)).fetchone()
        return Holder(cast(int, row[1]), row[2]) if row and row[0] else None

    def end_stale(self, conn: psycopg.Connection, stale: Holder) -> bool | None:
        """End `stale` (a session this process gave up but the server may still have) if it
        still holds the lock, waiting for it to exit: True when ended, False when it did not
        exit in time, None when it no longer holds the lock. Raises
        psycopg.errors.InsufficientPrivilege when the login role may not end it."""
        row = conn.execute(_END_STALE, {"key": self.key, "pid": stale.pid,
                                        "started": stale.started,
                                        "wait": STALE_END_WAIT_MS}).fetchone()
        return None if row is None else bool(row[0])

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


class Holder(NamedTuple):
    """One session that held a lock: its backend pid and start time (together, one session)."""

    pid: int
    started: datetime


def holders(conn: psycopg.Connection, name: str) -> list[int]:
    """Server pids of the sessions holding the lock `name` (at most one)."""
    return [row[0] for row in conn.execute(_HOLDERS, {"key": lock_key(name)}).fetchall()]


class StaleLockSession(psycopg.OperationalError):
    """The lock is still held by a session this process gave up (its connection broke on this
    side; the server has not seen it end) and could not be ended now: not lost to another
    process. Retry: the session ends by itself within its lease or keepalive limit."""


class LeadershipLost(RuntimeError):
    """This process no longer holds its leader lock (another holds it, or its session ended):
    its work must not commit. The one "lost" of every leader (the ingester, the rollup
    scheduler; docs/reliability.md)."""


class Leadership:
    """Being the one process that holds a `SessionLock`: the lock's own autocommit session, and
    the checks a leader makes on it (thread-safe). The policy (poll until leader, re-take a
    lost session or step down for good) is the caller's: aggregate/leader.py, ingest/leader.py,
    alerts/evaluator/service.py.
    """

    def __init__(self, lock: SessionLock) -> None:
        self.lock = lock
        self.pid: int | None = None  # the lock session's backend pid while held
        self._holder: Holder | None = None  # the held lock session's identity
        # A lock session given up without unlocking it: after a broken connection the server
        # may still have it (a partition hides the close), holding the lock for this process.
        self._stale: Holder | None = None
        self.confirmed_at = float("-inf")  # time.monotonic() of the last confirmation sent
        self._conn: psycopg.Connection | None = None
        self._pending: psycopg.Connection | None = None  # a lock attempt's new session
        self._mutex = threading.RLock()

    def connections(self) -> list[psycopg.Connection | None]:
        """Every session a call may be blocked on (for a watchdog to break): the held lock's,
        and a lock attempt's while it waits for its answer."""
        return [self._conn, self._pending]

    @property
    def session(self) -> psycopg.Connection:
        """The held lock's own session (a leader may LISTEN on it, so it hears nothing once it
        has lost the lock); LeadershipLost when the lock is not held."""
        conn = self._conn
        if conn is None or not self.held():
            raise LeadershipLost("not the leader")
        return conn

    def held(self) -> bool:
        """Whether this process took the lock and its session is still open (not asked)."""
        return self._conn is not None and not self._conn.closed and self.pid is not None

    def try_acquire(self) -> bool:
        """Take the lock on a new session if it is free (True: this process holds it; an open
        session that holds it already is kept). OperationalError (the database unreachable)
        goes to the caller."""
        with self._mutex:
            if self.held():
                return True
            self.release()
            sent = time.monotonic()
            conn = self.lock.connect()
            self._pending = conn
            try:
                holder = self.lock.take(conn)
                if holder is None and self._stale is not None:
                    holder = self._reclaim(conn, self._stale)
            except psycopg.Error:
                conn.close()
                raise
            finally:
                self._pending = None
            if holder is None:
                conn.close()
                return False
            self._conn, self._holder, self.confirmed_at = conn, holder, sent
            self.pid, self._stale = holder.pid, None
            return True

    def _reclaim(self, conn: psycopg.Connection, stale: Holder) -> Holder | None:
        """The lock is taken: if the taker is this process's own stale session, end it and
        take the lock on `conn`. Without this, a leader whose connections broke during a
        partition shorter than its lease would find its own old session holding the lock
        after the heal and take it for another process's (the ingester steps down for good)."""
        try:
            ended = self.lock.end_stale(conn, stale)
        except psycopg.errors.InsufficientPrivilege as exc:
            raise StaleLockSession(
                f"the lock {self.lock.name!r} is still held by this process's previous session "
                f"(backend pid {stale.pid}), which this login role may not end; it ends by "
                "itself within its lease") from exc
        if ended is None:  # gone: whoever holds the lock is someone else
            self._stale = None
            return None
        if not ended:
            raise StaleLockSession(
                f"the lock {self.lock.name!r} is still held by this process's previous session "
                f"(backend pid {stale.pid}), told to end {STALE_END_WAIT_MS} ms ago")
        log.warning("leader lock %r: ended this process's previous session (backend pid %d), "
                    "which still held it after its connection broke", self.lock.name, stale.pid)
        self._stale = None
        return self.lock.take(conn)

    def ping(self) -> bool:
        """Confirm the lock session still answers (a session lock lives exactly as long as its
        session); False, with the session dropped, when it does not."""
        with self._mutex:
            if not self.held():
                return False
            assert self._conn is not None
            sent = time.monotonic()
            try:
                self._conn.execute("SELECT 1")
            except psycopg.OperationalError:
                self.release()
                return False
            self.confirmed_at = sent
            return True

    def alive(self) -> bool:
        """Whether the lock session still answers and still holds the lock (asked on it);
        when not, the session is dropped."""
        with self._mutex:
            if not self.held():
                return False
            assert self._conn is not None
            try:
                holds = self.lock.held_by(self._conn)
            except psycopg.Error as exc:
                log.warning("leader lock %r: session lost: %s", self.lock.name, exc)
                holds = False
            if not holds:
                self.release()
            return holds

    def guard(self, conn: psycopg.Connection) -> None:
        """Raise LeadershipLost unless this process's lock session still holds the lock, asked
        on `conn` (a job's own connection, inside its transaction, so it rolls back)."""
        pid = self.pid
        if pid is None:
            raise LeadershipLost("not the leader")
        if not self.lock.held_by(conn, pid):
            raise LeadershipLost(f"the lock {self.lock.name!r} is no longer held by this "
                                 "process")

    def release(self, *, unlock: bool = False) -> None:
        """Close the lock session, which frees the lock (`unlock`: give it up explicitly first,
        for a session that may outlive the close)."""
        with self._mutex:
            if unlock and self.held():
                assert self._conn is not None
                try:
                    self.lock.unlock(self._conn)
                except psycopg.Error:
                    pass
                else:
                    self._holder = None  # unlocked: nothing left to end
            if self._holder is not None:
                self._stale = self._holder
            db.close_quietly(self._conn)
            self._conn = None
            self._holder = None
            self.pid = None
