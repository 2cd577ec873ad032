"""Devices, locations and the location summary: the paged envelope, stable order, complete
records (null, never missing), tenancy, and unit conversion of the summary."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import places
from shared.timeutil import local_date, local_day_bounds, zone
from tests.support.access_world import World, basic
from tests.support.apps import close_app, make_app
from tests.support.readings import insert_readings

A1 = basic("a1@a.example")
B1 = basic("b1@b.example")
DEVICE_KEYS = ["id", "name", "type", "model", "state", "org_id", "owner_id", "firmware_id",
               "reported_fw", "last_seen", "last_post", "last_deploy", "sync_interval",
               "batt_pct", "batt_volt", "signal_strength", "has_bridge", "current_location"]
CURRENT_LOCATION_KEYS = ["id", "name", "gps", "elev", "tz_name", "start_date"]
# The spec's location fields in its order, then what locations:write sets beyond them.
LOCATION_KEYS = ["id", "name", "gps", "elev", "tz_name", "state", "archived", "start_date",
                 "end_date", "current_device", "kc", "kc_schedule", "sensor_height", "crop",
                 "notes"]


def test_device_records_are_complete(client: FlaskClient, world: World) -> None:
    r = client.get("/api/v2/devices", headers=A1)
    assert r.status_code == 200
    page = r.get_json()
    assert list(page) == ["items", "limit", "page", "pages", "total"]
    assert (page["limit"], page["page"], page["pages"], page["total"]) == (24, 1, 1, 2)
    deployed, idle = page["items"]  # ordered by name: A000101, A000102
    assert list(deployed) == DEVICE_KEYS and list(idle) == DEVICE_KEYS
    assert deployed["name"] == world.dev_a and deployed["model"] == "Mark 3"
    assert deployed["org_id"] == str(world.org_a) and deployed["state"] == "New"
    loc = deployed["current_location"]
    assert list(loc) == CURRENT_LOCATION_KEYS
    assert loc["id"] == str(world.loc_a) and loc["gps"] == [-93.6, 41.9]
    assert loc["tz_name"] == "America/Chicago" and loc["elev"] == 290
    assert deployed["last_post"] is not None and deployed["last_deploy"] is not None
    assert deployed["batt_pct"] == 87.5 and deployed["signal_strength"] == -71
    assert idle["current_location"] is None and idle["last_post"] is None
    one = client.get(f"/api/v2/devices/{world.dev_a}", headers=A1)
    assert one.status_code == 200 and one.get_json() == deployed


def test_location_records_are_complete(client: FlaskClient, world: World) -> None:
    page = client.get("/api/v2/locations", headers=A1).get_json()
    assert (page["total"], page["pages"]) == (1, 1)
    (loc,) = page["items"]
    assert list(loc) == LOCATION_KEYS
    assert loc["id"] == str(world.loc_a) and loc["tz_name"] == "America/Chicago"
    assert loc["state"] == "Active" and loc["archived"] is False and loc["end_date"] is None
    device = loc["current_device"]
    assert device["name"] == world.dev_a and "current_location" not in device
    assert set(device) == set(DEVICE_KEYS) - {"current_location"}
    one = client.get(f"/api/v2/locations/{world.loc_a}", headers=A1)
    assert one.status_code == 200 and one.get_json() == loc


def test_other_org_sees_only_its_own(client: FlaskClient, world: World) -> None:
    devices = client.get("/api/v2/devices", headers=B1).get_json()
    assert [d["name"] for d in devices["items"]] == [world.dev_b]
    locations = client.get("/api/v2/locations", headers=B1).get_json()
    assert [x["id"] for x in locations["items"]] == [str(world.loc_b)]
    assert client.get(f"/api/v2/devices/{world.dev_a}", headers=B1).status_code == 404
    assert client.get(f"/api/v2/locations/{world.loc_a}", headers=B1).status_code == 404


@pytest.mark.parametrize("path", ["/api/v2/devices/NOPE", "/api/v2/locations/not-a-uuid",
                                  "/api/v2/locations/00000000-0000-4000-8000-000000000000"])
def test_missing_objects_are_404(client: FlaskClient, path: str) -> None:
    r = client.get(path, headers=A1)
    assert r.status_code == 404 and r.get_json()["code"] == 404


P1 = basic("p@p.example", "p-user-password")


@pytest.fixture(scope="module")
def big_org(world: World) -> str:
    """Org P: 30 devices and 30 locations, inserted out of name order, and its user p."""
    with psycopg.connect(world.url) as conn:
        org = accounts.create_org(conn, name="Org P")
        accounts.create_user(conn, org=org, email="p@p.example", password="p-user-password")
        for i in range(30):
            n = (i * 7) % 30  # scrambled insertion order
            places.register_device(conn, org=org, name=f"P{n:05d}")
            places.create_location(conn, org=org, loc=places.LocationInput(
                name=f"Plot {n:02d}", tz_name="Asia/Kolkata"))
        conn.commit()
    return world.url


@pytest.mark.parametrize("collection", ["devices", "locations", "locations/summary"])
@pytest.mark.parametrize("limit", [1, 7, 24, 30, 31, 10000])
def test_pages_cover_everything_once_in_stable_order(
        client: FlaskClient, big_org: str, collection: str, limit: int) -> None:
    table = "devices" if collection == "devices" else "locations"
    with psycopg.connect(big_org) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} t JOIN organisations o"
                           " ON o.id = t.org_id WHERE o.name = 'Org P'").fetchone()
    assert row and row[0] >= 30
    total = row[0]
    pages = math.ceil(total / limit)
    seen: list[str] = []
    for page in range(1, pages + 1):
        r = client.get(f"/api/v2/{collection}?limit={limit}&page={page}", headers=P1)
        assert r.status_code == 200
        body = r.get_json()
        assert (body["limit"], body["page"], body["pages"], body["total"]) == (
            limit, page, pages, total)
        assert len(body["items"]) == (limit if page < pages else total - limit * (pages - 1))
        seen += [item["name"] for item in body["items"]]
    assert len(seen) == len(set(seen)) == total
    assert seen == sorted(seen)
    past = client.get(f"/api/v2/{collection}?limit={limit}&page={pages + 1}", headers=P1)
    assert past.status_code == 404 and past.get_json()["code"] == 404
    # The same request twice gives the same page.
    again = [client.get(f"/api/v2/{collection}?limit={limit}&page=1", headers=P1).get_json()
             for _ in range(2)]
    assert again[0]["items"] == again[1]["items"]


@pytest.mark.parametrize("query, field", [
    ("limit=0", "limit"), ("limit=-1", "limit"), ("limit=10001", "limit"),
    ("limit=abc", "limit"), ("limit=1.5", "limit"), ("limit=1000000000000", "limit"),
    ("page=0", "page"), ("page=-2", "page"), ("page=x", "page")])
@pytest.mark.parametrize("collection", ["devices", "locations", "locations/summary"])
def test_bad_paging_parameters_are_400(client: FlaskClient, collection: str, query: str,
                                       field: str) -> None:
    r = client.get(f"/api/v2/{collection}?{query}", headers=A1)
    assert r.status_code == 400, r.get_json()
    assert field in r.get_json()["message"]


def test_empty_first_page_is_200_and_next_is_404(fresh_world: World) -> None:
    with psycopg.connect(fresh_world.url) as conn:
        org = accounts.create_org(conn, name="Empty Co")
        accounts.create_user(conn, org=org, email="e@empty.example", password="empty-pass-1")
        conn.commit()
    app = make_app(fresh_world.url)
    try:
        client = app.test_client()
        headers = basic("e@empty.example", "empty-pass-1")
        for collection in ("devices", "locations", "locations/summary"):
            r = client.get(f"/api/v2/{collection}", headers=headers)
            assert r.status_code == 200
            assert r.get_json() == {"items": [], "limit": 24, "page": 1, "pages": 0, "total": 0}
            assert client.get(f"/api/v2/{collection}?page=2", headers=headers).status_code == 404
    finally:
        close_app(app)


# ---- summary -------------------------------------------------------------------------------


def _today_totals(world: World, now: datetime) -> tuple[float, float, str]:
    """Insert today's daily row at loc_a (a partial day: ET of the hours so far, 40 % of the
    day, low quality); expected precip and ET."""
    tz = zone("America/Chicago")
    today = local_date(now, tz)
    start, end = local_day_bounds(today, tz)
    with psycopg.connect(world.url) as conn:
        conn.execute("DELETE FROM daily WHERE location = %s", (world.loc_a,))
        conn.execute("INSERT INTO daily (time, device, location, et, sample_pct, low_quality)"
                     " VALUES (%s, %s, %s, 0.75, 0.4, true)", (start, world.dev_a, world.loc_a))
        # Yesterday's ET must not count (nor hourly rows: the daily row is the one definition).
        conn.execute("INSERT INTO daily (time, device, location, et, sample_pct, low_quality)"
                     " VALUES (%s, %s, %s, 9, 1, false)",
                     (start - timedelta(days=1), world.dev_a, world.loc_a))
        row = conn.execute(
            "SELECT coalesce(sum(precip), 0) FROM calibrated WHERE location = %s"
            " AND time >= %s AND time < %s", (world.loc_a, start, end)).fetchone()
        conn.commit()
    assert row is not None
    return float(row[0]), 0.75, today.isoformat()


def _summary_item(client: FlaskClient, query: str = "") -> tuple[dict[str, Any], Any]:
    r = client.get(f"/api/v2/locations/summary{query}", headers=A1)
    assert r.status_code == 200, r.get_json()
    items = [i for i in r.get_json()["items"] if i["name"] == "North field"]
    return items[0], r


def test_summary_latest_conditions_and_today(client: FlaskClient, world: World) -> None:
    now = datetime.now(UTC)
    precip, et, today = _today_totals(world, now)
    item, r = _summary_item(client)
    assert set(LOCATION_KEYS) <= set(item)
    assert item["current_device"]["name"] == world.dev_a
    # Latest of the six readings: tair 25.0 C, rh 0.5 -> 50 %.
    assert item["conditions"]["tair"] == 25.0 and item["conditions"]["rh"] == 50.0
    assert item["conditions"]["time"].endswith("Z")
    assert item["today"] == {"date": today, "precip": pytest.approx(precip) if precip else None,
                             "et": 0.75, "sample_pct": 40.0, "low_quality": True}
    assert r.headers["X-Units"] == "C,pct,mm"


def test_summary_of_a_location_without_device_or_readings(client: FlaskClient,
                                                          big_org: str) -> None:
    r = client.get("/api/v2/locations/summary?limit=3", headers=P1)
    assert r.status_code == 200
    for item in r.get_json()["items"]:  # nulls, not missing keys
        assert item["conditions"] == {"time": None, "tair": None, "rh": None}
        assert item["today"]["precip"] is None and item["today"]["et"] is None
        assert item["today"]["date"] is not None
        assert item["current_device"] is None


def test_summary_honours_unit_parameters(client: FlaskClient, world: World) -> None:
    now = datetime.now(UTC)
    precip, _et, _today = _today_totals(world, now)
    item, r = _summary_item(client, "?temp=F&ratio=dec&size=in&limit=10000")
    assert item["conditions"]["tair"] == 77.0  # 25 C
    assert item["conditions"]["rh"] == 0.5
    assert item["today"]["et"] == pytest.approx(0.75 / 25.4, abs=0.001)
    if precip:
        assert item["today"]["precip"] == pytest.approx(precip / 25.4, abs=0.001)
    assert r.headers["X-Units"] == "F,dec,in"


@pytest.mark.parametrize("query", ["temp=k", "ratio=permille", "size=ft"])
def test_summary_bad_unit_is_400(client: FlaskClient, query: str) -> None:
    r = client.get(f"/api/v2/locations/summary?{query}", headers=A1)
    assert r.status_code == 400 and query.split("=")[0] in r.get_json()["message"]


@pytest.mark.parametrize("collection", ["devices", "locations", "locations/summary",
                                        "apikeys"])
def test_tenant_filters_in_the_query_are_ignored(client: FlaskClient, world: World,
                                                 collection: str) -> None:
    """S3: parameters naming org B's objects change nothing: org A's caller sees org A only."""
    query = (f"org_id={world.org_b}&organization_id={world.org_b}&user_id={world.b1}"
             f"&device={world.dev_b}&device_id={world.dev_b}&location={world.loc_b}"
             f"&location_id={world.loc_b}&id={world.key_ids['b_all']}")
    plain = client.get(f"/api/v2/{collection}", headers=A1)
    probed = client.get(f"/api/v2/{collection}?{query}", headers=A1)
    assert probed.status_code == plain.status_code == 200
    text = probed.get_data(as_text=True)
    for theirs in (world.dev_b, str(world.loc_b), str(world.key_ids["b_all"]), str(world.b1)):
        assert theirs not in text
    if collection != "locations/summary":  # the summary's conditions move with the clock
        assert probed.get_json() == plain.get_json()


def test_summary_conditions_come_from_the_last_seven_days(client: FlaskClient, world: World,
                                                          big_org: str) -> None:
    """An old reading is not a current condition; a recent one is."""
    with psycopg.connect(world.url) as conn:
        org = accounts.org_id(conn, "Org P")
        loc = places.create_location(conn, org=org, loc=places.LocationInput(
            name="Plot zz", tz_name="UTC"))
        old = datetime.now(UTC).replace(microsecond=0) - timedelta(days=8)
        insert_readings(conn, "P00000", loc, [{"time": old, "tair": 11.5}])
        conn.commit()

    def plot_zz() -> dict[str, Any]:
        items = client.get("/api/v2/locations/summary?limit=10000",
                           headers=P1).get_json()["items"]
        return next(i for i in items if i["name"] == "Plot zz")

    assert plot_zz()["conditions"]["time"] is None
    with psycopg.connect(world.url) as conn:
        insert_readings(conn, "P00000", loc, [{"time": old + timedelta(days=2), "tair": 12.5}])
        conn.commit()
    conditions = plot_zz()["conditions"]
    assert conditions["tair"] == 12.5 and conditions["rh"] is None
    assert conditions["time"] == (old + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
