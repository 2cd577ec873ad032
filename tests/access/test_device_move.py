"""POST /api/v2/devices/{name}/deployments (`locations:write`, issue 23): an administrator
moves a device to another location of the organisation; the readings the move covers are
relabelled and their rollups recomputed at the new location; who may, and what bad bodies get.
GET lists where the device has been."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask.testing import FlaskClient

from shared import places
from tests.aggregate.weather import Place, day_readings
from tests.support.access_world import World, basic
from tests.support.readings import insert_readings
from tests.support.rollups import fetch, run_all

A1 = basic("a1@a.example")
A2 = basic("a2@a.example")
B1 = basic("b1@b.example")


pytestmark = pytest.mark.usefixtures("admins")  # tests/support/access_world.py


def _post(client: FlaskClient, device: str, body: Any, headers: dict[str, str]) -> Any:
    return client.post(f"/api/v2/devices/{device}/deployments", json=body, headers=headers)


def _field(world: World, name: str, tz: str) -> UUID:
    with psycopg.connect(world.url) as conn:
        return places.create_location(conn, org=world.org_a, loc=places.LocationInput(
            name=name, tz_name=tz, lat=42.0, lon=-93.6, elev=290))


def test_moving_a_device_relabels_its_readings_and_recuts_the_rollups(
        client: FlaskClient, world: World) -> None:
    place = Place("Ames", 42.0, -93.6, "UTC", 290, date(2026, 6, 12), sky=0.8)
    old = _field(world, "Move from", "UTC")
    new = _field(world, "Move to", "Asia/Kolkata")
    device = "A000401"
    with psycopg.connect(world.url) as conn:
        places.register_device(conn, org=world.org_a, name=device)
        places.deploy_device(conn, device=device, location=old,
                               start=datetime(2026, 6, 1, tzinfo=UTC))
        insert_readings(conn, device, old, day_readings(place), marks=True)
        run_all(conn)
        assert [r["time"] for r in fetch(conn, "SELECT time FROM daily WHERE device = %s",
                                         device)] == [datetime(2026, 6, 12, tzinfo=UTC)]

    moved_at = datetime(2026, 6, 12, 12, tzinfo=UTC)  # half of the day moves
    r = _post(client, device, {"location": str(new), "from": "2026-06-12T12:00:00Z"}, A1)
    assert r.status_code == 201, r.get_json()
    body = r.get_json()
    assert body["location"] == {"id": str(new), "name": "Move to"}
    assert body["from"].startswith("2026-06-12T12:00:00") and body["to"] is None
    assert int(r.headers["X-Rollups-Marked"]) > 0

    with psycopg.connect(world.url) as conn:
        by_loc = dict(conn.execute(
            "SELECT location, count(*) FROM calibrated WHERE device = %s GROUP BY location",
            (device,)).fetchall())
        assert by_loc == {old: 144, new: 144}  # 288 five-minute readings, split at noon
        run_all(conn)
        days = fetch(conn, "SELECT time, location FROM daily WHERE device = %s ORDER BY time",
                     device)
    # The morning stays a UTC day at the old field; the afternoon (17:30 to 05:30 in Kolkata)
    # is cut in Kolkata's days: 12 and 13 June there, starting 18:30Z the day before.
    assert [d["time"] for d in days if d["location"] == old] == [
        datetime(2026, 6, 12, tzinfo=UTC)]
    assert [d["time"] for d in days if d["location"] == new] == [
        datetime(2026, 6, 11, 18, 30, tzinfo=UTC), datetime(2026, 6, 12, 18, 30, tzinfo=UTC)]

    history = client.get(f"/api/v2/devices/{device}/deployments", headers=A2).get_json()
    assert [(d["location"]["name"], d["to"] is None) for d in history["items"]] == [
        ("Move to", True), ("Move from", False)]
    assert history["items"][1]["to"] == body["from"]
    assert moved_at.isoformat().startswith(history["items"][1]["to"][:19])

    audit = client.get("/api/v2/audit?action=device.move", headers=A1).get_json()
    assert any(e["action"] == "device.move" and e["details"]["device"] == device
               for e in audit["items"]), audit


def test_who_may_move_and_what_bad_bodies_get(client: FlaskClient, world: World) -> None:
    target = _field(world, "Move target", "UTC")
    device = world.dev_a
    before = client.get(f"/api/v2/devices/{device}/deployments", headers=A1).get_json()

    # A member of the organisation reads the history but may not move.
    r = _post(client, device, {"location": str(target)}, A2)
    assert r.status_code == 403 and "role" in r.get_json()["message"]
    # Another organisation's administrator: the device is not theirs (the same 404 as none).
    r_b = _post(client, device, {"location": str(target)}, B1)
    r_none = _post(client, "NO-SUCH-DEVICE", {"location": str(target)}, B1)
    assert (r_b.status_code, r_none.status_code) == (404, 404)
    assert r_b.get_json()["message"].replace(device, "X") == \
        r_none.get_json()["message"].replace("NO-SUCH-DEVICE", "X")
    # Org A's administrator cannot move a device to org B's location: unknown to them.
    r = _post(client, device, {"location": str(world.loc_b)}, A1)
    assert r.status_code == 404 and "location" in r.get_json()["message"]
    for bad, field in (({}, "location"), ({"location": str(target), "from": "yesterday"}, "from"),
                       ({"location": str(target), "from": "2026-06-02",
                         "to": "2026-06-01"}, "to"),
                       ({"location": str(target), "colour": "red"}, "colour")):
        r = _post(client, device, bad, A1)
        assert r.status_code == 400, (bad, r.get_json())
        assert field in r.get_json()["message"], (bad, r.get_json())
    # Overlapping a later deployment: 409, nothing changes.
    with psycopg.connect(world.url) as conn:
        later = datetime.now(UTC) + timedelta(days=30)
        places.deploy_device(conn, device=device, location=world.loc_a, start=later)
    r = _post(client, device, {"location": str(target), "from": "2020-01-01",
                               "to": (later + timedelta(days=1)).isoformat()}, A1)
    assert r.status_code == 409, r.get_json()
    after = client.get(f"/api/v2/devices/{device}/deployments", headers=A1).get_json()
    assert len(after["items"]) == len(before["items"]) + 1  # only the seeded later one
