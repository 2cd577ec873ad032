"""Fixtures of the chaos scenarios (defined in tests/support/chaos.py, registered here)."""

from tests.support.chaos import *  # noqa: F403  fixtures (own_broker, own_pg)
