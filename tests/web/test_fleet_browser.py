"""Issue 34's "Done when" for the fleet, in headless Chromium against gunicorn with a real
mosquitto (password file, the shipped ACL) and the real ingester: an administrator adds a
device in the dashboard and sees its password once, publishes as that device with the shown
configuration line's credentials (paho), sees it on the device list with a current value and a
sparkline, then retires it and its login stops working; a location is made with the map pick
and its zone proposed. The same pages at 360 px scroll no wider than the screen."""

from __future__ import annotations

import json
import shlex
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt
import psycopg
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from people import accounts
from shared import places
from testbed.apiserver import gunicorn_api
from testbed.browser import wait_for
from testbed.mosquitto import MosquittoBroker
from tests.support.ingesting import wait_for as wait_until

EMAIL, PASSWORD = "fleet-owner@farm.example", "fleet-owner-password-1"
OVERFLOW = ("return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
            " document.body.scrollWidth]")


def _connect(host: str, port: int, user: str, password: str, client_id: str
             ) -> tuple[mqtt.Client | None, str]:
    """Log in as the device; (connected client, "") or (None, the broker's refusal)."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id,
                         protocol=mqtt.MQTTv311)
    client.username_pw_set(user, password)
    answered = threading.Event()
    outcome: dict[str, Any] = {}

    def on_connect(_c: Any, _u: Any, _f: Any, reason: Any, _p: Any) -> None:
        outcome["reason"] = reason
        answered.set()

    client.on_connect = on_connect
    client.connect(host, port, keepalive=30)
    client.loop_start()
    if not answered.wait(10) or outcome["reason"].is_failure:
        client.loop_stop()
        client.disconnect()
        return None, str(outcome.get("reason", "no answer"))
    return client, ""


def _until_login(creds: dict[str, str], *, works: bool) -> mqtt.Client | None:
    """Log in until the broker (which rereads its password file at the SIGHUP the server sent)
    accepts (`works`) or refuses the device's credentials."""
    def tried() -> list[mqtt.Client | None]:
        client, _refused = _connect(creds["-h"], int(creds["-p"]), creds["-u"], creds["-P"],
                                    creds["-i"])
        if (client is not None) == works:
            return [client]
        if client is not None:
            client.loop_stop()
            client.disconnect()
        return []

    return wait_until(tried, 20, every=0.2,
                      what=f"the login {'accepted' if works else 'refused'}")[0]


def _no_side_scroll(driver: WebDriver, what: str) -> None:
    scroll, client, body = driver.execute_script(OVERFLOW)
    # What sticks out, to say on failure (tag, id or class, right edge).
    wide = driver.execute_script(
        "return Array.from(document.querySelectorAll('main *')).filter(e =>"
        " e.getBoundingClientRect().right > document.documentElement.clientWidth)"
        ".slice(0, 8).map(e => e.tagName + '#' + e.id + '.' + e.className + ' '"
        " + Math.round(e.getBoundingClientRect().right))")
    assert scroll <= client and body <= client, (what, scroll, client, body, wide)


def _sign_in(driver: WebDriver, base: str) -> None:
    driver.get(f"{base}/dashboard/login")
    driver.find_element(By.ID, "email").send_keys(EMAIL)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "sign-in").click()
    wait_for(driver, "document.querySelector('main h1').textContent === 'Devices'")


