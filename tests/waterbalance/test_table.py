"""The `water_balance` table through the rollups (aggregate/water.py): rows per device and
local day equal to shared.waterbalance on the daily rows, irrigation events and settings
changes recomputed, and only from the first changed day forward (issue 35)."""

from __future__ import annotations

from datetime import date, timedelta

import pytest

from shared import dirty, irrigation
from shared import waterbalance as wb
from shared.timeutil import zone
from tests.aggregate.weather import Place, day_readings
from tests.support.readings import insert_readings
from tests.support.rollups import fetch, make_location, run_all

DAYS = [date(2024, 7, 1) + timedelta(days=i) for i in range(4)]


def _place(day: date) -> Place:
    return Place("valencia", 39.47, -0.38, "Europe/Madrid", 15.0, day, 0.9, tmean=26.0,
                 rh_mean=0.55)


def _setup(db, *, days: list[date] = DAYS):
    loc = make_location(db, "Europe/Madrid", lat=39.47, lon=-0.38, elev=15.0, kc=1.1)
    irrigation.put_settings(db, loc, {"soil": "sandy loam", "root_depth": 0.3,
                                      "crop": "tomato"})
    for d in days:
        insert_readings(db, "WB1", loc, [{**r, "precip": 0.0} for r in day_readings(_place(d))],
                        marks=True)
    run_all(db)
    return loc


def _stamp(db) -> None:
    """Mark every stored row (kc -1): a row rewritten since loses the stamp. (update_time
    cannot tell, the test runs in one transaction.)"""
    db.execute("UPDATE water_balance SET kc = -1 WHERE device = 'WB1'")


def _rows(db):
    return fetch(db, "SELECT *, (time AT TIME ZONE 'Europe/Madrid')::date AS day"
                     " FROM water_balance WHERE device = 'WB1' ORDER BY time")


def test_rows_equal_the_balance_of_the_daily_rows(db) -> None:
    _setup(db)
    rows = _rows(db)
    assert [r["day"] for r in rows] == DAYS
    daily = fetch(db, "SELECT et, kc, precip FROM daily WHERE device = 'WB1' ORDER BY time")
    want = wb.run([wb.Inputs(d, r["et"], r["kc"], r["precip"]) for d, r in zip(
        DAYS, daily, strict=True)], wb.Settings(wb.Soil.named("sandy loam"), wb.Roots(0.3),
                                                wb.CROP_P["tomato"]))
    for got, w in zip(rows, want, strict=True):
        assert got["taw"] == pytest.approx(w.taw, abs=0.01)  # 1000 x 0.12 x 0.3 = 36 mm
        assert got["etc"] == pytest.approx(w.etc, abs=0.01)
        assert got["ks"] == pytest.approx(w.ks, abs=0.001)
        assert got["etc_adj"] == pytest.approx(w.etc_adj, abs=0.01)
        assert got["depletion"] == pytest.approx(w.dr, abs=0.01)
    assert rows[0]["taw"] == pytest.approx(36.0)
    assert rows[-1]["depletion"] > rows[-1]["raw"], "four clear July days dry 30 cm of roots"
    assert rows[-1]["ks"] < 1
    # Each day's forecast (the alert kind `depletion` reads it): 0 once beyond RAW, else the
    # whole days at the mean etc so far (shared.waterbalance.forecast).
    for n, got in enumerate(rows):
        f = wb.forecast(want[:n + 1])
        assert f is not None and got["days_to_raw"] == f.days_to_raw
    assert rows[-1]["days_to_raw"] == 0 and rows[0]["days_to_raw"] > 0


def test_an_irrigation_event_recomputes_from_its_day_only(db) -> None:
    loc = _setup(db)
    before = {r["day"]: r for r in _rows(db)}
    _stamp(db)
    irrigation.add_event(db, loc, DAYS[2], 25.0)
    run_all(db)
    after = {r["day"]: r for r in _rows(db)}
    # Days before the event: not rewritten; from it on, rewritten and wetter.
    assert [after[d]["kc"] == -1 for d in DAYS] == [True, True, False, False]
    assert after[DAYS[2]]["irrigation"] == 25.0
    assert after[DAYS[2]]["depletion"] == pytest.approx(
        max(before[DAYS[1]]["depletion"] - 25.0 + after[DAYS[2]]["etc_adj"], 0), abs=0.02)
    assert after[DAYS[3]]["depletion"] < before[DAYS[3]]["depletion"]
    # A planned event is not in the balance.
    irrigation.add_event(db, loc, DAYS[3], 30.0, status="planned")
    run_all(db)
    assert {r["day"]: r for r in _rows(db)}[DAYS[3]]["irrigation"] == 0.0


def test_a_late_reading_recomputes_its_day_and_the_days_after(db) -> None:
    _setup(db)
    before = {r["day"]: r for r in _rows(db)}
    _stamp(db)
    rain = day_readings(_place(DAYS[2]))[150]
    db.execute("UPDATE calibrated SET precip = 12.0 WHERE device = 'WB1' AND time = %s",
               (rain["time"],))
    # A corrected reading: its buckets marked as ingest marks them.
    dirty.write_marks(db, dirty.bucket_marks("WB1", [rain["time"]], zone("Europe/Madrid")))
    run_all(db)
    after = {r["day"]: r for r in _rows(db)}
    assert [after[d]["kc"] == -1 for d in DAYS] == [True, True, False, False]
    assert after[DAYS[2]]["precip"] == pytest.approx(12.0)
    assert after[DAYS[3]]["depletion"] < before[DAYS[3]]["depletion"]


def test_settings_change_and_removal(db) -> None:
    loc = _setup(db)
    shallow = _rows(db)
    irrigation.put_settings(db, loc, {"theta_fc": 0.36, "theta_wp": 0.22, "root_depth": 1.0,
                                      "p": 0.5})
    run_all(db)
    deep = _rows(db)
    assert deep[0]["taw"] == pytest.approx(140.0)
    assert deep[-1]["ks"] == 1.0 and shallow[-1]["ks"] < 1
    irrigation.delete_settings(db, loc)
    run_all(db)
    assert _rows(db) == []


def test_bad_settings_name_the_field(db) -> None:
    from shared.errors import BadParameter
    loc = make_location(db, "Europe/Madrid", lat=39.47, lon=-0.38)
    for values, field in (({"soil": "moon dust", "root_depth": 1, "p": 0.5}, "soil"),
                          ({"theta_fc": 0.1, "theta_wp": 0.2, "root_depth": 1, "p": 0.5},
                           "theta_fc"),
                          ({"soil": "clay", "root_depth": 9, "p": 0.5}, "root_depth"),
                          ({"soil": "clay", "root_depth": 1, "crop": "kale?"}, "crop")):
        with pytest.raises(BadParameter) as err:
            irrigation.put_settings(db, loc, values)
        assert field in (err.value.errors or {}), values


def test_a_kc_edit_recomputes_the_balance(db) -> None:
    """A new kc for the location (PATCH /locations/{id}): the rollups rewrite its daily rows,
    whose trigger marks the balance; the same run recomputes it with the new etc."""
    from shared import locations
    loc = _setup(db)
    before = _rows(db)
    locations.update_location(db, loc, {"kc": 0.5}, None)
    run_all(db)
    after = _rows(db)
    assert [r["kc"] for r in after] == [0.5] * len(DAYS)
    assert after[0]["etc"] == pytest.approx(before[0]["etc"] * 0.5 / 1.1, abs=0.02)
    assert after[-1]["depletion"] < before[-1]["depletion"]
