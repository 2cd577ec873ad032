"""Fixtures of the aggregate tests (defined in tests/support/rollups.py, registered here)."""

from tests.support.rollups import db

__all__ = ["db"]
