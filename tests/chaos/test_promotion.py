"""The promotion drill (docs/operations.md "Hot standby and promotion"): a PostgreSQL primary
with a hot standby fed by streaming replication through a slot, the ingester, the scheduler and
the API all on the two-host URL (`target_session_attrs=read-write`) that deploy/services.sh
writes. Mid-run the primary is lost and the standby promoted; the ledger check then holds on
the promoted server (every PUBACKed reading stored once, nothing invented), the scheduler runs
its jobs there and the API (which read /data from the standby until then) answers from it, none
of them reconfigured or restarted.

Two ways to lose the primary: a crash (stop -m immediate) with the standby synchronous, which
is how services.sh sets it up, and a planned switchover (stop -m fast, which ships all WAL
first) with the standby asynchronous.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from people import accounts
from shared.config import Settings
from testbed.database import as_role
from testbed.mosquitto import MosquittoBroker
from testbed.postgres import PostgresServer
from tests.support.apps import close_app
from tests.support.chaos import chaos_settings
from tests.support.databases import migrate_database
from tests.support.failover import WriteProbe
from tests.support.figures import Figures
from tests.support.ingesting import (
    ROOT,
    IngesterProcess,
    Ledger,
    Run,
    ledger_check,
    make_site,
    settings_env,
    stored_times,
    wait_for,
)

pytestmark = pytest.mark.chaos

SLOT = "sds_standby"


def two_host_url(first: PostgresServer, second: PostgresServer, db: str,
                 attrs: str = "read-write") -> str:
    """The URL services.sh writes when a standby exists, as the login role: read-write, writes
    go to whichever accepts them; prefer-standby, reads go to the standby while it answers."""
    return as_role(f"postgresql://127.0.0.1:{first.port},127.0.0.1:{second.port}/{db}"
                   f"?target_session_attrs={attrs}&connect_timeout=5")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[PostgresServer, PostgresServer]]:
    """A durable primary with a migrated database `ingest` and its hot standby."""
    primary = PostgresServer().start(tmp_path / "primary", durable=True)
    standby = PostgresServer()
    try:
        migrate_database(primary.create_database("ingest"))
        standby.start_standby(primary, tmp_path / "standby", slot=SLOT)
        yield primary, standby
    finally:
        standby.cleanup()
        primary.cleanup()


def _replication(primary: PostgresServer) -> tuple[str, str] | None:
    with psycopg.connect(primary.dsn(), autocommit=True) as c:
        row = c.execute("SELECT state, sync_state FROM pg_stat_replication"
                        " WHERE application_name = %s", (SLOT,)).fetchone()
    return (row[0], row[1]) if row else None


def _crash(primary: PostgresServer) -> None:
    primary.crash()


def _switchover(primary: PostgresServer) -> None:
    primary.stop(mode="fast")


@pytest.mark.timeout(300)
@pytest.mark.parametrize("loss,sync", [(_crash, True), (_switchover, False)],
                         ids=["crash-sync", "switchover-async"])
def test_promotion_drill_loses_no_acked_reading(
    pair: tuple[PostgresServer, PostgresServer], settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures, loss: object, sync: bool,
) -> None:
    primary, standby = pair
    with psycopg.connect(primary.dsn(), autocommit=True) as c:
        c.execute("ALTER SYSTEM SET synchronous_standby_names = %s" % (
            f"'{SLOT}'" if sync else "''"))
        c.execute("SELECT pg_reload_conf()")
    wait_for(lambda: _replication(primary) == ("streaming", "sync" if sync else "async"), 20,
             what="the standby streaming")
    url = two_host_url(primary, standby, "ingest")
    with psycopg.connect(url) as c:
        site = make_site(c)
        uid = accounts.create_user(c, org=site.org, email="drill@example.org",
                                   password="drill-password-1")
        key = accounts.create_api_key(c, user=uid, scopes=["data:read"])["apikey"]
        c.commit()

    s = chaos_settings(settings, own_broker, database_url=url, aggregate_interval=1)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    sched_log = open(tmp_path / "aggregate.log", "ab")
    scheduler = subprocess.Popen([sys.executable, "-m", "aggregate"], cwd=ROOT,
                                 env=settings_env(s.replace(aggregate_metrics_port=0)),
                                 stdout=sched_log, stderr=sched_log)
    from serve import create_app

    # As services.sh configures it: /data read from the standby while it is current.
    read_url = two_host_url(standby, primary, "ingest", "prefer-standby")
    app = create_app(Settings(database_url=url, database_read_url=read_url, metrics_port=0,
                              aggregate_metrics_port=0, db_pool_min=1, db_pool_max=2,
                              cursor_secret="drill", api_rate_limit=0))
    client = app.test_client()
    headers = {"Authorization": f"Apikey {key}"}
    ledger = Ledger("127.0.0.1", own_broker.port)
    probe = WriteProbe(url).start()  # the RTO: the first write through the URL after the loss
    try:
        proc.wait_subscribed(1)
        before = client.get("/api/v2/data/calibrated?device=A1", headers=headers)
        assert before.status_code == 200
        assert before.headers["X-Read-Source"].startswith("standby")
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 600, 120).start()
        wait_for(lambda: len(stored_times(url)) >= 150, 60, what="a quarter stored")
        loss(primary)  # type: ignore[operator]
        lost_at = time.monotonic()
        standby.promote()  # by hand, at once: an operator's reaction time comes on top
        promoted_s = time.monotonic() - lost_at
        promoted_at = datetime.now(UTC)
        promoted = as_role(standby.dsn("ingest"))

        # The ingester finds the promoted server by itself and nothing acked is missing.
        wait_for(run.done, 120, what="publishing")
        ledger_check(promoted, run, timeout=90)
        recovery = time.monotonic() - lost_at
        assert proc.alive(), proc.log()[-3000:]
        assert "database error" in proc.log()
        with psycopg.connect(promoted) as c:
            assert c.execute("SELECT pg_is_in_recovery()").fetchone() == (False,)

        # The scheduler leads again on the promoted server and its jobs run there.
        def jobs_after() -> int:
            with psycopg.connect(promoted) as c:
                return int(c.execute("SELECT count(*) FROM job_runs WHERE ok AND started > %s",
                                     (promoted_at,)).fetchone()[0])

        wait_for(jobs_after, 60, what="a rollup job run on the promoted server")
        assert scheduler.poll() is None

        # The API's pooled connections to the lost primary are found stale when checked out
        # and replaced (shared.db): it answers from the promoted server at once, every stored
        # reading included.
        failed = 0
        deadline = time.monotonic() + 30
        while True:
            r = client.get("/api/v2/data/calibrated?device=A1&limit=1000&start_time="
                           f"{min(run.times).isoformat().replace('+00:00', 'Z')}",
                           headers=headers)
            if r.status_code == 200:
                break
            failed += 1
            assert r.status_code == 503 and time.monotonic() < deadline, r.get_data(True)
            time.sleep(0.2)
        assert len(r.get_json()) == len(run.acked)
        assert r.headers["X-Read-Source"].startswith("primary; ")  # the promoted server
        assert failed == 0  # was one per pooled connection before checkout replaced them
        wait_for(lambda: probe.first_write_after(lost_at) is not None, 30,
                 what="a write after the promotion")
    finally:
        probe.stop()
        ledger.close()
        proc.kill()
        scheduler.terminate()
        scheduler.wait(30)
        sched_log.close()
        close_app(app)  # the primary's pool and the standby's
    rows = stored_times(promoted)
    name = loss.__name__.strip("_")  # type: ignore[attr-defined]
    figures.record(f"delivery.ledger.promotion_{name}",
                   {"acked": len(run.acked), "missing": len(run.acked - set(rows)),
                    "extra": len(rows) - len(set(rows) & run.acked),
                    "stored again s": round(recovery, 1), "api errors": failed},
                   section="delivery",
                   title=f"Primary lost ({name}, standby {'sync' if sync else 'async'}), "
                         "standby promoted mid-run",
                   target="missing 0, extra 0", source="tests/chaos/test_promotion.py")
    figures.record(f"failover.standby_{name}",
                   {"RPO (acked readings lost)": len(run.acked - set(rows)),
                    "promote s": round(promoted_s, 1),
                    "first write s": probe.first_write_after(lost_at)},
                   section="failover",
                   title=f"Standby profile (standby {'sync' if sync else 'async'}), primary lost "
                         f"({name}), promoted by hand at once: RTO = first write s plus the "
                         "operator's reaction",
                   target="RPO 0", source="tests/chaos/test_promotion.py")
