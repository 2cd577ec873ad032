"""Fixtures of the dashboard tests: a module's database with the seeded world
(tests/support/dashboard.py) and the app and client on it (tests/support/apps.py)."""

from __future__ import annotations

import pytest

from tests.support.apps import app, app_overrides, client, module_db
from tests.support.dashboard import World, seed

__all__ = ["app", "app_overrides", "client", "module_db", "world"]


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded world, shared by a module."""
    return seed(module_db)
