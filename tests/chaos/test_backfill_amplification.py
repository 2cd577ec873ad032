"""Per-device recompute amplification and the lateness horizon, end to end through the ingester
(reliability plan R22, R23).

Live devices stream their last hour while one device backfills 20 days: the dirty marks, and so
the buckets the rollup recomputes, must be exactly the buckets holding the new readings (the
backfilling device's history, each live device's current hour and day), never other devices'
history. A single late reading costs one bucket per rollup table; a reading older than the
horizon is quarantined as too_old.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from aggregate import rollups
from shared.config import Settings
from shared.dirty import bucket_marks
from shared.timeutil import zone
from tests.support.chaos import slots
from tests.support.figures import Figures
from tests.support.ingesting import Ledger, RunningIngester, drop_session, iso, make_site, wait_for
from tests.support.rollups import run_all

pytestmark = pytest.mark.chaos

LIVE = [f"L{i}" for i in range(5)]
BACKFILL = "B1"
DAYS = 20
TZ = "America/Chicago"


def _publish(ledger: Ledger, prefix: str, device: str, times: list[datetime]) -> None:
    """One message per day of readings (a device's backlog upload), QoS 1, PUBACK required."""
    for start in range(0, len(times), 288):
        body = json.dumps([{"time": iso(t), "tair": 12.0 + i % 5}
                           for i, t in enumerate(times[start:start + 288])]).encode()
        assert ledger.publish(f"{prefix}/{device}/readings", body)


def _marks(conn: psycopg.Connection) -> set[tuple[str, str, datetime]]:
    return {(r[0], r[1], r[2]) for r in conn.execute(
        "SELECT rollup, device, bucket FROM rollup_dirty")}


def _stamps(conn: psycopg.Connection) -> dict[tuple[str, str, datetime], Any]:
    out = {}
    for table in rollups.TABLE_ORDER:
        for device, time, updated in conn.execute(
                f"SELECT device, time, update_time FROM {table}"):
            out[(table, device, time)] = updated
    return out


def _count(conn: psycopg.Connection, sql: str, *args: Any) -> int:
    return int(conn.execute(sql, args).fetchone()[0])


def test_backfill_recomputes_only_its_own_buckets(
    conn: psycopg.Connection, settings: Settings, broker: Any, figures: Figures,
) -> None:
    for device in [*LIVE, BACKFILL]:
        make_site(conn, device=device, tz=TZ)
    tz = zone(TZ)
    s = settings.replace(mqtt_host="127.0.0.1", mqtt_port=broker.port, mqtt_username=None,
                         mqtt_password=None, mqtt_client_id="ing-r23", topic_prefix="r23",
                         ingest_flush_interval=0.1)
    # Polling goes through its own autocommit session: a transaction left open across the
    # ingester's inserts would not see the chunks TimescaleDB creates for the backfill
    # (observed here: count(*) stuck at the rows of the chunks it had already touched).
    watch = psycopg.connect(conn.info.dsn, autocommit=True)
    run = RunningIngester(s).start()
    ledger = Ledger("127.0.0.1", broker.port)
    recent = slots(24, minutes_ago=0)  # the last two hours, newest first
    earlier, current = recent[12:], recent[:12]
    history = [t for t in slots(DAYS * 288, minutes_ago=0) if t < earlier[-1]]
    late_one = history[3 * 288]  # left out of the backfill, sent alone afterwards
    backfill = [t for t in history if t != late_one]
    try:
        # Baseline: every device's previous hour, rolled up, no marks left.
        for device in [*LIVE, BACKFILL]:
            _publish(ledger, s.topic_prefix, device, earlier)
        wait_for(lambda: _count(watch, "SELECT count(*) FROM calibrated") == 6 * 12,
                 what="baseline stored")
        conn.commit()
        run_all(conn)
        conn.commit()
        before = _stamps(conn)
        conn.commit()

        # The live devices send their current hour while B1 uploads 20 days.
        for device in LIVE:
            _publish(ledger, s.topic_prefix, device, current)
        _publish(ledger, s.topic_prefix, BACKFILL, backfill)
        expected = 6 * 12 + 5 * 12 + len(backfill)
        wait_for(lambda: _count(watch, "SELECT count(*) FROM calibrated") == expected, 60,
                 what="backfill and live readings stored")
        conn.commit()
        marks = _marks(conn)
        want = bucket_marks(BACKFILL, backfill, tz)
        for device in LIVE:
            want |= bucket_marks(device, current, tz)
        assert marks == want  # nothing but the buckets of the new readings
        claimed = run_all(conn)
        conn.commit()
        assert claimed == len(want)
        after = _stamps(conn)
        changed = {k for k in after if after[k] != before.get(k)}
        assert {(t, d, b) for t, d, b in changed} <= want
        # No baseline bucket of another device was rewritten.
        touched_history = {k for k in changed if k in before and k[1] != BACKFILL
                           and k not in want}
        assert not touched_history
        per_live = {d: len([m for m in want if m[1] == d]) for d in LIVE}
        assert max(per_live.values()) <= 6  # at most 2 hours x 2 + 2 days around midnight
        backfill_marks = len([m for m in want if m[1] == BACKFILL])

        # One late reading three days back: one bucket per rollup table.
        _publish(ledger, s.topic_prefix, BACKFILL, [late_one])
        wait_for(lambda: _count(watch, "SELECT count(*) FROM calibrated WHERE time = %s",
                                late_one), what="the late reading stored")
        conn.commit()
        assert _marks(conn) == bucket_marks(BACKFILL, [late_one], tz)
        before = _stamps(conn)
        conn.commit()
        single = run_all(conn)
        conn.commit()
        after = _stamps(conn)
        assert single == 3
        assert len({k for k in after if after[k] != before.get(k)}) == 3

        # Older than the horizon (SDS_INGEST_HORIZON_DAYS): quarantined, not stored.
        too_old = slots(1)[0] - timedelta(days=settings.ingest_horizon_days + 1)
        _publish(ledger, s.topic_prefix, BACKFILL, [too_old])
        wait_for(lambda: _count(watch, "SELECT count(*) FROM quarantine WHERE reason = "
                                "'too_old'"), what="the too-old reading quarantined")
        conn.commit()
        assert _count(watch, "SELECT count(*) FROM calibrated WHERE time = %s", too_old) == 0
        assert not _marks(conn)
    finally:
        watch.close()
        ledger.close()
        run.stop()
        drop_session(s)
    figures.record("rollup.per_late_reading", single, section="rollup",
                   title="Buckets recomputed for one late reading (3 days late, through the "
                         "ingester) (R23)",
                   target="3 (hourly, local_hourly, daily)",
                   source="tests/chaos/test_backfill_amplification.py")
    figures.record("rollup.backfill_amplification",
                   {"backfilled readings": len(backfill), "its buckets recomputed":
                    backfill_marks, "per reading": round(backfill_marks / len(backfill), 3),
                    "per live device": max(per_live.values()),
                    "other devices' history rewritten": 0},
                   section="rollup",
                   title=f"One device backfills {DAYS} days while {len(LIVE)} stream (R23)",
                   target="only that device's buckets; live devices unaffected",
                   source="tests/chaos/test_backfill_amplification.py")
    figures.record("rollup.horizon", f"{settings.ingest_horizon_days} days; older readings "
                   "quarantined as too_old (not stored, no marks)", section="rollup",
                   title="Lateness horizon (R22)", target="documented, enforced",
                   source="tests/chaos/test_backfill_amplification.py")
