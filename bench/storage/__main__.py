"""Benchmark: bytes per device-year in each data table, indexes included (docs/scaling.md).

    .venv/bin/python -m bench.storage [--devices N] [--days N] [--quick] [--database-url URL]

Loads the readings of N devices (default 50) at the 5-minute cadence with every column filled,
their hourly health reports, and their rollups (`aggregate.jobs.backfill`, what
`sds aggregate backfill` runs) into a fresh database on a throwaway PostgreSQL (or on
--database-url's server), in two halves of --days days (default 28). After each half it runs
VACUUM ANALYZE and reads the size of every table with TimescaleDB's hypertable_detailed_size:
heap, indexes, TOAST. The growth between the two measurements, per device-day, times 365 is the
figure per device-year: the second half is measured against the first in the same run, so the
fixed cost of the schema and of partly filled chunks drops out. The CSV.gz export of one
device-month (what retention writes before it drops, aggregate.lifecycle) is measured too.
"""

from __future__ import annotations

import argparse
import gzip
import sys
import time
from datetime import UTC, datetime, timedelta

import psycopg

from aggregate import jobs, rollups
from aggregate.storage import DATA_TABLES, human, table_sizes
from bench.common import scratch_database
from people import accounts
from shared import db, places

START = datetime(2025, 1, 6, tzinfo=UTC)  # a Monday: calibrated chunks are 7 days
ZONES = ("America/Chicago", "Europe/Berlin", "Asia/Kolkata", "Australia/Sydney")
PER_DAY = {"calibrated": 288, "health": 24, "hourly": 24, "local_hourly": 24, "daily": 1}


def _setup(conn: psycopg.Connection, devices: int) -> list[str]:
    org = accounts.create_org(conn, name="Bench storage")
    locs = [places.create_location(conn, org=org, loc=places.LocationInput(
        name=f"L{i}", tz_name=tz, lat=40.0 - 20 * i, lon=-90.0 + 60 * i, elev=100.0 * i,
        kc=1.0)) for i, tz in enumerate(ZONES)]
    names = [f"S{d:05d}" for d in range(devices)]
    for i, name in enumerate(names):
        places.register_device(conn, org=org, name=name)
        places.deploy_device(conn, device=name, location=locs[i % len(locs)],
                               start=START - timedelta(days=1))
    conn.commit()
    return names


def _load(conn: psycopg.Connection, devices: int, start: datetime, days: int) -> None:
    """`days` days of 5-minute readings with every stored column, and hourly health reports.
    Values vary per row (a float4 column costs its 4 bytes whatever the value; varying values
    keep the indexes and any future compression honest)."""
    conn.execute(
        "INSERT INTO calibrated (time, device, location, tair, rh, p, precip, swdw, swuw, lwdw,"
        " lwuw, pardw, paruw, wind_speed, wind_gust, wind_direction, tabove, tbelow, lfw, tdew,"
        " ea, vpd, slp)"
        " SELECT t, 'S' || lpad(d::text, 5, '0'), dp.location_id,"
        "  15 + 10 * sin(i / 40.0 + d), 0.55 + 0.4 * cos(i / 30.0), 98 + (d %% 5) * 0.5,"
        "  CASE WHEN (i + d) %% 97 = 0 THEN 0.4 ELSE 0 END,"
        "  greatest(0, 900 * sin((i %% 288) / 288.0 * 6.283 - 1.6)), 80 + random(),"
        "  320 + random() * 10, 390 + random() * 10,"
        "  greatest(0, 1800 * sin((i %% 288) / 288.0 * 6.283 - 1.6)), 90 + random(),"
        "  2 + sin(i / 7.0), 4 + sin(i / 5.0), (i * 13 + d * 31) %% 360, 16 + random(),"
        "  14 + 9 * sin(i / 40.0 + d), CASE WHEN i %% 288 < 60 THEN 5 ELSE 0 END,"
        "  8 + sin(i / 50.0), 1.1 + random() / 10, 0.6 + random() / 10, 101.3 + random()"
        " FROM generate_series(0, %(devices)s - 1) AS d"
        " JOIN devices dv ON dv.name = 'S' || lpad(d::text, 5, '0')"
        " JOIN deployments dp ON dp.device_id = dv.id,"
        "  generate_series(0, %(slots)s - 1) AS i,"
        "  LATERAL (SELECT %(start)s::timestamptz + i * interval '5 minutes') AS x(t)",
        {"devices": devices, "slots": days * 288, "start": start})
    conn.execute(
        "INSERT INTO health (time, device, location, batt_pct, batt_volt, rssi, sys_temp, fw)"
        " SELECT t, dv.name, dp.location_id, 60 + random() * 40, 3.6 + random() / 2,"
        "  -90 + random() * 30, 20 + random() * 15, '2.4.1'"
        " FROM devices dv JOIN deployments dp ON dp.device_id = dv.id,"
        "  generate_series(%(start)s::timestamptz, %(end)s - interval '1 hour',"
        "                  interval '1 hour') AS t",
        {"start": start, "end": start + timedelta(days=days)})
    conn.commit()
    jobs.backfill(conn, tables=rollups.TABLE_ORDER, start=start,
                  end=start + timedelta(days=days), devices=None, low_quality_pct=80.0)
    conn.commit()


