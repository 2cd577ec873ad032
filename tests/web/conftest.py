"""Fixtures of the dashboard tests: a module's database with the seeded world
(tests/support/dashboard.py), the app and client on it (tests/support/apps.py), and for the
browser tests gunicorn on it, a headless Chromium and the screenshots' folder; for the alert
pages, the in-process ingester and its publisher (tests/support/ingesting.py); for the fleet
pages, the deployed broker and its ingester (tests/support/devicebroker.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from testbed.apiserver import gunicorn_api
from testbed.browser import chromium
from tests.support.apps import app, app_overrides, client, module_db
from tests.support.dashboard import World, seed
from tests.support.devicebroker import deployed_broker, deployed_ingester
from tests.support.ingesting import ingester, mqtt_settings, publisher

__all__ = ["app", "app_overrides", "client", "deployed_broker", "deployed_ingester", "ingester",
           "module_db", "mqtt_settings", "publisher", "world"]  # fixtures, re-exported


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded world, shared by a module."""
    return seed(module_db)


@pytest.fixture(scope="module")
def server(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """gunicorn serving the app (API and dashboard) on the module's world."""
    logs = tmp_path_factory.mktemp("web-gunicorn")
    with gunicorn_api(world.url, logs, workers=2) as base:
        yield base


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: under the test run's base temporary directory."""
    path = tmp_path_factory.getbasetemp() / "dashboard-screenshots"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture
def browser(tmp_path: Path, processes: None) -> Iterator[WebDriver]:
    """A fresh headless Chromium (own profile, own cookies) that saves downloads in tmp_path."""
    with chromium(width=1400, height=1000, log_dir=tmp_path) as driver:
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {
            "behavior": "allow", "downloadPath": str(tmp_path / "downloads"),
            "eventsEnabled": True})
        yield driver
