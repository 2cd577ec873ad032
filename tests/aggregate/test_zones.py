"""Bucket boundaries, slot counts and values per zone, against an independent computation
with zoneinfo over the raw rows (reliability plan R25-R27)."""

from __future__ import annotations

import math
from collections import defaultdict
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from tests.support.readings import insert_readings, series
from tests.support.rollups import fetch, make_location, run_all

FIVE = timedelta(minutes=5)
# Rollup values are rounded at write to their column's precision: temperatures and amounts to
# 0.01 (half a unit: 0.005), shares to 0.1 % (0.0005 as a fraction).
HALF = 0.005 + 1e-5  # half a unit, plus the inputs' float32 storage
HALF_PCT = 0.0005

# (zone, local date, expected 5-minute slots in that local day, expected local hour rows)
CASES = [
    pytest.param("America/New_York", date(2024, 3, 10), 276, 23, id="spring_forward_23h"),
    pytest.param("America/New_York", date(2024, 11, 3), 300, 25, id="fall_back_25h"),
    pytest.param("Asia/Kolkata", date(2024, 6, 1), 288, 24, id="kolkata_half_hour"),
    pytest.param("Asia/Kathmandu", date(2024, 6, 1), 288, 24, id="kathmandu_45"),
    pytest.param("Australia/Lord_Howe", date(2024, 4, 7), 294, 25, id="lord_howe_30min_dst"),
    # 03:45 +13:45 -> 02:45 +12:45: wall hour 03 is cut to 45 min, then 02:45-03:00 (15 min)
    # stands alone before 03:00 repeats: 26 local hour rows in a 25-hour day.
    pytest.param("Pacific/Chatham", date(2024, 4, 7), 300, 26, id="chatham"),
    pytest.param("America/Santiago", date(2024, 9, 8), 276, 23, id="santiago_midnight_gap"),
    pytest.param("UTC", date(2024, 6, 1), 288, 24, id="utc"),
]


def _first_instant(day: date, tz: ZoneInfo) -> datetime:
    """Independent: scan UTC minutes for the first whose local date is `day`."""
    t = datetime.combine(day, datetime.min.time(), tzinfo=UTC) - timedelta(hours=16)
    while t.astimezone(tz).date() < day:
        t += timedelta(minutes=1)
    return t


def _tair(i: int, t: datetime) -> float:
    return round(15 + 10 * math.sin(i / 37.0) + (i % 7) * 0.1, 3)


def _rh(i: int, t: datetime) -> float:
    return round(0.5 + 0.4 * math.cos(i / 23.0), 4)


def _precip(i: int, t: datetime) -> float:
    return 0.2 if i % 17 == 0 else 0.0


