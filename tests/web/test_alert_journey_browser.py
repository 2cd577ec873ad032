"""Issue 33's grower journey ("Done when") in headless Chromium against gunicorn, with the real
mosquitto, ingester, evaluator and deliverer, a real SMTP server and the Slack stand-in on
loopback: the owner sets the organisation's SMTP settings, creates an email channel and a
Slack-format channel and tests both from their pages (the answers shown there); a frost rule
made from the template, previewed over the device's past week (two cold nights: "would have
fired 2 times"), with a repeat interval; quiet hours set on the policy page (a refused time
said in words first) and the daily digest; a crossing published over MQTT reaches both channels
titled in words; the unread count in the navigation, the event's link landing on the chart at
that moment with the threshold drawn, every open event acknowledged at once; then the Alerts,
Notifications, Channels and policy pages at 360 px without horizontal scrolling."""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from people import accounts
from shared.config import Settings
from testbed.apiserver import gunicorn_api
from testbed.browser import wait_for
from testbed.receivers import Receiver, service_receiver, smtp_sink
from tests.support.alerting import EvaluatorProcess
from tests.support.browsing import chart_drawn, create_channel, fill, snap
from tests.support.delivery import SEAL_KEY, DelivererProcess, deliverer_env
from tests.support.figures import Figures
from tests.support.ingesting import (
    Ledger,
    RunningIngester,
    iso,
    make_site,
    now_slot,
    topic,
)
from tests.support.ingesting import wait_for as wait_until
from tests.support.readings import FIVE, insert_readings, series

EMAIL, PASSWORD = "grower@farm.example", "grower-password-1"
OVERFLOW = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


@pytest.fixture
def evaluator(mqtt_settings: Settings, tmp_path: Path) -> Iterator[EvaluatorProcess]:
    proc = EvaluatorProcess(mqtt_settings, tmp_path / "evaluate.log")
    yield proc
    proc.stop()


@pytest.fixture
def receivers(tmp_path: Path, processes: None) -> Iterator[tuple[Receiver, Receiver]]:
    mail, chat = smtp_sink(tmp_path), service_receiver(tmp_path)
    try:
        yield mail, chat
    finally:
        mail.stop()
        chat.stop()


@pytest.fixture
def deliverer(database_url: str, tmp_path: Path, processes: None
              ) -> Iterator[DelivererProcess]:
    proc = DelivererProcess(deliverer_env(database_url), tmp_path / "deliver.log")
    yield proc
    proc.stop()


def _channel(driver: WebDriver, base: str, name: str, kind: str, **fields: str) -> str:
    """Create a channel on the Channels page, press Send a test on its page; the answer."""
    create_channel(driver, base, name, kind, **fields)
    driver.find_element(By.ID, "channel-test").click()
    wait_for(driver, "['delivered', 'failed'].includes("
                     "document.getElementById('test-result')?.dataset.state)", timeout=60)
    result = driver.find_element(By.ID, "test-result")
    assert result.get_attribute("data-state") == "delivered", result.text
    return str(result.text)


def _subjects(mail: Receiver) -> list[str]:
    return [str(email.message_from_string(m["data"], policy=email.policy.default)["subject"])
            for m in mail.received()]


def _history(conn: psycopg.Connection, device: str, location: object) -> None:
    """Readings of the past week, older than the evaluator's SDS_ALERT_MAX_AGE (one day) so
    it raises nothing for them: 5 C, with two nights of -1.5 C for an hour (days 4 and 2)."""
    end = now_slot() - timedelta(days=1, hours=12)
    steps = 5 * 288  # g = steps - i readings before `end`

    def tair(i: int, _t: object) -> float:
        g = steps - i
        return -1.5 if 12 <= g <= 23 or 588 <= g <= 599 else 5.0

    insert_readings(conn, device, location,  # type: ignore[arg-type]  # a location id
                    series(end - steps * FIVE, n=steps + 1, tair=tair))
    conn.commit()


