"""Export any span from the browser (issue 26): the device page's "Export whole range (CSV)"
follows the API's cursor through every CSV page of the chosen range, with progress, and saves
one file with the header once: 60 days of 5-minute readings (17,281 rows) are more than one
download link holds (the API's largest page)."""

from __future__ import annotations

import csv
import io
import time
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from serve.args import MAX_LIMIT
from shared import accounts
from testbed.browser import console_errors, wait_for
from tests.support.browsing import chart_drawn, sign_in
from tests.support.dashboard import END, World

DAYS = 60
ROWS = DAYS * 288 + 1


@pytest.fixture(scope="module")
def long(world: World) -> str:
    """Device E1 at North field with 60 days of 5-minute readings up to END."""
    with psycopg.connect(world.url) as conn:
        accounts.register_device(conn, org=world.org_a, name="E1")
        accounts.deploy_device(conn, device="E1", location=world.north,
                               start=END - timedelta(days=100))
        conn.execute(
            "INSERT INTO calibrated (time, device, location, tair, rh)"
            " SELECT t, 'E1', %(loc)s, 15 + 8 * sin(extract(epoch FROM t) / 13751.0), 0.6"
            " FROM generate_series(%(end)s - interval '60 days', %(end)s, interval '5 minutes') t",
            {"loc": world.north, "end": END})
        conn.commit()
    return "E1"


def test_export_follows_the_cursor_through_the_whole_range(
        server: str, browser: WebDriver, long: str, tmp_path: Path) -> None:
    assert ROWS > MAX_LIMIT  # more than one page, more than the download link holds
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/devices/{long}?table=calibrated&span=90"
                f"&end={END.date().isoformat()}&cols=tair,rh&temp=f&tz=UTC")
    chart_drawn(browser, "chart", loads=1)
    browser.find_element(By.ID, "export").click()
    wait_for(browser, "window.sdsDashboard.exported !== undefined", timeout=60)
    exported = browser.execute_script("return window.sdsDashboard.exported")
    assert exported["rows"] == ROWS
    assert f"Exported {ROWS:,} rows" in browser.find_element(By.ID, "export-status").text
    downloads = tmp_path / "downloads"
    deadline = time.monotonic() + 30
    while not list(downloads.glob("*.csv")) or list(downloads.glob("*.crdownload")):
        assert time.monotonic() < deadline, list(downloads.glob("*"))
        time.sleep(0.2)
    (saved,) = downloads.glob("*.csv")
    assert saved.name == exported["name"] and saved.name.startswith("calibrated_E1_")
    table = list(csv.reader(io.StringIO(saved.read_text())))
    assert table[0] == ["time", "tair", "rh", "local_time"]
    body = table[1:]
    assert len(body) == ROWS and ["time", "tair", "rh", "local_time"] not in body
    times = [r[0] for r in body]
    assert times == sorted(times) and len(set(times)) == ROWS  # no row twice, none lost
    assert max(float(r[1]) for r in body) > 70  # Fahrenheit, as chosen
    assert console_errors(browser) == []
