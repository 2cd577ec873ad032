"""The device page as served: a week of 5-minute data in 4 series, through gunicorn (or the
nginx edge in front of it, --edge).

On a throwaway PostgreSQL, one organisation with one device holding a week of 5-minute readings
(tair, rh, p, wind_speed: 2016 rows) and 30 daily rows; the app under gunicorn (2 workers, the
deployed config); headless Chromium signs in once, then loads the device page with the 4
columns ticked, cache off, N times. Per load: bytes transferred (page, stylesheet, scripts,
uPlot, the API's JSON for the chart and the daily panel), time from navigation start to the
chart's first draw (`sds-chart-drawn`), and a zoom redraw. Baseline, interleaved in the same
browser: fetching and parsing the same API JSON alone (what any client pays for the data), so
the ratio says what the page and the chart add on top of the data. Then the same loads with
the browser cache on (a returning visitor: scripts and styles cached, data fetched anew).
"""

from __future__ import annotations

import statistics
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import scratch_database
from people import accounts
from shared import db, places
from testbed.apiserver import gunicorn_api
from testbed.browser import chromium, wait_for
from testbed.nginx import NginxEdge

END = datetime(2026, 3, 8, tzinfo=UTC)
STEPS = 7 * 24 * 12
COLUMNS = ("tair", "rh", "p", "wind_speed")
EMAIL, PASSWORD = "bench@example.org", "bench-password"


def seed(url: str) -> None:
    """One organisation, user, location and device with a week of readings."""
    with db.connect(url) as conn:
        org = accounts.create_org(conn, name="Bench")
        accounts.create_user(conn, org=org, email=EMAIL, password=PASSWORD)
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Field", tz_name="America/Chicago"))
        places.register_device(conn, org=org, name="W1")
        places.deploy_device(conn, device="W1", location=loc, start=END - timedelta(days=60))
        conn.execute(
            "INSERT INTO calibrated (time, device, location, tair, rh, p, wind_speed)"
            " SELECT %s - g * interval '5 minutes', 'W1', %s, 15 + 8 * sin(g / 45.8),"
            " 0.6 - 0.25 * sin(g / 45.8), 101.3 + 0.3 * sin(g / 500.0), 3 + 2 * abs(sin(g / 37.0))"
            " FROM generate_series(0, %s - 1) g", (END, loc, STEPS))
        conn.execute(
            "INSERT INTO daily (time, device, location, maxt, mint, et, etc, precip,"
            " crop_water_demand, gdd) SELECT (%s::date - g) + time '06:00', 'W1', %s, 22, 8,"
            " 4.2, 3.4, 1.0, -2.4, 5 FROM generate_series(0, 29) g", (END, loc))


MEASURE = """
const done = arguments[arguments.length - 1];
const nav = performance.getEntriesByType('navigation')[0];
const res = performance.getEntriesByType('resource');
const drawn = performance.getEntriesByName('sds-chart-drawn')[0].startTime;
const api = window.sdsDashboard, u = api.main;
const t0 = performance.now();
u.setScale('x', {min: u.data[0][600], max: u.data[0][900]});  // uPlot redraws in a microtask
const wait = () => api.lastDraw > t0 ? done({
    bytes: nav.encodedBodySize + res.reduce((s, r) => s + r.encodedBodySize, 0),
    requests: 1 + res.length, drawn, zoom: api.lastDraw - t0, html: nav.responseEnd,
    data: res.filter(r => r.name.includes('/api/v2/data/calibrated')).map(
      r => [r.startTime, r.responseEnd])[0],
    points: u.data[0].length, series: u.series.length - 1,
    api: res.filter(r => r.name.includes('/api/v2/data/')).map(r => r.encodedBodySize)})
  : setTimeout(wait, 0);
Promise.resolve().then(wait);
"""

FETCH_ONLY = """
const done = arguments[arguments.length - 1];
const t0 = performance.now();
fetch(arguments[0], {cache: 'no-store'}).then(r => r.json()).then(rows =>
  done({ms: performance.now() - t0, rows: rows.length}));
"""


def _api_url(base: str) -> str:
    start = (END - timedelta(minutes=5 * (STEPS - 1))).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (f"{base}/api/v2/data/calibrated?device=W1&select=time,{','.join(COLUMNS)}"
            f"&start_time={start}&end_time={END.strftime('%Y-%m-%dT%H:%M:%SZ')}"
            "&local_time=America/Chicago&temp=c&pres=mb&size=mm&ratio=pct&speed=mps")


