"""The people pages (issue 23) in headless Chromium against gunicorn: an administrator makes an
API key with chosen scopes, copies it with the Copy button (the clipboard holds the key, and
the key reads the API), deactivates, reactivates and deletes it; changes a member's role and
removes them after the confirm step (their key stops at once); changes a location's time zone,
crop and kc schedule (the page says the rollups will be recomputed); saves units and zone as
preferences (the device page then opens in them); reads the audit log filtered by action. A
member sees the location and the members read-only. Every page fits a 360 px screen."""

from __future__ import annotations

from pathlib import Path

import psycopg
import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from people import accounts
from testbed.browser import console_errors, wait_for
from tests.support.browsing import sign_in, snap, submit
from tests.support.dashboard import PASSWORDS, World

PAGES = ("/dashboard/keys", "/dashboard/members", "/dashboard/account", "/dashboard/audit")
OVERFLOW = ("return [document.documentElement.scrollWidth, document.documentElement.clientWidth]")


def _go(driver: WebDriver, url: str, ready: str) -> None:
    driver.get(url)
    wait_for(driver, f"document.getElementById('{ready}') !== null")


def test_admin_uses_the_people_pages(server: str, browser: WebDriver, world: World,
                                     shots: Path) -> None:
    with psycopg.connect(world.url) as conn:
        accounts.create_user(conn, org=world.org_a, email="temp@a.example",
                             password="temp-a-password")
    sign_in(browser, server, "admin@a.example")
    # Navigation links lead to the pages.
    for link, ready in (("API keys", "new-key-form"), ("Members", "members"),
                        ("Preferences", "account-form"), ("Audit", "audit")):
        browser.find_element(By.LINK_TEXT, link).click()
        wait_for(browser, f"document.getElementById('{ready}') !== null")

    # API keys: scopes offered include the administrators' ones; the value is shown once.
    _go(browser, f"{server}/dashboard/keys", "new-key-form")
    browser.find_element(By.ID, "key-name").send_keys("logger")
    for scope in ("data:read", "devices:read"):
        browser.find_element(By.CSS_SELECTOR, f"input[name=scopes][value='{scope}']").click()
    assert browser.find_elements(By.CSS_SELECTOR, "input[name=scopes][value='orgs:write']")
    submit(browser, "key-create", "key-created")
    value = browser.find_element(By.ID, "new-key").get_attribute("value")
    assert value and value.startswith("sdsk_")
    browser.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": server, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    browser.find_element(By.ID, "copy-key").click()
    wait_for(browser, "document.getElementById('copy-key').dataset.state === 'copied'")
    pasted = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        " navigator.clipboard.readText().then(done, e => done('ERR ' + e));")
    assert pasted == value
    snap(browser, shots, "40-keys-created")
    key = {"Authorization": f"Apikey {value}"}
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 200
    browser.get(f"{server}/dashboard/keys")
    assert value not in browser.page_source  # once only
    row = "//tr[td[1][normalize-space()='logger']]"
    submit(browser, f"{row}//button[contains(@class,'toggle-key')]", "keys", By.XPATH)
    assert browser.find_element(By.XPATH, row).get_attribute("data-active") == "false"
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 401
    submit(browser, f"{row}//button[contains(@class,'toggle-key')]", "keys", By.XPATH)
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 200
    submit(browser, f"{row}//button[contains(@class,'delete-key')]", "key-confirm-delete",
            By.XPATH)
    assert "logger" in browser.find_element(By.ID, "key-confirm-delete").text
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 200
    submit(browser, "confirm-delete-key", "key-deleted")
    assert not browser.find_elements(By.XPATH, row)
    assert requests.get(f"{server}/api/v2/devices", headers=key, timeout=10).status_code == 401

    # Members: the temporary member gets a key, is promoted, then removed after the confirm.
    temp_key = requests.post(f"{server}/api/v2/apikeys", auth=("temp@a.example",
                             "temp-a-password"), json={"scopes": ["devices:read"]},
                             timeout=10).json()["apikey"]
    temp = {"Authorization": f"Apikey {temp_key}"}
    assert requests.get(f"{server}/api/v2/devices", headers=temp, timeout=10).status_code == 200
    _go(browser, f"{server}/dashboard/members", "members")
    member_row = "//tr[@data-email='temp@a.example']"
    roles = [o.get_attribute("value") for o in browser.find_elements(
        By.XPATH, f"{member_row}//select/option")]
    assert roles == ["owner", "admin", "member", "viewer"]  # the API's roles
    Select(browser.find_element(By.XPATH, f"{member_row}//select")).select_by_value("admin")
    submit(browser, f"{member_row}//button", "members", By.XPATH)
    assert browser.find_element(By.XPATH, member_row).get_attribute("data-role") == "admin"
    browser.find_element(By.XPATH, f"{member_row}//a[contains(@class,'remove-member')]").click()
    wait_for(browser, "document.getElementById('confirm-remove') !== null")
    assert "temp@a.example" in browser.find_element(By.TAG_NAME, "h1").text
    snap(browser, shots, "41-member-remove-confirm")
    submit(browser, "confirm-remove", "member-removed")
    assert not browser.find_elements(By.XPATH, member_row)
    assert requests.get(f"{server}/api/v2/devices", headers=temp, timeout=10).status_code == 401

    # A location: new zone, crop and kc schedule; the page says the rollups follow.
    _go(browser, f"{server}/dashboard/locations", "locations")
    browser.find_element(By.LINK_TEXT, "North field").click()
    wait_for(browser, "document.getElementById('location-form') !== null")
    for field, typed in (("loc-tz", "America/Denver"), ("loc-crop", "maize"),
                         ("loc-elev", "310")):
        box = browser.find_element(By.ID, field)
        box.clear()
        box.send_keys(typed)
    schedule = browser.find_element(By.ID, "loc-kc-schedule")
    schedule.clear()
    schedule.send_keys("2026-03-01 0.4\n2026-03-06 1.05")
    submit(browser, "location-save", "location-saved")
    said = browser.find_element(By.ID, "location-saved").text
    assert "will be recomputed" in said
    record = requests.get(f"{server}/api/v2/locations/{world.north}", timeout=10,
                          auth=("admin@a.example", PASSWORDS["admin@a.example"])).json()
    assert (record["tz_name"], record["elev"], record["crop"]) == ("America/Denver", 310, "maize")
    assert [e["kc"] for e in record["kc_schedule"]] == [0.4, 1.05]
    snap(browser, shots, "42-location-saved")
    # A bad zone: the API's message on the form, what was typed kept.
    box = browser.find_element(By.ID, "loc-tz")
    box.clear()
    box.send_keys("Mars/Olympus")
    submit(browser, "location-save", "location-error")
    assert "unknown time zone" in browser.find_element(By.ID, "location-error").text
    assert browser.find_element(By.ID, "loc-tz").get_attribute("value") == "Mars/Olympus"

    # Preferences: Fahrenheit and UTC become the device page's defaults.
    _go(browser, f"{server}/dashboard/account", "account-form")
    Select(browser.find_element(By.ID, "account-temp")).select_by_value("f")
    zone = browser.find_element(By.ID, "account-zone")
    zone.clear()
    zone.send_keys("UTC")
    submit(browser, "account-save", "account-saved")
    _go(browser, f"{server}/dashboard/devices/A1", "unit-temp")
    wait_for(browser, "document.getElementById('unit-temp').value === 'f'")

    # Audit: the changes above, filtered by action.
    _go(browser, f"{server}/dashboard/audit", "audit-filter")
    actions = {r.get_attribute("data-action")
               for r in browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")}
    assert {"apikey.create", "member.role", "member.remove", "location.update",
            "user.update"} <= actions
    box = browser.find_element(By.ID, "audit-action")
    box.send_keys("member.")
    box.submit()
    wait_for(browser, "location.search.includes('action=member.')")
    wait_for(browser, "document.getElementById('audit') !== null")
    actions = {r.get_attribute("data-action")
               for r in browser.find_elements(By.CSS_SELECTOR, "#audit tbody tr")}
    assert actions == {"member.role", "member.remove"}
    snap(browser, shots, "43-audit-members")

    # 360 px: every people page without horizontal scroll, the navigation reachable.
    browser.set_window_size(360, 800)
    wait_for(browser, "window.innerWidth <= 360")
    for path in (*PAGES, f"/dashboard/locations/{world.north}"):
        browser.get(f"{server}{path}")
        wait_for(browser, "document.readyState === 'complete'")
        scroll, client = browser.execute_script(OVERFLOW)
        assert scroll <= client, (path, scroll, client)
        assert browser.find_element(By.ID, "sign-out").is_displayed()
    browser.save_screenshot(str(shots / "44-location-360px.png"))
    assert not [e for e in console_errors(browser) if "Content Security Policy" in e]


def test_member_sees_members_and_a_location_read_only(server: str, browser: WebDriver,
                                                      world: World) -> None:
    sign_in(browser, server, "user@a.example")
    _go(browser, f"{server}/dashboard/members", "members")
    assert browser.find_elements(By.XPATH, "//tr[@data-email='admin@a.example']")
    assert not browser.find_elements(By.CSS_SELECTOR, "#members select, .remove-member")
    _go(browser, f"{server}/dashboard/locations/{world.north}", "location-facts")
    assert not browser.find_elements(By.ID, "location-form")
    _go(browser, f"{server}/dashboard/audit", "audit-refused")
    # A member's key offers no administrators' scope.
    _go(browser, f"{server}/dashboard/keys", "new-key-form")
    assert not browser.find_elements(By.CSS_SELECTOR, "input[value='orgs:write']")
    assert browser.find_elements(By.CSS_SELECTOR, "input[value='data:read']")
