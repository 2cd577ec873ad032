"""The water balance served like every table (issue 35): `water_balance` in /schemas with
descriptions and units, /data by location and device with units, CSV and local_time, and the
settings and irrigation endpoints recomputing it (through the rollups' run)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from tests.aggregate.weather import Place, day_readings
from tests.support.readings import insert_readings
from tests.support.rollups import run_all

DAYS = [date(2024, 7, 1) + timedelta(days=i) for i in range(5)]


@dataclass
class World:
    """The module's organisation, location and keys."""

    url: str
    loc: UUID
    keys: dict[str, str] = field(default_factory=dict)

    def headers(self, who: str = "admin") -> dict[str, str]:
        return {"Authorization": f"Apikey {self.keys[who]}"}


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    with psycopg.connect(module_db) as conn:
        org = accounts.create_org(conn, name="Water Org")
        admin = accounts.create_user(conn, org=org, email="admin@w.example",
                                     password="water-admin-pw-1", role="admin")
        member = accounts.create_user(conn, org=org, email="member@w.example",
                                      password="water-member-pw-1")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Valencia", tz_name="Europe/Madrid", lat=39.47, lon=-0.38, elev=15.0, kc=1.1))
        places.register_device(conn, org=org, name="WB1")
        rows = []
        for d in DAYS:
            place = Place("valencia", 39.47, -0.38, "Europe/Madrid", 15.0, d, 0.9, tmean=26.0,
                          rh_mean=0.55)
            rows += [{**r, "precip": 0.0} for r in day_readings(place)]
        insert_readings(conn, "WB1", loc, rows, marks=True)
        conn.execute("INSERT INTO water_settings (location_id, soil, theta_fc, theta_wp,"
                     " root_depth, p) VALUES (%s, 'sandy loam', 0.23, 0.11, 0.3, 0.4)", (loc,))
        run_all(conn)
        w = World(module_db, loc)
        scopes = ["data:read", "locations:read", "locations:write"]
        w.keys["admin"] = accounts.create_api_key(conn, user=admin, scopes=scopes)["apikey"]
        w.keys["member"] = accounts.create_api_key(conn, user=member, scopes=scopes)["apikey"]
        conn.commit()
    return w


def _data(client: FlaskClient, world: World, **params: Any) -> Any:
    return client.get("/api/v2/data/water_balance", query_string=params,
                      headers=world.headers())


def test_schemas_lists_the_table_with_units(client: FlaskClient, world: World) -> None:
    listed = client.get("/api/v2/schemas", headers=world.headers()).get_json()
    assert "water_balance" in str(listed)
    got = client.get("/api/v2/schemas/water_balance", headers=world.headers())
    assert got.status_code == 200, got.get_data(as_text=True)
    text = got.get_data(as_text=True)
    for name in ("depletion", "taw", "raw", "ks", "etc_adj", "irrigation", "FAO-56"):
        assert name in text


def test_data_by_location_and_device_with_units_csv_and_local_time(
        client: FlaskClient, world: World) -> None:
    by_loc = _data(client, world, location=str(world.loc), start_time="2024-06-30")
    assert by_loc.status_code == 200, by_loc.get_data(as_text=True)
    rows = by_loc.get_json()
    assert len(rows) == len(DAYS)
    assert rows[0]["taw"] == pytest.approx(36.0)  # 1000 x (0.23 - 0.11) x 0.3
    assert rows[-1]["depletion"] > 0
    by_dev = _data(client, world, device="WB1", start_time="2024-06-30", size="in")
    inch = by_dev.get_json()
    assert inch[0]["taw"] == pytest.approx(36.0 / 25.4, abs=0.01)
    as_csv = _data(client, world, device="WB1", start_time="2024-06-30", format="csv",
                   local_time="Europe/Madrid")
    assert as_csv.status_code == 200
    table = list(csv.DictReader(io.StringIO(as_csv.get_data(as_text=True))))
    assert len(table) == len(DAYS) and "depletion" in table[0]
    assert table[0]["local_time"].startswith("2024-07-01T00:00")  # local midnight, CEST


def test_pages_follow_the_cursor(client: FlaskClient, world: World) -> None:
    first = _data(client, world, location=str(world.loc), start_time="2024-06-30", limit=2,
                  select="time,depletion")
    assert first.status_code == 200 and len(first.get_json()) == 2
    got = list(first.get_json())
    cursor = first.headers.get("X-Cursor-Next")
    while cursor:
        page = _data(client, world, location=str(world.loc), start_time="2024-06-30", limit=2,
                     select="time,depletion", cursor=cursor)
        got += page.get_json()
        cursor = page.headers.get("X-Cursor-Next")
    assert [r["time"][:10] for r in got] == [(d - timedelta(days=1)).isoformat()
                                            for d in DAYS]  # local midnight: 22:00Z before
    assert list(got[0]) == ["time", "depletion"]


def test_irrigation_through_the_api_lowers_the_depletion(
        client: FlaskClient, world: World) -> None:
    before = _data(client, world, device="WB1", start_time="2024-06-30").get_json()
    refused = client.post(f"/api/v2/locations/{world.loc}/irrigation",
                          json={"day": "2024-07-04", "depth_mm": 20},
                          headers=world.headers("member"))
    assert refused.status_code == 403
    bad = client.post(f"/api/v2/locations/{world.loc}/irrigation",
                      json={"day": "2024-07-04", "depth_mm": 900}, headers=world.headers())
    assert bad.status_code == 400 and "depth_mm" in bad.get_data(as_text=True)
    made = client.post(f"/api/v2/locations/{world.loc}/irrigation",
                       json={"day": "2024-07-04", "depth_mm": 20}, headers=world.headers())
    assert made.status_code == 201, made.get_data(as_text=True)
    with psycopg.connect(world.url) as conn:
        run_all(conn)  # the scheduler's daily job
        conn.commit()
        audited = conn.execute("SELECT count(*) FROM audit_log WHERE action ="
                               " 'irrigation.create'").fetchone()
    assert audited is not None and audited[0] == 1
    after = _data(client, world, device="WB1", start_time="2024-06-30").get_json()
    assert after[3]["irrigation"] == 20.0
    assert after[3]["depletion"] < before[3]["depletion"]
    assert after[2] == before[2]
    water = client.get(f"/api/v2/locations/{world.loc}/water", headers=world.headers())
    assert water.status_code == 200
    body = water.get_json()
    assert body["settings"]["soil"] == "sandy loam"
    assert [e["depth_mm"] for e in body["events"]] == [20.0]
    (f,) = body["forecast"]
    assert f["device"] == "WB1" and f["refill_mm"] == pytest.approx(after[-1]["depletion"],
                                                                     abs=0.1)
    assert f["days_to_raw"] is not None and f["days_to_raw"] >= 0
