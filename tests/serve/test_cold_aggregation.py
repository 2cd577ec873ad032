"""Aggregated `/data/calibrated` pages (`interval`, `points`) across the cold tier
(serve.coldagg), and the parameter families of plain pages the first cold-tier suite
(test_cold_tier.py) does not walk: every request here is walked page by page while all is
hot, then July 2024 moves to Parquet files and the same requests must answer byte for byte
the same (JSON and CSV, `select`, units, `local_time`, `order`, cursors, `updated_since`,
`format`, UTC and local-day buckets across the 2024-08-01 boundary, the stored-rollup
shortcut, a teams-only member's aggregate over their team's devices only). Cursors taken
before the move keep reading after it, and hot copies of cold rows are not counted twice."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from aggregate import coldmove, rollups
from people import accounts
from tests.support.data_world import World, get, seed, walk
from tests.support.readings import insert_readings, noise, series

BOUNDARY = datetime(2024, 8, 1, tzinfo=UTC)
WINDOW = {"start_time": "2024-06-30T00:00:00Z", "end_time": "2024-08-04T00:00:00Z"}
LATE = {"start_time": "2024-07-26T00:00:00Z", "end_time": "2024-08-04T00:00:00Z"}
# Readings of D1 (at LA), D2 (at NY) and D3 (labelled NY, in no team) from July 26 to August 4,
# a value in every rule's column, and a six-hour outage on July 30 (incomplete buckets).
START, STEPS = datetime(2024, 7, 26, tzinfo=UTC), 9 * 288


def _outage(t: datetime) -> bool:
    return datetime(2024, 7, 30, 3, tzinfo=UTC) <= t < datetime(2024, 7, 30, 9, tzinfo=UTC)


def _places(world: World) -> tuple[tuple[str, Any], ...]:
    return (("D1", world.la), ("D2", world.ny), ("D3", world.ny))


def _series(k: int) -> list[dict[str, Any]]:
    """The readings of the k-th device of _places (the same values each time it is made)."""
    return series(START, n=STEPS, skip=_outage, tair=noise(10 * k, 35), rh=noise(10 * k + 1, 1),
                  p=noise(10 * k + 2, 110), precip=noise(10 * k + 3, 2),
                  wind_gust=noise(10 * k + 4, 20), wind_speed=noise(10 * k + 5, 9),
                  wind_direction=noise(10 * k + 6, 360), tdew=noise(10 * k + 7, 20))


@pytest.fixture(scope="module")
def cold_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cold tier directory."""
    return tmp_path_factory.mktemp("coldagg")