@pytest.mark.parametrize(("tz_name", "day", "day_slots", "hour_rows"), CASES)
def test_zone_buckets_match_independent_computation(
        db, tz_name: str, day: date, day_slots: int, hour_rows: int) -> None:
    tz = ZoneInfo(tz_name)
    day_start = _first_instant(day, tz)
    day_end = _first_instant(day + timedelta(days=1), tz)
    loc = make_location(db, tz_name, lat=10.0, lon=20.0, elev=50.0)
    rows = series(day_start - timedelta(hours=3), day_end + timedelta(hours=3),
                  tair=_tair, rh=_rh, precip=_precip)
    insert_readings(db, "Z1", loc, rows, marks=True)
    run_all(db)

    # --- daily: boundaries, slot count, values --------------------------------------------
    in_day = [r for r in rows if r["time"].astimezone(tz).date() == day]
    assert len(in_day) == day_slots == (day_end - day_start) / FIVE
    daily = fetch(db, "SELECT * FROM daily WHERE device = 'Z1' AND time = %s", day_start)
    assert len(daily) == 1, "no daily row at the independent local day start"
    d = daily[0]
    assert d["sample_pct"] == pytest.approx(1.0)
    assert d["low_quality"] is False
    temps = [r["tair"] for r in in_day]
    assert d["meant"] == pytest.approx(sum(temps) / len(temps), abs=HALF)
    assert d["maxt"] == pytest.approx(max(temps), abs=HALF)
    assert d["mint"] == pytest.approx(min(temps), abs=HALF)
    hottest = min((r for r in in_day if r["tair"] == max(temps)), key=lambda r: r["time"])
    coldest = min((r for r in in_day if r["tair"] == min(temps)), key=lambda r: r["time"])
    assert d["maxt_time"] == hottest["time"]
    assert d["mint_time"] == coldest["time"]
    assert d["rh_at_maxt"] == pytest.approx(hottest["rh"], abs=HALF)
    assert d["rh_at_mint"] == pytest.approx(coldest["rh"], abs=HALF)
    assert d["precip"] == pytest.approx(sum(r["precip"] for r in in_day), abs=HALF)
    wet_hours = {(r["time"].astimezone(tz).replace(minute=0).replace(tzinfo=None),
                  r["time"].astimezone(tz).utcoffset()) for r in in_day if r["precip"] > 0}
    assert d["precip_hours"] == len(wet_hours)
    assert d["gdd"] == pytest.approx(max(0.0, (max(temps) + min(temps)) / 2 - 10), abs=HALF)
    # The neighbouring (partial) days exist too, with their own share of slots.
    days = fetch(db, "SELECT time, sample_pct FROM daily WHERE device = 'Z1' ORDER BY time")
    assert [x["time"] for x in days].count(day_start) == 1
    assert all(x["sample_pct"] < 1 for x in days if x["time"] != day_start)

    # --- local_hourly: key each reading by its local wall hour and offset -------------------
    groups: dict[tuple[datetime, object], list[dict]] = defaultdict(list)
    for r in rows:
        local = r["time"].astimezone(tz)
        groups[(local.replace(minute=0, tzinfo=None), local.utcoffset())].append(r)
    expected = {min(g, key=lambda r: r["time"])["time"]: g for g in groups.values()}
    got = {x["time"]: x for x in fetch(
        db, "SELECT * FROM local_hourly WHERE device = 'Z1' ORDER BY time")}
    assert set(got) == set(expected)
    starts = sorted(got)
    day_hours = [s for s in starts if day_start <= s < day_end]
    assert len(day_hours) == hour_rows
    for s in starts:
        g = expected[s]
        row = got[s]
        temps = [r["tair"] for r in g]
        assert row["tair"] == pytest.approx(sum(temps) / len(temps), abs=HALF)
        assert row["maxt"] == pytest.approx(max(temps), abs=HALF)
        assert row["precip"] == pytest.approx(sum(r["precip"] for r in g), abs=HALF)
    # Interior buckets are complete: the bucket's slot count equals its readings, so the
    # durations of the day's local hours sum to the day length with no overlap or gap.
    for s in day_hours:
        assert got[s]["sample_pct"] == pytest.approx(1.0), s
    assert sum(len(expected[s]) for s in day_hours) == day_slots

    # --- hourly: UTC hours --------------------------------------------------------------------
    utc_groups: dict[datetime, list[float]] = defaultdict(list)
    for r in rows:
        utc_groups[r["time"].replace(minute=0)].append(r["tair"])
    hourly = {x["time"]: x for x in fetch(db, "SELECT * FROM hourly WHERE device = 'Z1'")}
    assert set(hourly) == set(utc_groups)
    for s, temps in utc_groups.items():
        assert hourly[s]["tair"] == pytest.approx(sum(temps) / len(temps), abs=HALF)
        assert hourly[s]["sample_pct"] == pytest.approx(len(temps) / 12, abs=HALF_PCT)


def test_lord_howe_fall_back_readings_land_in_distinct_buckets(db) -> None:
    """Regression from the verified date_trunc result: 14:50Z and 15:10Z on 2024-04-06."""
    loc = make_location(db, "Australia/Lord_Howe")
    a, b = datetime(2024, 4, 6, 14, 50, tzinfo=UTC), datetime(2024, 4, 6, 15, 10, tzinfo=UTC)
    insert_readings(db, "LH", loc, [{"time": a, "tair": 1.0}, {"time": b, "tair": 3.0}], marks=True)
    run_all(db)
    rows = fetch(db, "SELECT time, tair, sample_pct FROM local_hourly ORDER BY time")
    assert [r["time"] for r in rows] == [datetime(2024, 4, 6, 14, 0, tzinfo=UTC),
                                         datetime(2024, 4, 6, 15, 0, tzinfo=UTC)]
    assert [r["tair"] for r in rows] == [1.0, 3.0]
    # 1 of 12 slots in the full hour, 1 of 6 in the 30-minute hour after the change.
    assert rows[0]["sample_pct"] == pytest.approx(1 / 12, abs=HALF_PCT)
    assert rows[1]["sample_pct"] == pytest.approx(1 / 6, abs=HALF_PCT)


