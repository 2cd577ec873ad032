"""Fixtures of the alerts tests: the access world (tests/support/access_world.py, two
organisations) in a module-scoped database, and the app and client on it; for the
end-to-end tests, the broker settings, the in-process ingester and the publisher
(tests/support/ingesting.py); for the delivery tests, a client of an app that allows loopback
webhooks, an organisation with its owner (`org`) and the receivers and deliverers a test
starts (tests/support/delivery.py)."""

from tests.support.access_world import app_overrides, fresh_world, world
from tests.support.apps import app, client, module_db
from tests.support.delivery import (
    channels_client,
    channels_overrides,
    deliverers,
    org,
    receivers,
)
from tests.support.ingesting import ingester, mqtt_settings, publisher, site

__all__ = ["app", "app_overrides", "channels_client", "channels_overrides", "client",
           "deliverers", "fresh_world", "ingester", "module_db", "mqtt_settings", "org",
           "publisher", "receivers", "site", "world"]
