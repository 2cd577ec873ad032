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
