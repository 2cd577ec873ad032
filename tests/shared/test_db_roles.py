"""shared.db: role switching on connect, per-checkout request scope, and the off switch."""

from __future__ import annotations

from uuid import uuid4

import psycopg

from shared import db
from shared.config import Settings


def test_role_for_follows_the_setting() -> None:
    assert db.role_for(Settings(), db.ROLE_API) == db.ROLE_API
    assert db.role_for(Settings(db_roles=False), db.ROLE_API) is None
    assert db.role_for(Settings(), None) is None


def test_request_scope_sets_role_and_org_and_leaves_the_connection_idle(
        database_url: str) -> None:
    org = uuid4()
    with psycopg.connect(database_url) as conn:
        db.set_request_scope(conn, db.ROLE_API, org)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not conn.autocommit
        row = conn.execute("SELECT current_user, sds_request_org()").fetchone()
        assert row == (db.ROLE_API, org)
        conn.rollback()  # session-level: survives the end of a transaction
        db.set_request_scope(conn, db.ROLE_AUTH, None)
        assert conn.execute("SELECT current_user, sds_request_org()").fetchone() == (
            db.ROLE_AUTH, None)


def test_pool_sets_role_on_connect_and_runs_checkout_per_connection(
        database_url: str) -> None:
    settings = Settings(database_url=database_url, db_pool_min=1, db_pool_max=1)
    orgs = iter([uuid4(), uuid4()])
    seen: list[object] = []

    def checkout(conn: psycopg.Connection) -> None:
        org = next(orgs)
        seen.append(org)
        db.set_request_scope(conn, None, org)

    pool = db.make_pool(settings, name="db-roles-test", role=db.ROLE_API, checkout=checkout)
    try:
        for _ in range(2):
            with pool.connection() as conn:
                row = conn.execute("SELECT current_user, sds_request_org()").fetchone()
                assert row == (db.ROLE_API, seen[-1])
    finally:
        pool.close()
    assert len(seen) == 2


def test_checkout_pool_replaces_connections_whose_server_went_away(settings: Settings) -> None:
    """Every pooled session ended by the server (as when the primary is lost and a standby
    promoted): the next checkouts get new connections without an error."""
    pool = db.make_pool(settings.replace(db_pool_min=2, db_pool_max=2), name="stale-test",
                        role=db.ROLE_API,
                        checkout=lambda conn: db.set_request_scope(conn, None, None))
    try:
        pids = set()
        with pool.connection() as a, pool.connection() as b:
            pids = {a.info.backend_pid, b.info.backend_pid}
        with psycopg.connect(settings.database_url, autocommit=True) as admin:
            for pid in pids:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(3):
            with pool.connection() as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)
                assert conn.info.backend_pid not in pids
    finally:
        pool.close()
