"""PATCH /api/v2/locations/{id} (`locations:write`, issue 23): who may change a location, what
a bad body gets, and that a change re-cuts the rollups it affects: a new zone re-cuts the
daily rows in that zone, a new elevation or kc schedule recomputes ET and crop water demand."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from tests.aggregate.weather import Place, day_readings
from tests.support.access_world import World, apikey, basic
from tests.support.readings import insert_readings
from tests.support.rollups import fetch, run_all

A1 = basic("a1@a.example")
A2 = basic("a2@a.example")
B1 = basic("b1@b.example")


pytestmark = pytest.mark.usefixtures("admins")  # tests/support/access_world.py


def _location(world: World, name: str, place: Place, device: str) -> UUID:
    """A location of org A holding one local day of `place`'s readings by `device`, rolled up."""
    with psycopg.connect(world.url) as conn:
        loc = places.create_location(conn, org=world.org_a, loc=places.LocationInput(
            name=name, tz_name=place.tz, lat=place.lat, lon=place.lon, elev=place.elev))
        places.register_device(conn, org=world.org_a, name=device)
        insert_readings(conn, device, loc, day_readings(place), marks=True)
        run_all(conn)
    return loc


def _patch(client: FlaskClient, loc: UUID | str, body: Any, headers: dict[str, str]) -> Any:
    return client.patch(f"/api/v2/locations/{loc}", json=body, headers=headers)


def test_changing_the_zone_recuts_the_daily_rows_in_the_new_zone(
        client: FlaskClient, world: World) -> None:
    place = Place("Ames", 42.0, -93.6, "UTC", 290, date(2026, 6, 10), sky=0.8)
    loc = _location(world, "Zone field", place, "A000301")
    with psycopg.connect(world.url) as conn:
        before = [r["time"] for r in fetch(conn, "SELECT time FROM daily WHERE location = %s",
                                           loc)]
    assert before == [datetime(2026, 6, 10, tzinfo=UTC)]

    r = _patch(client, loc, {"tz_name": "Asia/Kolkata"}, A1)
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["tz_name"] == "Asia/Kolkata"
    assert int(r.headers["X-Rollups-Marked"]) > 0
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM rollup_dirty WHERE rollup = 'hourly'"
                            ).fetchone() == (0,)  # UTC hours do not depend on the zone
        run_all(conn)
        days = fetch(conn, "SELECT time, sample_pct FROM daily WHERE location = %s"
                     " ORDER BY time", loc)
        hours = {r["time"].minute for r in fetch(
            conn, "SELECT time FROM local_hourly WHERE location = %s", loc)}
    # The UTC day 2026-06-10 spans two Kolkata days (+05:30): their starts are 18:30Z.
    assert [d["time"] for d in days] == [datetime(2026, 6, 9, 18, 30, tzinfo=UTC),
                                         datetime(2026, 6, 10, 18, 30, tzinfo=UTC)]
    assert hours == {30}  # the old zone's whole-hour rows are gone


def test_elevation_and_kc_schedule_recompute_et_and_crop_water_demand(
        client: FlaskClient, world: World) -> None:
    place = Place("Ames", 42.0, -93.6, "America/Chicago", 0, date(2026, 6, 11), sky=0.9)
    loc = _location(world, "ET field", place, "A000302")

    def daily() -> dict[str, Any]:
        with psycopg.connect(world.url) as conn:
            run_all(conn)
            (row,) = fetch(conn, "SELECT et, etc, kc, crop_water_demand FROM daily"
                           " WHERE location = %s", loc)
        return row

    sea_level = daily()
    assert sea_level["et"] > 0 and sea_level["kc"] is None
    r = _patch(client, loc, {"elev": 3000, "kc_schedule": [
        {"start_date": "2026-06-01", "kc": 1.15}]}, A1)
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["kc_schedule"] == [{"start_date": "2026-06-01", "kc": 1.15}]
    assert r.get_json()["elev"] == 3000
    high = daily()
    # Lower pressure lowers the psychrometric constant (FAO-56 eq. 7-8): ET rises with height.
    assert high["et"] > sea_level["et"] * 1.02
    assert high["kc"] == pytest.approx(1.15, abs=1e-3)
    assert high["etc"] == pytest.approx(high["et"] * 1.15, rel=0.01)

    # The same values again change nothing and mark nothing.
    again = _patch(client, loc, {"elev": 3000}, A1)
    assert again.status_code == 200 and again.headers["X-Rollups-Marked"] == "0"


def test_fields_are_set_cleared_and_shown(client: FlaskClient, world: World) -> None:
    body = {"name": "North field (east)", "gps": [-93.61, 41.91], "crop": "maize",
            "notes": "irrigated from the east pivot", "sensor_height": 3, "kc": 0.9,
            "state": "Inactive"}
    r = _patch(client, world.loc_a, body, A1)
    assert r.status_code == 200, r.get_json()
    got = r.get_json()
    assert (got["name"], got["gps"], got["crop"], got["notes"], got["sensor_height"], got["kc"],
            got["state"]) == ("North field (east)", [-93.61, 41.91], "maize",
                              "irrigated from the east pivot", 3.0, 0.9, "Inactive")
    assert client.get(f"/api/v2/locations/{world.loc_a}", headers=A1).get_json() == got
    cleared = _patch(client, world.loc_a, {"notes": None, "gps": None, "state": "Active",
                                           "name": "North field"}, A1)
    assert cleared.status_code == 200
    assert cleared.get_json()["notes"] is None and cleared.get_json()["gps"] is None


