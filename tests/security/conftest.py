"""Fixtures of the security tests (reliability plan S4, S5, S11, S13-S18, S21).

They reuse the access tests' seeded two-organisation world (tests/support/access_world.py): org A
with users a1 and a2, devices A000101 (deployed, with readings) and A000102, a location, API
keys of every kind and bearer tokens; org B with user b1, device B000201, a location and keys.
Each test module gets its own database, so a module that writes (schemathesis creates and
changes keys) cannot disturb another.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flask import Flask

# The access tests' world and its module-scoped fixtures, imported so pytest registers them here.
from tests.support.access_world import World, app_overrides, fresh_world, world
from tests.support.apps import app, client, close_app, make_app, module_db

__all__ = ["app", "app_overrides", "client", "fresh_app", "fresh_world", "module_db",
           "world"]  # fixtures: registered here


@pytest.fixture
def fresh_app(fresh_world: World) -> Iterator[Flask]:  # noqa: F811 - fixture argument
    """The app on a world of its own (for tests that change rows and compare them)."""
    application = make_app(fresh_world.url, login_max_failures=10_000,
                           login_address_max_failures=10_000)
    try:
        yield application
    finally:
        close_app(application)

