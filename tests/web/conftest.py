"""Fixtures of the dashboard tests: a module's database with the seeded world
(tests/support/dashboard.py) and the app on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.support.apps import close_app
from tests.support.dashboard import World, make_app, seed
from tests.support.databases import clone_template


@pytest.fixture(scope="module")
def module_db(pg_server: Any, template_url: str) -> Iterator[str]:
    """A migrated database shared by one test module; dropped afterwards."""
    with clone_template(pg_server.dsn("postgres"), template_url, prefix="web_") as url:
        yield url


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded world, shared by a module."""
    return seed(module_db)


@pytest.fixture(scope="module")
def app(world: World) -> Iterator[Flask]:
    """The app on the module's world."""
    application = make_app(world.url)
    try:
        yield application
    finally:
        close_app(application)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A fresh test client (its own cookie jar)."""
    return app.test_client()
