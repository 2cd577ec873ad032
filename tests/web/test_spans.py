"""Readable spans on the device page (issue 34), in headless Chromium against gunicorn: a year
of 5-minute readings is drawn as days with a min-max band (not 8-hour buckets alternating day
and night); a drag-zoom draws the finer buckets it fetched (the canvas kept the coarse ones);
the "Download CSV" of a bucketed view is the buckets drawn; a daily chart's axis labels are
not cut at the canvas's edge; at 360 px the chart is in the first screen, at least half of it
tall, with no sideways scroll. Device Y1 of org A: a year of 5-minute readings with a daily
cycle of +-6 degrees on a yearly one of +-12."""

from __future__ import annotations

import csv
import io
import math
from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from shared import places
from testbed.browser import chromium, wait_for
from tests.support.browsing import chart_drawn, fetch, fetch_header, sign_in
from tests.support.dashboard import END, World
from tests.support.readings import insert_readings, series

# For each time given (epoch seconds): is there a pixel of the first series' own colour, opaque
# (a line, not the translucent band or its edges), within 3 px of where the chart's current
# data put the line? The drawn line is the data's only if every one is.
ON_LINE = """
const u = window.sdsDashboard.main, times = arguments[0];
const cfg = JSON.parse(document.getElementById('sds-config').textContent);
const want = [1, 3, 5].map(i => parseInt(cfg.colours[0].slice(i, i + 2), 16));
return times.map(t => {
  const i = u.data[0].indexOf(t);
  const x = Math.round(u.valToPos(t, 'x', true));
  const y = Math.round(u.valToPos(u.data[1][i], u.series[1].scale, true));
  const px = u.ctx.getImageData(x - 3, y - 3, 7, 7).data;
  for (let k = 0; k < px.length; k += 4) {
    if (px[k + 3] > 200 && Math.abs(px[k] - want[0]) + Math.abs(px[k + 1] - want[1])
        + Math.abs(px[k + 2] - want[2]) < 60) return true;
  }
  return false;
});
"""

# The drawn buckets in view: times, means and the band's edges (series 1, 2, 3).
IN_VIEW = """
const u = window.sdsDashboard.main, d = window.sdsDashboard.drawn.data;
const a = Math.floor(u.scales.x.min), b = Math.ceil(u.scales.x.max);
const out = [];
d[0].forEach((t, i) => { if (t >= a && t <= b && d[1][i] !== null)
  out.push([t, d[1][i], d[2][i], d[3][i]]); });
return out;
"""


@pytest.fixture(scope="module")
def year(world: World) -> str:
    """Device Y1 at North field: a year of 5-minute readings (105,121 rows) up to END."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="Y1")
        places.deploy_device(conn, device="Y1", location=world.north,
                             start=END - timedelta(days=400))
        def tair(_i: int, t: datetime) -> float:
            s = t.timestamp()
            return 10 + 12 * math.sin(s / 5022000.0) + 6 * math.sin(s / 13751.0)

        insert_readings(conn, "Y1", world.north,
                        series(END - timedelta(days=365), n=365 * 288 + 1, tair=tair, rh=0.6))
        conn.commit()
    with psycopg.connect(world.url, autocommit=True) as conn:
        conn.execute("ANALYZE calibrated")
    return "Y1"


def open_year(browser: WebDriver, server: str, device: str) -> None:
    """Y1's year of calibrated air temperature, in UTC."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{device}?table=calibrated&span=365"
                f"&end={END.date().isoformat()}&cols=tair&tz=UTC")
    chart_drawn(browser, "chart", loads=1)