@pytest.mark.parametrize(("body", "field"), [
    ({"tz_name": "Mars/Olympus_Mons"}, "Mars/Olympus_Mons"),
    ({"gps": [1.0, 2.0, 3.0]}, "gps"),
    ({"gps": [200.0, 0.0]}, "lon"),
    ({"kc": 5}, "kc"),
    ({"elev": 12000}, "elev"),
    ({"sensor_height": 0}, "sensor_height"),
    ({"state": "Gone"}, "state"),
    ({"name": ""}, "name"),
    ({"tz_name": None}, "tz_name"),
    ({"notes": "x" * 2001}, "notes"),
    ({"kc_schedule": [{"start_date": "2026-01-01", "kc": 1},
                      {"start_date": "2026-01-01", "kc": 2}]}, "kc_schedule"),
    ({"kc_schedule": [{"start_date": "soon", "kc": 1}]}, "kc_schedule"),
    ({"id": "00000000-0000-0000-0000-000000000000"}, "id"),
    ({"colour": "red"}, "colour"),
])
def test_bad_bodies_are_400_naming_the_field(client: FlaskClient, world: World,
                                             body: dict[str, Any], field: str) -> None:
    r = _patch(client, world.loc_a, body, A1)
    assert r.status_code == 400, r.get_json()
    assert field in r.get_json()["message"]


def test_a_taken_name_is_409(client: FlaskClient, world: World) -> None:
    with psycopg.connect(world.url) as conn:
        places.create_location(conn, org=world.org_a, loc=places.LocationInput(
            name="Taken", tz_name="UTC"))
    r = _patch(client, world.loc_a, {"name": "Taken"}, A1)
    assert r.status_code == 409


def test_only_the_organisations_administrators_write(client: FlaskClient, world: World) -> None:
    assert _patch(client, world.loc_a, {"crop": "oats"}, A2).status_code == 403  # a member
    # Another organisation's location is the same 404 as one that does not exist.
    other = _patch(client, world.loc_b, {"crop": "oats"}, A1)
    missing = _patch(client, "00000000-0000-0000-0000-000000000000", {"crop": "oats"}, A1)
    assert other.status_code == missing.status_code == 404
    assert _patch(client, world.loc_a, {"crop": "oats"}, B1).status_code == 404
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT crop FROM locations WHERE id = %s",
                            (world.loc_b,)).fetchone() == (None,)
        _, writer = accounts_key(conn, world.a1, ["locations:write"])
        _, reader = accounts_key(conn, world.a1, ["locations:read"])
    assert _patch(client, world.loc_a, {"crop": "oats"}, apikey(writer)).status_code == 200
    assert _patch(client, world.loc_a, {"crop": "rye"}, apikey(reader)).status_code == 403


def accounts_key(conn: psycopg.Connection, user: UUID, scopes: list[str]) -> tuple[UUID, str]:
    """(id, value) of a new key of `user` with `scopes`."""
    record = accounts.create_api_key(conn, user=user, scopes=scopes, name="write test")
    return record["id"], record["apikey"]


def test_a_kc_change_marks_only_the_daily_buckets_of_the_days_it_changes(
        client: FlaskClient, world: World) -> None:
    """Issue 34: a kc schedule entry from one day had marked every hourly and local_hourly
    bucket of the location; crop coefficients feed only the daily crop columns."""
    days = [date(2026, 6, 20), date(2026, 6, 21), date(2026, 6, 22)]
    place = Place("Ames", 42.0, -93.6, "America/Chicago", 0, days[0], sky=0.9)
    loc = _location(world, "Kc field", place, "A000303")
    with psycopg.connect(world.url) as conn:
        for d in days[1:]:
            insert_readings(conn, "A000303", loc, day_readings(replace(place, day=d)), marks=True)
        run_all(conn)

    def pending() -> dict[str, int]:
        with psycopg.connect(world.url) as conn:
            return dict(conn.execute("SELECT rollup, count(*) FROM rollup_dirty"
                                     " WHERE device = 'A000303' GROUP BY rollup").fetchall())

    r = _patch(client, loc, {"kc_schedule": [{"start_date": "2026-06-22", "kc": 1.1}]}, A1)
    assert r.status_code == 200, r.get_json()
    assert r.headers["X-Rollups-Marked"] == "1"
    assert pending() == {"daily": 1}  # the one day from the entry's date, no hours
    with psycopg.connect(world.url) as conn:
        run_all(conn)
        kcs = [row["kc"] for row in fetch(conn, "SELECT kc FROM daily WHERE location = %s"
                                          " ORDER BY time", loc)]
    assert kcs[:2] == [None, None] and kcs[2] == pytest.approx(1.1, abs=1e-3)

    # The default kc is in force only before the schedule's first entry: the two earlier days.
    r = _patch(client, loc, {"kc": 0.8}, A1)
    assert r.headers["X-Rollups-Marked"] == "2" and pending() == {"daily": 2}
    with psycopg.connect(world.url) as conn:
        run_all(conn)
        kcs = [row["kc"] for row in fetch(conn, "SELECT kc FROM daily WHERE location = %s"
                                          " ORDER BY time", loc)]
    assert kcs == [pytest.approx(0.8, abs=1e-3)] * 2 + [pytest.approx(1.1, abs=1e-3)]
