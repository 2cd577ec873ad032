"""The water page (issue 35) in headless Chromium against gunicorn: an administrator opens a
location's root-zone water page from the location page, reads the depletion chart and the
"irrigate in N days, X mm" line, records an irrigation event with the form; after the
scheduler's run the chart's depletion on that day has dropped. A member sees it read-only."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import psycopg
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from aggregate import water
from shared import irrigation
from testbed.browser import wait_for
from tests.support.browsing import sign_in, submit
from tests.support.dashboard import World


def _scheduler(url: str) -> None:
    """What the daily job does with the water marks (aggregate/jobs.py)."""
    with psycopg.connect(url) as conn:
        water.process(conn)


def _last_depletion(browser: WebDriver) -> tuple[str, float]:
    chart = browser.find_element(By.ID, "depletion-chart")
    return chart.get_attribute("data-last-day") or "", float(
        chart.get_attribute("data-last-depletion") or "nan")


def test_record_irrigation_and_see_the_depletion_drop(server: str, browser: WebDriver,
                                                      world: World, shots: Path) -> None:
    with psycopg.connect(world.url) as conn:
        irrigation.put_settings(conn, world.north, {"soil": "loamy sand", "root_depth": 0.3,
                                                    "crop": "lettuce"})
    _scheduler(world.url)
    sign_in(browser, server, "admin@a.example")
    browser.get(f"{server}/dashboard/locations/{world.north}")
    wait_for(browser, "document.getElementById('water-link') !== null")
    browser.find_element(By.ID, "water-link").click()
    wait_for(browser, "document.getElementById('depletion-chart') !== null")
    line = browser.find_element(By.ID, "irrigate-line").text
    assert "mm to refill to field capacity" in line
    assert "Irrigate" in line
    day, before = _last_depletion(browser)
    assert before > 5, "30 days of 3.4 mm ETc and 1 mm rain dry 30 cm of loamy sand"
    assert browser.find_elements(By.ID, "raw-line") and browser.find_elements(By.ID, "taw-line")
    browser.save_screenshot(str(shots / "60-water-before.png"))

    # The form: a day and a depth; the page says the balance follows.
    browser.find_element(By.ID, "irr-day").send_keys(
        datetime.strptime(day, "%Y-%m-%d").strftime("%m%d%Y"))
    browser.find_element(By.ID, "irr-mm").send_keys("25")
    submit(browser, "irrigation-save", "water-recorded")
    assert browser.find_elements(By.CSS_SELECTOR, f"#irrigation-events tr[data-day='{day}']")

    _scheduler(world.url)
    browser.refresh()
    wait_for(browser, "document.getElementById('depletion-chart') !== null")
    _same_day, after = _last_depletion(browser)
    assert after < before
    assert browser.find_elements(By.CSS_SELECTOR, f"rect.irrigation[data-day='{day}']")
    browser.save_screenshot(str(shots / "61-water-after.png"))
    with psycopg.connect(world.url) as conn:
        row = conn.execute("SELECT count(*) FROM audit_log WHERE action = 'irrigation.create'"
                           ).fetchone()
    assert row is not None and row[0] == 1
    assert date.fromisoformat(day)


def test_member_reads_the_water_page(server: str, browser: WebDriver, world: World) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/locations/{world.north}/water")
    wait_for(browser, "document.readyState === 'complete' && ("
                      "document.getElementById('irrigation-readonly') !== null ||"
                      " document.getElementById('water-none') !== null)")
    assert not browser.find_elements(By.ID, "irrigation-form")
