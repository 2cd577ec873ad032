"""Python and PostgreSQL agree on every zone's UTC offset (reliability plan R28).

Rollups bucket in SQL (`AT TIME ZONE`), dirty marks and the API's windows in Python (zoneinfo).
If the two tz databases differ (OS tzdata, the Python `tzdata` package, PostgreSQL's own
copy), readings would be marked dirty in one bucket and rolled up in another. For the demo
zones and the plan's DST zones, every 15-minute instant of 2024-2026 is compared: one query
per zone returns the offsets, Python computes its own.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from admin.demo import DEMO_SITES
from shared.timeutil import zone
from tests.support.figures import Figures

pytestmark = pytest.mark.chaos

PLAN_ZONES = ("America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham",
              "Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns", "America/Santiago")
ZONES = sorted({site[2] for site in DEMO_SITES} | set(PLAN_ZONES))
START = datetime(2024, 1, 1, tzinfo=UTC)
END = datetime(2027, 1, 1, tzinfo=UTC)
STEP = timedelta(minutes=15)


def test_zoneinfo_and_postgres_offsets_agree(conn: psycopg.Connection, figures: Figures) -> None:
    steps = int((END - START) / STEP)
    checked = 0
    disagreements: dict[str, list[str]] = {}
    for name in ZONES:
        row = conn.execute(
            "SELECT array_agg(extract(epoch FROM (t AT TIME ZONE %s) - (t AT TIME ZONE 'UTC'))"
            "::int ORDER BY t) FROM generate_series(%s::timestamptz, %s::timestamptz"
            " - interval '1 microsecond', %s::interval) AS t",
            (name, START, END, STEP)).fetchone()
        pg_offsets = row[0]
        assert len(pg_offsets) == steps
        tz = zone(name)  # exactly what dirty marks and the API use
        bad = []
        for i, pg_seconds in enumerate(pg_offsets):
            t = START + i * STEP
            offset = t.astimezone(tz).utcoffset()
            assert offset is not None
            if int(offset.total_seconds()) != pg_seconds:
                bad.append(f"{t:%Y-%m-%dT%H:%MZ}: python {offset}, postgres {pg_seconds} s")
        if bad:
            disagreements[name] = bad[:3]
        checked += len(pg_offsets)
    assert not disagreements, disagreements
    # The comparison is not vacuous: the zones do change offset in this period.
    assert conn.execute("SELECT count(DISTINCT extract(epoch FROM (t AT TIME ZONE"
                        " 'Australia/Lord_Howe') - (t AT TIME ZONE 'UTC'))) FROM"
                        " generate_series('2024-01-01'::timestamptz, '2025-01-01', '1 day') t"
                        ).fetchone()[0] == 2
    figures.record("time.zone_agreement", f"{checked:,} instants x zone, {len(ZONES)} zones, "
                   "0 disagreements", section="time",
                   title="zoneinfo utcoffset vs PostgreSQL AT TIME ZONE, every 15 min of "
                         "2024-2026 (R28)",
                   target="0 disagreements", source="tests/chaos/test_zone_agreement.py")
