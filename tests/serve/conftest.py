"""Fixtures of the `/schemas` and `/data` tests: the data world (tests/support/data_world.py)
in a module-scoped database, the app and client on it (tests/support/apps.py), and an S3
server for the cold tier on object storage (tests/support/s3.py)."""

from tests.support.apps import app, app_overrides, client, module_db
from tests.support.data_world import world
from tests.support.s3 import s3_server

__all__ = ["app", "app_overrides", "client", "module_db", "s3_server", "world"]
