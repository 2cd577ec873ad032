"""The scheduler after a database switch (issue 32): its pooled connections point at a server
that restarted (as after a restore or a promotion); the next round's jobs run on fresh
connections instead of failing once on the stale ones."""

from __future__ import annotations

import pytest

from aggregate import jobs
from aggregate.__main__ import scheduler_pool
from shared.config import Settings
from testbed.postgres import PostgresServer

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(180)]


def test_first_round_after_a_restart_does_not_fail(
    own_pg: tuple[PostgresServer, str], settings: Settings,  # noqa: F811  fixture
) -> None:
    pg, url = own_pg
    s = settings.replace(database_url=url, db_pool_min=2, db_pool_max=2)
    pool = scheduler_pool(s)
    try:
        pool.wait(30)
        for table in ("hourly", "daily"):
            jobs.run_job(pool, s, table=table)
        pg.restart()
        # Every pooled connection is stale now; the round must not fail on any of them.
        for table in ("hourly", "daily", "hourly"):
            jobs.run_job(pool, s, table=table)
    finally:
        pool.close()
