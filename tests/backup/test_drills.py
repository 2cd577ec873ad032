"""The restore drills (issue 25; docs/operations.md "Backups and restore"), on a durable
PostgreSQL archiving to a pgBackRest repository set up as deploy/services.sh sets one up
(testbed PgBackRestRepo, the configuration from shared/backup.py), the real ingester and a real
mosquitto, with restores done by the operator's command, `sds restore`.

1. Point in time: ingest under load, note T once every reading acked so far is stored, make a
   destructive mistake (drop the readings' chunks), restore to T into a fresh data directory
   and start on it: every reading acked before T is there, the mistake undone, ingest resumes.
2. The disk lost: under ingest, the server dies and its data directory is removed; restore the
   newest backup plus the archived WAL into the same place, let the ingester (which kept
   retrying) catch up, and count the PUBACKed readings that are gone: the default profile's RPO,
   bounded by archive_timeout (SDS_BACKUP_ARCHIVE_TIMEOUT). Restore and recovery times: RTO.
3. A backup that fails verification (tests/backup/test_verify.py).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.database import as_role
from testbed.mosquitto import MosquittoBroker
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from tests.support.chaos import chaos_settings
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    Run,
    iso,
    ledger_check,
    make_site,
    now_slot,
    stored_times,
    wait_for,
)
from tests.support.restoring import sds, start_restored, switch_and_stop

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]

def db_now(url: str) -> datetime:
    with psycopg.connect(url) as c:
        row = c.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0]


def test_point_in_time_restore_undoes_a_mistake(
    archived: tuple[PostgresServer, str, PgBackRestRepo], settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    pg, url, repo = archived
    with psycopg.connect(url) as c:
        make_site(c)
    s = chaos_settings(settings.replace(database_url=url), own_broker)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    ledger = Ledger("127.0.0.1", own_broker.port)
    restored: PostgresServer | None = None
    try:
        proc.wait_subscribed(1)
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 900, 60).start()
        wait_for(lambda: len(stored_times(url)) >= 300, 60, what="a third stored")
        # T: a moment by which every reading acked so far is committed.
        before_t = set(run.acked)
        wait_for(lambda: before_t <= set(stored_times(url)), 60, what="the acked ones stored")
        t_mark = db_now(url)
        after_t = set(stored_times(url))  # what was committed by T, and a little more
        time.sleep(0.5)
        wait_for(run.done, 120, what="publishing")
        ledger_check(url, run)
        # The mistake: every chunk of the readings' hypertable dropped.
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("SELECT drop_chunks('calibrated', older_than => now() + interval '1 year')")
        assert stored_times(url) == []
        proc.terminate()
        switch_and_stop(pg)

        target = tmp_path / "restored"
        result, restore_s = sds(repo, "restore", "--to", t_mark.isoformat(),
                                "--target-dir", str(target / "data"))
        assert result.returncode == 0, result.stdout + result.stderr
        assert "replays archived WAL up to" in result.stdout
        restored, recovery_s = start_restored(target)
        restored_url = as_role(restored.dsn("ingest"))
        rows = stored_times(restored_url)
        assert before_t <= set(rows), f"{len(before_t - set(rows))} acked before T missing"
        assert len(rows) == len(set(rows)) and set(rows) <= set(run.times)
        # The restore stopped at T: what came later (publishing went on) is not there.
        assert set(rows) <= after_t and len(rows) < len(run.acked)

        # Ingest resumes on the restored server: new readings are stored.
        proc2 = IngesterProcess(s.replace(database_url=restored_url),
                                tmp_path / "ingest2.log").start()
        try:
            proc2.wait_subscribed(1)
            # On the 5-minute grid, older than every reading of the run.
            fresh = [min(run.times) - timedelta(minutes=5 * i) for i in range(1, 21)]
            for i, t in enumerate(fresh):
                body = json.dumps({"time": iso(t), "tair": 12.0 + i % 5}).encode()
                assert ledger.publish(f"{s.topic_prefix}/A1/readings", body)
            wait_for(lambda: set(fresh) <= set(stored_times(restored_url)), 60,
                     what="readings after the restore stored")
        finally:
            proc2.kill()
    finally:
        ledger.close()
        proc.kill()
        if restored is not None:
            restored.cleanup()
    figures.record("recovery.pitr", {
        "acked before T": len(before_t), "missing": len(before_t - set(rows)),
        "restore s": round(restore_s, 1), "recovery s": round(recovery_s, 1),
    }, section="recovery",
        title="Point-in-time restore (default profile): chunks dropped by mistake, restored to "
              "T into a fresh data directory, ingest resumed",
        target="missing 0", source="tests/backup/test_drills.py")


class AckTimes:
    """A device publishing readings at `rate` per second until stopped, recording when each
    was PUBACKed (wall clock)."""

    def __init__(self, ledger: Ledger, topic: str, rate: float) -> None:
        self.ledger, self.topic, self.rate = ledger, topic, rate
        self.t0 = now_slot(10)
        self.acked: dict[datetime, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._publish, daemon=True)

    def _publish(self) -> None:
        i = 0
        while not self.stop.is_set():
            t = self.t0 - timedelta(minutes=5 * i)
            body = json.dumps({"time": iso(t), "tair": 10.0 + i % 7}).encode()
            give_up = time.monotonic() + 60
            while time.monotonic() < give_up and not self.stop.is_set():
                if self.ledger.publish(self.topic, body, timeout=2.0):
                    self.acked[t] = time.time()
                    break
                time.sleep(0.1)
            i += 1
            time.sleep(1 / self.rate)

    def start(self) -> AckTimes:
        self.thread.start()
        return self


# The drill at a scaled archive_timeout: 20 s instead of the shipped 60 (it is a setting,
# SDS_BACKUP_ARCHIVE_TIMEOUT), with more than one archive_timeout of ingest before the disk goes.
# The scenario and its bound are the same in units of archive_timeout; the load phase is 25 s
# instead of 75 s.
ARCHIVE_TIMEOUT = 20
LOAD_SECONDS = 25.0


def test_disk_lost_restore_latest_counts_the_rpo(
    archived: tuple[PostgresServer, str, PgBackRestRepo], settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    pg, url, repo = archived
    timeout = ARCHIVE_TIMEOUT
    with psycopg.connect(as_role(url, "postgres"), autocommit=True) as c:
        c.execute(f"ALTER SYSTEM SET archive_timeout = {timeout}")
        c.execute("SELECT pg_reload_conf()")
        # The reload reaches the server's processes asynchronously.
        wait_for(lambda: c.execute("SHOW archive_timeout").fetchone() == (f"{timeout}s",), 10,
                 what="the new archive_timeout in effect")
    with psycopg.connect(url) as c:
        make_site(c)
    s = chaos_settings(settings.replace(database_url=url), own_broker)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    ledger = Ledger("127.0.0.1", own_broker.port)
    restored: PostgresServer | None = None
    load = AckTimes(ledger, f"{s.topic_prefix}/A1/readings", 20.0)
    try:
        proc.wait_subscribed(1)
        load.start()
        time.sleep(LOAD_SECONDS)
        # The disk is lost: the server dies (no shutdown, no last archive) and its data is gone.
        pg.crash()
        lost_at = time.time()
        shutil.rmtree(pg.data_dir)
        load.stop.set()
        load.thread.join(30)
        acked = dict(load.acked)

        result, restore_s = sds(repo, "restore")  # into the configured (now empty) directory
        assert result.returncode == 0, result.stdout + result.stderr
        assert "delta" not in result.stdout
        restored, recovery_s = start_restored(pg.base_dir, port=pg.port)
        # The ingester kept retrying the same URL: it stores what the broker still queued.
        settle: list[int] = []

        def settled() -> bool:
            settle.append(len(stored_times(url)))
            return len(settle) > 25 and settle[-1] == settle[-25]

        wait_for(settled, 120, every=0.2, what="the ingester to catch up")
        rows = stored_times(url)
    finally:
        load.stop.set()
        ledger.close()
        proc.kill()
        if restored is not None:
            restored.stop()
    lost = {t: at for t, at in acked.items() if t not in set(rows)}
    assert len(rows) == len(set(rows)), "a reading stored twice"
    # The honest bound: only readings acked within one archive_timeout (plus the time to push a
    # segment) before the loss may be gone; everything older was in an archived segment.
    window = max((lost_at - at for at in lost.values()), default=0.0)
    assert window <= timeout + 15, f"{len(lost)} lost, oldest acked {window:.0f} s before"
    figures.record("recovery.disk_lost", {
        "acked": len(acked), "lost": len(lost),
        "lost window s": round(window, 1), "archive_timeout s": timeout,
        "restore s": round(restore_s, 1), "recovery s": round(recovery_s, 1),
    }, section="recovery",
        title="Data directory lost under ingest (default profile): newest backup plus archived "
              "WAL restored; acked readings lost (RPO) and restore + recovery time (RTO)",
        target=f"lost only within archive_timeout ({timeout} s) of the loss",
        source="tests/backup/test_drills.py")


def test_restore_refuses_a_running_cluster(
    archived: tuple[PostgresServer, str, PgBackRestRepo],
) -> None:
    pg, _url, repo = archived
    result, _ = sds(repo, "restore")
    assert result.returncode == 1
    assert "refusing to overwrite a running cluster" in result.stderr
    assert pg.is_running() and (pg.data_dir / "PG_VERSION").exists()
    with psycopg.connect(pg.dsn()) as c:
        assert c.execute("SELECT 1").fetchone() == (1,)
