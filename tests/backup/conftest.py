"""Fixtures of the backup drills: a broker and a PostgreSQL of a test's own
(tests/support/chaos.py)."""

from tests.support.chaos import own_broker, own_pg

__all__ = ["own_broker", "own_pg"]
