"""The database write watchdog (reliability plan R15): the decision without services, then the
break on a real blocked psycopg call."""

from __future__ import annotations

import time

import psycopg
import pytest

from ingest.client import Ingester
from ingest.watchdog import Guarded, Watchdog, break_connection
from shared.config import Settings


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_fires_once_after_the_limit_and_breaks_the_named_connections() -> None:
    clock = Clock()
    broken: list[object] = []
    fired: list[tuple[str, float]] = []
    dog = Watchdog(30.0, clock=clock, breaker=lambda c: broken.append(c) or True,
                   on_fire=lambda e, s: fired.append((e.what, s)))
    conns = ["data", "lock"]
    with dog.guard("batch write", lambda: conns):
        clock.now += 29.9
        assert dog.check() == [] and broken == []
        clock.now += 0.2
        assert [e.what for e in dog.check()] == ["batch write"]
        assert broken == ["data", "lock"] and fired == [("batch write", pytest.approx(30.1))]
        clock.now += 60
        assert dog.check() == []  # once per guarded call
    assert dog.fired == 1


def test_finished_calls_are_never_broken_and_each_call_has_its_own_deadline() -> None:
    clock = Clock()
    broken: list[object] = []
    dog = Watchdog(10.0, clock=clock, breaker=lambda c: broken.append(c) or True)
    with dog.guard("first", lambda: ["a"]):
        clock.now += 9
    clock.now += 100
    assert dog.check() == [] and broken == []
    with dog.guard("second", lambda: ["b"]) as second:
        assert isinstance(second, Guarded) and second.deadline == clock.now + 10
        clock.now += 5
        with dog.guard("third", lambda: ["c", None]):
            clock.now += 6  # second is 11 s in, third 6 s
            assert [e.what for e in dog.check()] == ["second"]
            clock.now += 4
            assert [e.what for e in dog.check()] == ["third"]
    assert broken == ["b", "c", None]


def test_limit_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Watchdog(0)


def test_breaks_a_real_blocked_call_at_once(database_url: str) -> None:
    """A call blocked waiting for a reply (as behind a blackholed path) fails with
    OperationalError shortly after the limit instead of waiting for the server."""
    dog = Watchdog(0.5).start()
    conn = psycopg.connect(database_url, autocommit=True)
    try:
        start = time.monotonic()
        with pytest.raises(psycopg.OperationalError):
            with dog.guard("sleep", lambda: [conn]):
                conn.execute("SELECT pg_sleep(20)")
        assert time.monotonic() - start < 5.0
        assert dog.fired == 1
        assert break_connection(conn) is False  # nothing left to break
    finally:
        dog.stop()
        conn.close()
    assert break_connection(None) is False


@pytest.mark.parametrize("field", ["ingest_db_watchdog", "ingest_lock_timeout"])
def test_ingester_refuses_a_limit_that_is_not_positive(field: str) -> None:
    with pytest.raises(ValueError, match="SDS_INGEST_DB_WATCHDOG and SDS_INGEST_LOCK_TIMEOUT"):
        Ingester(Settings(**{field: 0}))
