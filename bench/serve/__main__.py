"""`/data` through gunicorn against in-process baselines measured in the same run.

    .venv/bin/python -m bench.serve [--quick] [--big] [--database-url URL] [--repeat N]

Starts a throwaway PostgreSQL (TimescaleDB) unless --database-url names a server whose
maintenance database may create databases, makes two databases and loads `calibrated` with
INSERT ... SELECT generate_series (20 devices at one location, 5-minute rows, random values in
every column): the base history (default 200k rows, --big 1M) and, in the second, the same newest
rows plus 9x older history. It serves each with gunicorn (deploy/gunicorn.conf.py, 2 sync
workers) on free loopback ports and times:

1. a 10,000-row JSON page over HTTP / the same SQL + orjson.dumps of the same rows in-process
   (goal <= 1.5); flask.jsonify of those rows is the naive peer;
2. the same page as CSV / COPY (same query) TO STDOUT (goal <= 1.5);
3. history growth: the same page requests on the 10x database / on the base one
   (goal <= 1.25), for a device page and a location page;
4. the 50th cursor page of a location listing / the first page (goal <= 1.25), both orders,
   on the 10x database;
5. small requests (one day of hourly rows, API-key auth) requests/s / the constant
   /api/v2/health on the same server (goal >= 0.25), with p99 latencies;
6. through the shipped nginx edge (deploy/nginx/nginx.conf): 1000-row JSON pages/s with two
   API instances / with one (same machine; each instance 2 sync workers), and the edge's own
   cost (10k page through the edge / straight from gunicorn, goal <= 1.3: the heavy-page
   meter costs a lone client nothing);
7. gzip at the edge: size and time of the 10k JSON and CSV pages with Accept-Encoding: gzip /
   without (time over loopback, where bytes cost nothing: the CPU price of the saving).

Times are medians of --repeat runs, subject and baseline interleaved so both see the same
background load. Prints a table of ratios; exits 0 whatever the ratios (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import orjson

from bench.common import database, server_url
from people import accounts
from shared import db, places, units
from shared.columns import TABLES

REPO = Path(__file__).resolve().parents[2]
DEVICES = 20
STEP = timedelta(minutes=5)
END = datetime(2026, 1, 1, tzinfo=UTC)  # newest reading; history grows backwards from here
PAGE = 10000
CURSOR_PAGE = 1000
CURSOR_DEPTH = 50
CURSOR_SECRET = "bench-cursor-secret"

_REAL_COLUMNS = [c for c in TABLES["calibrated"].columns if c.dtype == "real"]


def device_name(i: int) -> str:
    return f"B{i:05d}"


# ---- setup -----------------------------------------------------------------------------------

@dataclass
class World:
    url: str
    org: uuid.UUID
    location: uuid.UUID
    key: str


def seed(url: str) -> World:
    """Organisation, location, 20 devices deployed there, an API key."""
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench")
        user = accounts.create_user(conn, org=org, email="bench@example.com",
                                    password="bench-password")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Field", tz_name="America/Chicago"))
        for i in range(DEVICES):
            places.register_device(conn, org=org, name=device_name(i))
            places.deploy_device(conn, device=device_name(i), location=loc,
                                   start=datetime(2000, 1, 1, tzinfo=UTC))
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        conn.commit()
    return World(url, org, loc, key)


def load_calibrated(world: World, *, first_step: int, steps: int) -> None:
    """Rows for every device at steps [first_step, first_step + steps) before END."""
    values = ", ".join("(10 + 30 * random())::real" for _ in _REAL_COLUMNS)
    names = ", ".join(c.name for c in _REAL_COLUMNS)
    stmt = (
        f"INSERT INTO calibrated (time, device, location, {names})"
        f" SELECT %(end)s - (g / {DEVICES}) * interval '5 minutes',"
        f" 'B' || lpad((g %% {DEVICES})::text, 5, '0'), %(loc)s, {values}"
        " FROM generate_series(%(lo)s, %(hi)s) g"
    )
    with db.connect(world.url, autocommit=True) as conn:
        conn.execute(stmt, {"end": END, "loc": world.location, "lo": first_step * DEVICES,
                            "hi": (first_step + steps) * DEVICES - 1})
        conn.execute("VACUUM ANALYZE calibrated")


def load_hourly(world: World, days: int) -> None:
    """Hourly rows for every device over the last `days` days."""
    with db.connect(world.url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO hourly (time, device, location, tair, maxt, mint, rh, p, precip,"
            " wind_speed, sample_pct, low_quality)"
            " SELECT %(end)s - h * interval '1 hour', 'B' || lpad(d::text, 5, '0'), %(loc)s,"
            " 20 + random(), 25, 15, random(), 101, 0, 3, 1, false"
            " FROM generate_series(1, %(hours)s) h, generate_series(0, %(devices)s - 1) d",
            {"end": END, "loc": world.location, "hours": days * 24, "devices": DEVICES})
        conn.execute("VACUUM ANALYZE hourly")


class Gunicorn:
    """gunicorn serving serve.wsgi:app on a free loopback port, with the deploy config
    (testbed.apiserver.GunicornServer)."""

    def __init__(self, url: str, workers: int = 2) -> None:
        from shared.config import Settings
        from testbed.apiserver import GunicornServer

        self.server = GunicornServer().start(
            {"SDS_DATABASE_URL": url, "SDS_CURSOR_SECRET": CURSOR_SECRET,
             "SDS_LOG_LEVEL": "WARNING", "SDS_DB_POOL_MAX": str(Settings().db_pool_max),
             # The load test sends thousands of requests a minute with one key; the
             # limiter's own cost is bench/auth's to measure, its 429s are not ours; so are
             # the fair-share caps' 429s and 503s (tests/serve/test_fairshare.py).
             "SDS_API_RATE_LIMIT": "0", "SDS_API_USER_RATE_LIMIT": "0",
             "SDS_API_ORG_RATE_LIMIT": "0", "SDS_API_USER_CONCURRENCY": "0",
             "SDS_API_ORG_CONCURRENCY": "0", "SDS_API_HEAVY_SLOTS": "0"},
            workers=workers)
        self.port = self.server.port

    def worker_peak_rss_kib(self) -> int:
        """Largest VmHWM (peak resident memory) among the worker processes."""
        peak = 0
        master = self.server.pid
        children = Path(f"/proc/{master}/task/{master}/children")
        for pid in children.read_text().split():
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        return peak

    def stop(self) -> None:
        """SIGTERM, wait, and remove the log directory."""
        self.server.cleanup()


# ---- measuring -------------------------------------------------------------------------------

def get(port: int, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, bytes, dict[str, str]]:
    """One GET on a new connection (gunicorn's sync workers close after each response)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, body, dict(response.getheaders())
    finally:
        conn.close()


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def medians(repeat: int, **cases: Callable[[], Any]) -> dict[str, float]:
    """Median seconds of each case, the cases interleaved round by round (after one warm-up)."""
    for fn in cases.values():
        fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(timed(fn))
    return {name: statistics.median(values) for name, values in samples.items()}


def data_path(table: str, **params: Any) -> str:
    return f"/api/v2/data/{table}?{urlencode(params)}"


def scan_for(world: World, *, device: str, start: datetime, end: datetime,
             csv: bool) -> Any:
    """The serve.queries.Scan the API builds for a 10,000-row page of one device."""
    from serve import queries

    table = TABLES["calibrated"]
    return queries.Scan(
        table=table, columns=table.columns,
        units={p: units.parse_unit(p, None) for p in units.UNIT_PARAMS}, org=world.org,
        device=device, location=None, start=start, end=end, limit=PAGE, csv=csv)


class InProcess:
    """The baselines: the API's own SQL run in this process."""

    def __init__(self, url: str) -> None:
        self.conn = db.connect(url, autocommit=True, options="-c TimeZone=UTC")

    def rows(self, scan) -> list[tuple[Any, ...]]:  # type: ignore[no-untyped-def]
        from serve import queries

        stmt, params = queries.page_statement(scan)
        with self.conn.cursor(binary=True) as cur:
            # Never prepared: after five executions psycopg would prepare it and PostgreSQL
            # then switches to a generic plan, measured a third slower (97 vs 73 ms), which
            # would flatter every ratio against this baseline in the longer default run.
            return cur.execute(stmt, params, prepare=False).fetchall()

    def orjson_page(self, scan) -> bytes:  # type: ignore[no-untyped-def]
        names = [c.name for c in scan.columns]
        return orjson.dumps([dict(zip(names, r, strict=False)) for r in self.rows(scan)],
                            option=orjson.OPT_UTC_Z)

    def jsonify_page(self, scan, app) -> bytes:  # type: ignore[no-untyped-def]
        import flask

        names = [c.name for c in scan.columns]
        with app.app_context():
            return flask.jsonify([dict(zip(names, r, strict=False))
                                  for r in self.rows(scan)]).get_data()

    def copy_csv(self, scan) -> bytes:  # type: ignore[no-untyped-def]
        from serve import queries

        stmt, params = queries.copy_statement(scan)
        out = bytearray()
        with self.conn.cursor() as cur, cur.copy(stmt, params) as copy:
            for block in copy:
                out += block
        return bytes(out)


def load_test(port: int, cases: dict[str, tuple[Any, ...]], seconds: float,
              threads: int, slice_seconds: float = 1.0) -> dict[str, tuple[float, float]]:
    """{case: (requests/s, p99 seconds)} of `threads` clients repeating each case's GET
    (path, headers[, port of another server than `port`]).

    The cases take turns in slices of `slice_seconds` until each had `seconds`, so a change
    of background load during the run affects them alike.
    """
    latencies: dict[str, list[float]] = {name: [] for name in cases}
    busy: dict[str, float] = {name: 0.0 for name in cases}
    failures: list[str] = []
    lock = threading.Lock()

    def client(path: str, headers: dict[str, str], stop: float, out: list[float],
               to: int) -> None:
        mine = []
        while time.monotonic() < stop:
            start = time.perf_counter()
            status, _, _ = get(to, path, headers)
            mine.append(time.perf_counter() - start)
            if status != 200:
                failures.append(f"{path}: {status}")
        with lock:
            out.extend(mine)

    for _ in range(max(1, round(seconds / slice_seconds))):
        for name, (path, headers, *other) in cases.items():
            began = time.monotonic()
            stop = began + slice_seconds
            to = other[0] if other else port  # a case may name its own server
            workers = [threading.Thread(target=client, args=(path, headers, stop,
                                                             latencies[name], to))
                       for _ in range(threads)]
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            busy[name] += time.monotonic() - began
    if failures:
        raise RuntimeError(f"{len(failures)} non-200 answers, e.g. {failures[0]}")
    result = {}
    for name, values in latencies.items():
        values.sort()
        result[name] = (len(values) / busy[name],
                        values[min(len(values) - 1, int(len(values) * 0.99))])
    return result


# ---- the run -------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repeats and shorter load tests (about 1 minute)")
    parser.add_argument("--big", action="store_true",
                        help="1M rows growing to 10M (the issue's sizes; several minutes)")
    parser.add_argument("--database-url", help="use this server instead of a throwaway one")
    parser.add_argument("--repeat", type=int, help="timed runs per case (default 15; quick 7)")
    args = parser.parse_args(argv)
    repeat = args.repeat or (7 if args.quick else 15)
    load_seconds = 3.0 if args.quick else 8.0
    small_rows = 1_000_000 if args.big else 200_000
    steps = small_rows // DEVICES

    results: list[tuple[str, float, str, str]] = []
    began = time.monotonic()
    with server_url(args.database_url) as admin, database(admin, prefix="bench_serve") as url, \
            database(admin, prefix="bench_serve") as big_url:
        # `url`: the base history; `big_url`: the same plus 9x older history. Both are served
        # side by side and timed interleaved, so background load hits both alike.
        world = seed(url)
        big_world = seed(big_url)
        t = time.monotonic()
        load_calibrated(world, first_step=0, steps=steps)
        load_hourly(world, days=7)
        print(f"loaded {small_rows:,} calibrated rows in {time.monotonic() - t:.1f} s",
              flush=True)
        t = time.monotonic()
        load_calibrated(big_world, first_step=0, steps=10 * steps)
        print(f"loaded {10 * small_rows:,} calibrated rows in {time.monotonic() - t:.1f} s",
              flush=True)
        server = Gunicorn(url)
        big_server = Gunicorn(big_url)
        edges: list[Any] = []
        second: Gunicorn | None = None
        base = InProcess(url)
        try:
            from serve import create_app
            from serve.pool import pool
            from shared.config import Settings

            jsonify_app = create_app(Settings(database_url=url, cursor_secret=CURSOR_SECRET))
            auth = {"Authorization": f"Apikey {world.key}"}
            big_auth = {"Authorization": f"Apikey {big_world.key}"}
            device = device_name(7)
            page_end = END
            page_start = END - (PAGE - 1) * STEP  # exactly 10,000 rows of one device
            json_scan = scan_for(world, device=device, start=page_start, end=page_end, csv=False)
            csv_scan = scan_for(world, device=device, start=page_start, end=page_end, csv=True)
            json_path = data_path("calibrated", device=device, limit=PAGE,
                                  start_time=page_start.isoformat(),
                                  end_time=page_end.isoformat())
            loc_path = data_path("calibrated", location=str(world.location), limit=PAGE,
                                 start_time=(END - (PAGE // DEVICES - 1) * STEP).isoformat(),
                                 end_time=END.isoformat())
            big_loc_path = loc_path.replace(str(world.location), str(big_world.location))

            status, body, _ = get(server.port, json_path, auth)
            assert status == 200 and len(orjson.loads(body)) == PAGE, (status, body[:300])
            assert orjson.loads(body) == orjson.loads(base.orjson_page(json_scan))
            _, csv_body, _ = get(server.port, json_path, {**auth, "Accept": "text/csv"})
            assert csv_body.count(b"\n") == PAGE + 1

            # 1-2. 10,000-row pages against in-process baselines.
            m = medians(
                repeat,
                http_json=lambda: get(server.port, json_path, auth),
                orjson=lambda: base.orjson_page(json_scan),
                jsonify=lambda: base.jsonify_page(json_scan, jsonify_app),
                http_csv=lambda: get(server.port, json_path, {**auth, "Accept": "text/csv"}),
                copy=lambda: base.copy_csv(csv_scan),
            )
            results += [
                ("10k JSON page over HTTP / SQL + orjson in-process",
                 m["http_json"] / m["orjson"], "<= 1.5",
                 f"{m['http_json'] * 1e3:.0f} ms vs {m['orjson'] * 1e3:.0f} ms"),
                ("10k CSV page over HTTP / COPY TO STDOUT", m["http_csv"] / m["copy"], "<= 1.5",
                 f"{m['http_csv'] * 1e3:.0f} ms vs {m['copy'] * 1e3:.0f} ms"),
                ("SQL + flask.jsonify in-process / 10k JSON page over HTTP",
                 m["jsonify"] / m["http_json"], "(x faster)",
                 f"{m['jsonify'] * 1e3:.0f} ms vs {m['http_json'] * 1e3:.0f} ms"),
            ]
            print(f"pages measured ({time.monotonic() - began:.0f} s)", flush=True)

            # 3. history growth: the same requests on the 10x database and the base one.
            m = medians(repeat, device=lambda: get(server.port, json_path, auth),
                        big_device=lambda: get(big_server.port, json_path, big_auth),
                        location=lambda: get(server.port, loc_path, auth),
                        big_location=lambda: get(big_server.port, big_loc_path, big_auth))
            for name in ("device", "location"):
                results.append((
                    f"10k {name} page, {10 * small_rows / 10**6:g}M / "
                    f"{small_rows / 10**6:g}M rows", m["big_" + name] / m[name], "<= 1.25",
                    f"{m['big_' + name] * 1e3:.0f} ms vs {m[name] * 1e3:.0f} ms"))

            # 4. cursor depth: page 50 of a location listing against page 1, both orders.
            for order in ("asc", "desc"):
                params = dict(location=str(big_world.location), limit=CURSOR_PAGE, order=order,
                              start_time=(END - 10 * steps * STEP).isoformat(),
                              end_time=END.isoformat(), select="time,device,tair,rh,p")
                first = data_path("calibrated", **params)
                path = first
                for _ in range(CURSOR_DEPTH - 1):
                    status, _, headers = get(big_server.port, path, big_auth)
                    assert status == 200
                    path = data_path("calibrated", **params, cursor=headers["X-Cursor-Next"])
                deep = path
                m = medians(repeat,
                            first=lambda first=first: get(big_server.port, first, big_auth),
                            deep=lambda deep=deep: get(big_server.port, deep, big_auth))
                results.append((f"page {CURSOR_DEPTH} / page 1 ({order}, 1000-row pages)",
                                m["deep"] / m["first"], "<= 1.25",
                                f"{m['deep'] * 1e3:.1f} ms vs {m['first'] * 1e3:.1f} ms"))

            # 5. small requests against the constant endpoint.
            day = END - timedelta(days=1)
            small_path = data_path("hourly", device=device, start_time=day.isoformat(),
                                   end_time=(END - timedelta(hours=1)).isoformat())
            status, body, _ = get(server.port, small_path, auth)
            assert status == 200 and len(orjson.loads(body)) == 24, body[:200]
            load = load_test(server.port, {
                "health": ("/api/v2/health", {}),
                "data": (small_path, auth),
                # Attribution: the same constant work behind API-key authentication.
                "schemas": ("/api/v2/schemas", auth),
            }, load_seconds, threads=4)
            (health_rps, health_p99), (data_rps, data_p99), (authed_rps, authed_p99) = (
                load["health"], load["data"], load["schemas"])
            results.append(("small requests/s: 1 day hourly (Apikey) / constant endpoint",
                            data_rps / health_rps, ">= 0.25",
                            f"{data_rps:.0f}/s (p99 {data_p99 * 1e3:.1f} ms) vs {health_rps:.0f}/s"
                            f" (p99 {health_p99 * 1e3:.1f} ms)"))
            results.append(("  attribution: /schemas (Apikey, constant) / constant endpoint",
                            authed_rps / health_rps, "(info)",
                            f"{authed_rps:.0f}/s (p99 {authed_p99 * 1e3:.1f} ms)"))
            results.append(("  attribution: 1 day hourly / /schemas (both Apikey)",
                            data_rps / authed_rps, "(info)", ""))
            peak = server.worker_peak_rss_kib()

            # 6. API replicas behind the edge: the same server alone, and with a second one.
            from testbed.nginx import NginxEdge

            second = Gunicorn(url)
            edges.append(NginxEdge().start([f"127.0.0.1:{server.port}"]))
            edges.append(NginxEdge().start([f"127.0.0.1:{server.port}",
                                            f"127.0.0.1:{second.port}"]))
            one, two = edges
            k_path = data_path("calibrated", device=device, limit=1000,
                               start_time=(END - 999 * STEP).isoformat(), end_time=END.isoformat())
            assert len(orjson.loads(get(two.port, k_path, auth)[1])) == 1000
            load = load_test(one.port, {"one": (k_path, auth, one.port),
                                        "two": (k_path, auth, two.port)},
                             load_seconds, threads=8)
            (one_rps, one_p99), (two_rps, two_p99) = load["one"], load["two"]
            results.append(("1000-row pages/s through the edge: 2 API instances / 1",
                            two_rps / one_rps, "(info)",
                            f"{two_rps:.0f}/s (p99 {two_p99 * 1e3:.0f} ms) vs {one_rps:.0f}/s "
                            f"(p99 {one_p99 * 1e3:.0f} ms), 8 clients, {os.cpu_count()} cores"))
            m = medians(repeat, edge=lambda: get(one.port, json_path, auth),
                        direct=lambda: get(server.port, json_path, auth))
            # Issue 30: the edge's heavy-page meter must cost a lone client nothing.
            results.append(("10k JSON page through the edge / straight from gunicorn",
                            m["edge"] / m["direct"], "<= 1.3",
                            f"{m['edge'] * 1e3:.0f} ms vs {m['direct'] * 1e3:.0f} ms"))

            # 7. gzip at the edge, JSON and CSV.
            for fmt, accept in (("JSON", "application/json"), ("CSV", "text/csv")):
                plain_h = {**auth, "Accept": accept}
                gz_h = {**plain_h, "Accept-Encoding": "gzip"}
                _, plain, _ = get(one.port, json_path, plain_h)
                _, packed, headers = get(one.port, json_path, gz_h)
                assert headers.get("Content-Encoding") == "gzip"
                m = medians(repeat, plain=lambda h=plain_h: get(one.port, json_path, h),
                            gz=lambda h=gz_h: get(one.port, json_path, h))
                results.append((f"10k {fmt} page gzipped at the edge: size / plain",
                                len(packed) / len(plain), "(info)",
                                f"{len(packed) / 1e6:.2f} MB vs {len(plain) / 1e6:.2f} MB"))
                results.append((f"10k {fmt} page gzipped at the edge: time / plain",
                                m["gz"] / m["plain"], "(info)",
                                f"{m['gz'] * 1e3:.0f} ms vs {m['plain'] * 1e3:.0f} ms "
                                "(loopback)"))
        finally:
            for edge in edges:
                edge.cleanup()
            if second is not None:
                second.stop()
            server.stop()
            big_server.stop()
            base.conn.close()
            pool(jsonify_app).close()

    print()
    print(f"bench.serve ({'big' if args.big else 'quick' if args.quick else 'default'} run, "
          f"{repeat} repeats, {time.monotonic() - began:.0f} s; load average "
          f"{os.getloadavg()[0]:.1f})")
    width = max(len(r[0]) for r in results)
    for name, ratio, goal, detail in results:
        verdict = ""
        if goal.startswith("<="):
            verdict = "met" if ratio <= float(goal[2:]) else "MISSED"
        elif goal.startswith(">="):
            verdict = "met" if ratio >= float(goal[2:]) else "MISSED"
        print(f"  {name:<{width}}  {ratio:6.2f}  {goal:<10} {verdict:<6}  {detail}")
    print(f"  peak gunicorn worker RSS: {peak / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
