"""Fixtures of the shared-library and operator-command tests: the deployed broker and its
ingester of the `sds device` tests (tests/support/devicebroker.py)."""

from tests.support.devicebroker import deployed_broker, deployed_ingester

__all__ = ["deployed_broker", "deployed_ingester"]  # fixtures, re-exported