@contextmanager
def _front(api: str, base_dir: Path, edge: bool) -> Iterator[str]:
    """The base URL the browser uses: gunicorn itself, or the shipped nginx edge in front of
    it (which serves the static files itself, docs/operations.md "The edge (nginx)")."""
    if not edge:
        yield api
        return
    server = NginxEdge().start([urlsplit(api).netloc], base_dir)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def measure(repeat: int, database_url: str | None = None, *, edge: bool = False
            ) -> dict[str, Any]:
    """Medians of `repeat` page loads and of as many bare API fetches, interleaved."""
    with scratch_database(database_url, prefix="bench_web") as url, \
            tempfile.TemporaryDirectory(prefix="bench-web-") as logs:
        seed(url)
        with gunicorn_api(url, Path(logs), workers=2, SDS_API_RATE_LIMIT="0") as api, \
                _front(api, Path(logs) / "edge", edge) as base, \
                chromium(width=1400, height=1000) as driver:
            driver.execute_cdp_cmd("Network.enable", {})
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
            driver.get(f"{base}/dashboard/login")
            driver.find_element("id", "email").send_keys(EMAIL)
            driver.find_element("id", "password").send_keys(PASSWORD)
            driver.find_element("id", "sign-in").click()
            wait_for(driver, "document.getElementById('devices') !== null")
            page = (f"{base}/dashboard/devices/W1?table=calibrated&span=7&end=2026-03-08"
                    f"&cols={','.join(COLUMNS)}")
            loads, fetches = [], []
            for i in range(repeat + 1):  # the first round warms up browser, server and caches
                driver.get(page)
                wait_for(driver, "document.getElementById('water').dataset.state === 'drawn'"
                                 " && performance.getEntriesByName('sds-chart-drawn').length > 0",
                         timeout=60)
                got = driver.execute_async_script(MEASURE)
                alone = driver.execute_async_script(FETCH_ONLY, _api_url(base))
                if i:
                    loads.append(got)
                    fetches.append(alone)
            # A returning visitor: static files from the browser cache (max-age 1 h), data not.
            driver.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
            cached = []
            for i in range(repeat + 1):
                driver.get(page)
                wait_for(driver, "document.getElementById('water').dataset.state === 'drawn'"
                                 " && performance.getEntriesByName('sds-chart-drawn').length > 0",
                         timeout=60)
                got = driver.execute_async_script(MEASURE)
                if i:
                    cached.append(got)
    last = loads[-1]
    return {
        "bytes": statistics.median(r["bytes"] for r in loads),
        "requests": last["requests"],
        "api_bytes": sum(last["api"]),
        "drawn": statistics.median(r["drawn"] for r in loads),
        "zoom": statistics.median(r["zoom"] for r in loads),
        "html": statistics.median(r["html"] for r in loads),
        "data_start": statistics.median(r["data"][0] for r in loads),
        "data_end": statistics.median(r["data"][1] for r in loads),
        "fetch": statistics.median(f["ms"] for f in fetches),
        "cached_drawn": statistics.median(r["drawn"] for r in cached),
        "cached_data_start": statistics.median(r["data"][0] for r in cached),
        "points": last["points"], "series": last["series"],
        "rows": fetches[-1]["rows"],
    }


def run(repeat: int, database_url: str | None = None, *, edge: bool = False) -> dict[str, Any]:
    """Measure and print the device page's figures (`edge`: through the nginx edge)."""
    found = measure(repeat, database_url, edge=edge)
    front = "the nginx edge, then gunicorn" if edge else "gunicorn"
    print(f"\ndevice page as served ({front}, 2 workers): a week of 5-minute data, "
          f"{found['series']} series x {found['points']} points, headless Chromium, cache off, "
          f"medians of {repeat}")
    print(f"  page weight: {found['bytes'] / 1024:.0f} KiB in {found['requests']} requests "
          f"(API JSON {found['api_bytes'] / 1024:.0f} KiB)")
    print(f"  first render (navigation start -> chart drawn): {found['drawn']:.0f} ms; HTML "
          f"received at {found['html']:.0f} ms, chart data requested at "
          f"{found['data_start']:.0f} ms and received at {found['data_end']:.0f} ms")
    print(f"  returning visitor (scripts and styles from the browser cache): first render "
          f"{found['cached_drawn']:.0f} ms, chart data requested at "
          f"{found['cached_data_start']:.0f} ms")
    print(f"  baseline, the same API JSON fetched and parsed alone: {found['fetch']:.0f} ms "
          f"({found['rows']} rows)")
    print(f"  ratio first render / data alone: {found['drawn'] / found['fetch']:.2f}")
    print(f"  zoom redraw (setScale to a day, 4 series): {found['zoom']:.1f} ms")
    return found