def test_an_admin_adds_publishes_sees_and_retires_a_device_in_the_browser(
        conn: psycopg.Connection, database_url: str,
        deployed_broker: tuple[MosquittoBroker, Path],
        deployed_ingester: None, browser: WebDriver, shots: Path, tmp_path: Path) -> None:
    broker, passwd = deployed_broker
    org = accounts.create_org(conn, name="Fleet Farm")
    accounts.create_user(conn, org=org, email=EMAIL, password=PASSWORD, role="owner")
    places.create_location(conn, org=org, loc=places.LocationInput(
        name="West block", tz_name="Europe/Paris", lat=44.8, lon=-0.6))
    conn.commit()
    with gunicorn_api(database_url, tmp_path / "api", SDS_BROKER_PASSWD_FILE=str(passwd),
                      SDS_MQTT_HOST="127.0.0.1", SDS_MQTT_PORT=str(broker.port)) as base:
        _sign_in(browser, base)
        browser.find_element(By.ID, "add-device").click()
        wait_for(browser, "document.getElementById('add-device-form') !== null")
        browser.find_element(By.ID, "device-name").send_keys("E7")
        browser.find_element(By.ID, "device-model").send_keys("ATMOS 41")
        Select(browser.find_element(By.ID, "device-location")).select_by_visible_text(
            "West block (Europe/Paris)")
        browser.find_element(By.ID, "add-device-submit").click()
        wait_for(browser, "document.getElementById('mqtt-password') !== null")

        # The password, once, with a copy button and the configuration line.
        password = browser.find_element(By.ID, "mqtt-password").get_attribute("value")
        line = browser.find_element(By.ID, "mqtt-snippet").get_attribute("value")
        assert password and len(password) == 24 and password in line
        browser.find_element(By.ID, "copy-password").click()
        wait_for(browser, "['copied', 'selected'].includes("
                          "document.getElementById('copy-password').dataset.state)")
        browser.set_window_size(360, 800)
        wait_for(browser, "window.innerWidth <= 360")
        _no_side_scroll(browser, "the password page")
        browser.save_screenshot(str(shots / "fleet-01-password-360px.png"))
        browser.set_window_size(1400, 1000)

        # Publish as the device with exactly the line's credentials.
        argv = shlex.split(line)
        assert argv[0] == "mosquitto_pub"
        creds = dict(zip(argv[1:-1:2], argv[2::2], strict=False))
        # The host the dashboard was reached at (SDS_DEVICE_MQTT_ADDRESS unset), the broker's port.
        assert creds["-h"] == urlsplit(base).hostname and creds["-p"] == str(broker.port)
        assert creds["-u"] == "E7" and creds["-P"] == password
        client = _until_login(creds, works=True)
        assert client is not None
        # Three readings 30 minutes apart (three sparkline buckets in a row), the newest now.
        slot = datetime.fromtimestamp(time.time() // 300 * 300, UTC)
        body = [{"time": (slot - timedelta(minutes=30 * k)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                 "tair": 21.5 - k, "rh": 0.62} for k in (2, 1, 0)]
        info = client.publish(creds["-t"], json.dumps(body), qos=int(creds["-q"]))
        info.wait_for_publish(10)
        assert info.is_published()
        client.loop_stop()
        client.disconnect()
        wait_until(lambda: conn.execute(
            "SELECT count(*) FROM calibrated WHERE device = 'E7'").fetchone() == (3,),
            what="E7's readings stored")

        # On the list: the current value, a drawn sparkline, when it was heard from.
        browser.get(f"{base}/dashboard/")
        row = "#devices tr[data-device='E7']"
        assert browser.execute_script(
            f"return document.querySelector(\"{row} td.tair\").textContent") == "21.5"
        assert browser.execute_script(
            f"return document.querySelector(\"{row} td.rh\").textContent") == "62.0"
        box = browser.execute_script(
            f"const s = document.querySelector(\"{row} svg.spark\");"
            " const r = s.getBoundingClientRect();"
            " return [r.width, r.height, s.querySelectorAll('polyline').length,"
            " s.dataset.points, s.querySelector('polyline').getTotalLength()]")
        # One line through the three buckets, drawn (its length in the viewBox's units).
        assert box[0] > 50 and box[1] > 10 and box[2] == 1 and box[3] == "3", box
        assert box[4] > 5, box
        ago = browser.execute_script(f"return document.querySelector(\"{row} time.ago\")"
                                     ".textContent")
        assert ago in ("just now", "1 min ago", "2 min ago"), ago
        assert password not in browser.page_source  # shown once
        # Sortable: by device name, descending, on a click of the heading.
        browser.execute_script("document.querySelector('#devices th button.sort').click();"
                               "document.querySelector('#devices th button.sort').click()")
        wait_for(browser, "document.getElementById('devices').dataset.sorted === "
                          "'0 descending'")
        browser.set_window_size(360, 800)
        wait_for(browser, "window.innerWidth <= 360")
        _no_side_scroll(browser, "the device list")
        assert browser.find_element(By.ID, "sort-by").is_displayed()
        card = browser.find_element(By.CSS_SELECTOR, row)
        assert card.rect["x"] >= 0 and card.rect["x"] + card.rect["width"] <= 360
        assert browser.find_element(By.CSS_SELECTOR, f"{row} svg.spark").is_displayed()
        browser.save_screenshot(str(shots / "fleet-02-list-360px.png"))

        # A location, with the coordinates picked on the map and the zone proposed.
        browser.get(f"{base}/dashboard/locations/new")
        wait_for(browser, "document.getElementById('pick-map').dataset.state === 'drawn'")
        _no_side_scroll(browser, "the new location page")
        browser.execute_script("window.sdsPick.map.setView([48.85, 2.35], 7, {animate: false})")
        ActionChains(browser).move_to_element(
            browser.find_element(By.ID, "pick-map")).click().perform()
        wait_for(browser, "document.getElementById('loc-tz').value === 'Europe/Paris'")
        lat = float(browser.find_element(By.ID, "loc-lat").get_attribute("value") or "nan")
        lon = float(browser.find_element(By.ID, "loc-lon").get_attribute("value") or "nan")
        assert abs(lat - 48.85) < 0.1 and abs(lon - 2.35) < 0.1, (lat, lon)
        browser.save_screenshot(str(shots / "fleet-03-location-360px.png"))
        browser.find_element(By.ID, "loc-name").send_keys("Paris plot")
        browser.find_element(By.ID, "location-create").click()
        wait_for(browser, "document.getElementById('location-saved') !== null")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Paris plot"
        _no_side_scroll(browser, "the location page")

        # Retire, after the confirm step; its login then stops working.
        browser.get(f"{base}/dashboard/fleet/E7")
        _no_side_scroll(browser, "the manage page")
        browser.find_element(By.ID, "retire-device").click()
        wait_for(browser, "document.getElementById('confirm-retire') !== null")
        _no_side_scroll(browser, "the confirm page")
        browser.find_element(By.ID, "confirm-retire").click()
        wait_for(browser, "document.getElementById('device-retired') !== null")
        _no_side_scroll(browser, "the list after retiring")
        browser.save_screenshot(str(shots / "fleet-04-retired-360px.png"))
        assert conn.execute("SELECT state FROM devices WHERE name = 'E7'").fetchone() == (
            "Retired",)
        assert "E7:" not in passwd.read_text()
        assert _until_login(creds, works=False) is None
