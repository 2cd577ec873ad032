"""Charts that tell the truth (issue 26), in headless Chromium against gunicorn: an outage is a
gap, not a line across it; series are labelled with the registry's descriptions and the chosen
units, not raw codes; a daily chart's axis is in days; incomplete buckets (a partial day) are
marked. Device G1 of org A: a week of 5-minute readings with a 41-hour outage, 30 daily rows, one
of which holds 40 % of its day's readings."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from shared import places
from testbed.browser import wait_for
from tests.support.browsing import chart_drawn, colour_counts, column_pixels, sign_in
from tests.support.dashboard import END, STEPS, World
from tests.support.readings import insert_readings, series, sine_of_time

OUTAGE_START = END - timedelta(days=4)
OUTAGE = timedelta(hours=41)

@pytest.fixture(scope="module")
def gapped(world: World) -> str:
    """Device G1 at North field: 5-minute readings with a 41-hour outage, daily rows."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="G1")
        places.deploy_device(conn, device="G1", location=world.north,
                               start=END - timedelta(days=60))
        insert_readings(conn, "G1", world.north, series(
            END - timedelta(minutes=5 * (STEPS - 1)), n=STEPS,
            skip=lambda t: OUTAGE_START < t < OUTAGE_START + OUTAGE,
            tair=sine_of_time(15, 8, 13751.0), rh=0.6))
        conn.execute(
            "INSERT INTO daily (time, device, location, meant, maxt, mint, sample_pct,"
            " low_quality) SELECT (%s::date - g) + time '06:00', 'G1', %s, 15, 20 + g %% 3, 8,"
            " CASE WHEN g = 1 THEN 0.4 ELSE 1 END, g = 1 FROM generate_series(0, 29) g",
            (END, world.north))
        conn.commit()
    return "G1"


def test_an_outage_of_41_hours_is_drawn_as_a_gap(server: str, browser: WebDriver,
                                                 gapped: str, shots: Path) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{gapped}?table=calibrated&span=7"
                f"&end={END.date().isoformat()}&cols=tair&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    chart = browser.find_element(By.ID, "chart")
    middle = (OUTAGE_START + OUTAGE / 2).timestamp()
    before = (OUTAGE_START - timedelta(hours=10)).timestamp()
    after = (OUTAGE_START + OUTAGE + timedelta(hours=10)).timestamp()
    inside = [column_pixels(browser, middle + k * 3600) for k in (-12, 0, 12)]
    assert inside == [0, 0, 0], inside  # nothing drawn across the outage
    assert column_pixels(browser, before) > 0
    assert column_pixels(browser, after) > 0
    assert chart.get_attribute("data-gaps") == "1"
    assert "1 outage" in browser.find_element(By.ID, "status").text
    browser.save_screenshot(str(shots / "12-outage-gap.png"))


def test_daily_chart_labels_from_the_registry_axis_in_days_partial_day_marked(
        server: str, browser: WebDriver, gapped: str, shots: Path) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{gapped}?table=daily&span=30"
                f"&end={END.date().isoformat()}&cols=maxt,mint&temp=f")
    chart_drawn(browser, "chart", loads=1)
    labels = browser.execute_script(
        "return window.sdsDashboard.main.series.slice(1).map(s => s.label)")
    assert labels == ["Air temperature, maximum (°F)", "Air temperature, minimum (°F)"]
    boxes = {e.get_attribute("value"): e.find_element(By.XPATH, "..").get_attribute("textContent")
             for e in browser.find_elements(By.CSS_SELECTOR, "#columns input")}
    assert boxes["maxt"].strip() == "Air temperature, maximum"
    ticks = browser.execute_script("return window.sdsDashboard.main.axes[0]._values")
    assert ticks and all(re.fullmatch(r"\d{4}-\d{2}-\d{2}", t) for t in ticks), ticks
    splits = browser.execute_script("return window.sdsDashboard.main.axes[0]._splits")
    steps = {round((b - a) / 86400) for a, b in zip(splits, splits[1:], strict=False)}
    assert steps and all(s >= 1 for s in steps), splits
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-incomplete") == "1"  # a day with 40 % of its readings
    assert "1 incomplete" in browser.find_element(By.ID, "status").text
    amber = browser.execute_script(
        "return JSON.parse(document.getElementById('sds-config').textContent)"
        ".incomplete_colour")
    assert colour_counts(browser, "chart", [amber])["counts"][0] > 20
    browser.save_screenshot(str(shots / "13-daily-days-partial.png"))


