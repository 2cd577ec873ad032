"""Issue 23's "Done when" test in headless Chromium against gunicorn: an administrator invites a
user into a team; the user accepts, signs in and sees only that team's devices in the list, the
charts and the API; the administrator removes them and their key stops working at once.

All of it in the dashboard, one browser, the two people signing in and out in turn: the owner
makes team "Field crew" on the Teams page with device A1 (not A3), invites crew@a.example on
the Members page as a teams-only member (SMTP is not configured: the page shows the link, with
its Copy button); the invitee opens the link and sets a password; the owner adds them to the
team on its page; they sign in and see A1 alone in the devices list, A1's chart draws, A3's
page is the same 404 as a missing device's, and a key they make on the API keys page lists
only A1; the owner removes them on the Members page and the key answers 401 at once. The
teams and members pages fit a 360 px screen."""

from __future__ import annotations

from pathlib import Path

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from people import links
from testbed.browser import console_errors, wait_for
from tests.support.browsing import chart_drawn, fetch, sign_in, snap, submit
from tests.support.dashboard import World

EMAIL, PASSWORD = "crew@a.example", "crew-member-passphrase-3"
OVERFLOW = "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"


def _ready(driver: WebDriver, element: str) -> None:
    wait_for(driver, f"document.readyState === 'complete' && "
                     f"document.getElementById('{element}') !== null")


def _sign_out(driver: WebDriver) -> None:
    submit(driver, "sign-out", "email")


def _sign_in_crew(driver: WebDriver, server: str) -> None:
    driver.get(f"{server}/dashboard/login")
    _ready(driver, "email")
    driver.find_element(By.ID, "email").send_keys(EMAIL)
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    submit(driver, "sign-in", "devices")


def _error_page(driver: WebDriver, server: str, name: str) -> str:
    """The device page of `name` as shown, the name replaced (to compare two 404 pages)."""
    driver.get(f"{server}/dashboard/devices/{name}")
    _ready(driver, "error-message")
    return str(driver.find_element(By.TAG_NAME, "main").text).replace(name, "X")


