"""The one-pass rollups (partials per cell, merged into every table) against the per-table
implementation they replaced, on the zone and DST scenarios (tests/aggregate/scenarios.py):
every value equal to the old one rounded to its column's precision, incrementally and by
backfill."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from aggregate import jobs
from shared.columns import TABLES, Rollup
from shared.units import stored_decimals
from tests.aggregate import scenarios
from tests.support.readings import insert_readings, series
from tests.support.rollups import run_all

GOLDEN = json.loads(Path(__file__).with_name("golden_rollups.json").read_text())
ET_RULES = (Rollup.ET, Rollup.ETC, Rollup.WATER_BALANCE)


def _changed_by_issue_22(table: str, name: str, row: dict[str, Any]) -> bool:
    """Values whose rule issue 22 or 35 changed, held by their own tests instead of the golden
    file: a partial day's ET (the sum of its hours, tests/aggregate/test_partial_day.py), a
    gap day's ET, and an hour count or gdd whose source has no value (NULL, not 0,
    test_hour_counts_null)."""
    col = TABLES[table].column(name) if name != "location_zone" else None
    if col is None or table != "daily":
        return False
    if col.rollup in ET_RULES:
        # Issue 35: a whole day with gaps fills its missing radiation (docs/aggregate.md,
        # test_reference_et.py::test_whole_day_with_a_midday_gap_fills_its_radiation).
        return bool(row["low_quality"]) or row["sample_pct"] < 1
    if col.rollup is Rollup.GDD:
        return row["maxt"] is None  # issue 35: NULL without a temperature reading
    if col.rollup in (Rollup.HOURS_ABOVE, Rollup.HOURS_WITH_ANY):
        return row[name] is None
    return False


def _differences(table: str, got: list[dict[str, Any]]) -> list[str]:
    """Where `got` is not the golden row rounded to the column's precision."""
    want = {(r["device"], r["time"]): r for r in GOLDEN[table]}
    have = {(r["device"], r["time"]): r for r in got}
    out = [f"{table} {k}: missing" for k in want.keys() - have.keys()]
    out += [f"{table} {k}: extra" for k in have.keys() - want.keys()]
    for key in want.keys() & have.keys():
        for name, old in want[key].items():
            new = have[key][name]
            if _changed_by_issue_22(table, name, have[key]):
                continue
            col = TABLES[table].column(name) if name != "location_zone" else None
            if col is None or not col.is_numeric or old is None or new is None:
                if old != new:
                    out.append(f"{table} {key} {name}: {old!r} -> {new!r}")
                continue
            # Old values are float4 sums in a different order (float noise), rounded now;
            # ET moved from Python to SQL (equal within 0.001 mm, test_et_sql.py).
            half = 0.5 * 10 ** -stored_decimals(col)
            slack = 1e-6 * max(1.0, abs(old)) + (0.001 if col.rollup in ET_RULES else 0)
            if col.rollup is Rollup.CIRCULAR_MEAN:
                diff = abs((new - old + 180) % 360 - 180)
            else:
                diff = abs(new - old)
            if diff > half + slack:
                out.append(f"{table} {key} {name}: {old!r} -> {new!r}")
    return out


def test_one_pass_equals_the_per_table_rollups(db, database_url) -> None:
    n = scenarios.load(db)
    assert n > 3000
    run_all(db)
    db.commit()
    incremental = scenarios.dump(db)
    wrong = [d for t in scenarios.TABLES for d in _differences(t, incremental[t])]
    assert not wrong, wrong[:20]
    assert {t: len(r) for t, r in incremental.items()} == {
        t: len(r) for t, r in GOLDEN.items()}

    # A backfill into empty tables, in 10-day pieces and with two workers, gives the same.
    for workers in (1, 2):
        for t in scenarios.TABLES:
            db.execute(f"DELETE FROM {t}")
        db.commit()
        jobs.backfill(db, tables=scenarios.TABLES, start=datetime(2024, 3, 1, tzinfo=UTC),
                      end=datetime(2024, 12, 1, tzinfo=UTC) + timedelta(hours=1),
                      devices=None, low_quality_pct=80.0, chunk_days=10, workers=workers,
                      connect=lambda: psycopg.connect(database_url))
        db.commit()
        assert scenarios.dump(db) == incremental, workers


