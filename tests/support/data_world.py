"""The data world: a seeded database for the `/schemas` and `/data` tests (tests/serve) and
the tests that read rows through a real server (the Python client, the edge).

Org A: location NY (America/New_York) and LA (America/Los_Angeles); devices D1 and D2 stand at
NY from T0 - 1 day; D1 moves to LA at T0 + 1 day. Both report every 5 minutes from T0 for two
days with the same timestamps (shared timestamps across devices at one location). D1 also has
hourly rows, hourly rows across the New York fall-back night, and daily rows starting at New
York local midnight. D4 has 2500 readings and no location. Org B: device B1 at location BL,
with readings at the same times.
Callers authenticate with API keys made by people.accounts.create_api_key.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
import pytest
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from people import accounts
from shared import places
from shared.timeutil import local_day_start
from tests.support import readings

T0 = datetime(2024, 7, 1, tzinfo=UTC)
STEPS = 576  # two days of 5-minute readings per device
NY = ZoneInfo("America/New_York")
FALL_BACK = datetime(2024, 11, 3, 4, tzinfo=UTC)  # 00:00 EDT; clocks fall back at 06:00Z
DAILY_FIRST = date(2024, 6, 20)
DAILY_DAYS = 15
D4_ROWS = 2500  # more than calibrated's row cap of 2050
PASSWORD_A1 = ("a1@a.example", "a1-password")  # user a1 of org A: (email, password)


@dataclass
class World:
    """Names, ids and API keys of the seeded objects."""

    url: str
    org_a: UUID
    org_b: UUID
    ny: UUID
    la: UUID
    bl: UUID
    keys: dict[str, str] = field(default_factory=dict)

    def headers(self, who: str = "a", **extra: str) -> dict[str, str]:
        """Authorization header of API key `who` (+ extra headers)."""
        return {"Authorization": f"Apikey {self.keys[who]}", **extra}


def _readings(conn: psycopg.Connection, device: str, *stays: tuple[UUID, datetime]) -> None:
    """STEPS readings from T0 (tair: readings.stepped_tair), at each (location, until) in
    turn."""
    rows = readings.series(T0, n=STEPS, tair=readings.stepped_tair, rh=0.653, p=101.325,
                           precip=lambda i, _t: 0.2 if i % 12 == 0 else 0.0, wind_speed=3.2,
                           tbelow=22.5, tabove=19.0, tdew=15.1, swdw=None)
    since = T0
    for location, until in stays:
        readings.insert_readings(conn, device, location,
                                 [r for r in rows if since <= r["time"] < until])
        since = until


def seed(url: str) -> World:
    """Create the world in the database at `url`."""
    with psycopg.connect(url) as conn:
        org_a = accounts.create_org(conn, name="Org A")
        org_b = accounts.create_org(conn, name="Org B")
        a1 = accounts.create_user(conn, org=org_a, email=PASSWORD_A1[0], password=PASSWORD_A1[1])
        b1 = accounts.create_user(conn, org=org_b, email="b1@b.example", password="b1-password")
        ny = places.create_location(
            conn, org=org_a,
            loc=places.LocationInput(name="NY field", tz_name="America/New_York"))
        la = places.create_location(
            conn, org=org_a,
            loc=places.LocationInput(name="LA field", tz_name="America/Los_Angeles"))
        bl = places.create_location(
            conn, org=org_b, loc=places.LocationInput(name="B field", tz_name="Europe/Berlin"))
        for name in ("D1", "D2", "D3", "D4"):
            places.register_device(conn, org=org_a, name=name)
        places.register_device(conn, org=org_b, name="B1")
        places.deploy_device(conn, device="D1", location=ny, start=T0 - timedelta(days=1),
                               end=T0 + timedelta(days=1))
        places.deploy_device(conn, device="D1", location=la, start=T0 + timedelta(days=1))
        places.deploy_device(conn, device="D2", location=ny, start=T0 - timedelta(days=1))
        places.deploy_device(conn, device="B1", location=bl, start=T0 - timedelta(days=1))
        moved, ever = T0 + timedelta(days=1), datetime.max.replace(tzinfo=UTC)
        _readings(conn, "D1", (ny, moved), (la, ever))
        _readings(conn, "D2", (ny, ever))
        _readings(conn, "B1", (bl, ever))
        # D4: more rows than any default page, no location (a device never deployed).
        readings.insert_readings(conn, "D4", None, readings.series(T0, n=D4_ROWS, tair=20))
        conn.execute("INSERT INTO health (time, device, location, batt_pct, fw)"
                     " VALUES (%s, 'D1', %s, 87.5, '1.2.3')", (T0, ny))
        conn.execute("INSERT INTO local_hourly (time, device, location, tair)"
                     " VALUES (%s, 'D1', %s, 21.3)", (T0, ny))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO hourly (time, device, location, tair, maxt, mint, rh, p, precip,"
                " wind_speed, low_quality, sample_pct) VALUES"
                " (%s, 'D1', %s, %s, %s, %s, 0.5, 101.3, 1.0, 3.6, %s, 1.0)",
                [(T0 + timedelta(hours=h), ny if h < 24 else la, 21.3, 25.0, 18.0, h % 2 == 0)
                 for h in range(48)])
            cur.executemany(
                "INSERT INTO hourly (time, device, location, tair) VALUES (%s, 'D3', %s, 10.0)",
                [(FALL_BACK + timedelta(hours=h), ny) for h in range(4)])
            cur.executemany(
                "INSERT INTO daily (time, device, location, meant, maxt, mint, gdd, precip)"
                " VALUES (%s, 'D1', %s, 20.0, 28.0, 12.0, 10.0, 2.5)",
                [(local_day_start(DAILY_FIRST + timedelta(days=d), NY), ny)
                 for d in range(DAILY_DAYS)])
        world = World(url, org_a, org_b, ny, la, bl)
        world.keys["a"] = accounts.create_api_key(conn, user=a1, scopes=["data:read"])["apikey"]
        world.keys["a_devices"] = accounts.create_api_key(
            conn, user=a1, scopes=["devices:read"])["apikey"]
        world.keys["b"] = accounts.create_api_key(conn, user=b1, scopes=["data:read"])["apikey"]
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("calibrated", "hourly", "daily"):
            conn.execute(f"ANALYZE {table}")
    return world


# ---- asking /data in-process (tests/serve, tests/security) -----------------------------------

URL = "/api/v2/data"


def get(client: FlaskClient, world: World, table: str, who: str = "a",
        accept: str | None = None, **params: Any) -> TestResponse:
    """GET /data/{table} with API key `who` of the world and `params` as the query string."""
    headers = world.headers(who)
    if accept:
        headers["Accept"] = accept
    return client.get(f"{URL}/{table}", query_string=params, headers=headers)


Answer = tuple[int, str | None, str | None, bytes]


def walk(client: FlaskClient, world: World, who: str, accept: str | None,
         params: dict[str, Any]) -> list[Answer]:
    """Every page of a `calibrated` listing, following X-Cursor-Next: status, X-Cursor-Next,
    X-Units and body of each (the before/after comparisons of the cold tier's tests)."""
    pages: list[Answer] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        got = get(client, world, "calibrated", who=who, accept=accept, **query)
        cursor = got.headers.get("X-Cursor-Next")
        pages.append((got.status_code, cursor, got.headers.get("X-Units"), got.get_data()))
        if got.status_code != 200 or cursor is None:
            return pages


def rows(response: TestResponse) -> list[dict[str, Any]]:
    """The rows of a 200 JSON page."""
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    return cast(list[dict[str, Any]], response.get_json())


def csv_rows(response: TestResponse) -> list[list[str]]:
    """The lines of a 200 CSV page, split into fields."""
    assert response.status_code == 200, response.get_data(as_text=True)
    return list(csv.reader(io.StringIO(response.get_data(as_text=True))))


def error(response: TestResponse, code: int) -> dict[str, Any]:
    """The JSON error body of a `code` answer (checked for its documented keys)."""
    assert response.status_code == code, response.get_data(as_text=True)
    assert response.content_type == "application/json"
    body = cast(dict[str, Any], response.get_json())
    assert body["code"] == code and isinstance(body["message"], str) and body["status"]
    return body


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded world, shared by a module (tests must not change it)."""
    return seed(module_db)
