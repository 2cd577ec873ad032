"""Issue 33's channel pages in headless Chromium against gunicorn, with the real deliverer
process, a real SMTP server (testbed.smtp_sink) and the Slack stand-in (testbed.service_receiver)
on loopback: the owner sets the organisation's SMTP settings in the page, creates an email
channel and a Slack-format channel, tests both from their pages and reads the SMTP server's and
the receiver's answers there; a disabled channel's banner leads to its page, where Enable brings
it back; then every channel page at 360 px without horizontal scrolling."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from testbed.apiserver import gunicorn_api
from testbed.browser import console_errors, wait_for
from testbed.receivers import Receiver, service_receiver, smtp_sink
from tests.support.browsing import create_channel, fill, snap
from tests.support.delivery import (
    PASSWORD,
    SEAL_KEY,
    DelivererProcess,
    deliverer_env,
    make_org,
)
from tests.support.figures import Figures

WIDEST = ("return [...document.querySelectorAll('main *')].filter(e => e.getBoundingClientRect()"
          ".right > document.documentElement.clientWidth + 1).slice(-4).map(e => e.tagName + '#'"
          " + e.id + '.' + e.className + ':' + Math.round(e.getBoundingClientRect().right))")
OVERFLOW = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


@pytest.fixture
def receivers(tmp_path: Path, processes: None) -> Iterator[tuple[Receiver, Receiver]]:
    mail, chat = smtp_sink(tmp_path), service_receiver(tmp_path)
    try:
        yield mail, chat
    finally:
        mail.stop()
        chat.stop()


def _test_from_the_page(driver: WebDriver) -> tuple[str, float]:
    """Press Send a test; the answer shown and the seconds from the click to it."""
    started = time.monotonic()
    driver.find_element(By.ID, "channel-test").click()
    wait_for(driver, "['delivered', 'failed'].includes("
                     "document.getElementById('test-result')?.dataset.state)", timeout=60)
    took = time.monotonic() - started
    result = driver.find_element(By.ID, "test-result")
    assert result.get_attribute("data-state") == "delivered", result.text
    return str(result.text), took


def test_a_grower_sets_up_email_and_slack_and_tests_both(
        conn: psycopg.Connection, database_url: str, browser: WebDriver, shots: Path,
        tmp_path: Path, receivers: tuple[Receiver, Receiver], figures: Figures) -> None:
    mail, chat = receivers
    org = make_org(conn, "channel-farm")
    deliverer = DelivererProcess(deliverer_env(database_url, channel_max_failures=1),
                                 tmp_path / "deliver.log")
    with gunicorn_api(database_url, tmp_path / "api", SDS_APIKEY_SEAL_KEYS=SEAL_KEY,
                      SDS_WEBHOOK_ALLOW_PRIVATE="true") as base:
        deliverer.start()
        try:
            browser.get(f"{base}/dashboard/login")
            fill(browser, "email", org.admin_email)
            fill(browser, "password", PASSWORD)
            browser.find_element(By.ID, "sign-in").click()
            wait_for(browser, "document.querySelector('main h1').textContent === 'Devices'")
            browser.find_element(By.LINK_TEXT, "Channels").click()
            wait_for(browser, "document.getElementById('email-source') !== null")
            assert browser.find_element(By.ID, "email-source").get_attribute(
                "data-source") == "none"

            # The owner's SMTP settings, in the page; no process is restarted.
            fill(browser, "smtp-host", "127.0.0.1")
            fill(browser, "smtp-port", str(mail.port))
            Select(browser.find_element(By.ID, "smtp-security")).select_by_value("none")
            fill(browser, "smtp-from", "alerts@channel-farm.example")
            browser.find_element(By.ID, "smtp-save").click()
            wait_for(browser, "document.getElementById('email-source')?.dataset.source"
                              " === 'organisation'")

            create_channel(browser, base, "Grower mail", "email",
                    **{"channel-recipients": "grower@channel-farm.example"})
            answer, email_s = _test_from_the_page(browser)
            assert "250 " in answer, answer
            got = mail.received()
            assert got[0]["rcpt_tos"] == ["grower@channel-farm.example"]
            assert "[TEST]" in got[0]["data"]
            snap(browser, shots, "channel-email-tested")

            create_channel(browser, base, "Farm chat", "webhook", format="slack",
                    **{"channel-url": f"http://127.0.0.1:{chat.port}/slack/services/T0/B0/x"})
            answer, slack_s = _test_from_the_page(browser)
            assert "HTTP 200 OK: ok" in answer, answer
            figures.record("channels_test_answer_s", round(max(email_s, slack_s), 1),
                           section="alerts", title="Send a test on a channel's page to the "
                           "receiver's answer shown there (s; the slower of email and Slack)",
                           target="<= 10", source="tests/web/test_channel_browser.py")
            assert [(x["service"], x["problems"]) for x in chat.received()] == [("slack", [])]
            snap(browser, shots, "channel-slack-tested")
            # The page's Service menu shows the chosen format's own fields (issue 33: the
            # format can be changed); Telegram's chat id only for Telegram.
            wait_for(browser, "document.getElementById('edit-channel').dataset.ready === '1'")
            chat_id = browser.find_element(By.ID, "edit-chat-id")
            assert not chat_id.is_displayed()
            Select(browser.find_element(By.ID, "edit-format")).select_by_value("telegram")
            assert chat_id.is_displayed() and chat_id.is_enabled()
            assert not browser.find_element(By.ID, "edit-routing-key").is_displayed()
            Select(browser.find_element(By.ID, "edit-format")).select_by_value("slack")
            assert not chat_id.is_displayed()

            # A channel the deliverer disables (one failure here): the banner leads to its
            # page, and Enable there brings it back.
            create_channel(browser, base, "Broken chat", "webhook", format="slack",
                    **{"channel-url": f"http://127.0.0.1:{chat.port}/nowhere"})
            browser.find_element(By.ID, "channel-test").click()
            deadline_script = ("document.getElementById('test-result')?.dataset.state"
                               " === 'failed'")
            wait_for(browser, deadline_script, timeout=60)
            browser.get(f"{base}/dashboard/channels")
            wait_for(browser, "document.getElementById('channel-banner').dataset.state"
                              " === 'checked'")
            link = browser.find_element(By.CSS_SELECTOR, "#channel-banner a.channel-link")
            assert link.text == "Broken chat"
            link.click()
            wait_for(browser, "document.getElementById('channel-enable') !== null")
            assert "disabled" in browser.find_element(By.ID, "channel-state").text
            assert not browser.find_elements(By.ID, "channel-test")  # receives nothing
            # The failed test is still due for a retry (0.2-1 s here), which fails again and,
            # at one failure allowed, disables the channel again: seen once, before the page
            # after Enable was drawn. With the deliverer stopped, the page shows Enable's own
            # result.
            deliverer.stop()
            browser.find_element(By.ID, "channel-enable").click()
            wait_for(browser, "document.getElementById('channel-test') !== null")
        finally:
            deliverer.stop()

        # 360 px: the channel pages without horizontal scroll, the navigation reachable.
        browser.get(f"{base}/dashboard/channels")
        ids = [r.get_attribute("data-id")
               for r in browser.find_elements(By.CSS_SELECTOR, "#channels tr[data-id]")]
        assert len(ids) == 3
        browser.set_window_size(360, 800)
        wait_for(browser, "window.innerWidth <= 360")
        pages = ["/dashboard/channels", *(f"/dashboard/channels/{i}" for i in ids),
                 f"/dashboard/channels/{ids[0]}/delete"]
        for path in pages:
            browser.get(f"{base}{path}")
            wait_for(browser, "document.readyState === 'complete'")
            scroll, width = browser.execute_script(OVERFLOW)
            assert scroll <= width, (path, scroll, width, browser.execute_script(WIDEST))
            assert browser.find_element(By.ID, "sign-out").is_displayed()
        browser.save_screenshot(str(shots / "channels-360px.png"))
        assert not [e for e in console_errors(browser) if "Content Security Policy" in e]
