"""The locations map (issue 26), in headless Chromium against gunicorn: drawn with no tile
server reachable (Leaflet and world-atlas's countries are served by the dashboard itself; no
request leaves 127.0.0.1), a marker per location with coordinates coloured by its devices'
worst health badge, the latest conditions in its tooltip."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from shared import places
from testbed.browser import console_errors, wait_for
from tests.support.browsing import sign_in
from tests.support.dashboard import END, World


@pytest.fixture(scope="module")
def south(world: World) -> str:
    """A second located place of org A, South field near Sydney, with device D1 (never seen)."""
    with psycopg.connect(world.url) as conn:
        loc = places.create_location(conn, org=world.org_a, loc=places.LocationInput(
            name="South field", tz_name="Australia/Sydney", lat=-33.9, lon=151.2))
        places.register_device(conn, org=world.org_a, name="D1")
        places.deploy_device(conn, device="D1", location=loc, start=END)
        conn.commit()
    return str(loc)


def test_the_map_draws_offline_with_health_and_conditions(
        server: str, browser: WebDriver, world: World, south: str, shots: Path) -> None:
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/locations")
    wait_for(browser, "['drawn', 'error'].includes(document.getElementById('map').dataset.state)",
             timeout=30)
    assert browser.find_element(By.ID, "map").get_attribute("data-state") == "drawn", \
        (browser.find_element(By.ID, "map").text, console_errors(browser))
    found = browser.execute_script(
        "const m = document.getElementById('map');"
        " return {land: m.querySelectorAll('path.land').length,"
        " tiles: m.querySelectorAll('.leaflet-tile, img').length,"
        " markers: Array.from(m.querySelectorAll('path.map-marker')).map("
        "   p => [p.dataset.location, p.getAttribute('class')]),"
        " urls: performance.getEntriesByType('resource').map(r => r.name)}")
    assert found["land"] > 100, found["land"]  # the countries of the shipped basemap
    assert found["tiles"] == 0
    classes = dict(found["markers"])
    assert set(classes) == {str(world.north), south}
    assert "bad" in classes[str(world.north)]  # A2 is silent
    assert "warn" in classes[south]  # D1 was never seen
    # Nothing left this machine: every request of the page went to the server under test.
    assert found["urls"] and all(u.startswith(server + "/") for u in found["urls"]), found["urls"]
    assert any(u.endswith("/vendor/countries-110m.json") for u in found["urls"])
    # The tooltip: the latest conditions and the devices' badges.
    marker = browser.find_element(By.CSS_SELECTOR,
                                  f"path.map-marker[data-location='{world.north}']")
    ActionChains(browser).move_to_element(marker).perform()
    wait_for(browser, "document.querySelector('.leaflet-tooltip') !== null")
    tip = browser.find_element(By.CSS_SELECTOR, ".leaflet-tooltip").text
    assert "North field" in tip and "21.5 °C" in tip and "A2: silent" in tip, tip
    browser.save_screenshot(str(shots / "16-locations-map.png"))
    assert console_errors(browser) == []
