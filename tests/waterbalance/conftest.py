"""Fixtures of the water balance tests (the aggregate tests' db, tests/support/rollups.py)."""

from tests.support.rollups import db

__all__ = ["db"]
