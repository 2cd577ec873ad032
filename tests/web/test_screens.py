"""The dashboard on a narrow screen, in headless Chromium against gunicorn (issue 26): at 400 px
the devices page is a list of cards with no horizontal scroll, "Sign out" is visible and works,
a device's chart takes the screen's width, and the locations (with the map), compare and bad
data pages do not scroll sideways either."""

from __future__ import annotations

from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from testbed.browser import wait_for
from tests.support.browsing import chart_drawn, sign_in

# document width beyond the window: a horizontal scroll bar
OVERFLOW = ("return [document.documentElement.scrollWidth, document.documentElement.clientWidth,"
            " document.body.scrollWidth]")


def visible(driver: WebDriver, element_id: str) -> bool:
    """The element is displayed and wholly inside the window."""
    return bool(driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        " return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth"
        " && r.top >= 0", element_id))


def test_devices_at_400_px_are_cards_without_horizontal_scroll(
        server: str, browser: WebDriver, shots: Path) -> None:
    browser.set_window_size(400, 900)
    sign_in(browser, server, "user@a.example")
    wait_for(browser, "window.innerWidth <= 400")
    scroll, client, body = browser.execute_script(OVERFLOW)
    assert scroll <= client and body <= client, (scroll, client, body)
    assert visible(browser, "sign-out")
    # Cards: the table's header row is hidden, each device's facts are labelled.
    assert not browser.find_element(By.CSS_SELECTOR, "#devices thead").is_displayed()
    card = browser.find_element(By.CSS_SELECTOR, "#devices tr[data-device='A1']")
    assert card.size["width"] <= client
    assert "80%" in card.text
    labels = browser.execute_script(
        "return Array.from(arguments[0].cells).map(c => getComputedStyle(c, '::before').content)",
        card)
    assert '"Battery"' in labels and '"Last seen"' in labels
    for link in browser.find_elements(By.CSS_SELECTOR, "header.top nav a"):
        rect = link.rect
        assert rect["x"] >= 0 and rect["x"] + rect["width"] <= client, link.text
    browser.save_screenshot(str(shots / "10-devices-400px.png"))

    browser.find_element(By.LINK_TEXT, "A1").click()
    chart_drawn(browser, "chart", loads=1)
    chart_drawn(browser, "water")
    scroll, client, body = browser.execute_script(OVERFLOW)
    assert scroll <= client and body <= client, (scroll, client, body)
    width = browser.execute_script("return window.sdsDashboard.main.width")
    assert 0.8 * client <= width <= client  # the chart fills the screen's width
    assert visible(browser, "sign-out")
    browser.save_screenshot(str(shots / "11-device-400px.png"))

    for page in ("/dashboard/locations", "/dashboard/compare", "/dashboard/quarantine"):
        browser.get(f"{server}{page}")
        scroll, client, body = browser.execute_script(OVERFLOW)
        assert scroll <= client, (page, scroll, client, body)
        assert visible(browser, "sign-out"), page
    browser.find_element(By.ID, "sign-out").click()
    wait_for(browser, "document.getElementById('login-message') !== null")
