"""Local-day and local-week buckets over cold months across a change of clocks: New York falls
back on 2024-11-03 (a 25-hour day) and Los Angeles too; after every month up to November
moves cold, `interval=1d` and `7d` pages (whose edges serve.coldagg takes from PostgreSQL's
`time_bucket` in each location's zone) answer byte for byte as they did hot."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from aggregate import coldmove
from tests.support.data_world import World, get, seed
from tests.support.readings import insert_readings, noise, series

WINDOW = {"start_time": "2024-10-28T00:00:00Z", "end_time": "2024-11-10T00:00:00Z"}


@pytest.fixture(scope="module")
def app_overrides(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The app reads a cold tier of its own."""
    return {"cold_path": str(tmp_path_factory.mktemp("colddst"))}


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The data world and two weeks of D1 (at LA) and D2 (at NY) readings around the change."""
    world = seed(module_db)
    with psycopg.connect(module_db) as conn:
        for k, (device, loc) in enumerate((("D1", world.la), ("D2", world.ny))):
            insert_readings(conn, device, loc, series(
                datetime(2024, 10, 27, tzinfo=UTC), n=15 * 288, tair=noise(k, 30),
                precip=noise(k + 5, 1), wind_direction=noise(k + 9, 360)))
        conn.commit()
    return world


REQUESTS: list[tuple[str | None, dict[str, Any]]] = [
    ("text/csv", {"device": "D2", "interval": "1d", "local_time": "America/New_York"}),
    (None, {"device": "D1,D2", "interval": "1d", "select": "device,time,tair,precip",
            "order": "desc", "limit": 9}),
    (None, {"location": "NY", "interval": "7d"}),
    (None, {"device": "D1", "points": 30, "select": "time,wind_direction,tair"}),
]


def _walk(client: FlaskClient, world: World, accept: str | None,
          params: dict[str, Any]) -> list[tuple[int, bytes]]:
    pages, cursor = [], None
    while True:
        query = {**WINDOW, **params, **({"cursor": cursor} if cursor else {})}
        if query.get("location") == "NY":
            query["location"] = str(world.ny)
        got = get(client, world, "calibrated", accept=accept, **query)
        pages.append((got.status_code, got.get_data()))
        cursor = got.headers.get("X-Cursor-Next")
        if got.status_code != 200 or cursor is None:
            return pages


def test_local_buckets_across_the_change_of_clocks(client: FlaskClient, world: World,
                                                   app_overrides: dict[str, Any]) -> None:
    before = [_walk(client, world, *r) for r in REQUESTS]
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=app_overrides["cold_path"],
                              now=datetime(2024, 12, 3, tzinfo=UTC))
    assert {m.month.isoformat() for m in moved} >= {"2024-10-01", "2024-11-01"}
    after = [_walk(client, world, *r) for r in REQUESTS]
    assert after == before
    day = before[0][0][1].decode()
    # The 25-hour local day of New York starts at 04:00Z, the next one at 05:00Z.
    assert "2024-11-03T04:00:00+0000" in day and "2024-11-04T05:00:00+0000" in day
    assert ",300,300,true" in day  # that day's 300 five-minute slots, all read
    assert all(p[0] == 200 for r in before for p in r) and len(before[1]) > 2
