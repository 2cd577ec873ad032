"""Late and out-of-order readings, duplicated, with rollup runs in between: after a final run
every rollup table equals a pure-Python reference over the raw rows (reliability plan R21)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.aggregate import reference
from tests.support.readings import insert_readings
from tests.support.rollups import fetch, make_location, run_all

BASE = datetime(2024, 4, 6, 10, 0, tzinfo=UTC)  # Lord Howe falls back 2024-04-06 15:00Z
ZONE = "Australia/Lord_Howe"

step = st.one_of(
    st.tuples(st.just("insert"), st.integers(0, 24 * 12 * 3 - 1),
              st.floats(-10, 40, allow_nan=False).map(lambda v: round(v, 2))),
    st.tuples(st.just("run"), st.just(0), st.just(0.0)),
)


def _reference(rows: dict[datetime, float], tz: ZoneInfo
               ) -> tuple[list[tuple[int, float, float, float]], ...]:
    """(count, sum, min, max) per bucket of each table, by zoneinfo over the raw rows."""
    hourly, local, daily = defaultdict(list), defaultdict(list), defaultdict(list)
    for t, v in rows.items():
        hourly[t.replace(minute=0)].append(v)
        lt = t.astimezone(tz)
        local[(lt.replace(minute=0, tzinfo=None), lt.utcoffset())].append(v)
        daily[lt.date()].append(v)
    def summary(groups: dict) -> list[tuple[int, float, float, float]]:
        return [(len(g), sum(g), min(g), max(g)) for g in groups.values()]

    return summary(hourly), summary(local), summary(daily)


def test_any_order_of_late_inserts_and_runs_matches_the_reference(database_url, figures) -> None:
    totals = {"examples": 0, "buckets": 0, "mismatched": 0, "marks left": 0}

    @settings(max_examples=15, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(steps=st.lists(step, min_size=1, max_size=25))
    def check(steps) -> None:  # type: ignore[no-untyped-def]
        with psycopg.connect(database_url) as db:
            for table in ("calibrated", "hourly", "local_hourly", "daily", "rollup_dirty"):
                db.execute(f"DELETE FROM {table}")
            row = db.execute("SELECT id FROM locations WHERE tz_name = %s", (ZONE,)).fetchone()
            loc = row[0] if row else make_location(db, ZONE)
            stored: dict[datetime, float] = {}
            for kind, slot, value in steps:
                if kind == "insert":
                    t = BASE + timedelta(minutes=5 * slot)
                    insert_readings(db, "P1", loc, [{"time": t, "tair": value}], marks=True)
                    stored.setdefault(t, value)  # first write wins, like ingest
                else:
                    run_all(db)
                db.commit()
            run_all(db)
            db.commit()
            got = []
            for table in ("hourly", "local_hourly", "daily"):
                col = "meant" if table == "daily" else "tair"
                rows = fetch(db, f"SELECT {col} AS mean, maxt, mint FROM {table} ORDER BY time")
                got.append(rows)
            left = reference.marks_left(db)
            wrong = reference.mismatches(db)
            buckets = reference.bucket_count(db)
        totals["examples"] += 1
        totals["buckets"] += buckets
        totals["mismatched"] += len(wrong)
        totals["marks left"] += left
        assert left == 0
        assert not wrong, sorted(wrong.items(), key=str)[:5]
        ref = _reference(stored, ZoneInfo(ZONE))
        for rows, expected in zip(got, ref, strict=True):
            mine = sorted((r["mint"], r["maxt"], r["mean"]) for r in rows)
            theirs = sorted((e[2], e[3], e[1] / e[0]) for e in expected)
            assert len(mine) == len(theirs)
            for a, b in zip(mine, theirs, strict=True):
                assert a == pytest.approx(b, abs=0.005 + 1e-4)  # rounded to 0.01 at write

    check()
    assert totals["examples"] >= 1 and totals["buckets"] > 0
    figures.record("rollup.reference_mismatch",
                   {"mismatched buckets": totals["mismatched"],
                    "marks left": totals["marks left"], "buckets compared": totals["buckets"],
                    "sequences": totals["examples"]},
                   section="rollup",
                   title="Rollup buckets mismatching the reference after the final run; dirty "
                         "marks left after quiescence (R21: hypothesis sequences of late, "
                         "duplicated inserts and runs, Lord Howe DST)",
                   target="0; 0", source="tests/aggregate/test_property.py")
