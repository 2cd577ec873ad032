"""The demo's past (`sds demo --history-days N`): 5-minute readings of every demo device from N
days ago until the simulator's backfill takes over, written by PostgreSQL itself in one
statement per device (generate_series), then rolled up with one backfill, so a fresh demo has
more than a year of history at once and the cold tier's mover has months to move
(docs/operations.md "Cold tier"). Simulating the same rows in Python (admin.simulate) costs
~160 us a reading, about two minutes for the 720,000 readings of 500 days of five devices; this
takes seconds.

The weather is plausible rather than physical, in the simulator's shape (a solar curve from
latitude and longitude, a diurnal wave around a seasonal mean, humidity from a slower dew
point, pressure from elevation) and deterministic; the derived columns (tdew, ea, vpd, slp) use
ingest.derive's formulas, and every value is rounded to its column's stored decimals as the
ingest writer does.
"""

from __future__ import annotations

from datetime import datetime

import psycopg
from psycopg import sql

from aggregate import jobs
from ingest import derive
from shared import fao56
from shared.columns import TABLES
from shared.units import stored_decimals

_DECIMALS = {c.name: stored_decimals(c) for c in TABLES["calibrated"].columns
             if c.dtype == "real"}

# Per reading t of a device at (lat, lon, elev), with k a per-device phase: the inputs, then
# the derived columns from them (ingest.derive.derive_row, in SQL). MATERIALIZED: inlined, the
# nested expressions were repeated in every column that uses them (50x slower).
_SQL = """
WITH s AS (
  SELECT t, extract(epoch FROM t) / 3600.0 AS h, extract(doy FROM t) AS doy,
         mod((extract(epoch FROM t) / 3600.0 + %(lon)s / 15.0)::numeric, 24)::float8 AS sh
  FROM generate_series(%(lo)s::timestamptz, %(hi)s::timestamptz - interval '5 minutes',
                       interval '5 minutes') AS t
), w AS (
  SELECT t, h, sh,
    27 - 0.4 * abs(%(lat)s) - 0.0065 * %(elev)s + 0.25 * abs(%(lat)s)
      * cos(2 * pi() * (doy - %(peak)s) / 365) AS tm,
    sin(radians(%(lat)s)) * sin(radians(23.44) * sin(2 * pi() * (284 + doy) / 365))
      + cos(radians(%(lat)s)) * cos(radians(23.44) * sin(2 * pi() * (284 + doy) / 365))
      * cos(radians(15 * (sh - 12))) AS el
  FROM s
), x AS MATERIALIZED (
  SELECT t, h, el, tm, greatest(0, el) * 1361 * 0.75 * (0.7 + 0.3 * sin(h / 7.1 + %(k)s)) AS sw,
    tm + 6 * cos(2 * pi() * (sh - 15) / 24) + 1.5 * sin(h / 5.3 + %(k)s) AS ta
  FROM w
), y AS (
  SELECT *, least(ta, tm - 5 - 3 * sin(h / 29.0 + %(k)s)) AS td,
    (101.3 + 0.8 * sin(h / 13.0 + %(k)s)) * ((293 - 0.0065 * %(elev)s) / 293) ^ 5.26 AS pr,
    CASE WHEN sin(h / 3.7 + %(k)s) * sin(h / 41.0 + %(k)s) > 0.85 THEN 0.6 ELSE 0 END AS pc
  FROM x
), z AS MATERIALIZED (
  SELECT *, least(1.0, {es_td} / {es_ta}) AS rh, 0.8 * 5.670374419e-8 * (ta + 273.15) ^ 4 AS lw,
    ta + 0.004 * sw AS tb
  FROM y
)
INSERT INTO calibrated (time, device, location, tair, rh, p, precip, swdw, swuw, lwdw, lwuw,
    pardw, paruw, wind_speed, wind_gust, wind_direction, tabove, tbelow, lfw, tdew, ea, vpd, slp)
SELECT t, %(device)s, %(location)s, round(ta::numeric, {tair}), round(rh::numeric, {rh}),
  round(pr::numeric, {p}), round(pc::numeric, {precip}), round(sw::numeric, {swdw}),
  round((0.23 * sw)::numeric, {swuw}), round(lw::numeric, {lwdw}),
  round((0.98 * 5.670374419e-8 * (tb + 273.15) ^ 4)::numeric, {lwuw}),
  round((2.05 * sw)::numeric, {pardw}), round((0.205 * sw)::numeric, {paruw}),
  round((2 + 1.5 * sin(h / 4.1 + %(k)s) + 2 * greatest(0, el))::numeric, {wind_speed}),
  round((1.5 * (2 + 1.5 * sin(h / 4.1 + %(k)s) + 2 * greatest(0, el)))::numeric, {wind_gust}),
  round(mod((degrees(h / 9.0 + %(k)s) + 360000)::numeric, 360), {wind_direction}),
  round(((lw / 5.670374419e-8) ^ 0.25 - 273.15)::numeric, {tabove}), round(tb::numeric, {tbelow}),
  CASE WHEN rh > 0.95 OR pc > 0 THEN 5 ELSE 0 END,
  round(({c} * ln(rh * {es_ta} / {a}) / ({b} - ln(rh * {es_ta} / {a})))::numeric, {tdew}),
  round((rh * {es_ta})::numeric, {ea}), round(((1 - rh) * {es_ta})::numeric, {vpd}),
  round((pr * (1.0 - {lapse} * %(elev)s / (ta + 273.15 + {lapse} * %(elev)s)) ^ (-{hyp}))::numeric,
        {slp})
FROM z
"""


def _statement() -> str:
    a, b, c = fao56.ES_A, fao56.ES_B, fao56.ES_C
    return _SQL.format(
        es_td=f"({a} * exp({b} * td / (td + {c})))", es_ta=f"({a} * exp({b} * ta / (ta + {c})))",
        a=a, b=b, c=c, lapse=derive.LAPSE_RATE, hyp=derive._HYPSOMETRIC_EXP, **_DECIMALS)


def seed(conn: psycopg.Connection, devices: list[tuple[str, object, float, float, float]],
         start: datetime, end: datetime, *, low_quality_pct: float, cold_path: str) -> int:
    """Readings of each (device, location, lat, lon, elev) over [start, end), committed, then
    their rollups (one backfill); the readings written."""
    written = 0
    for k, (device, location, lat, lon, elev) in enumerate(devices):
        cur = conn.execute(sql.SQL(_statement()), {  # constant text, formatted from the registry
            "lo": start, "hi": end, "device": device, "location": location, "lat": lat,
            "lon": lon, "elev": elev, "k": 1.7 * k, "peak": 200 if lat >= 0 else 17})
        written += cur.rowcount
    conn.commit()
    jobs.backfill(conn, tables=("hourly", "local_hourly", "daily"), start=start, end=end,
                  devices=[d[0] for d in devices], low_quality_pct=low_quality_pct,
                  chunk_days=14, cold_path=cold_path)
    conn.commit()
    return written
