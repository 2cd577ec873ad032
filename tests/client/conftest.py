"""The Python client (client/, package sds_client) against the real API: gunicorn over a real
socket on the seeded data world of tests/support/data_world.py (org A: D1, D2 at NY, D4 with 2500
readings; org B: B1)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testbed.apiserver import gunicorn_api
from tests.support.apps import module_db
from tests.support.data_world import World, world

__all__ = ["api_url", "module_db", "world"]  # fixtures: registered here


@pytest.fixture(scope="module")
def api_url(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811
    """Base URL of gunicorn serving the module's world."""
    with gunicorn_api(world.url, tmp_path_factory.mktemp("api")) as base:
        yield base