@pytest.fixture(scope="module")
def year(world: World) -> str:
    """Device Y1 at North field: a year of 5-minute readings (105,121 rows) up to END."""
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name="Y1")
        places.deploy_device(conn, device="Y1", location=world.north,
                               start=END - timedelta(days=400))
        seasons, days = sine_of_time(10, 12, 5022000.0), sine_of_time(0, 6, 13751.0)
        insert_readings(conn, "Y1", world.north, series(
            END - timedelta(days=365), n=365 * 288 + 1,
            tair=lambda i, t: seasons(i, t) + days(i, t), rh=0.6))
        conn.commit()
    with psycopg.connect(world.url, autocommit=True) as conn:
        conn.execute("ANALYZE calibrated")
    return "Y1"


def test_a_year_of_5_minute_data_draws_the_whole_year_to_the_newest_day(
        server: str, browser: WebDriver, year: str, shots: Path) -> None:
    """More rows than the page draws raw: buckets (points=) with a mean line in a min-max
    band, from the first day to the newest (the page used to draw the oldest 50,000 rows)."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{year}?table=calibrated&span=365"
                f"&end={END.date().isoformat()}&cols=tair&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-aggregated")  # e.g. 12h
    found = browser.execute_script(
        "const u = window.sdsDashboard.main, t = u.data[0].filter((x, i) => u.data[1][i] !== null);"
        " return {first: t[0], last: t[t.length - 1], n: u.data[0].length,"
        " series: u.series.slice(1).map(s => s.label), bands: (u.bands || []).length}")
    assert found["last"] >= (END - timedelta(days=1)).timestamp(), found  # the newest day
    assert found["first"] <= (END - timedelta(days=364)).timestamp(), found
    assert found["n"] <= 2000
    assert found["series"] == ["Air temperature (°C)", "lowest", "highest"]
    assert found["bands"] == 1
    assert column_pixels(browser, (END - timedelta(hours=18)).timestamp()) > 0
    assert "buckets of" in browser.find_element(By.ID, "status").text
    browser.save_screenshot(str(shots / "14-year-band.png"))
    # Zoomed into the last two days: finer buckets for the view, fetched after the zoom.
    whole = chart.get_attribute("data-aggregated")
    two_days = (END - timedelta(days=2)).timestamp()
    browser.execute_script("window.sdsDashboard.main.setScale('x', {min: arguments[0],"
                           " max: arguments[1]})", two_days, END.timestamp())
    wait_for(browser, f"document.getElementById('chart').dataset.aggregated !== '{whole}'")
    in_view = browser.execute_script(
        "const u = window.sdsDashboard.main; return u.data[0].filter((t, i) => t >= arguments[0]"
        " && u.data[1][i] !== null).length", two_days)
    assert in_view >= 2 * 24 * 4, (chart.get_attribute("data-aggregated"), in_view)
    browser.find_element(By.ID, "zoom-reset").click()  # back to the whole year's buckets
    wait_for(browser, f"document.getElementById('chart').dataset.aggregated === '{whole}'")


@pytest.fixture(scope="module")
def et_field(world: World) -> str:
    """Location "ET field" (UTC) with device T1: today's daily row so far (40 % of the day,
    ET of the hours measured 0.47 mm) and hourly ET summing to 1.05 mm over the day's hours
    (the other figure the dashboard showed before there was one home)."""
    with psycopg.connect(world.url) as conn:
        loc = places.create_location(conn, org=world.org_a, loc=places.LocationInput(
            name="ET field", tz_name="UTC", lat=10.0, lon=10.0))
        places.register_device(conn, org=world.org_a, name="T1")
        places.deploy_device(conn, device="T1", location=loc, start=END)
        conn.execute(
            "INSERT INTO daily (time, device, location, et, sample_pct, low_quality)"
            " VALUES (date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 'T1', %s,"
            " 0.47, 0.4, true)", (loc,))
        conn.execute(
            "INSERT INTO local_hourly (time, device, location, et) SELECT"
            " date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
            "  + g * interval '1 hour', 'T1', %s, 0.15 FROM generate_series(0, 6) g", (loc,))
        conn.commit()
    return str(loc)


def test_one_et_today_on_locations_and_the_device_page(
        server: str, browser: WebDriver, et_field: str) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/locations")
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-location='{et_field}']")
    et_cell = row.find_elements(By.TAG_NAME, "td")[-1].text
    assert et_cell.startswith("0.47") and "so far" in et_cell, et_cell
    browser.get(f"{server}/dashboard/devices/T1")
    fact = browser.find_element(By.ID, "et-today").text
    assert fact.startswith("0.47 mm so far") and "ET field" in fact, fact
    chart_drawn(browser, "water")  # the water panel's today: the same daily row
    last = browser.find_elements(By.CSS_SELECTOR, "#water-table tbody tr")[-1]
    assert last.find_elements(By.TAG_NAME, "td")[1].text == "0.47"
    # In inches alike on both pages (the API's conversion and precision).
    browser.get(f"{server}/dashboard/locations?size=in")
    row = browser.find_element(By.CSS_SELECTOR, f"tr[data-location='{et_field}']")
    inches = row.find_elements(By.TAG_NAME, "td")[-1].text.split()[0]
    browser.get(f"{server}/dashboard/devices/T1?size=in")
    assert browser.find_element(By.ID, "et-today").text.startswith(f"{inches} in so far")
    assert inches == "0.019"


def test_bad_data_per_day_shows_every_reason_of_a_day(server: str, browser: WebDriver,
                                                      world: World, shots: Path) -> None:
    """Ten days ago A1 had one bad_json and one out_of_range row: as lines on one axis they lay
    on each other and one colour showed; stacked bars show both."""
    with psycopg.connect(world.url) as conn:
        conn.execute(
            "INSERT INTO quarantine (received_at, topic, device, reason, detail, payload)"
            " SELECT received_at, topic, device, 'out_of_range', 'tair: 99 is outside -60..70',"
            " payload FROM quarantine WHERE device = 'A1' AND received_at < now() - interval"
            " '9 days'")
        conn.commit()
    sign_in(browser, server, "admin@a.example")
    browser.get(f"{server}/dashboard/quarantine?device=A1&days=30")
    chart_drawn(browser, "counts")
    found = browser.execute_script(
        "const u = window.sdsDashboard.counts;"
        " const cfg = JSON.parse(document.getElementById('sds-counts').textContent);"
        " const day = u.data[0][u.data[0].length - 11];"
        " const x = Math.round(u.valToPos(day, 'x', true));"
        " const px = u.ctx.getImageData(x - 1, Math.round(u.bbox.top), 3,"
        "   Math.round(u.bbox.height)).data;"
        " return cfg.colours.slice(0, 2).map(h => {"
        "   const w = [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)); let n = 0;"
        "   for (let i = 0; i < px.length; i += 4) if (px[i + 3] > 200 && Math.abs(px[i] - w[0])"
        "     + Math.abs(px[i + 1] - w[1]) + Math.abs(px[i + 2] - w[2]) < 60) n++;"
        "   return n; })")
    assert browser.find_element(By.ID, "counts").get_attribute("data-series") == \
        "out_of_range,bad_json"  # 3 and 2 rows in the period
    assert all(n > 10 for n in found), found  # both reasons' colours in that day's bar
    browser.save_screenshot(str(shots / "17-bad-data-stacked.png"))
