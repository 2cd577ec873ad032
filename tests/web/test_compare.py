"""Compare (issue 26): one column of several devices on one chart, in headless Chromium
against gunicorn. Devices A1, C1 and C2 of org A hold a week of 5-minute readings each (C1 two
degrees warmer, C2 with a 30-hour outage); the chart draws three lines in three colours, in
the chosen units; choosing a location ticks the devices standing there."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from shared import places
from testbed.browser import console_errors, wait_for
from tests.support.browsing import assert_series_drawn, chart_drawn, column_pixels, sign_in
from tests.support.dashboard import END, STEPS, World
from tests.support.readings import insert_readings, series, sine_of_time

OUTAGE_START = END - timedelta(days=3)


@pytest.fixture(scope="module")
def three(world: World) -> World:
    """Devices C1 and C2 at North field beside A1, with a week of readings each."""
    with psycopg.connect(world.url) as conn:
        for name, warmer in (("C1", 2), ("C2", -3)):
            places.register_device(conn, org=world.org_a, name=name)
            places.deploy_device(conn, device=name, location=world.north,
                                   start=END - timedelta(days=60))
            outage = name == "C2"  # C2 is out for 30 hours from OUTAGE_START
            insert_readings(conn, name, world.north, series(
                END - timedelta(minutes=5 * (STEPS - 1)), n=STEPS,
                skip=lambda t, out=outage: out and OUTAGE_START < t < OUTAGE_START + timedelta(
                    hours=30),
                tair=sine_of_time(15 + warmer, 8, 13751.0), rh=0.6))
        conn.commit()
    return world


def test_three_devices_on_one_chart(server: str, browser: WebDriver, three: World,
                                    shots: Path) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/compare?devices=A1,C1,C2&table=calibrated&col=tair"
                f"&span=7&end={END.date().isoformat()}&temp=f&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-series") == "A1,C1,C2"
    assert chart.get_attribute("data-units").startswith("F")
    assert_series_drawn(browser, "chart", 3)  # three lines in the palette's first 3 colours
    found = browser.execute_script(
        "const u = window.sdsDashboard.main, max = (a) => Math.max(...a.filter(v => v != null));"
        " return {labels: u.series.slice(1).map(s => s.label), axis: u.axes[1].label,"
        " max: [1, 2, 3].map(i => max(u.data[i])),"
        " nulls: [1, 2, 3].map(i => u.data[i].filter(v => v === null).length)}")
    assert found["labels"] == ["A1", "C1", "C2"]
    assert found["axis"] == "Air temperature (°F)"
    assert found["max"][1] > found["max"][0] + 3  # C1 is 2 C (3.6 F) warmer: its own line
    # C2's outage is a gap over all of its 30 hours (A1's readings there do not fill it).
    assert found["nulls"][2] >= 30 * 12 - 2 and found["nulls"][0] == 0, found["nulls"]
    middle = (OUTAGE_START + timedelta(hours=15)).timestamp()
    green = column_pixels(browser, middle, 2)
    assert green == 0, green
    assert column_pixels(browser, middle, 0) > 0  # A1 is drawn there
    browser.save_screenshot(str(shots / "15-compare-three.png"))
    # A location ticks the devices standing there: A1, A2, A3, C1, C2 at North field.
    Select(browser.find_element(By.ID, "location")).select_by_visible_text("North field")
    chart_drawn(browser, "chart", loads=2)
    assert chart.get_attribute("data-series") == "A1,A2,A3,C1,C2"
    assert "location=" in browser.current_url
    assert console_errors(browser) == []


def test_compare_has_bands_zoom_csv_of_what_is_drawn_and_the_device_zone(
        server: str, browser: WebDriver, three: World, tmp_path: Path) -> None:
    """Compare had no zoom, no CSV, no bands and no device zone. Over 90 days (bucketed): each
    device a mean line in its band; Zoom in fetches finer buckets and draws them; the CSV holds
    what is drawn in view; "first device's local zone" is North field's."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/compare?devices=C1,C2&table=calibrated&col=tair"
                f"&span=90&end={END.date().isoformat()}&tz=device")
    chart_drawn(browser, "chart", loads=1)
    chart = browser.find_element(By.ID, "chart")
    assert chart.get_attribute("data-aggregated") == "1d"
    found = browser.execute_script(
        "const u = window.sdsDashboard.main;"
        " return {labels: u.series.slice(1).map(s => s.label), bands: (u.bands || []).length,"
        " zone: u.series[0].label}")
    assert found["labels"] == ["C1", "C1 lowest", "C1 highest", "C2", "C2 lowest", "C2 highest"]
    assert found["bands"] == 2
    assert found["zone"] == "time (America/Chicago)"
    before = browser.execute_script("const s = window.sdsDashboard.main.scales.x;"
                                    " return s.max - s.min")
    browser.find_element(By.ID, "zoom-in").click()
    wait_for(browser, "window.sdsDashboard.main.scales.x.max"
                      f" - window.sdsDashboard.main.scales.x.min < {before * 0.6}")
    # To the last 4 days (the devices' readings are the last week), as a drag does.
    browser.execute_script("window.sdsDashboard.main.setScale('x', {min: arguments[0],"
                           " max: arguments[1]})", (END - timedelta(days=4)).timestamp(),
                           END.timestamp())
    wait_for(browser, "document.getElementById('chart').dataset.aggregated !== '1d'"
                      " && window.sdsDashboard.drawn.interval !== '1d'")
    fine = chart.get_attribute("data-aggregated")
    assert fine.endswith(("m", "h")), fine
    browser.find_element(By.ID, "csv").click()
    wait_for(browser, "window.sdsDashboard.csv !== undefined")
    file = browser.execute_script("return window.sdsDashboard.csv")
    lines = file["text"].splitlines()
    assert lines[0] == "time,C1,C1_min,C1_max,C2,C2_min,C2_max"
    drawn = browser.execute_script(
        "const u = window.sdsDashboard.main, d = window.sdsDashboard.drawn.data;"
        " const a = Math.floor(u.scales.x.min), b = Math.ceil(u.scales.x.max);"
        " return d[0].map((t, i) => [t, d.slice(1).map(s => s[i] == null ? null : s[i])])"
        "  .filter(([t, v]) => t >= a && t <= b && v.some(x => x !== null))")
    assert len(lines) - 1 == len(drawn) > 24, (len(lines), len(drawn))
    for line, (t, values) in zip(lines[1:], drawn, strict=True):
        cells = line.split(",")
        assert datetime.strptime(cells[0], "%Y-%m-%dT%H:%M:%S%z").timestamp() == t
        assert [float(c) if c else None for c in cells[1:]] == values
    assert fine in file["name"] and file["name"].endswith(".csv")
    assert console_errors(browser) == []