def _sizes(url: str) -> dict[str, tuple[int, int, int, int]]:
    """{table: (rows, heap bytes, index bytes, total bytes)} after VACUUM ANALYZE."""
    with db.connect(url, autocommit=True) as conn:
        for table in DATA_TABLES:
            conn.execute(f"VACUUM ANALYZE {table}")
        found = {t.name: t for t in table_sizes(conn, exact_rows=True)}
    return {t: (found[t].rows, found[t].table_bytes + found[t].toast_bytes,
                found[t].index_bytes, found[t].total_bytes) for t in DATA_TABLES}


def _export_bytes(url: str, device: str, start: datetime, days: int) -> tuple[int, int]:
    """(rows, bytes) of one device's `days` days of calibrated as retention exports them
    (CSV with a header, gzip)."""
    with db.connect(url) as conn, conn.cursor() as cur:
        conn.execute("SET TimeZone = 'UTC'")
        data = bytearray()
        with cur.copy("COPY (SELECT * FROM calibrated WHERE device = %s AND time >= %s"
                      " AND time < %s ORDER BY time) TO STDOUT WITH (FORMAT csv, HEADER)",
                      (device, start, start + timedelta(days=days))) as copy:
            for block in copy:
                data += block
        rows = cur.rowcount
    return rows, len(gzip.compress(bytes(data)))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table of results."""
    ap = argparse.ArgumentParser(prog="python -m bench.storage", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", type=int, default=50)
    ap.add_argument("--days", type=int, default=28, help="of history, loaded in two halves")
    ap.add_argument("--quick", action="store_true", help="10 devices, 14 days")
    ap.add_argument("--database-url", default=None,
                    help="server whose maintenance database may create databases")
    args = ap.parse_args(argv)
    devices, days = (10, 14) if args.quick else (args.devices, max(2, args.days))
    half = days // 2
    t0 = time.perf_counter()
    with scratch_database(args.database_url, prefix="bench_storage") as url:
        with db.connect(url) as conn:
            names = _setup(conn, devices)
            _load(conn, devices, START, half)
        first = _sizes(url)
        with db.connect(url) as conn:
            _load(conn, devices, START + timedelta(days=half), days - half)
        second = _sizes(url)
        export_rows, export_bytes = _export_bytes(url, names[0], START, days)
    grown_days = devices * (days - half)
    print(f"bench.storage: {devices} devices x {days} days ({devices * days} device-days), "
          f"measured at {half} and {days} days; {time.perf_counter() - t0:.0f} s\n")
    print(f"{'table':<13} {'rows/dev-day':>12} {'B/row':>7} {'heap/dev-yr':>12} "
          f"{'index/dev-yr':>13} {'total/dev-yr':>13} {'avg total/dev-yr':>17}")
    year_total = 0.0
    for table in DATA_TABLES:
        r1, h1, i1, t1 = first[table]
        r2, h2, i2, t2 = second[table]
        per_day = (r2 - r1) / grown_days
        heap = (h2 - h1) / grown_days * 365
        index = (i2 - i1) / grown_days * 365
        total = (t2 - t1) / grown_days * 365
        average = t2 / (devices * days) * 365  # with the fixed costs, for comparison
        year_total += total
        per_row = (t2 - t1) / max(1, r2 - r1)
        print(f"{table:<13} {per_day:>12.1f} {per_row:>7.0f} {human(heap):>12} "
              f"{human(index):>13} {human(total):>13} {human(average):>17}")
    print(f"{'all five':<13} {'':>12} {'':>7} {'':>12} {'':>13} {human(year_total):>13}")
    table_per_day = (second["calibrated"][3] - first["calibrated"][3]) / grown_days
    print(f"\nCSV.gz export of one device's {days} days of calibrated (as retention writes it): "
          f"{export_rows} rows, {human(export_bytes)}; per device-year "
          f"{human(export_bytes / days * 365)}, {table_per_day * days / export_bytes:.1f}x "
          "smaller than the table with its indexes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
