"""shared.locks: one key scheme, exclusive session locks, and the pg_locks lookup that finds
the holder (used by the scheduler's guard and `sds aggregate status`)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from ingest.watchdog import break_connection
from shared import db
from shared.locks import Leadership, LeadershipLost, SessionLock, holders, lock_key
from tests.support.tcpproxy import TcpProxy


def test_lock_key_is_a_stable_signed_bigint() -> None:
    # Fixed values: every process and every release must compute the same key for a name.
    assert lock_key("sds-ingest:c1") == -7925826333257736387
    assert lock_key("sds-aggregate-scheduler") == -8150930069668226103
    assert lock_key("a") != lock_key("b")
    assert all(-2**63 <= lock_key(n) < 2**63 for n in ("", "x" * 1000, "é"))


def test_session_lock_is_exclusive_and_found_in_pg_locks(database_url: str) -> None:
    one = SessionLock(database_url, "test-lock", application_name="sds-test-lock", lease=30)
    other = SessionLock(database_url, "test-lock", application_name="sds-test-lock")
    a, b = one.connect(), other.connect()
    try:
        assert a.autocommit and a.info.parameter_status("application_name") == "sds-test-lock"
        assert a.execute("SHOW idle_session_timeout").fetchone() == ("30s",)
        pid = one.try_lock(a)
        assert pid == a.info.backend_pid
        assert other.try_lock(b) is None
        assert one.held_by(a) and one.held_by(b, pid) and not other.held_by(b)
        assert holders(b, "test-lock") == [pid] and holders(b, "other-lock") == []
        one.unlock(a)
        assert other.try_lock(b) == b.info.backend_pid
    finally:
        a.close()
        b.close()
    # Closing the holder's session frees the lock.
    c = one.connect()
    try:
        assert one.try_lock(c) is not None
    finally:
        c.close()


def test_keys_of_either_sign_are_found_by_holders_where(database_url: str) -> None:
    # pg_locks splits a bigint key into two unsigned halves; the lookup must put the sign back.
    for name in ("sds-ingest:c1", "sds-migrate"):
        lock = SessionLock(database_url, name, application_name="sds-test-lock")
        with lock.connect() as conn:
            pid = lock.try_lock(conn)
            assert pid is not None and lock.held_by(conn), name
    assert lock_key("sds-ingest:c1") < 0 < lock_key("sds-migrate")


def test_connect_sets_name_server_parameters_keepalives_and_role(database_url: str) -> None:
    with db.connect(database_url, name="sds-test", autocommit=True, keepalive_probes=2,
                    server={"statement_timeout": 1234}, role=db.ROLE_INGEST) as conn:
        assert conn.autocommit
        assert conn.execute("SHOW statement_timeout").fetchone() == ("1234ms",)
        assert conn.execute("SELECT current_user").fetchone() == (db.ROLE_INGEST,)
        params = conn.info.get_parameters()
        assert params["application_name"] == "sds-test" and params["keepalives_count"] == "2"
    assert db.session_options({"a": 1, "b": "on"}) == "-c a=1 -c b=on"


def test_connect_role_follows_settings(database_url: str) -> None:
    from shared.config import Settings

    off = Settings(database_url=database_url, db_roles=False)
    with db.connect(off, role=db.ROLE_INGEST) as conn:
        assert conn.execute("SELECT current_user = session_user").fetchone() == (True,)
    assert isinstance(conn, psycopg.Connection)


ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("admin", "aggregate", "alerts", "ingest", "serve", "shared", "people", "testbed",
            "client")
# What only the one leadership helper may do: take a lock without waiting, ask who holds it,
# declare its own "lost" exception.
_LEADER_INLINE = re.compile(r"\.try_lock\(|\.held_by\(|^class \w*Lost\b", re.M)


def test_one_leadership_helper_and_one_lost(database_url: str) -> None:
    """The scheduler's, the ingester's and the alert evaluator's leader policies share
    shared.locks.Leadership and its one LeadershipLost (issue 31: three wrappers had three).
    One leader at a time; a guard on another session sees whether the leader still holds the
    lock."""
    from aggregate import leader as scheduler
    from alerts.evaluator import service as evaluator
    from ingest import leader as ingester

    assert scheduler.LeadershipLost is ingester.LeadershipLost is LeadershipLost
    assert evaluator.LeadershipLost is LeadershipLost
    inline = sorted(str(path.relative_to(ROOT)) for package in PACKAGES
                    for path in (ROOT / package).rglob("*.py")
                    if path != ROOT / "shared" / "locks.py"
                    and _LEADER_INLINE.search(path.read_text()))
    assert inline == [], f"leadership handled outside shared.locks.Leadership: {inline}"
    a = Leadership(SessionLock(database_url, "test-leader", application_name="sds-test"))
    b = Leadership(SessionLock(database_url, "test-leader", application_name="sds-test"))
    with psycopg.connect(database_url) as other:
        try:
            with pytest.raises(LeadershipLost, match="not the leader"):
                a.guard(other)
            assert a.try_acquire() and a.held() and a.ping() and a.alive()
            assert not b.try_acquire() and not b.held()
            a.guard(other)  # held: no exception
            a.release(unlock=True)
            assert not a.held() and b.try_acquire()
            a.pid = b.pid if b.pid is None else b.pid + 1  # a stale pid, not the holder's
            with pytest.raises(LeadershipLost, match="no longer held"):
                a.guard(other)
        finally:
            a.release()
            b.release()


def _via(url: str, port: int) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}").geturl()


def _lose_session_on_this_side(leadership: Leadership, proxy: TcpProxy) -> int:
    """Freeze the lock session's path and break its socket here, as the ingester's watchdog
    does in a partition: this side drops it, the server still has it (and the lock)."""
    old = leadership.pid
    assert old is not None and proxy.freeze() == 1
    assert break_connection(leadership.connections()[0])
    assert not leadership.ping() and not leadership.held()
    return old


def test_a_leader_ends_its_own_stale_session_and_takes_the_lock_back(database_url: str) -> None:
    """CI failure of test_database_blackhole_fires_the_write_watchdog: after a partition
    shorter than the lease, the ingester's old lock session still held the lock on the server,
    and the ingester took it for another ingester's and stepped down for good. The leader now
    ends its own previous session (pid and start time, so never someone else's) and goes on."""
    from ingest.leader import Leader

    target = urlsplit(database_url).port
    assert target is not None
    with TcpProxy(target) as proxy, psycopg.connect(database_url, autocommit=True) as watch:
        leader = Leader(_via(database_url, proxy.port), "stale-own", lease=30)
        try:
            leader.confirm()
            old = _lose_session_on_this_side(leader.leadership, proxy)
            assert holders(watch, leader.key) == [old]  # the server still has it
            leader.confirm()  # not LeadershipLost: the lock was this process's own
            assert not leader.lost and leader.fresh()
            assert holders(watch, leader.key) == [leader.leadership.pid] != [old]
            ended = watch.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                                  (old,)).fetchone()
            assert ended == (0,)
        finally:
            leader.release()


def test_a_stale_session_never_lets_a_leader_end_another_process(database_url: str) -> None:
    """Once this process's old session is gone, a lock held by anyone else is not its own:
    the attempt answers False (the ingester's 'lost') and ends nothing."""
    target = urlsplit(database_url).port
    assert target is not None
    lock = SessionLock(database_url, "test-stale-other", application_name="sds-test")
    with TcpProxy(target) as proxy, psycopg.connect(database_url, autocommit=True) as watch:
        mine = Leadership(SessionLock(_via(database_url, proxy.port), "test-stale-other",
                                      application_name="sds-test"))
        other = Leadership(lock)
        try:
            assert mine.try_acquire()
            old = _lose_session_on_this_side(mine, proxy)
            watch.execute("SELECT pg_terminate_backend(%s, 5000)", (old,))
            assert other.try_acquire()
            assert not mine.try_acquire() and not mine.held()
            assert other.alive() and holders(watch, "test-stale-other") == [other.pid]
            assert not mine.try_acquire() and other.alive()  # and it stays that way
        finally:
            mine.release()
            other.release()