def test_kc_schedule_water_balance_and_missing_inputs(db) -> None:
    """kc: the schedule's latest entry on or before the local date, else the location's kc;
    etc = et x kc and crop water demand = precip - etc, from the unrounded et; no
    coordinates, no et (NULL, not a guess), but kc still holds."""
    from tests.support.rollups import fetch, make_location

    brussels = make_location(db, "Europe/Brussels", lat=50.8, lon=4.35, elev=100.0, kc=0.9,
                             sensor_height=10.0)
    db.execute("INSERT INTO crop_coefficients (location_id, start_date, kc) VALUES"
               " (%s, '2024-07-06', 1.15), (%s, '2024-08-01', 0.7)", (brussels, brussels))
    nowhere = make_location(db, "UTC", kc=1.0)
    start = datetime(2024, 7, 4, 22, tzinfo=UTC)  # local midnight of 5 July in Brussels
    fields = dict(tair=lambda i, t: 12.3 + 9.2 * (i % 144) / 143, rh=lambda i, t: 0.7,
                  wind_speed=lambda i, t: 2.8, swdw=lambda i, t: 255.0,
                  precip=lambda i, t: 0.1 if i % 50 == 0 else 0.0)
    insert_readings(db, "KC1", brussels, series(start, start + timedelta(days=2), **fields),
                    marks=True)
    insert_readings(db, "KC2", nowhere, series(start, start + timedelta(days=1), **fields),
                    marks=True)
    run_all(db)
    days = fetch(db, "SELECT time, et, etc, kc, precip, crop_water_demand FROM daily"
                     " WHERE device = 'KC1' ORDER BY time")
    assert [d["kc"] for d in days] == [0.9, 1.15]  # 5 July: constant kc; 6 July: schedule
    for d in days:
        assert d["et"] > 0
        assert abs(d["etc"] - d["et"] * d["kc"]) <= 0.01
        assert abs(d["crop_water_demand"] - (d["precip"] - d["etc"])) <= 0.01
    hours = fetch(db, "SELECT et, etc FROM local_hourly WHERE device = 'KC1'")
    assert all(h["et"] is not None and h["etc"] is not None for h in hours)
    none = fetch(db, "SELECT et, etc, kc, crop_water_demand FROM daily WHERE device = 'KC2'")
    assert none and all(r["et"] is None and r["etc"] is None and r["kc"] == 1.0
                        and r["crop_water_demand"] is None for r in none)
    assert all(r["et"] is None for r in fetch(db, "SELECT et FROM hourly WHERE device = 'KC2'"))


def test_a_reading_outside_every_cell_fails_the_recompute(db, monkeypatch) -> None:
    """The SQL rule that puts a reading in a cell and the Python cells must agree; when they
    do not (here: Python's cells lose one), the recompute fails instead of dropping readings."""
    from aggregate import rollups
    from shared import timeutil
    from tests.support.rollups import make_location

    loc = make_location(db, "Asia/Kolkata")
    start = datetime(2024, 6, 1, tzinfo=UTC)
    insert_readings(db, "X1", loc, series(start, start + timedelta(hours=3),
                                          tair=lambda i, t: 20.0), marks=True)
    real = timeutil.cells
    monkeypatch.setattr(rollups.timeutil, "cells", lambda tz, lo, hi: [
        c for c in real(tz, lo, hi) if c.start != start])  # the cell of the first readings
    with pytest.raises(RuntimeError, match="fall in no cell"):
        run_all(db)
