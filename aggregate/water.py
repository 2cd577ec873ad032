"""The `water_balance` table: the FAO-56 root-zone balance (shared/waterbalance.py) of each
device at a location with water settings, day by day from its daily rows.

Marks (`water_balance_dirty`: device, location, first day to recompute) come from a trigger on
`daily` (late readings, kc changes: every rewritten daily row) and from settings, irrigation
event and kc schedule changes (`sds_mark_location_water`). A run claims marks and recomputes
each pair from its marked day forward only: the depletion of the day before is read back from
the stored row, so one late reading recomputes its day and those after it, not the season.
The daily job runs it in the same transaction as the daily rows it follows (aggregate/jobs.py).
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from shared import timeutil
from shared import waterbalance as wb
from shared.columns import TABLES
from shared.units import stored_decimals

CLAIM = (
    "DELETE FROM water_balance_dirty WHERE (device, location) IN ("
    " SELECT device, location FROM water_balance_dirty ORDER BY device, location"
    " LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING device, location, day")

_COLS = TABLES["water_balance"]
_DECIMALS = {c.name: stored_decimals(c) for c in _COLS.columns
             if c.dtype == "real" and c.name not in ("sample_pct",)}


def settings_of(row: dict[str, Any]) -> wb.Settings:
    """shared.waterbalance settings from a `water_settings` row."""
    roots = wb.Roots(float(row["root_depth"]),
                     None if row["root_depth_end"] is None else float(row["root_depth_end"]),
                     row["root_start"], row["root_end"])
    return wb.Settings(wb.Soil(float(row["theta_fc"]), float(row["theta_wp"])), roots,
                       float(row["p"]))


def process(conn: psycopg.Connection, limit: int = 500) -> int:
    """Claim up to `limit` marks and recompute their balances; returns the pairs done."""
    marks = conn.execute(CLAIM, (limit,)).fetchall()
    for device, location, day in marks:
        recompute(conn, device, location, day)
    return len(marks)


def _kc(row: dict[str, Any] | None) -> float | None:
    """The day's kc: the daily row's, or etc / et when only those are stored (rows written
    before kc was a column of daily)."""
    if row is None:
        return None
    if row["kc"] is not None:
        return float(row["kc"])
    if row["etc"] is not None and row["et"]:
        return float(row["etc"]) / float(row["et"])
    return None


def _round(name: str, value: float | None) -> float | None:
    if value is None or name not in _DECIMALS:
        return value
    return round(value, _DECIMALS[name])


def recompute(conn: psycopg.Connection, device: str, location: UUID, from_day: date) -> int:
    """Rewrite `device`'s balance at `location` from local day `from_day` on; returns rows."""
    with conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
        srow = cur.execute(
            "SELECT w.*, l.tz_name FROM water_settings w JOIN locations l ON l.id = w.location_id"
            " WHERE w.location_id = %s", (location,)).fetchone()
        if srow is None:  # settings removed: no balance
            conn.execute("DELETE FROM water_balance WHERE device = %s AND location = %s",
                         (device, location))
            return 0
        tz = timeutil.zone(srow["tz_name"])
        settings = settings_of(srow)
        first = cur.execute(
            "SELECT min(time) AS t, max(time) AS last FROM daily WHERE device = %s"
            " AND location = %s", (device, location)).fetchone()
        if first is None or first["t"] is None:
            conn.execute("DELETE FROM water_balance WHERE device = %s AND location = %s",
                         (device, location))
            return 0
        first_day = timeutil.local_date(first["t"], tz)
        last_day = timeutil.local_date(first["last"], tz)
        start, dr0 = max(from_day, first_day), 0.0
        if start > first_day:
            prev = cur.execute(
                "SELECT depletion FROM water_balance WHERE device = %s AND location = %s"
                " AND time = %s", (device, location,
                                   timeutil.local_day_start(start - timedelta(days=1), tz))
            ).fetchone()
            if prev is None or prev["depletion"] is None:
                start = first_day  # no stored day before: from the start
            else:
                dr0 = float(prev["depletion"])
        lo = timeutil.local_day_start(start, tz)
        daily = {timeutil.local_date(r["time"], tz): r for r in cur.execute(
            "SELECT time, et, kc, etc, precip, sample_pct, low_quality FROM daily"
            " WHERE device = %s AND location = %s AND time >= %s ORDER BY time",
            (device, location, lo)).fetchall()}
        irrigation = {r["day"]: float(r["mm"]) for r in cur.execute(
            "SELECT day, sum(depth_mm) AS mm FROM irrigation_events WHERE location_id = %s"
            " AND status = 'applied' AND day >= %s AND day <= %s GROUP BY day",
            (location, start, last_day)).fetchall()}
    inputs = []
    d = start
    while d <= last_day:
        r = daily.get(d)
        inputs.append(wb.Inputs(
            d, None if r is None or r["et"] is None else float(r["et"]), _kc(r),
            None if r is None or r["precip"] is None else float(r["precip"]),
            irrigation.get(d, 0.0)))
        d += timedelta(days=1)
    days = wb.run(inputs, settings, dr0)
    # The forecast of each day looks back FORECAST_DAYS days, into the stored rows before it.
    with conn.cursor() as cur:
        earlier = [wb.Day(start, 0, 0, 0, 0, None if r[0] is None else float(r[0]), 1, None,
                          0, 0, 0, 0) for r in reversed(cur.execute(
            "SELECT etc FROM water_balance WHERE device = %s AND location = %s AND time < %s"
            " ORDER BY time DESC LIMIT %s", (device, location, lo, wb.FORECAST_DAYS - 1)
        ).fetchall())]
    history = earlier + days
    rows = []
    for n, (i, day) in enumerate(zip(inputs, days, strict=True)):
        f = wb.forecast(history[:len(earlier) + n + 1])
        ahead = None if f is None or f.days_to_raw is None else float(f.days_to_raw)
        r = daily.get(i.day)
        values = {"et": i.et0, "kc": i.kc, "etc": day.etc, "precip": i.precip,
                  "irrigation": day.irrigation, "root_depth": day.zr, "taw": day.taw,
                  "p": day.p, "raw": day.raw, "ks": day.ks, "etc_adj": day.etc_adj,
                  "deep_percolation": day.dp, "depletion": day.dr, "days_to_raw": ahead}
        rows.append((timeutil.local_day_start(i.day, tz), device, location,
                     *(_round(k, v) for k, v in values.items()),
                     None if r is None else r["sample_pct"],
                     None if r is None else r["low_quality"]))
    names = ("time", "device", "location", "et", "kc", "etc", "precip", "irrigation",
             "root_depth", "taw", "p", "raw", "ks", "etc_adj", "deep_percolation", "depletion",
             "days_to_raw", "sample_pct", "low_quality")
    cols = [sql.Identifier(n) for n in names]
    sets = sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(n))
                              for n in names if n not in ("time", "device"))
    with conn.cursor() as cur:
        cur.executemany(sql.SQL(
            "INSERT INTO water_balance ({cols}) VALUES ({marks})"
            " ON CONFLICT (device, time) DO UPDATE SET {sets}, update_time = now()").format(
            cols=sql.SQL(", ").join(cols),
            marks=sql.SQL(", ").join([sql.Placeholder()] * len(cols)), sets=sets), rows)
        end: datetime = timeutil.local_day_start(last_day + timedelta(days=1), tz)
        cur.execute("DELETE FROM water_balance WHERE device = %s AND location = %s"
                    " AND time >= %s", (device, location, end))
    return len(rows)
