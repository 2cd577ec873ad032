"""Quarantine retention and the operator's purge (issue 11, finding 3: no purge, no retention).

The ingester deletes rows older than SDS_QUARANTINE_RETENTION_DAYS through the database function
sds_quarantine_purge, as its own role (which may still not DELETE directly:
tests/security/test_rls.py); `sds quarantine purge|stats` work as the database owner.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import errors

from admin.cli import main
from ingest import quarantine
from shared import db
from shared.config import Settings
from tests.support.figures import Figures
from tests.support.ingesting import (
    IngesterProcess,
    Ledger,
    RunningIngester,
    Site,
    count,
    iso,
    now_slot,
    topic,
    wait_for,
)

AGES_DAYS = {"A1": [0.1, 2, 29, 31, 400], "A2": [0.5, 40], None: [45]}


def _fill(conn: psycopg.Connection) -> None:
    now = datetime.now(UTC)
    for device, ages in AGES_DAYS.items():
        for age in ages:
            conn.execute(
                "INSERT INTO quarantine (received_at, topic, device, reason, detail, payload)"
                " VALUES (%s, %s, %s, %s, 'test', 'x')",
                (now - timedelta(days=age), f"sensors/{device or 'zz'}/readings", device,
                 "bad_json" if age < 35 else "bad_shape"))
    conn.commit()


def _ages(conn: psycopg.Connection) -> list[int]:
    conn.rollback()
    return sorted(int(r[0]) for r in conn.execute(
        "SELECT extract(day FROM now() - received_at) FROM quarantine"))


def test_retention_pass_as_the_ingest_role(conn: psycopg.Connection, settings: Settings,
                                           ) -> None:
    _fill(conn)
    retention = quarantine.Retention(settings.replace(quarantine_retention_days=30))
    assert retention.run_once() == 4  # 31, 400, 40 and 45 days
    assert _ages(conn) == [0, 0, 2, 29]
    # The function is the ingest role's only way to delete, and it keeps at least a day.
    with psycopg.connect(settings.database_url, autocommit=True) as c:
        db.set_role(c, db.ROLE_INGEST)
        with pytest.raises(errors.RaiseException, match="at least 1 day"):
            c.execute("SELECT sds_quarantine_purge(0, 10)")
        with pytest.raises(errors.InsufficientPrivilege):
            c.execute("DELETE FROM quarantine")


def test_ingester_applies_retention_while_leading(
    conn: psycopg.Connection, mqtt_settings: Settings, monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(conn)
    monkeypatch.setattr(quarantine, "RETENTION_FIRST", 0.2)
    run = RunningIngester(mqtt_settings.replace(quarantine_retention_days=30)).start()
    try:
        wait_for(lambda: run.metric("sds_ingest_quarantine_purged_total") == 4,
                 what="retention pass")
        assert _ages(conn) == [0, 0, 2, 29]
    finally:
        run.stop()


def test_retention_off(conn: psycopg.Connection, mqtt_settings: Settings,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(conn)
    monkeypatch.setattr(quarantine, "RETENTION_FIRST", 0.1)
    run = RunningIngester(mqtt_settings.replace(quarantine_retention_days=0)).start()
    try:
        time.sleep(1.0)  # ten times the first pass's delay
        assert len(_ages(conn)) == 8
    finally:
        run.stop()


def test_purge_and_stats_commands(conn: psycopg.Connection, database_url: str) -> None:
    _fill(conn)
    runner = CliRunner()
    env = {"SDS_DATABASE_URL": database_url}

    def sds(*args: str) -> str:
        result = runner.invoke(main, list(args), env=env, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    out = sds("quarantine", "purge", "--older-than-days", "1", "--device", "A1", "--dry-run")
    assert out.startswith("would delete 4 quarantine rows") and "of device A1" in out
    assert len(_ages(conn)) == 8
    assert "deleted 1 " in sds("quarantine", "purge", "--older-than-days", "1", "--device",
                               "A1", "--reason", "bad_shape")
    assert _ages(conn) == [0, 0, 2, 29, 31, 40, 45]
    stats = sds("quarantine", "stats")
    assert "A1" in stats and "A2" in stats and "bad_json" in stats
    assert "deleted 6 " in sds("quarantine", "purge", "--older-than-days", "0.2")
    assert _ages(conn) == [0]
    bad = runner.invoke(main, ["quarantine", "purge"], env=env)
    assert bad.exit_code == 2 and "--older-than-days" in bad.output


def test_redelivered_bad_message_is_quarantined_once(
    conn: psycopg.Connection, site: Site, mqtt_settings: Settings, publisher: Ledger,
    tmp_path: Path, figures: Figures,
) -> None:
    """The ingester commits a batch's quarantine rows, then dies before its acks (SIGKILL at
    after_commit_before_ack): the broker redelivers the messages (DUP) to the next process,
    which stores their readings once (the key) and adds no second quarantine row (the
    message digest)."""
    readings = topic(mqtt_settings, site.device)
    proc = IngesterProcess(mqtt_settings, tmp_path / "ingest.log")
    proc.start(fault_at="after_commit_before_ack", fault_every=1)
    proc.wait_subscribed(1)
    mixed = json.dumps([{"time": iso(now_slot(10)), "tair": 1.0},
                        {"time": iso(now_slot(15)), "tair": 999.0}]).encode()
    try:
        assert publisher.publish(readings, b"not json")
        assert publisher.publish(readings, mixed)
        proc.wait_exit(30)  # killed by its fault hook right after the commit
        rows_before = count(conn, "SELECT count(*) FROM quarantine")
        assert rows_before >= 1
        proc.start()
        wait_for(lambda: "quarantine rows were already there" in proc.log(), 30,
                 what="the redelivered batch")
        wait_for(lambda: count(conn, "SELECT count(*) FROM calibrated") == 1, 30,
                 what="the good reading")
        time.sleep(0.5)
        by_reason = dict(conn.execute(
            "SELECT reason, count(*) FROM quarantine GROUP BY reason").fetchall())
    finally:
        proc.terminate()
    skipped = sum(int(n) for n in re.findall(r"(\d+) quarantine rows were already there",
                                             proc.log()))
    assert by_reason == {"bad_json": 1, "out_of_range": 1}
    assert skipped >= rows_before  # what the first process committed came again, suppressed
    figures.record("security.redelivered_quarantine", {
        "rows after the crash": rows_before, "redelivered rows suppressed": skipped,
        "rows in the end": sum(by_reason.values())}, section="security",
        title="Bad messages committed to quarantine, ingester SIGKILLed before its acks, "
              "redelivered (DUP) to the next process",
        target="each quarantined once (message digest)",
        source="tests/ingest/test_quarantine_ops.py")
