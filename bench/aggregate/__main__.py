"""Benchmark: backfill of hourly + local_hourly + daily vs. one plain GROUP BY for hourly.

    .venv/bin/python -m bench.aggregate [--rows N] [--devices N] [--quick] [--database-url URL]

Loads N five-minute rows (default about 1M: 100 devices x 35 days, devices spread over eight
zones, among them :30/:45 offsets and 30-minute DST) into a fresh database on a throwaway
PostgreSQL (or on --database-url's server), then measures in the same run:

- baseline: one `INSERT ... SELECT time_bucket('1 hour', time), device, avg/min/max/sum ...
  GROUP BY 1, 2` for `hourly` alone, with the hourly columns' plain aggregates;
- backfill: `aggregate.jobs.backfill` of all three tables over the whole range (what
  `sds aggregate backfill` runs: one pass over each 7-day piece's readings into partials per
  cell, merged into the three tables with ET, rounded, written once), ratio = backfill /
  baseline (goal <= 1.5); measured again with `--workers` (default 2) device shares;
- where the time goes: the same backfill in one piece, timed per step (cells, the pass over
  the readings, the merge and write of each table), and a bare pass over the readings that
  only counts rows per cell (the floor of any one-pass design);
- incremental: one new hour for every device, then one run of every rollup job;
- late reading: one reading 20 days late, the buckets its marks recompute, and the run time.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta

import psycopg
from psycopg import sql

from aggregate import jobs, rollups
from bench.common import scratch_database
from people import accounts
from shared import db, dirty, places
from shared.columns import TABLES, Rollup
from shared.timeutil import zone

ZONES = ("America/Chicago", "America/Los_Angeles", "Asia/Kolkata", "America/Santiago",
         "Australia/Sydney", "Asia/Kathmandu", "Australia/Lord_Howe", "Europe/Berlin")
START = datetime(2024, 3, 1, tzinfo=UTC)  # spans spring-forward in the northern zones
SLOTS_PER_DAY = 288


def _load(conn: psycopg.Connection, *, devices: int, days: int) -> tuple[list[str], int]:
    """Locations in ZONES, `devices` devices, `days` days of readings (no dirty marks)."""
    org = accounts.create_org(conn, name="Bench")
    locs = [places.create_location(conn, org=org, loc=places.LocationInput(
        name=f"L{i}", tz_name=tz, lat=-35.0 + 9 * i, lon=-120.0 + 30 * i, elev=100.0 * i,
        kc=0.9)) for i, tz in enumerate(ZONES)]
    names = [f"B{d:03d}" for d in range(devices)]
    conn.execute(
        "INSERT INTO calibrated (time, device, location, tair, rh, p, precip, swdw, pardw,"
        " wind_speed, wind_gust, wind_direction, tbelow, lfw, tdew, ea, vpd, slp)"
        " SELECT t, 'B' || lpad(d::text, 3, '0'), (%(locs)s::uuid[])[1 + d %% %(nloc)s],"
        "  15 + 10 * sin(i / 40.0 + d), 0.55 + 0.4 * cos(i / 30.0), 98 + (d %% 5) * 0.5,"
        "  CASE WHEN (i + d) %% 97 = 0 THEN 0.4 ELSE 0 END,"
        "  greatest(0, 900 * sin((i %% 288) / 288.0 * 6.283 - 1.6)),"
        "  greatest(0, 1800 * sin((i %% 288) / 288.0 * 6.283 - 1.6)),"
        "  2 + sin(i / 7.0), 4 + sin(i / 5.0), (i * 13 + d * 31) %% 360,"
        "  14 + 9 * sin(i / 40.0 + d), CASE WHEN i %% 288 < 60 THEN 5 ELSE 0 END,"
        "  8 + sin(i / 50.0), 1.1, 0.6, 101.3"
        " FROM generate_series(0, %(devices)s - 1) AS d,"
        "  generate_series(0, %(slots)s - 1) AS i,"
        "  LATERAL (SELECT %(start)s::timestamptz + i * interval '5 minutes') AS x(t)",
        {"locs": locs, "nloc": len(locs), "devices": devices,
         "slots": days * SLOTS_PER_DAY, "start": START})
    n = conn.execute("SELECT count(*) FROM calibrated").fetchone()[0]  # type: ignore[index]
    conn.commit()
    return names, n


def _baseline_sql() -> sql.Composed:
    """The plain GROUP BY for hourly, with the registry's MEAN/MIN/MAX/SUM hourly columns."""
    fn = {Rollup.MEAN: "avg", Rollup.MIN: "min", Rollup.MAX: "max", Rollup.SUM: "sum"}
    cols = [c for c in TABLES["hourly"].columns if c.rollup in fn]
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in cols)
    exprs = sql.SQL(", ").join(
        sql.SQL("{}({})").format(sql.SQL(fn[c.rollup]), sql.Identifier(c.source or ""))
        for c in cols)
    return sql.SQL(
        "INSERT INTO bench_hourly (time, device, {names}, sample_pct)"
        " SELECT time_bucket('1 hour', time), device, {exprs}, count(*) / 12.0"
        " FROM calibrated GROUP BY 1, 2").format(names=names, exprs=exprs)


