"""Issue 24's dashboard, end to end in headless Chromium against gunicorn, with the real
ingester, evaluator and deliverer: a rule made with the rules page's form fires on a reading
published over MQTT, the event shows in the inbox and is acknowledged there; the webhook channel
that cannot be reached is disabled by the deliverer and the banner says so on every page; notes
added from the device chart (a range and an instant) are drawn on it and their text shows on
hover."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import requests
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from people import accounts
from shared.config import Settings
from testbed.apiserver import gunicorn_api
from testbed.browser import wait_for
from tests.support.alerting import EvaluatorProcess
from tests.support.browsing import chart_drawn, colour_counts, snap
from tests.support.delivery import SEAL_KEY, DelivererProcess, deliverer_env
from tests.support.figures import Figures
from tests.support.ingesting import Ledger, RunningIngester, iso, make_site, now_slot, topic
from tests.support.ingesting import wait_for as wait_until

EMAIL, PASSWORD = "grower@farm.example", "grower-password-1"
NOTE = "#8250df"  # serve/web/charts.py NOTE_COLOUR
# Pixels of the band: the note colour at about 25 % opacity (the canvas is transparent, the
# page's white shows through), which tests.support.browsing's counter skips as unpainted.
BAND_PIXELS = """
const canvas = arguments[0].querySelector('canvas');
const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
const [r, g, b] = [1, 3, 5].map(i => parseInt(arguments[1].slice(i, i + 2), 16));
let n = 0;
for (let i = 0; i < px.length; i += 4) {
  if (px[i + 3] > 40 && px[i + 3] < 90 && Math.abs(px[i] - r) + Math.abs(px[i + 1] - g)
      + Math.abs(px[i + 2] - b) < 30) n++;
}
return n;
"""


def _closed_port() -> int:
    """A loopback port nothing listens on: every webhook delivery to it fails at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def evaluator(mqtt_settings: Settings, tmp_path: Path) -> Iterator[EvaluatorProcess]:
    proc = EvaluatorProcess(mqtt_settings, tmp_path / "evaluate.log")
    yield proc
    proc.stop()


def _sign_in(driver: WebDriver, base: str) -> None:
    driver.get(f"{base}/dashboard/login")
    driver.find_element(By.ID, "email").send_keys(EMAIL)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "sign-in").click()
    wait_for(driver, "document.querySelector('main h1').textContent === 'Devices'")


def _create_rule_in_the_form(driver: WebDriver, base: str) -> None:
    driver.get(f"{base}/dashboard/alerts")
    driver.find_element(By.ID, "rule-name").send_keys("Frost")
    Select(driver.find_element(By.ID, "rule-column")).select_by_value("tair")
    Select(driver.find_element(By.ID, "rule-device")).select_by_value("A1")
    Select(driver.find_element(By.ID, "rule-op")).select_by_value("<")
    for field, value in (("rule-threshold", "32"), ("rule-for", "0"), ("rule-clear", "34")):
        box = driver.find_element(By.ID, field)
        box.clear()
        box.send_keys(value)
    Select(driver.find_element(By.ID, "rule-unit")).select_by_value("f")
    driver.find_element(By.ID, "rule-create").click()
    wait_for(driver, "document.querySelectorAll('#rules tr[data-id]').length === 1")
    assert "below 32 °F" in driver.find_element(By.ID, "rules").text


def _reload_until(driver: WebDriver, url: str, script: str, timeout: float = 30) -> None:
    def shows() -> bool:
        driver.get(url)
        return bool(driver.execute_script("return " + script))

    wait_until(shows, timeout, every=0.5, what=f"{url}: {script}")