def drag_zoom(browser: WebDriver, start: float, end: float) -> None:
    """Drag across the plot from time `start` to `end` (epoch seconds), as a person does."""
    over = browser.find_element(By.CSS_SELECTOR, "#chart .u-over")
    x0, x1, width = browser.execute_script(
        "const u = window.sdsDashboard.main;"
        " return [u.valToPos(arguments[0], 'x'), u.valToPos(arguments[1], 'x'),"
        " u.over.getBoundingClientRect().width]", start, end)
    middle = width / 2
    (ActionChains(browser).move_to_element_with_offset(over, int(x0 - middle), 20)
     .click_and_hold().move_by_offset(int((x1 - x0) / 2), 0)
     .move_by_offset(int((x1 - x0) / 2), 0).release().perform())


def test_a_year_is_days_with_a_band_and_a_drag_zoom_draws_the_finer_buckets(
        server: str, browser: WebDriver, year: str, shots: Path) -> None:
    open_year(browser, server, year)
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-aggregated") == "1d"  # not 8h: no day-night sawtooth
    status = browser.find_element(By.ID, "status").text
    assert "buckets of 1d" in status, status
    days = browser.execute_script(IN_VIEW)
    assert 365 <= len(days) <= 367, len(days)
    assert all(lo < mean < hi for _, mean, lo, hi in days[1:-1])  # the day's band around it
    browser.save_screenshot(str(shots / "34-year-days.png"))

    drag_zoom(browser, (END - timedelta(days=20)).timestamp(),
              (END - timedelta(days=10)).timestamp())
    wait_for(browser, "document.getElementById('chart').dataset.aggregated === '30m'")
    view = browser.execute_script(
        "const s = window.sdsDashboard.main.scales.x; return [s.min, s.max]")
    assert 8 * 86400 < view[1] - view[0] < 12 * 86400, view
    # Where the fetched half-hours put the line at every daily high and low of the view, the
    # canvas has the line (the coarse days' line lies degrees away from there).
    fine = browser.execute_script(
        "const u = window.sdsDashboard.main, a = u.scales.x.min + 3600, b = u.scales.x.max - 3600;"
        " const t = u.data[0], v = u.data[1], out = [];"
        " for (let i = 1; i < t.length - 1; i++) if (t[i] > a && t[i] < b && v[i] !== null"
        "   && ((v[i] >= v[i - 1] && v[i] >= v[i + 1]) || (v[i] <= v[i - 1] && v[i] <= v[i + 1])))"
        "   out.push(t[i]);"
        " return out")
    assert len(fine) >= 15, fine
    hits = browser.execute_script(ON_LINE, fine)
    assert all(hits), [t for t, hit in zip(fine, hits, strict=True) if not hit]
    assert browser.execute_script("return window.sdsDashboard.drawn.interval") == "30m"
    assert "buckets of 30m" in browser.find_element(By.ID, "status").text
    browser.save_screenshot(str(shots / "34-year-drag-zoomed.png"))


def csv_of_view(browser: WebDriver) -> tuple[list[list[str]], str]:
    """The "Download CSV" link's file (fetched with the page's cookie) and its file name."""
    href = browser.find_element(By.ID, "csv").get_attribute("href")
    status, body = fetch(browser, href)
    assert status == 200, body
    return list(csv.reader(io.StringIO(body))), fetch_header(browser, href, "Content-Disposition")


def assert_csv_is_drawn(browser: WebDriver) -> list[list[str]]:
    """The view's CSV holds exactly the drawn buckets in view: times, means, bands."""
    table, disposition = csv_of_view(browser)
    head, body = table[0], table[1:]
    drawn = browser.execute_script(IN_VIEW)
    assert len(body) == len(drawn), (len(body), len(drawn))
    at = {k: head.index(k) for k in ("time", "tair", "tair_min", "tair_max")}
    for row, (t, mean, lo, hi) in zip(body, drawn, strict=True):
        assert datetime.strptime(row[at["time"]], "%Y-%m-%dT%H:%M:%S%z").timestamp() == t
        assert float(row[at["tair"]]) == pytest.approx(mean, abs=1e-6)
        assert float(row[at["tair_min"]]) == pytest.approx(lo, abs=1e-6)
        assert float(row[at["tair_max"]]) == pytest.approx(hi, abs=1e-6)
    first = browser.execute_script(
        "return new Date(arguments[0] * 1000).toISOString().slice(0, 10)", drawn[0][0])
    assert first in disposition, disposition  # the file's name says the range it holds
    what = browser.find_element(By.ID, "csv-what").text
    assert f"{len(drawn)} buckets of" in what and "as drawn" in what, what
    return body


