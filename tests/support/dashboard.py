"""The dashboard tests' seeded world (tests/web) and form sign-in (the app: tests/support/apps).

Org A: admin `admin@a.example` and user `user@a.example`; location "North field"
(America/Chicago) with device A1 (a week of 5-minute readings of tair, rh, p, wind_speed ending
at END, hourly rows for that week, 30 daily rows with ET, crop ET, rain, demand and GDD;
last seen now, battery 80 %) and device A2 (never reported, last seen two days ago, battery
12 %: silent and low) and device A3 (one reading ten minutes ago: the location's latest
conditions, tair 21.5 C, rh 50 %). Quarantine of A1: three rows in the last hours (out_of_range x2,
bad_json) and one ten days ago. Org B: administrator `user@b.example`, location "B field", device B1
with readings at the same times and a quarantined message whose payload holds B_SECRET.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from flask.testing import FlaskClient

from people import accounts
from shared import places
from tests.support import readings
from tests.support.ingesting import now_slot

END = datetime(2026, 3, 8, tzinfo=UTC)  # newest 5-minute reading
STEPS = 7 * 24 * 12  # a week of 5-minute readings
PASSWORDS = {"admin@a.example": "admin-a-password", "user@a.example": "user-a-password",
             "user@b.example": "user-b-password"}
B_SECRET = "B-SECRET-PAYLOAD-7f3e"
A_PAYLOAD = '{"time": "2026-03-07T12:00:00Z", "rh": 1.7}'


@dataclass
class World:
    """Names and ids of the seeded objects."""

    url: str
    org_a: UUID
    org_b: UUID
    north: UUID
    b_field: UUID
    quarantine_a: list[int]
    quarantine_b: int


def _readings(conn: psycopg.Connection, device: str, location: UUID) -> None:
    """A week of 5-minute readings ending at END: tair a daily cycle (readings.diurnal_tair),
    rh against it, p and wind slowly varying, a little rain every 97th reading."""
    start = END - timedelta(minutes=5 * (STEPS - 1))
    readings.insert_readings(conn, device, location, readings.series(
        start, n=STEPS, tair=readings.diurnal_tair,
        rh=lambda i, _t: 0.6 - 0.25 * math.sin(2 * math.pi * i / 288),
        p=lambda i, _t: 101.3 + 0.3 * math.sin(i / 500.0),
        wind_speed=lambda i, _t: 3 + 2 * abs(math.sin(i / 37.0)),
        precip=lambda i, _t: 0.4 if i % 97 == 0 else 0.0))


def seed(url: str) -> World:
    """Create the world in the database at `url`."""
    with psycopg.connect(url) as conn:
        org_a = accounts.create_org(conn, name="Org A")
        org_b = accounts.create_org(conn, name="Org B")
        accounts.create_user(conn, org=org_a, email="admin@a.example",
                             password=PASSWORDS["admin@a.example"], role="owner")
        accounts.create_user(conn, org=org_a, email="user@a.example",
                             password=PASSWORDS["user@a.example"])
        # An administrator in B: A's payloads must be out of reach even for B's admins.
        accounts.create_user(conn, org=org_b, email="user@b.example",
                             password=PASSWORDS["user@b.example"], role="owner")
        north = places.create_location(conn, org=org_a, loc=places.LocationInput(
            name="North field", tz_name="America/Chicago", lat=41.9, lon=-93.6, elev=300))
        b_field = places.create_location(
            conn, org=org_b, loc=places.LocationInput(name="B field", tz_name="Europe/Berlin"))
        for name in ("A1", "A2", "A3"):
            places.register_device(conn, org=org_a, name=name)
        places.register_device(conn, org=org_b, name="B1")
        deployed = END - timedelta(days=60)
        places.deploy_device(conn, device="A1", location=north, start=deployed)
        places.deploy_device(conn, device="A2", location=north, start=deployed)
        places.deploy_device(conn, device="A3", location=north, start=deployed)
        places.deploy_device(conn, device="B1", location=b_field, start=deployed)
        conn.execute("UPDATE devices SET last_seen = now(), batt_pct = 80, batt_volt = 3.9,"
                     " signal_strength = -71, state = 'Active' WHERE name = 'A1'")
        conn.execute("UPDATE devices SET last_seen = now() - interval '2 days', batt_pct = 12,"
                     " state = 'Active' WHERE name = 'A2'")
        conn.execute("UPDATE devices SET last_seen = now(), batt_pct = 90 WHERE name = 'B1'")
        _readings(conn, "A1", north)
        conn.execute("UPDATE devices SET last_seen = now(), batt_pct = 70 WHERE name = 'A3'")
        readings.insert_readings(conn, "A3", north, readings.series(
            now_slot(10), n=1, tair=21.5, rh=0.5))
        _readings(conn, "B1", b_field)
        conn.execute(
            "INSERT INTO hourly (time, device, location, tair, maxt, mint, rh)"
            " SELECT %s - g * interval '1 hour', 'A1', %s, 15, 18, 12, 0.55"
            " FROM generate_series(0, 167) g", (END, north))
        conn.execute(
            "INSERT INTO daily (time, device, location, meant, maxt, mint, et, etc, precip,"
            " crop_water_demand, gdd)"
            " SELECT (%s::date - g) + time '06:00', 'A1', %s, 15, 22, 8, 4.2, 3.4, 1.0, -2.4, 5"
            " FROM generate_series(0, 29) g", (END, north))
        with conn.cursor() as cur:
            quarantine_a = []
            for ago, reason, detail, index, payload in (
                    (timedelta(hours=1), "out_of_range", "reading 0: rh: 1.7 is outside 0..1", 0,
                     A_PAYLOAD),
                    (timedelta(hours=2), "out_of_range", "reading 0: tair: 99 is outside -60..70",
                     0, '{"time": "2026-03-07T12:05:00Z", "tair": 99}'),
                    (timedelta(hours=3), "bad_json", "Expecting value: line 1 column 1", None,
                     "not json"),
                    (timedelta(days=10), "bad_json", "Expecting value: line 1 column 1", None,
                     "{{")):
                cur.execute(
                    "INSERT INTO quarantine (received_at, topic, device, reason, detail,"
                    " reading_index, payload) VALUES (now() - %s, 'sensors/A1/readings', 'A1',"
                    " %s, %s, %s, %s) RETURNING id",
                    (ago, reason, detail, index, payload.encode()))
                quarantine_a.append(cur.fetchone()[0])  # type: ignore[index]
            cur.execute(
                "INSERT INTO quarantine (received_at, topic, device, reason, detail, payload)"
                " VALUES (now() - interval '30 minutes', 'sensors/B1/readings', 'B1',"
                " 'wrong_type', 'tair: a string', %s) RETURNING id", (B_SECRET.encode(),))
            quarantine_b = cur.fetchone()[0]  # type: ignore[index]
            # A message of an unregistered device belongs to no organisation.
            cur.execute("INSERT INTO quarantine (topic, device, reason, detail, payload) VALUES"
                        " ('sensors/ZZ/readings', 'ZZ', 'unknown_device', 'no such device',"
                        " 'zz')")
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        for table in ("calibrated", "hourly", "daily", "quarantine"):
            conn.execute(f"ANALYZE {table}")
    return World(url, org_a, org_b, north, b_field, quarantine_a, quarantine_b)


def shows(html: str, name: str) -> bool:
    """Whether `name` (a device, a short code) is on the page as a whole token. A page carries
    random text: the CSRF token (secrets.token_urlsafe: letters, digits, - and _) holds a given
    two-character name about once in a hundred pages, so `name in html` is no test of absence."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", html) is not None


def csrf_of(html: str) -> str:
    """The CSRF value of the first form on a page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field on the page"
    return found.group(1)


def sign_in(client: FlaskClient, email: str, password: str | None = None) -> Any:
    """Sign `email` in through the form (GET for the CSRF value, then POST)."""
    page = client.get("/dashboard/login")
    return client.post("/dashboard/login", data={
        "email": email, "password": password if password is not None else PASSWORDS[email],
        "csrf": csrf_of(page.get_data(as_text=True)), "next": ""})
