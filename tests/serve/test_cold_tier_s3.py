# ruff: noqa: F811 (the imported fixtures are parameters of the tests below)
"""tests/serve/test_cold_tier.py with the cold tier on S3-compatible object storage
(SDS_COLD_PATH=s3://cold/tier on a real moto server process, testbed/s3.py): the mover writes
the month as objects, and every request answers byte-for-byte as it did while the month was
hot. The tests themselves are test_cold_tier's, imported: only where the files live differs."""

from __future__ import annotations

from typing import Any

import pytest

from aggregate import coldmove
from shared import coldstore
from testbed.s3 import S3Server
from tests.serve.test_cold_tier import (  # noqa: F401 (fixtures and tests collected here too)
    before_and_after,
    client_module,
    test_aggregation_over_cold_months_is_refused,
    test_cursor_from_before_the_move_still_reads,
    test_july_moved_cold,
    test_pages_span_the_boundary,
    test_same_answer_before_and_after_the_move,
    test_teams_only_member_reads_cold_rows_of_their_devices_only,
    world,
)
from tests.support.s3 import s3_server  # noqa: F401 (fixture)

COLD = "s3://cold/tier"


@pytest.fixture(scope="module")
def cold_dir() -> str:
    """The module's cold tier: a prefix of the moto server's bucket (a URL, not a directory)."""
    return COLD


@pytest.fixture(scope="module")
def app_overrides(s3_server: S3Server) -> dict[str, Any]:
    """The app reads the cold tier from the S3 server (its app factory configures the store,
    which the mover in before_and_after then shares, as one process's `sds` would)."""
    return {"cold_path": COLD, **s3_server.cold_settings()}


def test_the_files_are_objects_in_the_bucket(before_and_after: dict[str, Any],
                                             s3_server: S3Server) -> None:
    moved: list[coldmove.Moved] = before_and_after["moved"]
    assert s3_server.objects("cold/tier") == {m.path: m.bytes for m in moved}
    store = coldstore.open_store(COLD)
    shown = store.describe()
    assert shown.startswith("s3://cold/tier ") and s3_server.endpoint in shown
    assert "sds-test-secret" not in shown + repr(store)