def test_the_view_csv_of_a_bucketed_view_is_the_buckets_drawn(
        server: str, browser: WebDriver, year: str) -> None:
    """It was "985 rows, as shown" and the oldest 10,000 raw rows under the year's name."""
    open_year(browser, server, year)
    wait_for(browser, "window.sdsDashboard.drawn && window.sdsDashboard.drawn.interval === '1d'")
    assert len(assert_csv_is_drawn(browser)) >= 365
    drag_zoom(browser, (END - timedelta(days=20)).timestamp(),
              (END - timedelta(days=10)).timestamp())
    wait_for(browser, "window.sdsDashboard.drawn.interval === '30m'")
    assert len(assert_csv_is_drawn(browser)) > 10 * 48 * 0.8


@pytest.fixture(scope="module")
def days(world: World) -> str:
    """Device D1 at North field: 60 daily rows up to END."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="D1")
        places.deploy_device(conn, device="D1", location=world.north,
                             start=END - timedelta(days=400))
        conn.execute(
            "INSERT INTO daily (time, device, location, meant, maxt, mint, sample_pct)"
            " SELECT (%s::date - g) + time '06:00', 'D1', %s, 15, 20 + g %% 3, 8, 1"
            " FROM generate_series(0, 59) g", (END, world.north))
        conn.commit()
    return "D1"


def test_daily_axis_labels_are_not_cut_at_the_edge(server: str, browser: WebDriver,
                                                    days: str) -> None:
    """The daily chart's last label was drawn half off the canvas ("2026-11-2")."""
    sign_in(browser, server, "user@a.example")
    for span in (30, 60):
        browser.get(f"{server}/dashboard/devices/{days}?table=daily&span={span}"
                    f"&end={END.date().isoformat()}&cols=maxt&tz=UTC")
        chart_drawn(browser, "chart")
        cut = browser.execute_script(
            "const u = window.sdsDashboard.main, ax = u.axes[0], out = [];"
            " u.ctx.save(); u.ctx.font = ax.font[0];"
            " ax._splits.forEach((ts, i) => { const text = ax._values[i]; if (!text) return;"
            "   const x = u.valToPos(ts, 'x', true), half = u.ctx.measureText(text).width / 2;"
            "   if (x - half < 0 || x + half > u.ctx.canvas.width) out.push(text); });"
            " u.ctx.restore(); return [out, ax._values.filter(Boolean).length]")
        assert cut[0] == [] and cut[1] >= 1, (span, cut)


