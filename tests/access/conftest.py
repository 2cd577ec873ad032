"""Fixtures of the access tests: the access world (tests/support/access_world.py) in a
module-scoped database (and `admins`: a1 and b1 made administrators), and the app and client on
it (tests/support/apps.py); for the link tests, the world with memberships reset, an SMTP sink
and an app without SMTP (tests/support/invites.py)."""

from tests.support.access_world import admins, app_overrides, fresh_world, world
from tests.support.apps import app, client, module_db
from tests.support.invites import link_world, plain, sink

__all__ = ["admins", "app", "app_overrides", "client", "fresh_world", "link_world", "module_db",
           "plain", "sink", "world"]
