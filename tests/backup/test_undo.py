"""Undo without loss (issue 32; docs/operations.md "Someone ran a bad DELETE"): under ingest,
a bad DELETE removes readings; the live service keeps running and storing. `sds restore
--beside` brings the moment T before the mistake up beside it (another directory and port,
read-only), and `sds copy-back` inserts what the DELETE removed: every deleted row is back,
and every reading acked after T is still there (0 lost), stored once."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psycopg
import pytest

from shared.config import Settings
from testbed.mosquitto import MosquittoBroker
from testbed.pgbackrest import PgBackRestRepo
from testbed.postgres import PostgresServer
from testbed.process import free_port
from tests.support.chaos import chaos_settings
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    Run,
    ledger_check,
    make_site,
    stored_times,
    wait_for,
)
from tests.support.restoring import sds

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.timeout(600),
    pytest.mark.skipif(os.geteuid() != 0, reason="PostgreSQL and pgBackRest run as postgres"),
]


def test_bad_delete_undone_beside_the_live_service(
    archived: tuple[PostgresServer, str, PgBackRestRepo], settings: Settings, tmp_path: Path,
    own_broker: MosquittoBroker, figures: Figures,
) -> None:
    pg, url, repo = archived
    with psycopg.connect(url) as c:
        make_site(c)
    s = chaos_settings(settings.replace(database_url=url), own_broker)
    proc = IngesterProcess(s, tmp_path / "ingest.log").start()
    ledger = Ledger("127.0.0.1", own_broker.port)
    beside = tmp_path / "beside" / "data"
    port = free_port()
    try:
        proc.wait_subscribed(1)
        run = Run(ledger, f"{s.topic_prefix}/A1/readings", 600, 40).start()
        wait_for(lambda: len(stored_times(url)) >= 200, 60, what="a third stored")
        at_t = sorted(stored_times(url))  # committed before T
        with psycopg.connect(url) as c:
            t_mark = c.execute("SELECT clock_timestamp()").fetchone()[0]
        # The mistake, after T, while readings keep arriving: readings stored by T go.
        with psycopg.connect(url) as c:
            deleted = {r[0] for r in c.execute(
                "DELETE FROM calibrated WHERE device = 'A1' AND time = ANY(%s) RETURNING time",
                (at_t[:150],))}
        assert len(deleted) == 150
        wait_for(run.done, 120, what="publishing")
        acked = set(run.acked)
        wait_for(lambda: acked - deleted <= set(stored_times(url)), 60,
                 what="every acked reading but the deleted ones stored")
        # The WAL past T must be in the archive (the archive timeout would ship it within 60 s).
        with psycopg.connect(pg.dsn(), autocommit=True) as c:
            c.execute("SELECT pg_switch_wal()")

        started = time.monotonic()
        result, restore_s = sds(repo, "restore", "--beside", "--to", t_mark.isoformat(),
                                "--target-dir", str(beside), "--port", str(port), url=url)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "paused at" in result.stdout
        # The live service never stopped: the ingester is the same process, still subscribed.
        assert proc.alive()
        copied, _ = sds(repo, "copy-back", "--from-port", str(port), "--table", "calibrated",
                        "--where", "device = 'A1'", url=url)
        assert copied.returncode == 0, copied.stdout + copied.stderr
        undo_s = time.monotonic() - started
        assert f"{len(deleted)} missing here copied back" in copied.stdout, copied.stdout
        rows = stored_times(url)
        assert deleted <= set(rows), f"{len(deleted - set(rows))} deleted rows not back"
        assert acked <= set(rows), f"{len(acked - set(rows))} acked readings missing"
        assert len(rows) == len(set(rows))
        ledger_check(url, run)
        stopped, _ = sds(repo, "restore-beside-stop", "--target-dir", str(beside))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    finally:
        ledger.close()
        proc.kill()
        if (beside / "postmaster.pid").exists():
            sds(repo, "restore-beside-stop", "--target-dir", str(beside))
    figures.record("recovery.undo", {
        "deleted": len(deleted), "back": len(deleted & set(rows)),
        "acked": len(acked), "acked lost": len(acked - set(rows)),
        "restore beside s": round(restore_s, 1), "undo s": round(undo_s, 1),
    }, section="recovery",
        title="A bad DELETE undone beside the live service (sds restore --beside, sds copy-back)",
        target="acked lost 0, every deleted row back", source="tests/backup/test_undo.py")