def test_the_device_page_at_360_px_shows_the_chart_first(
        server: str, year: str, tmp_path: Path, processes: None, shots: Path) -> None:
    with chromium(width=360, height=740, log_dir=tmp_path) as phone:
        # A phone's screen: the window alone has a floor of width on some platforms.
        phone.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 360, "height": 740, "deviceScaleFactor": 1, "mobile": False})
        open_year(phone, server, year)
        wait_for(phone, "window.innerWidth <= 360")
        phone.save_screenshot(str(shots / "34-device-360px.png"))
        found = phone.execute_script(
            "const c = document.getElementById('chart').getBoundingClientRect();"
            " const f = document.getElementById('device-facts').getBoundingClientRect();"
            " const e = document.documentElement;"
            " return {top: c.top, height: c.height, screen: window.innerHeight,"
            "  factsTop: f.top, scroll: e.scrollWidth, client: e.clientWidth}")
        assert found["top"] + found["height"] <= found["screen"], found  # the first screen
        assert found["height"] >= found["screen"] / 2, found
        assert found["factsTop"] > found["top"] + found["height"], found  # the facts below
        wide = phone.execute_script(
            "return Array.from(document.querySelectorAll('body *')).filter(e =>"
            " e.getBoundingClientRect().right > document.documentElement.clientWidth)"
            ".slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className)")
        assert found["scroll"] <= found["client"], (found, wide)  # no sideways scroll
        # The column choice is one line until opened.
        boxes = phone.find_elements(By.CSS_SELECTOR, "#columns input")
        assert boxes and not any(b.is_displayed() for b in boxes)
        summary = phone.find_element(By.CSS_SELECTOR, "#columns-choice summary")
        assert "Air temperature" in summary.text
        summary.click()
        rh = phone.find_element(By.CSS_SELECTOR, "#columns input[value='rh']")
        assert rh.is_displayed()
        rh.click()
        wait_for(phone, "window.sdsDashboard.loads >= 2 && document.getElementById('chart')"
                        ".dataset.series === 'tair,rh'")
        assert "2 (" in summary.text
        assert phone.execute_script(
            "return document.documentElement.scrollWidth <= document.documentElement.clientWidth")


@pytest.fixture(scope="module")
def hourly_year(world: World) -> str:
    """Device H1 at North field: a year of hourly rows (8,760) up to END, no readings."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="H1")
        places.deploy_device(conn, device="H1", location=world.north,
                             start=END - timedelta(days=400))
        conn.execute(
            "INSERT INTO hourly (time, device, location, tair, maxt, precip, sample_pct)"
            " SELECT t, 'H1', %(loc)s, 10 + 6 * sin(extract(epoch FROM t) / 13751.0),"
            "  12 + 6 * sin(extract(epoch FROM t) / 13751.0), 0.5, 1"
            " FROM generate_series(%(end)s - interval '365 days', %(end)s - interval '1 hour',"
            "   interval '1 hour') t", {"loc": world.north, "end": END})
        conn.commit()
    return "H1"


def test_a_year_of_hourly_rows_is_drawn_in_days_and_its_csv_says_raw(
        server: str, browser: WebDriver, hourly_year: str) -> None:
    """A year of `hourly` was 8,760 rows drawn as they were, a solid block of daily cycles."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{hourly_year}?table=hourly&span=365"
                f"&end={END.date().isoformat()}&cols=tair,maxt,precip&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-aggregated") == "1d"
    found = browser.execute_script(
        "const u = window.sdsDashboard.main, d = u.data;"
        " const i = d[0].findIndex((t, k) => d[1][k] !== null && k > 10);"
        " return {n: d[0].filter((t, k) => d[1][k] !== null).length,"
        " labels: u.series.slice(1).map(s => s.label), bands: (u.bands || []).length,"
        " row: d.map(s => s[i])}")
    assert 364 <= found["n"] <= 366, found["n"]
    assert found["bands"] == 1  # the mean (tair) in its band; maxt and precip are not means
    assert [label.split(" (")[0] for label in found["labels"]][1:3] == ["lowest", "highest"]
    t, mean, lo, hi, maxt, precip = found["row"]
    assert mean == pytest.approx(10, abs=0.5) and lo == pytest.approx(4, abs=0.2)
    assert hi == pytest.approx(16, abs=0.2) and maxt == pytest.approx(18, abs=0.2)
    assert precip == pytest.approx(24 * 0.5)  # a day's rain is the sum of its hours
    what = browser.find_element(By.ID, "csv-what").text
    assert "raw rows" in what and "buckets of 1d" in what, what
    href = browser.find_element(By.ID, "csv").get_attribute("href")
    assert "interval=" not in href and "/data/hourly?" in href
    status = browser.find_element(By.ID, "status").text
    assert "buckets of 1d" in status, status
