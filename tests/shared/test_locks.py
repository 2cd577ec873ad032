"""shared.locks: one key scheme, exclusive session locks, and the pg_locks lookup that finds
the holder (used by the scheduler's guard and `sds aggregate status`)."""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from shared import db
from shared.locks import Leadership, LeadershipLost, SessionLock, holders, lock_key


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