def _sign_in(driver: WebDriver, base: str) -> None:
    driver.get(f"{base}/dashboard/login")
    driver.find_element(By.ID, "email").send_keys(EMAIL)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    driver.find_element(By.ID, "sign-in").click()
    wait_for(driver, "document.querySelector('main h1').textContent === 'Devices'")


def _no_side_scroll(driver: WebDriver, url: str, figures: Figures, name: str) -> None:
    driver.get(url)
    wait_for(driver, "document.getElementById('unread').dataset.count !== undefined")
    scroll, client = driver.execute_script(OVERFLOW)
    before = {"alerts": "; 619 before issue 33", "notifications": "; 579 before issue 33"}
    figures.record(f"alerts_{name}_width_at_360_px", scroll, section="alerts",
                   title=f"Width of the {name} page in a 360 px window (px"
                         f"{before.get(name, '')})", target="<= 360",
                   source="tests/web/test_alert_journey_browser.py")
    assert scroll <= client <= 360, (name, scroll, client)
    for button in driver.find_elements(By.CSS_SELECTOR, "main button"):
        if button.is_displayed():
            rect = button.rect
            assert rect["x"] >= 0 and rect["x"] + rect["width"] <= client, button.text


def test_a_grower_sets_up_frost_and_works_the_inbox(
        conn: psycopg.Connection, database_url: str, mqtt_settings: Settings,
        ingester: RunningIngester, publisher: Ledger, evaluator: EvaluatorProcess,
        receivers: tuple[Receiver, Receiver], deliverer: DelivererProcess,
        browser: WebDriver, shots: Path, tmp_path: Path, figures: Figures) -> None:
    mail, chat = receivers
    site = make_site(conn, device="F1")
    accounts.create_user(conn, org=site.org, email=EMAIL, password=PASSWORD, role="owner")
    conn.commit()
    _history(conn, "F1", site.location)
    with gunicorn_api(database_url, tmp_path / "api", SDS_APIKEY_SEAL_KEYS=SEAL_KEY,
                      SDS_WEBHOOK_ALLOW_PRIVATE="true") as base:
        deliverer.start()
        _sign_in(browser, base)
        # Where alerts go: the organisation's SMTP server, an email channel and a Slack
        # channel, each tested from its page with the server's and the receiver's answer.
        browser.get(f"{base}/dashboard/channels")
        fill(browser, "smtp-host", "127.0.0.1")
        fill(browser, "smtp-port", str(mail.port))
        Select(browser.find_element(By.ID, "smtp-security")).select_by_value("none")
        fill(browser, "smtp-from", "alerts@farm.example")
        browser.find_element(By.ID, "smtp-save").click()
        wait_for(browser, "document.getElementById('email-source')?.dataset.source"
                          " === 'organisation'")
        answer = _channel(browser, base, "Grower mail", "email",
                          **{"channel-recipients": EMAIL})
        assert "250 " in answer and _subjects(mail) == ["[TEST] Test of channel Grower mail"]
        answer = _channel(browser, base, "Farm chat", "webhook", format="slack",
                          **{"channel-url": f"http://127.0.0.1:{chat.port}/slack/T0/B0/x"})
        assert "HTTP 200 OK: ok" in answer, answer
        assert [(x["service"], x["problems"]) for x in chat.received()] == [("slack", [])]

        # The template fills the form; the grower keeps it and previews the past week.
        browser.get(f"{base}/dashboard/alerts")
        # The form shows what the kind uses; the clear comparison follows the condition's.
        Select(browser.find_element(By.ID, "rule-op")).select_by_value(">")
        assert browser.execute_script(
            "return Array.from(document.getElementById('rule-clear-op').options)"
            ".filter(o => !o.disabled).map(o => o.value).join()") == ",<,<="
        Select(browser.find_element(By.ID, "rule-column")).select_by_value("wind_speed")
        assert browser.execute_script(
            "return Array.from(document.getElementById('rule-unit').options)"
            ".filter(o => !o.disabled).map(o => o.textContent).join()") == "m/s,km/h,mph"
        Select(browser.find_element(By.ID, "rule-kind")).select_by_value("silent")
        assert not browser.find_element(By.ID, "rule-column").is_displayed()
        assert not browser.find_element(By.ID, "rule-op").is_displayed()
        assert "Reporting intervals" in browser.find_element(By.ID, "threshold-label").text
        browser.find_element(By.CSS_SELECTOR, "a.template[data-template=frost]").click()
        wait_for(browser, "document.getElementById('rule-name').value === 'Frost'")
        assert Select(browser.find_element(By.ID, "rule-column")).first_selected_option.text \
            == "Air temperature (tair)"
        assert Select(browser.find_element(By.ID, "rule-device")).first_selected_option.text \
            == "F1"
        browser.find_element(By.ID, "rule-preview").click()
        wait_for(browser, "window.sdsRules.previews === 1")
        status = browser.find_element(By.ID, "preview-status").text
        assert status == "F1: would have fired 2 times in the last 7 days", status
        assert browser.execute_script(
            "return window.sdsRules.last.events.map(e => e.kind).join()") == \
            "firing,resolved,firing,resolved"
        wait_for(browser, "document.getElementById('preview-chart').dataset.state === 'drawn'")
        snap(browser, shots, "alerts-preview")
        # Fire at once for the test's crossing: the grower adjusts the template's 15 minutes,
        # and asks to be reminded every hour while it stays firing.
        fill(browser, "rule-for", "0")
        fill(browser, "rule-repeat", "60")
        browser.find_element(By.ID, "rule-create").click()
        wait_for(browser, "document.querySelectorAll('#rules tr[data-id]').length === 1")
        row = browser.find_element(By.CSS_SELECTOR, "#rules tr[data-id]").text
        assert "below 0 °C" in row and "at or above 1 °C" in row, row
        assert "reminds every 1 h" in row, row

        # Quiet hours for the frost rule at F1, set away from now so the crossing below is
        # sent; a time the form cannot take is said in words first. Then the daily digest.
        browser.find_element(By.ID, "nav-inbox").click()
        browser.find_element(By.ID, "policy-link").click()
        wait_for(browser, "document.getElementById('quiet-form') !== null")
        quiet = (datetime.now(UTC) + timedelta(hours=3)).replace(minute=0)
        fill(browser, "quiet-from", "25:00")
        fill(browser, "quiet-to", f"{(quiet.hour + 1) % 24:02d}:00")
        fill(browser, "quiet-zone", "UTC")
        Select(browser.find_element(By.ID, "quiet-rule")).select_by_visible_text("Frost")
        Select(browser.find_element(By.ID, "quiet-device")).select_by_value("F1")
        browser.find_element(By.ID, "quiet-save").click()
        wait_for(browser, "document.getElementById('quiet-error') !== null")
        assert browser.find_element(By.ID, "quiet-error").text == \
            "From: a time of day, like 22:00."
        fill(browser, "quiet-from", f"{quiet.hour:02d}:00")
        browser.find_element(By.ID, "quiet-save").click()
        wait_for(browser, "document.querySelectorAll('#mutes li.mute').length === 1")
        mute = browser.find_element(By.CSS_SELECTOR, "#mutes li.mute").text
        assert mute.startswith(f"{quiet.hour:02d}:00–{(quiet.hour + 1) % 24:02d}:00 UTC, "
                               "every day: rule Frost at device F1"), mute
        browser.find_element(By.ID, "digest-active").click()
        Select(browser.find_element(By.ID, "digest-hour")).select_by_value("6")
        browser.find_element(By.ID, "digest-save").click()
        wait_for(browser, "document.getElementById('digest-state').dataset.active === 'true'")
        assert browser.find_element(By.ID, "digest-state").text.startswith(
            "Each day at 06:00 UTC")
        snap(browser, shots, "alerts-policy")

        # A frost, a thaw and a frost again, over MQTT: firing, resolved, firing.
        evaluator.start()
        for minutes, tair in ((15, -2.0), (10, 3.0), (5, -2.5)):
            body = {"time": iso(now_slot(minutes)), "tair": tair}
            assert publisher.publish(topic(mqtt_settings, "F1"), json.dumps(body).encode())
        events = wait_until(lambda: _crossings(base), 60, what="three events")
        assert [e["kind"] for e in sorted(events, key=lambda e: e["at"])] == \
            ["firing", "resolved", "firing"]
        newest_at = max(e["at"] for e in events)
        # Both channels got them, titled in words (the column's name, the unit's symbol).
        said = wait_until(lambda: (lambda m: m if len(m) == 4 else None)(_subjects(mail)), 60,
                          what="the three emails")
        assert said.count("[ALERT] Frost: Air temperature below 0 °C at F1") == 2, said
        assert "[RESOLVED] Resolved: Frost: Air temperature at or above 1 °C at F1" in said
        texts = wait_until(lambda: (lambda c: c if len(c) == 4 else None)(chat.received()), 60,
                           what="the three Slack messages")
        assert all(x["problems"] == [] for x in texts)
        assert any("Air temperature: -2.5 °C" in x["body"] for x in texts), texts
        assert not any("tair" in json.loads(x["body"])["text"] for x in texts)

        # Two tests and three crossings are unread.
        browser.get(f"{base}/dashboard/alerts")
        wait_for(browser, "document.getElementById('unread').dataset.count === '5'")
        assert browser.find_element(By.ID, "unread").text == "5"

        # The newest frost's link lands on the chart at that moment, threshold drawn.
        browser.find_element(By.ID, "nav-inbox").click()
        wait_for(browser, "document.querySelectorAll('#inbox tr[data-id]').length === 5")
        newest = next(r for r in browser.find_elements(By.CSS_SELECTOR, "#inbox tr[data-id]")
                      if r.get_attribute("data-id") == next(
                          e["id"] for e in events if e["at"] == newest_at))
        assert "Air temperature: -2.5 °C" in newest.text, newest.text
        snap(browser, shots, "alerts-inbox-issue33")
        newest.find_element(By.CSS_SELECTOR, "a.chart-link").click()
        chart_drawn(browser, "chart", loads=1)
        wait_for(browser, "document.getElementById('chart').dataset.markAt === 'drawn'"
                          " && document.getElementById('chart').dataset.markThreshold === 'drawn'")
        snap(browser, shots, "alerts-event-on-chart")

        # Tick every open event and acknowledge them at once.
        browser.back()
        wait_for(browser, "document.querySelectorAll('#inbox input[name=ids]').length === 5")
        for box in browser.find_elements(By.CSS_SELECTOR, "#inbox input[name=ids]"):
            box.click()
        browser.find_element(By.ID, "ack-selected").click()
        wait_for(browser, "document.querySelectorAll('#inbox input[name=ids]').length === 0"
                          " && document.getElementById('unread').dataset.count === '0'")
        assert browser.find_element(By.ID, "unread").get_attribute("hidden") is not None
        assert all(f"by {EMAIL}" in r.text for r in
                   browser.find_elements(By.CSS_SELECTOR, "#inbox tr[data-id]"))

        # The same pages on a phone.
        browser.set_window_size(360, 800)
        wait_for(browser, "window.innerWidth <= 360")
        for path, name in (("alerts", "alerts"), ("notifications", "notifications"),
                           ("channels", "channels"), ("notifications/policy", "policy")):
            _no_side_scroll(browser, f"{base}/dashboard/{path}", figures, name)
            browser.save_screenshot(str(shots / f"{name}-360px.png"))


def _crossings(base: str) -> list[dict[str, object]] | None:
    """The firing and resolved events (the channels' tests are events too), once three."""
    items = [e for e in requests.get(f"{base}/api/v2/notifications?limit=50",
                                     auth=(EMAIL, PASSWORD), timeout=30).json()["items"]
             if e["kind"] in ("firing", "resolved")]
    return items if len(items) == 3 else None
