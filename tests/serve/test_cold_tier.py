"""`/data/calibrated` across the cold tier (serve.coldread): the same requests answer
byte-for-byte the same before and after July 2024 moves to Parquet files (JSON and CSV,
`select`, units, `local_time`, `order`, cursors walked page by page, a cursor taken before the
move and used after it, pages spanning the hot/cold boundary on 2024-08-01), a teams-only
member reads cold rows only of their team's devices, and an aggregated page over a cold month
answers as it did hot (tests/serve/test_cold_aggregation.py walks every aggregation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from aggregate import coldmove
from people import accounts
from tests.support.data_world import World, get, seed, walk
from tests.support.readings import insert_readings, series

BOUNDARY = datetime(2024, 8, 1, tzinfo=UTC)
WINDOW = {"start_time": "2024-06-30T00:00:00Z", "end_time": "2024-08-02T00:00:00Z"}


@pytest.fixture(scope="module")
def cold_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cold tier directory."""
    return tmp_path_factory.mktemp("cold")


@pytest.fixture(scope="module")
def app_overrides(cold_dir: Path) -> dict[str, Any]:
    """The app reads the module's cold tier."""
    return {"cold_path": str(cold_dir)}


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The data world, plus D1 and D2 readings across the hot/cold boundary (July 31 22:00 to
    August 1 02:00), and a teams-only member w1 whose team holds D2 and location NY."""
    world = seed(module_db)
    with psycopg.connect(module_db) as conn:
        ny, la = world.ny, world.la
        for device, loc in (("D1", la), ("D2", ny)):
            insert_readings(conn, device, loc, series(
                BOUNDARY - timedelta(hours=2), n=48, tair=lambda g, _t: 15 + g * 0.13, rh=0.41))
        # D3 (no deployment) has readings labelled NY, interleaved with D1's and D2's: w1
        # sees NY but not D3, so NY's cold file holds rows w1 must not get, and every page of
        # theirs must still be full.
        insert_readings(conn, "D3", ny, series(datetime(2024, 7, 1, tzinfo=UTC), n=576, tair=30))
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
                     " VALUES (%s, %s, %s)", (team, world.org_a, ny))
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (w1,))
        world.keys["w1"] = accounts.create_api_key(conn, user=w1, scopes=["data:read"])["apikey"]
        conn.commit()
    return world


def _requests(world: World) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(key, Accept, parameters) of every request compared; each is walked to its last page."""
    return [
        ("a", None, {"device": "D1", **WINDOW, "limit": 10000}),
        ("a", None, {"device": "D1", **WINDOW, "limit": 1500, "order": "desc"}),
        ("a", None, {"device": "D1", **WINDOW, "limit": 250, "select": "time,tair,rh",
                     "temp": "f", "ratio": "dec", "local_time": "America/New_York"}),
        ("a", None, {"location": str(world.ny), **WINDOW, "limit": 400}),
        ("a", None, {"device": "D1,D2", **WINDOW, "limit": 333, "order": "desc",
                     "local_time": "+05:30"}),
        ("a", None, {"device": "D4", **WINDOW}),
        ("a", "text/csv", {"device": "D1", **WINDOW, "limit": 700,
                           "local_time": "Europe/Paris"}),
        ("a", "text/csv", {"device": "D1,D2", **WINDOW, "limit": 900, "select": "device,time,p",
                           "pres": "kp"}),
        ("a", "text/csv", {"location": str(world.la), **WINDOW, "order": "desc"}),
        ("b", None, {"device": "B1", **WINDOW, "limit": 5000}),
        ("w1", None, {"device": "D2", **WINDOW, "limit": 600}),
        ("w1", None, {"location": str(world.ny), **WINDOW, "limit": 100}),
        ("w1", "text/csv", {"device": "D4", **WINDOW}),
        ("b", None, {"device": "D1", **WINDOW}),
    ]


