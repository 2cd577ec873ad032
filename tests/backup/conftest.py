"""Fixtures of the backup drills: a broker and a PostgreSQL of a test's own
(tests/support/chaos.py), and a durable server archiving into a repository of its own with a
first full backup, and a copy of the repository whose stack is stopped afterwards
(tests/support/restoring.py)."""

from tests.support.chaos import own_broker, own_pg
from tests.support.restoring import archived, tree

__all__ = ["archived", "own_broker", "own_pg", "tree"]
