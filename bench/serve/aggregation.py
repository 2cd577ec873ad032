"""`/data` aggregation: a year of one device's 5-minute readings reduced to a chart's points.

    .venv/bin/python -m bench.serve.aggregation [--quick] [--database-url URL] [--repeat N]

Starts a throwaway PostgreSQL (TimescaleDB) unless --database-url names one, loads one device's
year of 5-minute readings (105,120 rows, random values in every column) into `calibrated`
and the year's 8,760 `hourly` rows (the real rollup's rows are not needed: the baseline only
reads them), serves it with gunicorn (deploy/gunicorn.conf.py) and times, interleaved:

1. `points=1000` over the year, every column (12 h buckets from the readings: means, bands,
   totals, the wind's circular mean) / the same year read from `hourly` in one 8,760-row page
   (goal <= 2, issue 26);
2. the same with `select=time,tair` (a chart's one series with its band) / the same baseline;
3. `interval=1h` with `select=time,tair,precip`, answered from `hourly` (X-Aggregated-From),
   / the same baseline (what the stored-rollup path costs over reading the rows).

Times are medians of --repeat runs. Prints a table of ratios; exits 0 whatever they are.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import timedelta

import orjson

from bench.common import database, server_url
from bench.serve.__main__ import END, Gunicorn, _REAL_COLUMNS, data_path, get, medians, seed
from shared import db

YEAR = timedelta(days=365)
STEPS = 365 * 288
DEVICE = "B00000"


def load_year(url: str, location: object) -> None:
    """A year of 5-minute readings of DEVICE before END, and the year's hourly rows."""
    values = ", ".join("(10 + 30 * random())::real" for _ in _REAL_COLUMNS)
    names = ", ".join(c.name for c in _REAL_COLUMNS)
    with db.connect(url, autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO calibrated (time, device, location, {names})"
            f" SELECT %(end)s - g * interval '5 minutes', %(device)s, %(loc)s, {values}"
            " FROM generate_series(1, %(steps)s) g",
            {"end": END, "device": DEVICE, "loc": location, "steps": STEPS})
        conn.execute(
            "INSERT INTO hourly (time, device, location, tair, maxt, mint, rh, max_rh, min_rh,"
            " tdew, max_tdew, ea, vpd, slp, p, precip, prate, swdw, swuw, lwdw, lwuw, pardw,"
            " paruw, tabove, tbelow, lfw, wind_speed, wind_speed_max, wind_speed_min,"
            " wind_direction, wind_heading, sample_pct, low_quality)"
            " SELECT %(end)s - h * interval '1 hour', %(device)s, %(loc)s, 20, 25, 15, 0.5,"
            " 0.6, 0.4, 10, 11, 1.2, 0.8, 101, 100, 0.2, 2.4, 300, 50, 350, 400, 600, 80,"
            " 5, 22, 2, 3, 9, 1, 180, 'S', 1, false FROM generate_series(1, %(hours)s) h",
            {"end": END, "device": DEVICE, "loc": location, "hours": STEPS // 12})
        conn.execute("VACUUM ANALYZE calibrated")
        conn.execute("VACUUM ANALYZE hourly")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve.aggregation",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--database-url", help="use this server instead of a throwaway one")
    parser.add_argument("--repeat", type=int, help="timed runs per case (default 15; quick 5)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (5 if args.quick else 15)
    began = time.monotonic()
    results: list[tuple[str, float, str, str]] = []
    with server_url(args.database_url) as admin, database(admin, prefix="bench_agg") as url:
        world = seed(url)
        t = time.monotonic()
        load_year(url, world.location)
        print(f"loaded {STEPS:,} readings and {STEPS // 12:,} hourly rows in "
              f"{time.monotonic() - t:.1f} s", flush=True)
        server = Gunicorn(url)
        try:
            auth = {"Authorization": f"Apikey {world.key}"}
            span = {"device": DEVICE, "start_time": (END - YEAR).isoformat(),
                    "end_time": (END - timedelta(hours=1)).isoformat()}
            hourly = data_path("hourly", **span, limit=10000)
            points = data_path("calibrated", **span, points=1000)
            chart = data_path("calibrated", **span, points=1000, select="time,tair")
            stored = data_path("calibrated", **span, interval="1h", select="time,tair,precip",
                               limit=10000)
            status, body, _ = get(server.port, hourly, auth)
            assert status == 200 and len(orjson.loads(body)) == STEPS // 12, body[:300]
            for path, source, count in ((points, "calibrated", 730), (chart, "calibrated", 730),
                                        (stored, "hourly", STEPS // 12)):
                status, body, headers = get(server.port, path, auth)
                assert status == 200, body[:300]
                assert headers["X-Aggregated-From"] == source, headers
                assert len(orjson.loads(body)) == count, (path, len(orjson.loads(body)))
            m = medians(repeat, hourly=lambda: get(server.port, hourly, auth),
                        points=lambda: get(server.port, points, auth),
                        chart=lambda: get(server.port, chart, auth),
                        stored=lambda: get(server.port, stored, auth))
            base = m["hourly"]
            results += [
                ("points=1000 over a year, all columns / the year from hourly",
                 m["points"] / base, "<= 2",
                 f"{m['points'] * 1e3:.0f} ms vs {base * 1e3:.0f} ms (730 x 12 h buckets)"),
                ("points=1000, select=time,tair / the year from hourly",
                 m["chart"] / base, "(info)", f"{m['chart'] * 1e3:.0f} ms"),
                ("interval=1h, select=time,tair,precip (from hourly) / the year from hourly",
                 m["stored"] / base, "(info)", f"{m['stored'] * 1e3:.0f} ms (8,760 buckets)"),
            ]
        finally:
            server.stop()
    print()
    print(f"bench.serve.aggregation ({repeat} repeats, {time.monotonic() - began:.0f} s)")
    width = max(len(r[0]) for r in results)
    for name, ratio, goal, detail in results:
        verdict = ""
        if goal.startswith("<="):
            verdict = "met" if ratio <= float(goal[2:]) else "MISSED"
        print(f"  {name:<{width}}  {ratio:6.2f}  {goal:<7} {verdict:<6}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
