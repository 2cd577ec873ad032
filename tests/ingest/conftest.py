"""Fixtures of the ingest tests (defined in tests/support/ingesting.py, registered here)."""

from tests.support.ingesting import ingester, mqtt_settings, publisher, site

__all__ = ["ingester", "mqtt_settings", "publisher", "site"]