def test_local_hourly_never_derived_from_utc_hourly(db) -> None:
    """Kolkata local hours differ from any re-bucketing of UTC hours (R27): with the hourly
    table emptied, local_hourly is still computed from the raw rows."""
    loc = make_location(db, "Asia/Kolkata")
    start = datetime(2024, 6, 1, tzinfo=UTC)
    rows = series(start, start + timedelta(hours=3), tair=lambda i, t: float(i))
    insert_readings(db, "K1", loc, rows, marks=True)
    db.execute("DELETE FROM rollup_dirty WHERE rollup = 'hourly'")
    run_all(db)
    assert fetch(db, "SELECT count(*) AS n FROM hourly")[0]["n"] == 0
    got = fetch(db, "SELECT time, tair FROM local_hourly ORDER BY time")
    assert [g["time"].minute for g in got] == [30, 30, 30, 30]  # 23:30Z, 00:30Z, ...
    # 00:30Z-01:30Z holds readings 6..17 -> mean 11.5; no UTC-hour mean is 11.5.
    assert got[1]["tair"] == pytest.approx(11.5)


def test_undeployed_readings_roll_up_only_into_hourly(db) -> None:
    start = datetime(2024, 6, 1, tzinfo=UTC)
    insert_readings(db, "U1", None, series(start, start + timedelta(hours=2),
                                           tair=lambda i, t: 20.0), marks=True)
    run_all(db)
    assert fetch(db, "SELECT count(*) AS n, min(location::text) AS loc FROM hourly")[0] == {
        "n": 2, "loc": None}
    assert fetch(db, "SELECT count(*) AS n FROM local_hourly")[0]["n"] == 0
    assert fetch(db, "SELECT count(*) AS n FROM daily")[0]["n"] == 0


def test_deploying_a_device_over_stored_readings_builds_its_local_rows(db) -> None:
    """Readings stored before deployment have only hourly rows; deploy_device relabels them
    and marks their buckets, and the next run builds local_hourly and daily in the new zone."""
    from shared import places

    loc = make_location(db, "Asia/Kathmandu", lat=27.7, lon=85.3, elev=1400.0)
    org = db.execute("SELECT org_id FROM locations WHERE id = %s", (loc,)).fetchone()[0]
    places.register_device(db, org=org, name="DEP1")
    start = datetime(2024, 6, 1, tzinfo=UTC)
    insert_readings(db, "DEP1", None, series(start, start + timedelta(hours=6),
                                             tair=lambda i, t: 25.0, rh=lambda i, t: 0.5),
                    marks=True)
    run_all(db)
    assert fetch(db, "SELECT count(*) AS n FROM local_hourly")[0]["n"] == 0
    places.deploy_device(db, device="DEP1", location=loc, start=start)
    run_all(db)
    hours = fetch(db, "SELECT time, location FROM local_hourly ORDER BY time")
    assert [h["time"].minute for h in hours] == [15] * 7  # Kathmandu hours start at :15 UTC
    assert {h["location"] for h in hours} == {loc}
    assert fetch(db, "SELECT count(*) AS n FROM hourly WHERE location = %s", loc)[0]["n"] == 6
    assert fetch(db, "SELECT count(*) AS n FROM daily")[0]["n"] == 1


TABLE_ZONES = ("America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Pacific/Chatham",
               "Asia/Kolkata", "Asia/Kathmandu", "America/St_Johns", "America/Santiago")
PLAIN_DATES = (date(2024, 1, 1), date(2025, 6, 15), date(2026, 12, 31))
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


def _transition_dates(tz: ZoneInfo) -> list[date]:
    """Local dates of 2024-2026 on which `tz` changes its UTC offset (found by scanning)."""
    out = []
    t, end = EPOCH, datetime(2027, 1, 1, tzinfo=UTC)
    while t < end:
        nxt = t + timedelta(hours=1)
        if t.astimezone(tz).utcoffset() != nxt.astimezone(tz).utcoffset():
            u = t
            while u.astimezone(tz).utcoffset() == t.astimezone(tz).utcoffset():
                u += FIVE
            out.append(u.astimezone(tz).date())
        t = nxt
    return out


