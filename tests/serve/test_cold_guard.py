"""A calibrated JSON page of an organisation with no cold file in its window takes no snapshot
and no catalogue lookup of its own: its first statement checks the catalogue itself
(queries.Scan.guard). Consistent with a concurrent move: a move that lands between a long
page's first statement and the rest sends the page back to be read whole in one snapshot,
and its answer is the one the page had before the move."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from aggregate import coldmove
from people import accounts
from serve import coldread
from serve.api import data
from shared import places
from tests.support.readings import insert_readings, series

JUNE_25 = datetime(2024, 6, 25, tzinfo=UTC)
MOVED_AT = datetime(2024, 8, 2, tzinfo=UTC)  # hot_days=1: June and July go cold
AUGUST = {"device": "G1", "start_time": "2024-08-01T00:00:00Z",
          "end_time": "2024-08-06T00:00:00Z"}  # hot, before and after the move
LONG = {"device": "G1", "start_time": "2024-06-28T00:00:00Z",
        "end_time": "2024-08-04T00:00:00Z", "limit": 3000}


@dataclass
class GuardWorld:
    """The module's database and API key."""

    url: str
    key: str


@pytest.fixture(scope="module")
def cold_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's cold tier directory."""
    return tmp_path_factory.mktemp("coldguard")


@pytest.fixture(scope="module")
def app_overrides(cold_dir: Path) -> dict[str, Any]:
    """The app reads the module's cold tier."""
    return {"cold_path": str(cold_dir)}


@pytest.fixture(scope="module")
def world(module_db: str) -> GuardWorld:
    """G1: readings from June 25 to August 5, 2024 (June and July move cold in the test)."""
    with psycopg.connect(module_db) as conn:
        org = accounts.create_org(conn, name="Guard")
        user = accounts.create_user(conn, org=org, email="g@guard.example", password="g-pw-1234")
        places.register_device(conn, org=org, name="G1")
        insert_readings(conn, "G1", None, series(
            JUNE_25, JUNE_25 + timedelta(days=41), tair=lambda i, _t: 10 + (i % 97) * 0.13,
            rh=0.5))
        key = accounts.create_api_key(conn, user=user, scopes=["data:read"])["apikey"]
        conn.commit()
    return GuardWorld(module_db, str(key))


def _get(client: FlaskClient, world: GuardWorld, **params: Any) -> tuple[int, str | None, bytes]:
    got = client.get("/api/v2/data/calibrated", query_string=params,
                     headers={"Authorization": f"Apikey {world.key}"})
    return got.status_code, got.headers.get("X-Cursor-Next"), got.get_data()


def _counting(calls: list[str], name: str, real: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)
    return wrapper


def test_a_page_with_no_cold_file_takes_no_snapshot_or_lookup(
        client: FlaskClient, world: GuardWorld, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(coldread, "_files", _counting(calls, "catalogue", coldread._files))
    monkeypatch.setattr(data, "_one_snapshot", _counting(calls, "snapshot", data._one_snapshot))
    status, cursor, body = _get(client, world, **AUGUST, limit=800)
    assert status == 200 and cursor is not None and body.count(b'"time"') == 800
    assert calls == []  # one statement in autocommit, the catalogue checked inside it
    status, cursor, body = _get(client, world, **AUGUST, limit=1100)
    assert status == 200 and body.count(b'"time"') == 1100
    assert calls == ["snapshot", "catalogue"]  # the rest of a long page: one lookup, no file
    assert _get(client, world, device="G1", start_time="2020-01-01T00:00:00Z",
                end_time="2020-01-02T00:00:00Z")[::2] == (200, b"[]")
    assert _get(client, world, device="G9")[0] == 404


def test_a_move_between_the_first_statement_and_the_rest(
        client: FlaskClient, world: GuardWorld, cold_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    before = _get(client, world, **LONG)
    moved: list[Any] = []
    real = data._one_snapshot

    def move_first(conn: psycopg.Connection) -> None:
        # The rest of the page starts its snapshot: the mover runs to the end just before.
        if not moved:
            with psycopg.connect(world.url, autocommit=True) as other:
                moved.extend(coldmove.move(other, hot_days=1, cold_path=str(cold_dir),
                                           now=MOVED_AT))
        real(conn)

    monkeypatch.setattr(data, "_one_snapshot", move_first)
    during = _get(client, world, **LONG)
    assert [m.month.month for m in moved] == [6, 7]
    with psycopg.connect(world.url) as conn:
        hot = conn.execute("SELECT count(*) FROM calibrated WHERE time < '2024-08-01'"
                           ).fetchone()[0]  # type: ignore[index]
    assert hot == 0
    assert during == before and before[0] == 200 and before[2].count(b'"time"') == 3000
    after = _get(client, world, **LONG)  # cold from the start: the guard sends it to a snapshot
    assert after == before