@pytest.fixture(scope="module")
def app_overrides(cold_dir: Path) -> dict[str, Any]:
    """The app reads the module's cold tier."""
    return {"cold_path": str(cold_dir)}


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The data world, the readings above, and a teams-only member w1 whose team holds D2 and
    location NY."""
    world = seed(module_db)
    with psycopg.connect(module_db) as conn:
        for k, (device, loc) in enumerate(_places(world)):
            insert_readings(conn, device, loc, _series(k))
        # The stored rollups of those days, so `1h` and `1d` pages read `hourly` and `daily`.
        rollups.recompute_range(conn, tables=["hourly", "daily"], start=START,
                                end=START + STEPS * timedelta(minutes=5), first=True,
                                last=True, devices=None, low_quality_pct=50.0)
        w1 = accounts.create_user(conn, org=world.org_a, email="w1@a.example",
                                  password="w1-password")
        team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'T') RETURNING id",
                            (world.org_a,)).fetchone()[0]  # type: ignore[index]
        d2 = conn.execute("SELECT id FROM devices WHERE name = 'D2'").fetchone()[0]  # type: ignore[index]
        conn.execute("INSERT INTO team_members (team_id, org_id, user_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, w1))
        conn.execute("INSERT INTO team_devices (team_id, org_id, device_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, d2))
        conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                     " VALUES (%s, %s, %s)", (team, world.org_a, world.ny))
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (w1,))
        world.keys["w1"] = accounts.create_api_key(conn, user=w1, scopes=["data:read"])["apikey"]
        conn.commit()
    return world


def _requests(world: World) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(key, Accept, parameters) of every request compared; each is walked to its last page."""
    ny, la = str(world.ny), str(world.la)
    return [
        # 1h: the stored `hourly` rows where their counts match, the readings elsewhere.
        ("a", None, {"device": "D1", **WINDOW, "interval": "1h", "limit": 100,
                     "select": "time,device,tair,rh,precip"}),
        ("a", None, {"device": "D1", **LATE, "interval": "15m", "limit": 300,
                     "select": "time,tair,precip,wind_direction,wind_gust", "temp": "f",
                     "speed": "kph"}),
        ("a", "text/csv", {"device": "D2", **WINDOW, "interval": "1d",
                           "local_time": "America/New_York"}),
        ("a", None, {"location": ny, **WINDOW, "interval": "7d"}),
        ("a", "text/csv", {"device": "D1,D2", **LATE, "points": 50, "order": "desc",
                           "select": "device,time,tair,rh,p", "pres": "kp", "ratio": "dec"}),
        ("a", None, {"location": la, **LATE, "interval": "6h", "limit": 7,
                     "local_time": "+05:30"}),
        ("a", None, {"device": "D2", **LATE, "interval": "5m", "order": "desc", "limit": 900,
                     "format": "csv", "local_time": "Asia/Kathmandu"}),
        ("a", None, {"device": "D2", **LATE, "interval": "1d", "select": "time,tair,precip",
                     "format": "csv"}),
        ("a", None, {"device": "D4", **WINDOW, "interval": "30m"}),
        ("b", None, {"device": "B1", **WINDOW, "interval": "2h"}),
        ("w1", None, {"device": "D2", **LATE, "interval": "1h", "limit": 100}),
        ("w1", "text/csv", {"location": ny, **LATE, "interval": "3h", "order": "desc"}),
        ("w1", None, {"location": ny, **LATE, "points": 20}),
        ("w1", None, {"device": "D4", **LATE, "interval": "1h"}),
        ("b", None, {"device": "D1", **WINDOW, "points": 10}),
        # Plain pages: the families test_cold_tier.py does not walk.
        ("a", None, {"device": "D2", **LATE, "limit": 777, "format": "csv", "order": "desc",
                     "select": "time,wind_direction,wind_speed", "speed": "kph"}),
        ("a", None, {"location": ny, **LATE, "limit": 1000, "order": "desc",
                     "local_time": "Asia/Kathmandu", "temp": "f"}),
        ("a", None, {"device": "D1", **LATE, "updated_since": "2024-01-01T00:00:00Z"}),
        ("a", None, {"device": "D1", "start_time": "2024-07-31", "end_time": "2024-08-01",
                     "limit": 100}),
    ]


def _headers(client: FlaskClient, world: World, params: dict[str, Any]) -> dict[str, str]:
    got = get(client, world, "calibrated", **params)
    return {k: v for k, v in got.headers.items() if k.startswith("X-Aggregat")}


@pytest.fixture(scope="module")
def client_module(app: Any) -> FlaskClient:
    """A test client shared by the module's fixtures."""
    return app.test_client()


@pytest.fixture(scope="module")
def before_and_after(client_module: FlaskClient, world: World, cold_dir: Path,
                     ) -> dict[str, Any]:
    """Every request's pages before July moved cold, after, and after hot copies of some cold
    rows came back (a late duplicate), and the cursors kept from before the move."""
    reqs = _requests(world)
    before = [walk(client_module, world, *r) for r in reqs]
    sources = [_headers(client_module, world, reqs[i][2]) for i in (0, 1)]
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=str(cold_dir),
                              now=BOUNDARY + timedelta(days=2))
        hot_july = conn.execute("SELECT count(*) FROM calibrated WHERE time < %s",
                                (BOUNDARY,)).fetchone()[0]  # type: ignore[index]
    after = [walk(client_module, world, *r) for r in reqs]
    sources_after = [_headers(client_module, world, reqs[i][2]) for i in (0, 1)]
    kept = {i: before[i][0][1] for i in (1, 5, 6)}  # cursors to second pages, taken hot
    resumed = {i: get(client_module, world, "calibrated", accept=reqs[i][1], cursor=kept[i],
                      **reqs[i][2]) for i in kept}
    with psycopg.connect(world.url, autocommit=True) as conn:
        # A late duplicate: hot copies of July 31's cold readings of D1, D2 and D3 (the same
        # values, as a replayed message writes them): each must be counted once.
        day = (BOUNDARY - timedelta(days=1), BOUNDARY)
        for k, (device, loc) in enumerate(_places(world)):
            insert_readings(conn, device, loc,
                            [r for r in _series(k) if day[0] <= r["time"] < day[1]])
        copies = conn.execute("SELECT count(*) FROM calibrated WHERE time < %s",
                              (BOUNDARY,)).fetchone()[0]  # type: ignore[index]
    again = [walk(client_module, world, *r) for r in reqs]
    return {"reqs": reqs, "before": before, "after": after, "moved": moved,
            "hot_july": hot_july, "kept": kept, "again": again, "copies": copies,
            "resumed": resumed, "sources": (sources, sources_after)}


