"""The API app in-process for tests: `make_app` on a test database, and the module-scoped
fixtures the serve, access and security conftests share (`module_db`, `app`, `client`).

A conftest takes them with `from tests.support.apps import app, client, module_db` and
provides its own `world` fixture (an object with `.url`); `app_overrides` (module scope)
changes settings of the module's app.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Protocol

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.config import Settings
from tests.support.databases import clone_template


class HasUrl(Protocol):
    """A seeded world: at least the URL of its database."""

    url: str


def make_app(url: str, **overrides: Any) -> Flask:
    """The API app on the database at `url` (settings overridable)."""
    from serve import create_app

    settings = Settings(database_url=url, metrics_port=0, aggregate_metrics_port=0,
                        db_pool_min=1, db_pool_max=4, cursor_secret="test-cursor-secret",
                        # Counted, but high: tests send thousands of requests with one
                        # credential (tests/access/test_rate_limit.py tests the limit itself).
                        api_rate_limit=1_000_000, api_user_rate_limit=1_000_000,
                        api_org_rate_limit=1_000_000,
                        # Modules create many keys with one user, and hold streamed answers
                        # unread while they send the next request: no key cap, in-flight cap
                        # or heavy-page pool (tests/access/test_fairshare.py tests them).
                        api_max_keys_per_user=10_000, api_user_concurrency=0,
                        api_org_concurrency=0, api_heavy_slots=0)
    return create_app(settings.replace(**overrides))


def close_app(app: Flask) -> None:
    """Close the app's pools (and their threads): the primary's and a standby's, if any."""
    from serve.pool import pool, read_router

    pool(app).close()
    router = read_router(app)
    if router is not None:
        router.standby.close()


@pytest.fixture(scope="module")
def module_db(pg_server: Any, template_url: str) -> Iterator[str]:
    """A migrated database shared by one test module; dropped afterwards."""
    with clone_template(pg_server.dsn("postgres"), template_url, prefix="api_") as url:
        yield url


@pytest.fixture(scope="module")
def app_overrides() -> dict[str, Any]:
    """Settings of the module's app that differ from `make_app`'s (none by default)."""
    return {}


@pytest.fixture(scope="module")
def app(world: HasUrl, app_overrides: dict[str, Any]) -> Iterator[Flask]:
    """The app on the module's world."""
    application = make_app(world.url, **app_overrides)
    try:
        yield application
    finally:
        close_app(application)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A test client of the module's app."""
    return app.test_client()


def plain_rule(rule: str) -> str:
    """A route rule without the object-id converter (serve/ids.py): `<objid('user'):user_id>`
    is `<user_id>`, as the route inventories of the tests name it."""
    return re.sub(r"<objid\([^)]*\):", "<", rule)
