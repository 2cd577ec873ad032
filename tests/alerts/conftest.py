"""Fixtures of the alerts tests: the access world (tests/support/access_world.py, two
organisations) in a module-scoped database, and the app and client on it."""

from tests.support.access_world import app_overrides, fresh_world, world
from tests.support.apps import app, client, module_db

__all__ = ["app", "app_overrides", "client", "fresh_world", "module_db", "world"]
