"""The accept page in real headless Chromium against gunicorn (issue 23): an owner invites a
colleague through the API (no SMTP: the link is in the answer), the colleague opens the link,
sets a name and password, lands on the sign-in form with the email filled in, signs in and
sees the organisation's devices; the spent link then shows the one refusal and no form. A
password-reset link made by the owner works the same way and ends the user's sessions. An
invitation of an existing account is accepted signed in, on the Preferences page (issue 30)."""

from __future__ import annotations

from pathlib import Path

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from people import links
from testbed.browser import console_errors, wait_for
from tests.support.browsing import sign_in, snap
from tests.support.dashboard import PASSWORDS, World

NEW_PASSWORD = "colleague-passphrase-7"


def _link(server: str, world: World, path: str, body: dict[str, str] | None) -> str:
    """The link in the owner's API answer, pointed at this test server (SDS_PUBLIC_URL is the
    deployment's edge, which this test does not run)."""
    r = requests.post(f"{server}/api/v2/orgs/{world.org_a}/{path}", json=body, timeout=30,
                      auth=("admin@a.example", PASSWORDS["admin@a.example"]))
    assert r.status_code == 201, r.text
    return server + links.ACCEPT_PATH + r.json()["link"].rsplit("/", 1)[1]


def _sign_in_with(browser: WebDriver, password: str) -> None:
    browser.find_element(By.ID, "password").send_keys(password)
    browser.find_element(By.ID, "sign-in").click()
    wait_for(browser, "document.getElementById('devices') !== null")


def test_an_invited_colleague_accepts_signs_in_and_sees_the_devices(
        server: str, world: World, browser: WebDriver, shots: Path) -> None:
    url = _link(server, world, "invitations", {"email": "colleague@a.example",
                                               "role": "viewer"})
    browser.get(url)
    assert "Org A" in browser.find_element(By.ID, "accept-what").text
    assert "viewer" in browser.find_element(By.ID, "accept-what").text
    snap(browser, shots, "accept-01-invitation")
    browser.find_element(By.ID, "name").send_keys("Colleague")
    browser.find_element(By.ID, "password").send_keys(NEW_PASSWORD)
    browser.find_element(By.ID, "again").send_keys(NEW_PASSWORD)
    browser.find_element(By.ID, "accept").click()
    wait_for(browser, "document.getElementById('login-message') !== null")
    assert "/dashboard/login" in browser.current_url
    assert browser.find_element(By.ID, "email").get_attribute("value") == "colleague@a.example"
    snap(browser, shots, "accept-02-sign-in")
    _sign_in_with(browser, NEW_PASSWORD)
    rows = {r.get_attribute("data-device")
            for r in browser.find_elements(By.CSS_SELECTOR, "#devices tbody tr")}
    assert rows == {"A1", "A2", "A3"}  # org A's devices, as its viewer
    assert console_errors(browser) == []
    browser.get(url)  # spent: the one refusal, and no form
    assert links.REFUSED in browser.find_element(By.ID, "accept-error").text
    assert not browser.find_elements(By.ID, "password")


def test_a_reset_link_sets_a_new_password_and_ends_the_session(
        server: str, world: World, browser: WebDriver, shots: Path) -> None:
    with requests.Session() as api:
        token = api.post(f"{server}/api/v2/auth/token", timeout=30, json={
            "email": "user@a.example", "password": PASSWORDS["user@a.example"]}).json()["token"]
        user = api.get(f"{server}/api/v2/users/me", timeout=30,
                       headers={"Authorization": f"Bearer {token}"}).json()["id"]
        url = _link(server, world, f"users/{user}/reset-link", None)
        browser.get(url)
        assert "user@a.example" in browser.find_element(By.ID, "accept-what").text
        browser.find_element(By.ID, "password").send_keys(NEW_PASSWORD)
        browser.find_element(By.ID, "again").send_keys(NEW_PASSWORD)
        browser.find_element(By.ID, "accept").click()
        wait_for(browser, "document.getElementById('login-message') !== null")
        snap(browser, shots, "accept-03-reset-done")
        assert api.get(f"{server}/api/v2/users/me", timeout=30, headers={
            "Authorization": f"Bearer {token}"}).status_code == 401  # the old token ended
        _sign_in_with(browser, NEW_PASSWORD)


def test_an_existing_account_accepts_signed_in_and_signs_out_everywhere(
        server: str, world: World, browser: WebDriver, shots: Path) -> None:
    """Issue 30: a link for an email that has an account shows no form, only the way to sign
    in; signed in, the account accepts on its Preferences page; its "Sign out everywhere"
    ends the session and every API key."""
    url = _link(server, world, "invitations", {"email": "user@b.example", "role": "viewer"})
    with requests.Session() as api:
        key = api.post(f"{server}/api/v2/apikeys", timeout=30, json={"scopes": ["devices:read"]},
                       auth=("user@b.example", PASSWORDS["user@b.example"])).json()["apikey"]
        browser.get(url)
        assert "sign in" in browser.find_element(By.ID, "accept-existing").text
        assert not browser.find_elements(By.ID, "password")
        snap(browser, shots, "accept-04-existing-account")
        sign_in(browser, server, "user@b.example")
        browser.get(f"{server}/dashboard/account")
        assert "Org A" in browser.find_element(By.ID, "my-invitations").text
        snap(browser, shots, "accept-05-invitations")
        browser.find_element(By.CSS_SELECTOR, "#my-invitations .accept-invitation").click()
        wait_for(browser, "document.getElementById('account-joined') !== null")
        assert browser.find_elements(By.ID, "no-invitations")
        browser.find_element(By.ID, "sign-out-everywhere").click()
        wait_for(browser, "document.getElementById('login-message') !== null")
        assert "everywhere" in browser.find_element(By.ID, "login-message").text
        snap(browser, shots, "accept-06-signed-out-everywhere")
        assert api.get(f"{server}/api/v2/devices", timeout=30,
                       headers={"Authorization": f"Apikey {key}"}).status_code == 401
        assert console_errors(browser) == []
