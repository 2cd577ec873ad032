"""Helpers of the dashboard's browser tests (tests/web): signing in through the form, waiting
for a chart, counting a chart's pixels per series colour, fetching with the page's cookies,
screenshots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from testbed.browser import wait_for
from testbed.process import poll
from tests.support.dashboard import PASSWORDS

# Series colours of device.js / quarantine.js, in column order.
COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"]

# Pixels of a colour on a canvas (within a small distance, for anti-aliasing), per colour.
COUNT_COLORS = """
const canvas = arguments[0].querySelector('canvas');
if (!canvas) return null;
const ctx = canvas.getContext('2d');
const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
const want = arguments[1].map(h => [1, 3, 5].map(i => parseInt(h.slice(i, i + 2), 16)));
const counts = want.map(() => 0);
let painted = 0;
for (let i = 0; i < px.length; i += 4) {
  if (px[i + 3] < 200) continue;
  painted++;
  for (let k = 0; k < want.length; k++) {
    const [r, g, b] = want[k];
    if (Math.abs(px[i] - r) + Math.abs(px[i + 1] - g) + Math.abs(px[i + 2] - b) < 60) counts[k]++;
  }
}
return {counts, painted, width: canvas.width, height: canvas.height};
"""


def snap(driver: WebDriver, shots: Path, name: str) -> Path:
    """Save a full-page screenshot `name`.png."""
    height = driver.execute_script("return document.body.scrollHeight")
    driver.set_window_size(1400, max(1000, min(int(height) + 40, 4000)))
    path = shots / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 5000
    return path


def sign_in(driver: WebDriver, base: str, email: str) -> None:
    """Sign in through the form, starting from a dashboard page."""
    driver.get(f"{base}/dashboard/")
    assert "/dashboard/login" in driver.current_url  # signed out: sent to the form
    driver.find_element(By.ID, "email").send_keys(email)
    driver.find_element(By.ID, "password").send_keys(PASSWORDS[email])
    driver.find_element(By.ID, "sign-in").click()
    # Null-safe: the probe may land on the next page before its heading is parsed.
    wait_for(driver, "document.getElementById('devices') !== null || "
                     "(document.querySelector('main h1') || {}).textContent === 'Devices'")


def submit(driver: WebDriver, element: str, ready: str, by: str = By.ID) -> None:
    """Click `element` (a submit button, a link) and wait for the next page: loaded, with an
    element of id `ready`.

    The old page is told apart by a mark on its window object, which a new document never
    has. (Selenium's staleness_of probes the old <html> element instead, and a probe that
    lands while Chromium swaps the documents is answered "unknown error: Node with given id
    does not belong to the document", not the stale-element error it waits for: CI saw it
    once under full load.)"""
    driver.execute_script("window.sdsLeaving = true")
    driver.find_element(by, element).click()
    wait_for(driver, "window.sdsLeaving === undefined && document.readyState === 'complete'"
                     f" && document.getElementById('{ready}') !== null")


def fetch(driver: WebDriver, path: str) -> tuple[int, str]:
    """GET `path` from the page's own script (its cookies, same origin): status and body."""
    found = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        " fetch(arguments[0]).then(r => r.text().then(t => done([r.status, t])))"
        ".catch(e => done([0, String(e)]));", path)
    return int(found[0]), str(found[1])


def fetch_header(driver: WebDriver, url: str, name: str) -> str:
    """One response header of a GET of `url` from the page (its cookies)."""
    return str(driver.execute_async_script(
        "const done = arguments[arguments.length - 1], name = arguments[1];"
        " fetch(arguments[0]).then(r => r.text().then(() => done(r.headers.get(name) || '')))"
        ".catch(e => done(String(e)));", url, name))


def chart_drawn(driver: WebDriver, element_id: str, loads: int | None = None) -> None:
    """Wait until the chart in #element_id has drawn (after `loads` data loads, if given)."""
    # Null-safe: right after a click the old page may still be the document.
    cond = (f"(document.getElementById('{element_id}') || {{dataset: {{}}}}).dataset.state"
            " === 'drawn'")
    if loads is not None:
        cond += f" && window.sdsDashboard.loads >= {loads}"
    wait_for(driver, cond, timeout=30)


def colour_counts(driver: WebDriver, element_id: str, colors: list[str]) -> dict[str, Any]:
    """Pixels of each colour on the chart's canvas."""
    found = driver.execute_script(COUNT_COLORS, driver.find_element(By.ID, element_id), colors)
    assert found is not None, f"no canvas in #{element_id}"
    return dict(found)


def assert_series_drawn(driver: WebDriver, element_id: str, n: int) -> None:
    """The chart's canvas is not blank and shows a line of each of its first n colours."""
    found = colour_counts(driver, element_id, COLORS[:n])
    assert found["painted"] > 1000, f"#{element_id} canvas looks blank: {found}"
    for colour, count in zip(COLORS[:n], found["counts"], strict=True):
        assert count > 150, f"series colour {colour} barely on #{element_id}: {found}"


# Pixels of series colour arguments[1] in the main plot's 3-pixel column at time arguments[0].
COLUMN = """
const u = window.sdsDashboard.main;
const cfg = JSON.parse(document.getElementById('sds-config').textContent);
const want = [1, 3, 5].map(i => parseInt(cfg.colours[arguments[1]].slice(i, i + 2), 16));
const x = Math.round(u.valToPos(arguments[0], 'x', true));
const top = Math.round(u.bbox.top), h = Math.round(u.bbox.height);
const px = u.ctx.getImageData(x - 1, top, 3, h).data;
let n = 0;
for (let i = 0; i < px.length; i += 4) {
  if (px[i + 3] > 100 && Math.abs(px[i] - want[0]) + Math.abs(px[i + 1] - want[1])
      + Math.abs(px[i + 2] - want[2]) < 120) n++;
}
return n;
"""


def column_pixels(driver: WebDriver, at: float, series: int = 0) -> int:
    """How many pixels of series `series`'s colour the main plot has in its column at `at`
    (epoch seconds): 0 where that series draws nothing (a gap)."""
    return int(driver.execute_script(COLUMN, at, series))


def downloaded(folder: Path, extension: str, timeout: float = 30.0) -> Path:
    """The one file with `extension` the browser saved into `folder`, once no download is in
    progress there (Chromium writes *.crdownload until it is complete)."""
    wait_for_file = poll(lambda: list(folder.glob(f"*.{extension}"))
                         and not list(folder.glob("*.crdownload")), timeout, every=0.2)
    assert wait_for_file, f"no .{extension} downloaded: {list(folder.glob('*'))}"
    (saved,) = folder.glob(f"*.{extension}")
    return saved


def fill(driver: WebDriver, element_id: str, text: str) -> None:
    """Replace the text of the field `element_id`."""
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(text)


def create_channel(driver: WebDriver, base: str, name: str, kind: str, **fields: str) -> None:
    """Create a channel on the Channels page (`format` picks the service, the other fields
    are filled by id) and wait for its own page."""
    driver.get(f"{base}/dashboard/channels")
    wait_for(driver, "document.getElementById('new-channel').dataset.ready === '1'")
    fill(driver, "channel-name", name)
    Select(driver.find_element(By.ID, "channel-kind")).select_by_value(kind)
    if "format" in fields:
        Select(driver.find_element(By.ID, "channel-format")).select_by_value(fields["format"])
    for element_id, text in fields.items():
        if element_id != "format":
            fill(driver, element_id, text)
    driver.find_element(By.ID, "channel-create").click()
    wait_for(driver, f"document.getElementById('channel-title')?.textContent === {name!r}")
