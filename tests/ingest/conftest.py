"""Fixtures of the ingest tests (defined in tests/support/ingesting.py, registered here)."""

from tests.support.ingesting import *  # noqa: F403  fixtures (site, mqtt_settings, ingester, publisher)
