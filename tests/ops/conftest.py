"""Fixtures of the operations tests: a module's database (tests/support/apps.py)."""

from tests.support.apps import module_db

__all__ = ["module_db"]
