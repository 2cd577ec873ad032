"""A client-side watchdog for database calls that hang: break the connection, let the caller retry.

The server's statement_timeout cannot end a call whose request never reached the server or whose
reply never comes back (a blackholed path, a frozen proxy), and TCP's own timers do not fire
while something on the path still acknowledges the segments (a userspace proxy, a NAT box). So
every batch write runs under `Watchdog.guard`: a thread checks the guarded calls once a second
(or faster for short limits) and, when one has run longer than its limit, shuts down the
sockets of its connections. The blocked psycopg call then fails at once with OperationalError,
the transaction is gone (nothing committed, nothing acknowledged) and the ingester's usual retry
path sends the batch again on a new connection.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg

log = logging.getLogger(__name__)

Connections = Callable[[], Iterable["psycopg.Connection | None"]]


def break_connection(conn: psycopg.Connection | None) -> bool:
    """Shut down the socket under `conn` (both directions) so a call blocked on it fails now.

    The file descriptor stays owned by libpq: shutdown acts on the socket, so it is done on a
    duplicate that is closed again at once. Returns False when there was no open socket.
    """
    if conn is None or conn.closed:
        return False
    try:
        fd = conn.pgconn.socket
    except psycopg.OperationalError:  # libpq has no socket any more
        return False
    try:
        with socket.socket(fileno=os.dup(fd)) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:  # already shut down, or not a socket any more
        return False
    return True


@dataclass(eq=False)
class Guarded:
    """One guarded call in progress."""

    what: str
    started: float
    deadline: float
    connections: Connections
    fired: bool = field(default=False)


class Watchdog:
    """Breaks the connections of guarded calls that overran `limit` seconds.

    `clock` and `breaker` are injectable for tests; `check(now)` is the whole decision and can
    be driven without the thread.
    """

    def __init__(self, limit: float, *, on_fire: Callable[[Guarded, float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 breaker: Callable[[psycopg.Connection | None], bool] = break_connection
                 ) -> None:
        if limit <= 0:
            raise ValueError("the watchdog limit must be positive")
        self.limit = limit
        self.fired = 0
        self._on_fire = on_fire
        self._clock = clock
        self._breaker = breaker
        self._lock = threading.Lock()
        self._active: set[Guarded] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @contextmanager
    def guard(self, what: str, connections: Connections) -> Iterator[Guarded]:
        """Run the body under the watchdog; `connections()` names what to break if it hangs."""
        now = self._clock()
        entry = Guarded(what, now, now + self.limit, connections)
        with self._lock:
            self._active.add(entry)
        try:
            yield entry
        finally:
            with self._lock:
                self._active.discard(entry)

    def check(self, now: float | None = None) -> list[Guarded]:
        """Fire every guarded call past its deadline (once each); returns those fired now."""
        now = self._clock() if now is None else now
        fired: list[Guarded] = []
        # Under the lock, so a call that just finished (and left the set) is never broken.
        with self._lock:
            for entry in self._active:
                if entry.fired or now < entry.deadline:
                    continue
                entry.fired = True
                broken = sum(1 for conn in entry.connections() if self._breaker(conn))
                log.error("watchdog: %s stuck for %.1f s (limit %.1f s); broke %d database "
                          "connection(s), nothing was acknowledged and it will be retried",
                          entry.what, now - entry.started, self.limit, broken)
                fired.append(entry)
        self.fired += len(fired)
        for entry in fired:
            if self._on_fire is not None:
                self._on_fire(entry, now - entry.started)
        return fired

    def start(self) -> Watchdog:
        """Check in a daemon thread until `stop()`."""
        every = min(1.0, self.limit / 10)

        def loop() -> None:
            while not self._stop.wait(every):
                self.check()

        self._stop.clear()
        self._thread = threading.Thread(target=loop, name="db-watchdog", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """End the checking thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
