"""`/data/calibrated` with the cold tier on S3-compatible object storage
(SDS_COLD_PATH=s3://cold/tier on a real moto server process, testbed/s3.py): the mover writes
the data world's June and July as objects in the bucket, and the same requests (JSON and CSV,
`select`, units, `local_time`, `order`, device lists, a location, cursors walked page by page,
another organisation's key) answer byte-for-byte as they did while the months were hot.
tests/serve/test_cold_tier.py is the same over a directory, with every parameter family."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from flask import Flask

from aggregate import coldmove
from shared import coldstore
from testbed.s3 import S3Server
from tests.support.data_world import World, get

COLD = "s3://cold/tier"
WINDOW = {"start_time": "2024-06-01T00:00:00Z", "end_time": "2024-12-01T00:00:00Z"}


@pytest.fixture(scope="module")
def app_overrides(s3_server: S3Server) -> dict[str, Any]:
    """The app reads the cold tier from the S3 server: its app factory configures the store
    (coldstore.configure), which the mover below then shares, as one process would."""
    return {"cold_path": COLD, **s3_server.cold_settings()}


def _requests(world: World) -> list[tuple[str, str | None, dict[str, Any]]]:
    return [
        ("a", None, {"device": "D1", **WINDOW, "limit": 1000}),
        ("a", None, {"device": "D1,D2", **WINDOW, "limit": 333, "order": "desc",
                     "select": "time,device,tair,rh", "temp": "f", "local_time": "+05:30"}),
        ("a", None, {"location": str(world.ny), **WINDOW, "limit": 400}),
        ("a", None, {"device": "D4", **WINDOW}),
        ("a", "text/csv", {"device": "D1", **WINDOW, "limit": 700,
                           "local_time": "Europe/Paris"}),
        ("b", None, {"device": "B1", **WINDOW, "limit": 5000}),
        ("b", None, {"device": "D1", **WINDOW}),
    ]


def _walk(app: Flask, world: World, who: str, accept: str | None,
          params: dict[str, Any]) -> list[tuple[int, str | None, bytes]]:
    client, pages, cursor = app.test_client(), [], None
    while True:
        got = get(client, world, "calibrated", who=who, accept=accept,
                  **{**params, **({"cursor": cursor} if cursor else {})})
        cursor = got.headers.get("X-Cursor-Next")
        pages.append((got.status_code, cursor, got.get_data()))
        if got.status_code != 200 or cursor is None:
            return pages


@pytest.fixture(scope="module")
def before_and_after(app: Flask, world: World) -> dict[str, Any]:
    """Every request's pages before and after the summer moved to the bucket."""
    reqs = _requests(world)
    before = [_walk(app, world, *r) for r in reqs]
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=COLD,
                              now=datetime(2024, 8, 5, tzinfo=UTC))
        hot = conn.execute("SELECT count(*) FROM calibrated WHERE time < '2024-08-01'"
                           ).fetchone()[0]  # type: ignore[index]
    after = [_walk(app, world, *r) for r in reqs]
    return {"reqs": reqs, "before": before, "after": after, "moved": moved, "hot": hot}


@pytest.mark.parametrize("index", range(7))
def test_same_answer_from_the_bucket(before_and_after: dict[str, Any], index: int) -> None:
    before, after = before_and_after["before"][index], before_and_after["after"][index]
    assert before == after, before_and_after["reqs"][index]
    if index == 6:
        assert before[0][0] == 404  # org B's key, org A's device: not theirs, cold or hot
    else:
        assert before[0][0] == 200 and len(before[0][2]) > 100


def test_the_months_are_objects_in_the_bucket(before_and_after: dict[str, Any],
                                              s3_server: S3Server) -> None:
    moved: list[coldmove.Moved] = before_and_after["moved"]
    assert before_and_after["hot"] == 0 and {m.month.month for m in moved} >= {7}
    assert s3_server.objects("cold/tier") == {m.path: m.bytes for m in moved}
    shown = coldstore.open_store(COLD).describe()
    assert shown.startswith("s3://cold/tier ") and s3_server.endpoint in shown
    assert "sds-test-secret" not in shown + repr(coldstore.open_store(COLD))