def _timed(fn) -> float:  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table of results."""
    ap = argparse.ArgumentParser(prog="python -m bench.aggregate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100 * 35 * SLOTS_PER_DAY,
                    help="readings to load (default 1,008,000)")
    ap.add_argument("--devices", type=int, default=100)
    ap.add_argument("--quick", action="store_true", help="100k rows")
    ap.add_argument("--repeat", type=int, default=2, help="timed repetitions (best is kept)")
    ap.add_argument("--workers", type=int, default=2,
                    help="workers of the second backfill measurement (tables side by side)")
    ap.add_argument("--database-url", default=None,
                    help="server whose maintenance database may create databases")
    args = ap.parse_args(argv)
    rows = 100_800 if args.quick else args.rows
    days = max(2, round(rows / (args.devices * SLOTS_PER_DAY)))
    end = START + timedelta(days=days)
    with scratch_database(args.database_url, prefix="bench_aggregate") as url, \
            db.connect(url) as conn:
        t_load = time.perf_counter()
        names, n = _load(conn, devices=args.devices, days=days)
        conn.autocommit = True
        conn.execute("VACUUM ANALYZE calibrated")
        conn.autocommit = False
        print(f"loaded {n:,} rows ({args.devices} devices x {days} days, {len(ZONES)} zones)"
              f" in {time.perf_counter() - t_load:.1f} s", flush=True)
        conn.execute("CREATE TABLE bench_hourly (LIKE hourly INCLUDING DEFAULTS)")
        conn.commit()

        def baseline() -> None:
            conn.execute("TRUNCATE bench_hourly")
            conn.execute(_baseline_sql())
            conn.commit()

        def backfill(workers: int) -> None:
            for t in rollups.TABLE_ORDER:
                conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(t)))
            conn.commit()
            jobs.backfill(conn, tables=rollups.TABLE_ORDER, start=START, end=end,
                          devices=None, low_quality_pct=80.0, chunk_days=7, workers=workers,
                          connect=lambda: db.connect(url))

        def steps() -> dict[str, float]:
            for t in rollups.TABLE_ORDER:
                conn.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(t)))
            conn.commit()
            timings: dict[str, float] = {}
            with conn.transaction():
                rollups.recompute_range(conn, tables=rollups.TABLE_ORDER, start=START, end=end,
                                        first=True, last=True, devices=None,
                                        low_quality_pct=80.0, timings=timings)
            return timings

        def bare_pass() -> None:
            with conn.transaction():
                conn.execute("CREATE TEMP TABLE bench_cells ON COMMIT DROP AS"
                             " SELECT device, location, time_bucket('1 hour', time) AS cell,"
                             " count(*) FROM calibrated GROUP BY 1, 2, 3")

        baseline()  # warm the cache for both
        base_times, fill_times, par_times, bare_times = [], [], [], []
        parts: list[dict[str, float]] = []
        for _ in range(max(1, args.repeat)):
            base_times.append(_timed(baseline))
            fill_times.append(_timed(lambda: backfill(1)))
            par_times.append(_timed(lambda: backfill(args.workers)))
            bare_times.append(_timed(bare_pass))
            parts.append(steps())
            print(f"  baseline {base_times[-1]:.2f} s, backfill {fill_times[-1]:.2f} s,"
                  f" backfill --workers {args.workers} {par_times[-1]:.2f} s,"
                  f" bare pass {bare_times[-1]:.2f} s, steps "
                  + ", ".join(f"{k} {v:.2f}" for k, v in parts[-1].items()), flush=True)
        counts = {t: conn.execute(sql.SQL("SELECT count(*) FROM {}").format(
            sql.Identifier(t))).fetchone()[0] for t in rollups.TABLE_ORDER}  # type: ignore[index]
        conn.commit()

        # Incremental: the next hour for every device, with its marks, then one run.
        locs = dict(conn.execute(
            "SELECT DISTINCT ON (c.device) c.device, l.tz_name FROM calibrated c"
            " JOIN locations l ON l.id = c.location ORDER BY c.device, c.time DESC").fetchall())
        hour = [end + timedelta(minutes=5 * i) for i in range(12)]
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO calibrated (time, device, location, tair, rh, wind_speed, swdw)"
                " SELECT %s, %s, location, 20, 0.5, 2, 300 FROM calibrated"
                " WHERE device = %s ORDER BY time DESC LIMIT 1",
                [(t, d, d) for d in names for t in hour])
        marks = set()
        for d in names:
            marks |= dirty.bucket_marks(d, hour, zone(locs[d]))
        dirty.write_marks(conn, marks)
        conn.commit()
        t0 = time.perf_counter()
        inc = {t: 0 for t in rollups.TABLE_ORDER}
        for t in rollups.TABLE_ORDER:
            with conn.transaction():
                inc[t] = rollups.process_marks(conn, table=t, limit=100000,
                                               low_quality_pct=80.0)
        t_inc = time.perf_counter() - t0

        # One reading 20 days late (its slot deleted first, as if it never arrived).
        late_t = START + timedelta(days=days - 20 if days > 20 else days // 2, minutes=35)
        dev = names[len(names) // 2]
        conn.execute("DELETE FROM calibrated WHERE device = %s AND time = %s", (dev, late_t))
        conn.execute(
            "INSERT INTO calibrated (time, device, location, tair) SELECT %s, %s, location, 99"
            " FROM calibrated WHERE device = %s ORDER BY time DESC LIMIT 1",
            (late_t, dev, dev))
        late_marks = dirty.bucket_marks(dev, [late_t], zone(locs[dev]))
        dirty.write_marks(conn, late_marks)
        conn.commit()
        t0 = time.perf_counter()
        late_buckets = 0
        for t in rollups.TABLE_ORDER:
            with conn.transaction():
                late_buckets += rollups.process_marks(conn, table=t, limit=1000,
                                                      low_quality_pct=80.0)
        t_late = time.perf_counter() - t0

    base, fill, par = min(base_times), min(fill_times), min(par_times)
    best = min(parts, key=lambda p: sum(p.values()))
    print()
    print("| Measure | Value |")
    print("|---|---:|")
    print(f"| rows | {n:,} ({args.devices} devices x {days} days, {len(ZONES)} zones) |")
    print(f"| rows written: hourly / local_hourly / daily | {counts['hourly']:,} / "
          f"{counts['local_hourly']:,} / {counts['daily']:,} |")
    print(f"| baseline: plain GROUP BY time_bucket for hourly (best of {len(base_times)}) |"
          f" {base:.2f} s |")
    print(f"| backfill of all three tables (best of {len(fill_times)}) | {fill:.2f} s |")
    print(f"| **ratio backfill / baseline (goal <= 1.5)** | **{fill / base:.2f}** |")
    print(f"| median ratio | {statistics.median(fill_times) / statistics.median(base_times):.2f} |")
    print(f"| backfill with --workers {args.workers} (best of {len(par_times)}) | {par:.2f} s |")
    print(f"| **ratio backfill --workers {args.workers} / baseline** | **{par / base:.2f}** |")
    print(f"| bare pass: count(*) per device, location and UTC hour / baseline |"
          f" {min(bare_times) / base:.2f} |")
    for k, v in best.items():
        print(f"| one-piece backfill step: {k} | {v:.2f} s ({v / base:.2f} x baseline) |")
    print(f"| incremental: {len(names)} devices' latest hour, marks hourly/local/daily |"
          f" {inc['hourly']}/{inc['local_hourly']}/{inc['daily']} |")
    print(f"| incremental run time | {t_inc * 1000:.0f} ms |")
    print(f"| late reading (20 days): buckets recomputed | {late_buckets} |")
    print(f"| late reading run time | {t_late * 1000:.0f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
