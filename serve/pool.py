"""The one way to the API's connection pool: `pool()` (the current app's) or `pool(app)`.

`serve.create_app` opens the pool and stores it with `attach`; views, authentication and the
`/data` page all borrow connections from what `pool()` returns. With SDS_DATABASE_READ_URL
set, `/data` pages read through `read_pool()` instead: a hot standby's pool while the standby
is current enough (ReadRouter), else the primary's. Writes always use `pool()`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import psycopg
from flask import Flask, current_app
from psycopg_pool import ConnectionPool, PoolTimeout

log = logging.getLogger(__name__)

# Where the pool lives on the app; everything else, tests and benchmarks included, asks pool().
EXTENSION = "db"


def attach(app: Flask, opened: ConnectionPool) -> None:
    """Make `opened` the pool of `app`."""
    app.extensions[EXTENSION] = opened


def pool(app: Flask | None = None) -> ConnectionPool:
    """The connection pool of `app`, or of the app handling the current request."""
    owner = app if app is not None else cast(
        Flask, current_app._get_current_object())  # type: ignore[attr-defined]
    return cast(ConnectionPool, owner.extensions[EXTENSION])


# ---- reads from a hot standby ------------------------------------------------------------------
# Where the standby's pool and its staleness check live on the app (only when
# SDS_DATABASE_READ_URL is set).
READ_EXTENSION = "db_read"
CHECK_EVERY = 1.0  # seconds a staleness measurement is reused
RETRY_UNREACHABLE = 5.0  # seconds before asking a standby that did not answer again
CHECK_TIMEOUT = 1.0  # longest a request waits for a standby connection for the check
PROMOTED = "the read server is not in recovery (promoted?)"
CATCH_UP_WAIT = 0.2  # longest a check waits for the standby to reach the primary's position

# The primary's WAL position first, then the standby's replay position and the time of the
# last transaction it replayed (docs/operations.md "Hot standby and promotion").
# The insert position, not the write position: with asynchronous commit a transaction is
# visible on the primary before its WAL is written, and must count as not yet on the standby.
_PRIMARY_LSN = "SELECT pg_current_wal_insert_lsn()"
_STANDBY_STATE = ("SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn() >= %s::pg_lsn,"
                  " extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8")


@dataclass(frozen=True, slots=True)
class ReadChoice:
    """The pool a read uses, and the X-Read-Source header value saying which and why."""

    pool: ConnectionPool
    header: str | None


class ReadRouter:
    """Sends reads to the standby while it is at most `max_staleness` seconds behind the
    primary, else to the primary (the header says which, and why).

    Staleness: the primary's current WAL position is read first; a standby that has replayed
    up to it holds everything committed before this check, so it is current (0 s). Otherwise
    it lacks commits made since the last one it replayed, and is `now() -
    pg_last_xact_replay_timestamp()` behind. The replay timestamp alone would not do: on an
    idle primary it ages although the standby is current. A standby not yet at the position
    gets CATCH_UP_WAIT to reach it (streaming applies in milliseconds), so a commit made just
    before the check does not count as lag. A measurement is reused for CHECK_EVERY seconds
    (with its age added), so a worker asks at most once a second; `forget()` drops it.
    """

    def __init__(self, primary: ConnectionPool, standby: ConnectionPool, max_staleness: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.primary = primary
        self.standby = standby
        self.max_staleness = max_staleness
        self._clock = clock
        self._lock = threading.Lock()
        self._measured_at: float | None = None
        self._lag: float | None = None  # None: unreachable
        self._why = ""

    def measure(self) -> tuple[float | None, str]:
        """(seconds the standby is behind, or None when it cannot tell; reason text)."""
        try:
            with self.primary.connection() as conn:
                row = conn.execute(_PRIMARY_LSN).fetchone()
            primary_lsn = str(row[0]) if row else None
            with self.standby.connection(timeout=CHECK_TIMEOUT) as conn:
                # A healthy standby replays a commit within milliseconds, but this request's
                # own bookkeeping (last_seen) may have moved the primary just now: give it a
                # moment to reach the position before calling it behind.
                give_up = self._clock() + CATCH_UP_WAIT
                while True:
                    state = conn.execute(_STANDBY_STATE, (primary_lsn,)).fetchone()
                    if state is None or not state[0] or state[1] or self._clock() >= give_up:
                        break
                    time.sleep(0.01)
        except (psycopg.Error, PoolTimeout) as exc:
            log.warning("standby staleness check failed: %s", exc)
            return None, "standby unreachable"
        assert state is not None
        in_recovery, caught_up, since_replay = state
        if not in_recovery:
            # Promoted (or the read URL names a primary): as current as the primary itself.
            return 0.0, PROMOTED
        if caught_up:
            return 0.0, "standby current"
        if since_replay is None:
            return None, "standby has replayed nothing yet"
        return max(0.0, float(since_replay)), f"standby {since_replay:.1f} s behind"

    def forget(self) -> None:
        """Drop the last measurement, so the next read measures the standby again instead of
        reusing it (for up to CHECK_EVERY, or RETRY_UNREACHABLE after a failed check): for a
        caller that knows the standby has just changed (replay paused, server stopped)."""
        with self._lock:
            self._measured_at = None

    def choose(self) -> ReadChoice:
        """The pool for this read, with its header."""
        now = self._clock()
        with self._lock:
            age = None if self._measured_at is None else now - self._measured_at
            stale_after = CHECK_EVERY if self._lag is not None else RETRY_UNREACHABLE
            if age is None or age >= stale_after:
                self._lag, self._why = self.measure()
                self._measured_at, age = self._clock(), 0.0
            lag, why = self._lag, self._why
        if why == PROMOTED:
            return ReadChoice(self.standby, f'primary; reason="{PROMOTED}"')
        if lag is not None and lag + age <= self.max_staleness:
            return ReadChoice(self.standby, f"standby; lag={lag + age:.1f}")
        if lag is not None:
            why = f"standby {lag + age:.1f} s behind, limit {self.max_staleness:g} s"
        return ReadChoice(self.primary, f'primary; reason="{why}"')


def attach_reads(app: Flask, router: ReadRouter) -> None:
    """Make `router` choose where the reads of `app` go."""
    app.extensions[READ_EXTENSION] = router


def read_router(app: Flask | None = None) -> ReadRouter | None:
    """The read router of `app` (or of the current app); None when no standby is configured."""
    owner = app if app is not None else cast(
        Flask, current_app._get_current_object())  # type: ignore[attr-defined]
    return cast("ReadRouter | None", owner.extensions.get(READ_EXTENSION))


def read_pool(app: Flask | None = None) -> ReadChoice:
    """Where a read-only view should read: the standby when one is configured and current
    enough, else the primary (header None: no standby configured)."""
    owner = app if app is not None else cast(
        Flask, current_app._get_current_object())  # type: ignore[attr-defined]
    router = read_router(owner)
    if router is None:
        return ReadChoice(pool(owner), None)
    return router.choose()