def test_a_rule_made_in_the_dashboard_fires_into_the_inbox_and_notes_are_drawn(
        conn: psycopg.Connection, database_url: str, mqtt_settings: Settings,
        ingester: RunningIngester, publisher: Ledger, evaluator: EvaluatorProcess,
        browser: WebDriver, shots: Path, tmp_path: Path, figures: Figures) -> None:
    site = make_site(conn, device="A1")
    accounts.create_user(conn, org=site.org, email=EMAIL, password=PASSWORD, role="owner")
    conn.commit()
    deliverer = DelivererProcess(deliverer_env(
        database_url, channel_max_failures=2, mqtt_host="127.0.0.1",
        mqtt_port=mqtt_settings.mqtt_port), tmp_path / "deliver.log")
    with gunicorn_api(database_url, tmp_path / "api", SDS_APIKEY_SEAL_KEYS=SEAL_KEY,
                      SDS_WEBHOOK_ALLOW_PRIVATE="true") as base:
        hook = requests.post(f"{base}/api/v2/channels", auth=(EMAIL, PASSWORD), timeout=30,
                             json={"name": "valve controller", "kind": "webhook",
                                   "url": f"http://127.0.0.1:{_closed_port()}/hook"})
        assert hook.status_code == 201, hook.text
        _sign_in(browser, base)
        assert browser.find_element(By.ID, "channel-banner").get_attribute("hidden") is not None

        _create_rule_in_the_form(browser, base)
        evaluator.start()
        deliverer.start()
        try:
            # -2 C is 28.4 F, under the form's 32 F.
            body = {"time": iso(now_slot(10)), "tair": -2.0, "rh": 0.8}
            sent = time.monotonic()
            assert publisher.publish(topic(mqtt_settings, "A1"), json.dumps(body).encode())
            inbox = f"{base}/dashboard/notifications"
            _reload_until(browser, inbox, "document.querySelector("
                          "'#inbox tr[data-kind=firing]') !== null")
            figures.record("alerts_publish_to_inbox_s", round(time.monotonic() - sent, 1),
                           section="alerts", title="Publish of a reading to its firing event"
                           " in the dashboard's inbox (s; the page reloads every 0.5 s)",
                           target="<= 30", source="tests/web/test_alert_browser.py")
            row = browser.find_element(By.CSS_SELECTOR, "#inbox tr[data-kind=firing]")
            assert "Frost" in row.text and "A1" in row.text
            snap(browser, shots, "alerts-inbox")
            row.find_element(By.CSS_SELECTOR, "button.ack").click()
            wait_for(browser, "document.querySelector('#inbox tr[data-kind=firing] button.ack')"
                              " === null")
            # The deliverer fails the webhook twice and disables it: the banner on every page.
            wait_until(lambda: requests.get(
                f"{base}/api/v2/channels", auth=(EMAIL, PASSWORD), timeout=30
            ).json()["items"][0]["disabled_at"], 30, what="the channel disabled")
        finally:
            deliverer.stop()
        browser.get(f"{base}/dashboard/alerts")
        wait_for(browser, "document.getElementById('channel-banner').dataset.state === 'checked'")
        banner = browser.find_element(By.ID, "channel-banner")
        assert banner.is_displayed() and "valve controller" in banner.text
        _reload_until(browser, inbox, "document.querySelector("
                      "'#inbox tr[data-kind=channel_disabled]') !== null")

        # Notes from the chart: the shown range as a band, then an instant picked by a click.
        browser.get(f"{base}/dashboard/devices/A1")
        chart_drawn(browser, "chart", loads=1)
        wait_for(browser, "window.sdsDashboard.notes.loaded >= 1")
        browser.find_element(By.ID, "note-range").click()
        browser.find_element(By.ID, "note-text").send_keys("frost cloth on")
        browser.find_element(By.ID, "note-tags").send_keys("frost")
        browser.find_element(By.ID, "note-add").click()
        wait_for(browser, "document.getElementById('chart').dataset.notes === '1'")
        over = browser.find_element(By.CSS_SELECTOR, "#chart .u-over")
        ActionChains(browser).move_to_element_with_offset(over, -over.size["width"] // 4, 0
                                                          ).click().perform()
        assert browser.find_element(By.ID, "note-start").get_attribute("value")
        browser.find_element(By.ID, "note-end").clear()
        browser.find_element(By.ID, "note-text").send_keys("sensor cleaned")
        browser.find_element(By.ID, "note-add").click()
        wait_for(browser, "document.getElementById('chart').dataset.notes === '2'")
        found = colour_counts(browser, "chart", [NOTE])
        assert found["counts"][0] > 100, found  # the instant's line (and flag)
        band = browser.execute_script(BAND_PIXELS, browser.find_element(By.ID, "chart"), NOTE)
        assert band > 0.5 * found["width"] * found["height"] * 0.5, (band, found)
        # Hovering the instant's line shows its text.
        ActionChains(browser).move_to_element_with_offset(over, -over.size["width"] // 4, 5
                                                          ).perform()
        wait_for(browser, "!document.getElementById('note-tip').hidden")
        assert "sensor cleaned" in browser.find_element(By.ID, "note-tip").text
        listed = browser.find_element(By.ID, "notes").text
        assert "frost cloth on [frost]" in listed and "sensor cleaned" in listed
        snap(browser, shots, "device-notes")
        stored = requests.get(f"{base}/api/v2/annotations?device=A1", auth=(EMAIL, PASSWORD),
                              timeout=30).json()
        assert [(a["text"], a["end_time"] is None, a["author"]) for a in stored["items"]
                ] in ([("frost cloth on", False, EMAIL), ("sensor cleaned", True, EMAIL)],
                      [("sensor cleaned", True, EMAIL), ("frost cloth on", False, EMAIL)])
