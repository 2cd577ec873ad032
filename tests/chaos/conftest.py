"""Fixtures of the chaos scenarios (defined in tests/support/chaos.py, registered here)."""

from tests.support.chaos import own_broker, own_pg

__all__ = ["own_broker", "own_pg"]
