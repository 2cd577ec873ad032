"""Headless Debian Chromium for browser tests (Swagger UI, the dashboard), through Selenium.

`chromium()` starts Debian's `chromium` with Debian's `chromium-driver` (both installed by
deploy/setup.sh), headless, with a fresh profile in a temporary directory and every background
network feature off, so a test talks only to the 127.0.0.1 server it started. Selenium Manager
is never asked to fetch a driver or a browser: both paths are given, and SE_OFFLINE is set.
On exit the browser, the driver process and the profile are gone.

    with chromium() as driver:
        driver.get(f"http://127.0.0.1:{port}/api/v2/doc")
        ...
        errors = console_errors(driver)
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# Selenium Manager must not reach the internet for a driver or a browser build of its own.
os.environ.setdefault("SE_OFFLINE", "true")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

# No sandbox: CI runs as root, where Chromium's sandbox refuses to start. The rest keep the
# browser from calling home (updates, sync, field trials, QUIC probes) during a test.
FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--no-default-browser-check", "--disable-extensions",
)


def require_chromium() -> None:
    """Fail with the fix when the browser or its driver is missing (deploy/setup.sh adds them)."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: run deploy/setup.sh "
                           "(installs the chromium and chromium-driver packages)")


@contextmanager
def chromium(*, width: int = 1280, height: int = 900, timeout: float = 30.0,
             log_dir: Path | None = None) -> Iterator[webdriver.Chrome]:
    """A headless Chromium WebDriver with a fresh profile; quit and cleaned up on exit.

    `timeout` bounds page loads and scripts. `log_dir`, when given, receives the driver's log.
    """
    require_chromium()
    profile = tempfile.mkdtemp(prefix="sds-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={width},{height}")
    # Console messages of the page, read back by console_errors().
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service_args: dict[str, Any] = {"executable_path": str(CHROMEDRIVER)}
    if log_dir is not None:
        service_args["log_output"] = str(log_dir / "chromedriver.log")
    driver = webdriver.Chrome(options=options, service=Service(**service_args))
    try:
        driver.set_page_load_timeout(timeout)
        driver.set_script_timeout(timeout)
        yield driver
    finally:
        try:
            driver.quit()
        finally:
            shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: webdriver.Chrome, script: str, *, timeout: float = 20.0) -> Any:
    """Run the JavaScript expression `script` (as `return <script>`) until it is truthy;
    its value, or TimeoutException naming the script."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script(f"return {script}"),
        message=f"still false after {timeout} s: {script}")


def console_errors(driver: webdriver.Chrome) -> list[str]:
    """The page's console messages of level SEVERE since the last call."""
    return [entry["message"] for entry in driver.get_log("browser")
            if entry.get("level") == "SEVERE"]


__all__ = ["CHROMEDRIVER", "CHROMIUM", "FLAGS", "chromium", "console_errors", "require_chromium",
           "wait_for"]