def test_july_moved_cold(before_and_after: dict[str, Any]) -> None:
    assert {m.month.isoformat() for m in before_and_after["moved"]} == {"2024-07-01"}
    assert before_and_after["hot_july"] == 0
    assert before_and_after["copies"] == 3 * 288  # the late duplicates, hot again


@pytest.mark.parametrize("index", range(19))
def test_hot_copies_of_cold_rows_count_once(before_and_after: dict[str, Any],
                                            index: int) -> None:
    before, again = before_and_after["before"][index], before_and_after["again"][index]
    assert before == again, (index, before_and_after["reqs"][index][2])


@pytest.mark.parametrize("index", range(19))
def test_same_answer_before_and_after_the_move(before_and_after: dict[str, Any],
                                               index: int) -> None:
    before, after = before_and_after["before"][index], before_and_after["after"][index]
    who, _accept, params = before_and_after["reqs"][index]
    assert before == after, (index, params)
    if (who, params.get("device")) in (("w1", "D4"), ("b", "D1")):
        assert before[0][0] == 404  # not theirs, cold or hot
    elif "updated_since" in params:
        assert before[0][0] == 400  # calibrated rows are written once: no update_time
    else:
        assert before[0][0] == 200 and len(before[0][3]) > 100, before[0]


def test_aggregated_walks_cross_the_boundary(before_and_after: dict[str, Any]) -> None:
    reqs, after = before_and_after["reqs"], before_and_after["after"]
    for index, (_who, _accept, params) in enumerate(reqs):
        if "interval" not in params and "points" not in params:
            continue
        body = b"".join(page[3] for page in after[index]).decode()
        # (A 7d bucket from July 29 holds cold and hot readings: its start is in July.)
        if after[index][0][0] == 200 and params.get("device") not in ("D4", "B1") and (
                params.get("interval") != "7d"):
            assert "2024-07-" in body and "2024-08-0" in body, params
    # Walked page by page: 864 15-minute buckets in pages of 300, 36 6-hour ones in pages of 7.
    assert len(after[1]) == 3 and len(after[5]) == 6


def test_stored_rollup_shortcut_is_kept(before_and_after: dict[str, Any]) -> None:
    hot, cold = before_and_after["sources"]
    assert hot == cold
    assert hot[0] == {"X-Aggregated-From": "hourly", "X-Aggregation-Interval": "1h"}
    assert hot[1] == {"X-Aggregated-From": "calibrated", "X-Aggregation-Interval": "15m"}


def test_cursor_from_before_the_move_still_reads(before_and_after: dict[str, Any]) -> None:
    for index, resumed in before_and_after["resumed"].items():
        second = before_and_after["before"][index][1]
        assert (resumed.status_code, resumed.get_data()) == (200, second[3]), index


def test_teams_only_member_aggregates_their_devices_only(
        before_and_after: dict[str, Any]) -> None:
    reqs, after = before_and_after["reqs"], before_and_after["after"]
    place = next(i for i, (who, _a, p) in enumerate(reqs)
                 if who == "w1" and "points" in p)
    rows = [r for page in after[place] for r in _json(page[3])]
    assert {r["device"] for r in rows} == {"D2"}
    assert any(r["time"] < "2024-08" for r in rows)
    everyone = [r for page in after[3] for r in _json(page[3])]
    assert {"D2", "D3"} <= {r["device"] for r in everyone}


def _json(body: bytes) -> list[dict[str, Any]]:
    return list(json.loads(body))
