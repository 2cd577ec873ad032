"""Fixtures of the aggregate tests (defined in tests/support/rollups.py and s3.py, registered
here)."""

from tests.support.rollups import db
from tests.support.s3 import s3_server

__all__ = ["db", "s3_server"]
