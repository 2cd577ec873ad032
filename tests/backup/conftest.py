"""Fixtures of the backup drills: a broker of a test's own (tests/support/chaos.py)."""

from tests.support.chaos import own_broker

__all__ = ["own_broker"]
