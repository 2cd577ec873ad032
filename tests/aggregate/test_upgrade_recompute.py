"""Upgrading to migration 0090 recomputes the stored daily history by itself (issue 22): the
migration marks every daily row dirty and the scheduler's ordinary runs recompute them. A
history written by the old daily function (no lower Rs/Rso bound) and the old hour counts is
corrected by draining the marks as the scheduler does, and the time it takes is measured."""

from __future__ import annotations

import time
from datetime import date, timedelta

import pytest

from admin import migrate
from aggregate import jobs, rollups
from tests.aggregate.weather import Place, day_readings
from tests.support.readings import insert_readings
from tests.support.reference_et import DAILY_TOL, pyet_daily
from tests.support.rollups import fetch, make_location, run_all

DEVICES, DAYS = 12, 14
OVERCAST = Place("brussels_overcast", 50.8, 4.35, "Europe/Brussels", 100.0, date(2024, 7, 1),
                 0.15)


def _migration(version: int) -> str:
    return next(m.sql for m in migrate.available() if m.version == version)


def _old_daily_function() -> str:
    """Migration 0061's daily function, as an installation before 0090 has it."""
    sql = _migration(61)
    body = sql[sql.index("CREATE FUNCTION sds_fao56_daily_et"):]
    return body.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)


def test_upgrade_marks_and_the_scheduler_recomputes_the_history(db, figures) -> None:
    db.execute(_old_daily_function())
    loc = make_location(db, OVERCAST.tz, **OVERCAST.location_fields())
    for d in range(DEVICES):
        for k in range(DAYS):
            place = Place(**{**OVERCAST.__dict__, "day": OVERCAST.day + timedelta(days=k)})
            insert_readings(db, f"UP{d:02d}", loc, day_readings(place), marks=True)
    run_all(db)
    # The old rules' history: et without the lower bound, and hour counts of a missing rain
    # gauge stored as 0 (the old statement's value).
    db.execute("UPDATE daily SET precip_hours = 0 WHERE precip IS NULL")
    before = fetch(db, "SELECT device, time, et, maxt, mint, max_rh, min_rh, wind_speed, swdw"
                       " FROM daily ORDER BY device, time")
    assert len(before) == DEVICES * DAYS

    def reference(row: dict) -> float:
        day = row["time"].astimezone(OVERCAST.day_bounds()[0].tzinfo).date()
        return pyet_daily(tmax=row["maxt"], tmin=row["mint"], rh_max=row["max_rh"],
                          rh_min=row["min_rh"], u2=row["wind_speed"], rs=row["swdw"],
                          lat=OVERCAST.lat, elev=OVERCAST.elev, day=day)

    assert all(r["et"] > reference(r) + 0.1 for r in before), "the old history is wrong"

    db.execute(_migration(90))
    marks = fetch(db, "SELECT count(*) AS n FROM rollup_dirty WHERE rollup = 'daily'")[0]["n"]
    assert marks == len(before)

    started = time.perf_counter()
    done = 0
    while n := rollups.process_marks(db, table="daily", limit=jobs.BATCH,
                                     low_quality_pct=80.0):
        done += n
    seconds = time.perf_counter() - started
    assert done == len(before)

    after = fetch(db, "SELECT * FROM daily ORDER BY device, time")
    for row in after:
        assert row["et"] == pytest.approx(reference(row), abs=DAILY_TOL + 0.005)
        assert row["precip_hours"] is None
    per_1000 = seconds / len(before) * 1000
    year_of_1000 = per_1000 * 365  # 365,000 daily rows
    figures.record("rollup.upgrade_daily_recompute_s_per_1000_rows", round(per_1000, 2),
                   section="rollup",
                   title="Daily rows recomputed after an upgrade that changes a daily rule, "
                         "seconds per 1,000 rows (one worker)",
                   target=f"a year of 1,000 devices (365,000 rows) in under an hour; "
                          f"this run: {year_of_1000 / 60:.0f} min",
                   source="tests/aggregate/test_upgrade_recompute.py")
    assert year_of_1000 < 3600