def test_admin_invites_into_a_team_member_sees_only_it_until_removed(
        server: str, browser: WebDriver, world: World, shots: Path) -> None:
    """Issue 23's "Done when" browser test (see the module's docstring)."""
    # The owner makes the team, with A1 and not A3.
    sign_in(browser, server, "admin@a.example")
    browser.find_element(By.LINK_TEXT, "Teams").click()
    _ready(browser, "team-form")
    browser.find_element(By.ID, "team-name").send_keys("Field crew")
    submit(browser, "team-create", "team-title")
    team_url = browser.current_url
    assert browser.find_element(By.ID, "team-title").text == "Field crew"
    Select(browser.find_element(By.ID, "add-devices-target")).select_by_value("A1")
    submit(browser, "add-devices-button", "team-devices")
    held = [e.get_attribute("data-label") for e in browser.find_elements(
        By.CSS_SELECTOR, "#team-devices li[data-label]")]
    assert held == ["A1"]

    # ... invites the user as a teams-only member: no SMTP, so the link is on the page.
    browser.find_element(By.LINK_TEXT, "Members").click()
    _ready(browser, "invite-form")
    browser.find_element(By.ID, "invite-email").send_keys(EMAIL)
    Select(browser.find_element(By.ID, "invite-role")).select_by_value("member")
    browser.find_element(By.ID, "invite-teams-only").click()
    submit(browser, "invite-send", "invite-link")
    assert "Not mailed" in browser.find_element(By.ID, "invite-not-mailed").text
    link = browser.find_element(By.ID, "invite-link").get_attribute("value")
    assert link and links.ACCEPT_PATH in link
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": server, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    browser.find_element(By.ID, "copy-invite").click()
    wait_for(browser, "document.getElementById('copy-invite').dataset.state === 'copied'")
    pasted = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        " navigator.clipboard.readText().then(done, e => done('ERR ' + e));")
    assert pasted == link
    row = browser.find_element(By.CSS_SELECTOR, f"#invitations tr[data-email='{EMAIL}']")
    cells = [td.text for td in row.find_elements(By.TAG_NAME, "td")]
    assert cells[:3] == [EMAIL, "member", "yes"], cells  # pending, teams only
    snap(browser, shots, "team-01-invited")
    _sign_out(browser)

    # The invitee opens the link (pointed at this test server: SDS_PUBLIC_URL is the
    # deployment's edge) and sets a password.
    browser.get(server + links.ACCEPT_PATH + link.rsplit("/", 1)[1])
    _ready(browser, "accept-what")
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#accept-what strong")
            ][1:] == ["member", EMAIL]
    browser.find_element(By.ID, "name").send_keys("Crew")
    browser.find_element(By.ID, "password").send_keys(PASSWORD)
    browser.find_element(By.ID, "again").send_keys(PASSWORD)
    submit(browser, "accept", "login-message")

    # The owner adds them to the team on its page.
    sign_in(browser, server, "admin@a.example")
    browser.get(team_url)
    _ready(browser, "add-members-target")
    Select(browser.find_element(By.ID, "add-members-target")).select_by_visible_text(EMAIL)
    submit(browser, "add-members-button", "team-members")
    assert browser.find_elements(By.CSS_SELECTOR, f"#team-members li[data-label='{EMAIL}']")
    snap(browser, shots, "team-02-team-page")
    _sign_out(browser)

    # The member sees the team's device alone: the list, its chart, the others' 404.
    _sign_in_crew(browser, server)
    rows = {r.get_attribute("data-device")
            for r in browser.find_elements(By.CSS_SELECTOR, "#devices tbody tr")}
    assert rows == {"A1"}
    browser.find_element(By.LINK_TEXT, "A1").click()
    chart_drawn(browser, "chart", loads=1)
    assert int(browser.find_element(By.ID, "chart").get_attribute("data-points") or 0) > 0
    snap(browser, shots, "team-03-member-chart")
    assert fetch(browser, "/dashboard/devices/A3")[0] == 404
    assert fetch(browser, "/dashboard/devices/Z9")[0] == 404
    assert _error_page(browser, server, "A3") == _error_page(browser, server, "Z9")

    # ... and a key of theirs, made on the API keys page, lists only that device.
    browser.find_element(By.LINK_TEXT, "API keys").click()
    _ready(browser, "new-key-form")
    browser.find_element(By.ID, "key-name").send_keys("crew script")
    for scope in ("devices:read", "data:read"):
        browser.find_element(By.CSS_SELECTOR, f"input[name=scopes][value='{scope}']").click()
    submit(browser, "key-create", "key-created")
    value = browser.find_element(By.ID, "new-key").get_attribute("value")
    key = {"Authorization": f"Apikey {value}"}
    listed = requests.get(f"{server}/api/v2/devices", headers=key, timeout=10)
    assert listed.status_code == 200
    assert [d["name"] for d in listed.json()["items"]] == ["A1"]
    hidden = requests.get(f"{server}/api/v2/devices/A3", headers=key, timeout=10)
    missing = requests.get(f"{server}/api/v2/devices/Z9", headers=key, timeout=10)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.text.replace("A3", "X") == missing.text.replace("Z9", "X")
    data = {"device": "A1", "start_time": "2026-03-07T00:00:00Z",
            "end_time": "2026-03-07T01:00:00Z"}
    rows = requests.get(f"{server}/api/v2/data/calibrated", headers=key, params=data,
                        timeout=10)
    assert rows.status_code == 200 and len(rows.json()) == 13, rows.text[:500]
    data["device"] = "A3"
    assert requests.get(f"{server}/api/v2/data/calibrated", headers=key, params=data,
                        timeout=10).status_code == 404
    _sign_out(browser)

    # The owner removes them on the Members page; the key answers 401 at once.
    sign_in(browser, server, "admin@a.example")
    browser.find_element(By.LINK_TEXT, "Members").click()
    _ready(browser, "members")
    browser.find_element(
        By.XPATH, f"//tr[@data-email='{EMAIL}']//a[contains(@class,'remove-member')]").click()
    _ready(browser, "confirm-remove")
    submit(browser, "confirm-remove", "member-removed")
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 401

    # 360 px: the teams, team and members pages without horizontal scroll.
    browser.set_window_size(360, 800)
    wait_for(browser, "window.innerWidth <= 360")
    for url in (f"{server}/dashboard/teams", team_url, f"{server}/dashboard/members"):
        browser.get(url)
        wait_for(browser, "document.readyState === 'complete'")
        scroll, client = browser.execute_script(OVERFLOW)
        assert scroll <= client, (url, scroll, client)
        assert browser.find_element(By.ID, "sign-out").is_displayed()
    browser.save_screenshot(str(shots / "team-04-team-360px.png"))
    assert not [e for e in console_errors(browser) if "Content Security Policy" in e]