def _slot_value(t: datetime) -> float:
    """A reading's tair: its slot number, so min and max name a bucket's first and last slot."""
    return float((t - EPOCH) // FIVE)


def test_local_day_table_2024_2026(db, figures) -> None:
    """R25/R26 over the table of the plan: every offset-change date of 2024-2026 in eight
    zones (plus ordinary dates for the zones without DST), a reading in every 5-minute slot.
    Each local day starts at its first existing instant and holds day length / 5 min slots;
    its local hours partition it with no overlap or gap (first and last slot of each hour
    are its min and max, every hour complete)."""
    cases: list[tuple[str, date, datetime, datetime]] = []
    for tz_name in TABLE_ZONES:
        tz = ZoneInfo(tz_name)
        dates = _transition_dates(tz) or list(PLAIN_DATES)
        loc = make_location(db, tz_name)
        rows: dict[datetime, dict] = {}
        for day in dates:
            start, end = _first_instant(day, tz), _first_instant(day + timedelta(days=1), tz)
            cases.append((tz_name, day, start, end))
            for r in series(start - timedelta(hours=1), end + timedelta(hours=1),
                            tair=lambda i, t: _slot_value(t)):
                rows[r["time"]] = r
        insert_readings(db, tz_name, loc, rows.values(), marks=True)
    run_all(db)

    lengths: dict[int, int] = defaultdict(int)
    for tz_name, day, start, end in cases:
        tz = ZoneInfo(tz_name)
        day_slots = (end - start) // FIVE
        lengths[day_slots] += 1
        d = fetch(db, "SELECT time, sample_pct, mint, maxt, meant FROM daily"
                      " WHERE device = %s AND time >= %s AND time < %s",
                  tz_name, start - timedelta(hours=1), end)
        assert [x["time"] for x in d] == [start], (tz_name, day)
        first, last = _slot_value(start), _slot_value(end - FIVE)
        assert (d[0]["mint"], d[0]["maxt"]) == (first, last), (tz_name, day)
        assert d[0]["sample_pct"] == pytest.approx(1.0), (tz_name, day)
        assert d[0]["meant"] == pytest.approx((first + last) / 2, abs=HALF), (tz_name, day)
        hours = fetch(db, "SELECT time, sample_pct, mint, maxt FROM local_hourly"
                          " WHERE device = %s AND time >= %s AND time < %s ORDER BY time",
                      tz_name, start, end)
        groups: dict[tuple[datetime, object], list[datetime]] = defaultdict(list)
        t = start
        while t < end:
            local = t.astimezone(tz)
            groups[(local.replace(minute=0, tzinfo=None), local.utcoffset())].append(t)
            t += FIVE
        expected = sorted((min(g), max(g)) for g in groups.values())
        got = [(h["time"], EPOCH + FIVE * int(h["maxt"])) for h in hours]
        assert got == expected, (tz_name, day)
        # Each hour starts where the previous ended: no gap, no overlap, sum = day length.
        assert all(b[0] == a[1] + FIVE for a, b in zip(got, got[1:], strict=False))
        assert got[0][0] == start and got[-1][1] == end - FIVE
        assert all(h["sample_pct"] == pytest.approx(1.0) for h in hours), (tz_name, day)
        assert all(EPOCH + FIVE * int(h["mint"]) == h["time"] for h in hours)
    # The table holds the plan's day lengths: 23 h, 23.5 h, 24.5 h and 25 h days, not only 24.
    assert {276, 282, 288, 294, 300} <= set(lengths), dict(lengths)
    figures.record("time.zone_date_cases",
                   {"zone x date cases": len(cases), "zones": len(TABLE_ZONES),
                    "by day length (slots)": ", ".join(f"{k}: {v}"
                                                       for k, v in sorted(lengths.items()))},
                   section="time",
                   title="Zone x date cases checked for day length, overlaps and gaps "
                         "(R25-R27; every offset change of 2024-2026)",
                   target="all pass; cases counted", source="tests/aggregate/test_zones.py")