@pytest.fixture(scope="module")
def before_and_after(client_module: FlaskClient, world: World, cold_dir: Path,
                     ) -> dict[str, Any]:
    """Every request's pages before and after July 2024 moved cold, and a cursor kept."""
    reqs = _requests(world)
    before = [walk(client_module, world, *r) for r in reqs]
    kept = before[2][0][1]  # the second page's cursor of request 2, taken while all was hot
    hourly = get(client_module, world, "calibrated", device="D1", interval="1h", **WINDOW)
    with psycopg.connect(world.url, autocommit=True) as conn:
        moved = coldmove.move(conn, hot_days=1, cold_path=str(cold_dir),
                              now=BOUNDARY + timedelta(days=2))
        hot_july = conn.execute("SELECT count(*) FROM calibrated WHERE time < %s",
                                (BOUNDARY,)).fetchone()[0]  # type: ignore[index]
    after = [walk(client_module, world, *r) for r in reqs]
    resumed = get(client_module, world, "calibrated", cursor=kept, **reqs[2][2])
    hourly_after = get(client_module, world, "calibrated", device="D1", interval="1h", **WINDOW)
    return {"reqs": reqs, "before": before, "after": after, "moved": moved,
            "hot_july": hot_july, "resumed": resumed, "hourly": (hourly, hourly_after)}


@pytest.fixture(scope="module")
def client_module(app: Any) -> FlaskClient:
    """A test client shared by the module's fixtures."""
    return app.test_client()


def test_july_moved_cold(before_and_after: dict[str, Any]) -> None:
    moved = before_and_after["moved"]
    assert {m.month.isoformat() for m in moved} == {"2024-07-01"}
    assert len(moved) == 2 and sum(m.rows for m in moved) == 4 * 576 + 2500 + 2 * 24  # orgs A and B
    assert before_and_after["hot_july"] == 0


@pytest.mark.parametrize("index", range(14))
def test_same_answer_before_and_after_the_move(before_and_after: dict[str, Any],
                                               index: int) -> None:
    before, after = before_and_after["before"][index], before_and_after["after"][index]
    assert before == after, before_and_after["reqs"][index]
    who, _accept, params = before_and_after["reqs"][index]
    if (who, params.get("device")) in (("w1", "D4"), ("b", "D1")):
        assert before[0][0] == 404  # not theirs, cold or hot
    else:
        assert before[0][0] == 200 and len(before[0][3]) > 100


def test_pages_span_the_boundary(before_and_after: dict[str, Any], world: World) -> None:
    pages = before_and_after["after"][0]
    body = pages[0][3].decode()
    assert "2024-07-31T23:55:00Z" in body and "2024-08-01T00:00:00Z" in body
    assert body.index("2024-07-31T23:55:00Z") < body.index("2024-08-01T00:00:00Z")


def test_cursor_from_before_the_move_still_reads(before_and_after: dict[str, Any]) -> None:
    resumed = before_and_after["resumed"]
    second = before_and_after["before"][2][1]
    assert (resumed.status_code, resumed.get_data()) == (200, second[3])


def test_teams_only_member_reads_cold_rows_of_their_devices_only(
        before_and_after: dict[str, Any]) -> None:
    # w1's team holds D2 and NY (where D1 stood too); D4 is not theirs: 404, cold as hot.
    reqs, after = before_and_after["reqs"], before_and_after["after"]
    mine = next(i for i, (who, _a, p) in enumerate(reqs) if who == "w1" and "device" in p)
    rows = [r for page in after[mine] for r in _json(page[3])]
    assert {r["device"] for r in rows} == {"D2"}
    assert any(r["time"] < "2024-08" for r in rows) and any(r["time"] >= "2024-08" for r in rows)
    theirs = next(i for i, (who, _a, p) in enumerate(reqs) if who == "w1" and p.get("device")
                  == "D4")
    assert after[theirs][0][0] == 404
    everyone = next(i for i, (who, _a, p) in enumerate(reqs) if p.get("device") == "D4")
    assert after[everyone][0][0] == 200 and len(_json(after[everyone][0][3])) > 2000
    place = next(i for i, (who, _a, p) in enumerate(reqs) if who == "w1" and "location" in p)
    pages = [_json(page[3]) for page in after[place]]
    assert "D3" not in {r["device"] for page in pages for r in page}
    assert all(len(page) == 100 for page in pages[:-1]) and len(pages) > 5
    anyone = next(i for i, (who, _a, p) in enumerate(reqs) if who == "a" and "location" in p)
    assert "D3" in {r["device"] for page in after[anyone] for r in _json(page[3])}


def test_aggregation_over_cold_months_answers_as_hot(before_and_after: dict[str, Any]) -> None:
    hot, cold = before_and_after["hourly"]
    assert hot.status_code == 200 and len(hot.get_json()) > 24
    assert (cold.status_code, cold.get_data()) == (200, hot.get_data())


def _json(body: bytes) -> list[dict[str, Any]]:
    return list(json.loads(body))


