"""Fixtures of the `/schemas` and `/data` tests: the data world (tests/support/data_world.py)
in a module-scoped database, and the app and client on it (tests/support/apps.py)."""

from tests.support.apps import app, app_overrides, client, module_db
from tests.support.data_world import world

__all__ = ["app", "app_overrides", "client", "module_db", "world"]
