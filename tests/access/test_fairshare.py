"""Fair share per user and organisation (issue 20 item 4; serve.fairshare, serve.ratelimit,
people.keypolicy): more keys buy no more requests, requests in flight are capped per user and per
organisation, a heavy page needs a slot of a small pool (held until its last byte), a user holds
a bounded number of keys, and only administrators grant the organisation-management scopes.

Other workers' requests in flight are stood in for by slots this test takes itself on the same
lock files: an flock on a second open file conflicts as one from another process does.
The 20-client attack on gunicorn behind the edge: tests/serve/test_fairshare.py.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask

from people import accounts
from serve.fairshare import HEAVY, Slots
from shared import places
from tests.support.access_world import World, apikey, basic
from tests.support.apps import close_app, make_app
from tests.support.readings import insert_readings, series


@pytest.fixture
def slot_dir(tmp_path: Path) -> Path:
    return tmp_path / "slots"


def _app(world: World, slot_dir: Path, **overrides: Any) -> Flask:
    return make_app(world.url, api_slot_dir=str(slot_dir), **overrides)


@pytest.fixture
def capped(fresh_world: World, slot_dir: Path) -> Iterator[Flask]:
    app = _app(fresh_world, slot_dir, api_user_concurrency=2, api_org_concurrency=3,
               api_heavy_slots=1, api_heavy_rows=100)
    yield app
    close_app(app)


def _user_id(world: World, email: str) -> str:
    with psycopg.connect(world.url) as conn:
        row = conn.execute("SELECT id FROM users WHERE email = %s", (email,)).fetchone()
    assert row is not None
    return str(row[0])


def test_a_user_at_the_in_flight_cap_gets_429_until_one_finishes(
        capped: Flask, fresh_world: World, slot_dir: Path) -> None:
    slots = Slots(slot_dir)
    user = _user_id(fresh_world, "a1@a.example")
    held = [slots.try_take(f"user-{user}", 2) for _ in range(2)]
    assert None not in held
    client = capped.test_client()
    # Any of the user's credentials: another key, basic.
    for headers in (apikey(fresh_world.keys["all"]), apikey(fresh_world.keys["devices"]),
                    basic("a1@a.example")):
        r = client.get("/api/v2/devices", headers=headers)
        assert r.status_code == 429, r.get_data()
        assert "at most 2 at once for this user" in r.get_json()["message"]
        assert r.headers["Retry-After"] == "1"
    # Another user of the same organisation is not this user's cap.
    assert client.get("/api/v2/devices",
                      headers=apikey(fresh_world.keys["a2_all"])).status_code == 200
    os.close(held[0] or -1)
    assert client.get("/api/v2/devices",
                      headers=apikey(fresh_world.keys["all"])).status_code == 200
    os.close(held[1] or -1)
    # The requests gave their slots back: both are free again.
    assert slots.any_free(f"user-{user}", 2)
    again = [slots.try_take(f"user-{user}", 2) for _ in range(2)]
    assert None not in again


def test_an_organisation_at_its_cap_gets_429_for_every_user(
        capped: Flask, fresh_world: World, slot_dir: Path) -> None:
    slots = Slots(slot_dir)
    held = [slots.try_take(f"org-{fresh_world.org_a}", 3) for _ in range(3)]
    assert None not in held
    client = capped.test_client()
    for key in ("all", "a2_all"):
        r = client.get("/api/v2/devices", headers=apikey(fresh_world.keys[key]))
        assert r.status_code == 429
        assert "for this organisation" in r.get_json()["message"]
    assert client.get("/api/v2/devices",
                      headers=apikey(fresh_world.keys["b_all"])).status_code == 200


def test_a_heavy_page_needs_a_slot_and_holds_it_until_its_last_byte(
        capped: Flask, fresh_world: World, slot_dir: Path) -> None:
    with psycopg.connect(fresh_world.url) as conn:
        # Enough rows that the page streams instead of being built whole.
        places.register_device(conn, org=fresh_world.org_a, name="A000199")
        insert_readings(conn, "A000199", None, series(
            datetime.now(UTC) - timedelta(days=3), n=10_000, step=timedelta(seconds=5), tair=20))
        conn.commit()
    slots = Slots(slot_dir)
    client = capped.test_client()
    key = apikey(fresh_world.keys["all"])
    since = "start_time=2000-01-01&format=csv"
    heavy = f"/api/v2/data/calibrated?device=A000199&limit=10000&{since}"
    small = f"/api/v2/data/calibrated?device=A000199&limit=100&{since}"
    taken = slots.try_take(HEAVY, 1)
    assert taken is not None
    r = client.get(heavy, headers=key)
    assert r.status_code == 503 and r.headers["Retry-After"] == "2"
    assert "large page" in r.get_json()["message"] and r.mimetype == "application/json"
    # Refused before authentication too: a flood of heavy pages costs no database round trip.
    assert client.get(heavy).status_code == 503
    assert client.get(small, headers=key).status_code == 200  # small pages are not metered
    os.close(taken)
    streamed = client.get(heavy, headers=key)
    assert streamed.status_code == 200 and streamed.is_streamed
    assert not slots.any_free(HEAVY, 1)  # the body has not been read yet
    assert streamed.get_data()
    assert slots.any_free(HEAVY, 1)
    # A HEAD's body is closed without being read: its slot comes back all the same.
    head = client.head(heavy, headers=key)
    assert head.status_code == 200
    head.close()
    assert slots.any_free(HEAVY, 1)


def test_more_keys_buy_no_more_requests(fresh_world: World, slot_dir: Path) -> None:
    app = _app(fresh_world, slot_dir, api_rate_limit=100, api_user_rate_limit=6,
               api_org_rate_limit=1000)
    try:
        client = app.test_client()
        keys = ["all", "data", "devices", "locations", "apikeys", "none"]
        statuses = [client.get("/api/v2/devices", headers=apikey(fresh_world.keys[k])).status_code
                    for k in keys]
        # "none" has no scope for /devices (403) but its request still counts.
        assert statuses.count(429) == 0
        r = client.get("/api/v2/devices", headers=apikey(fresh_world.keys["all"]))
        assert r.status_code == 429
        assert "6 requests per 60 s for this user's keys and tokens together" in (
            r.get_json()["message"])
        assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 429
        # The organisation's other user still has budget.
        assert client.get("/api/v2/devices",
                          headers=apikey(fresh_world.keys["a2_all"])).status_code == 200
    finally:
        close_app(app)


def test_an_organisation_has_one_budget(fresh_world: World, slot_dir: Path) -> None:
    app = _app(fresh_world, slot_dir, api_rate_limit=100, api_user_rate_limit=100,
               api_org_rate_limit=3)
    try:
        client = app.test_client()
        for key in ("all", "a2_all", "devices"):
            assert client.get("/api/v2/devices",
                              headers=apikey(fresh_world.keys[key])).status_code == 200
        r = client.get("/api/v2/devices", headers=apikey(fresh_world.keys["a2_all"]))
        assert r.status_code == 429 and "for this organisation" in r.get_json()["message"]
        assert r.headers["RateLimit-Limit"] == "3" and r.headers["RateLimit-Remaining"] == "0"
        assert client.get("/api/v2/devices",
                          headers=apikey(fresh_world.keys["b_all"])).status_code == 200
    finally:
        close_app(app)


def _keys_of(world: World, email: str) -> int:
    with psycopg.connect(world.url) as conn:
        row = conn.execute("SELECT count(*) FROM api_keys k JOIN users u ON u.id = k.user_id"
                           " WHERE u.email = %s", (email,)).fetchone()
    assert row is not None
    return int(row[0])


def test_keys_per_user_are_capped_with_a_clear_409(fresh_world: World, slot_dir: Path) -> None:
    held = _keys_of(fresh_world, "a1@a.example")
    app = _app(fresh_world, slot_dir, api_max_keys_per_user=held + 1)
    try:
        client = app.test_client()
        body = {"scopes": ["data:read"], "name": "one more"}
        assert client.post("/api/v2/apikeys", json=body,
                           headers=basic("a1@a.example")).status_code == 200
        r = client.post("/api/v2/apikeys", json=body, headers=basic("a1@a.example"))
        assert r.status_code == 409
        assert f"the most one user may have ({held + 1})" in r.get_json()["message"]
        assert _keys_of(fresh_world, "a1@a.example") == held + 1
        # Another user's count is their own.
        assert client.post("/api/v2/apikeys", json=body,
                           headers=basic("b1@b.example")).status_code == 200
    finally:
        close_app(app)


@pytest.mark.parametrize("scope", ["orgs:write", "users:write", "teams:write"])
def test_only_administrators_grant_the_organisation_scopes(
        fresh_world: World, slot_dir: Path, scope: str) -> None:
    app = _app(fresh_world, slot_dir)
    try:
        client = app.test_client()
        user = basic("a1@a.example")
        r = client.post("/api/v2/apikeys", json={"scopes": ["data:read", scope]}, headers=user)
        assert r.status_code == 403 and scope in r.get_json()["message"]
        key_id = fresh_world.key_ids["all"]
        r = client.put(f"/api/v2/apikeys/{key_id}", json={"scopes": [scope]}, headers=user)
        assert r.status_code == 403
        # The scopes a member's role allows stay theirs to grant; one it does not is 403.
        assert client.post("/api/v2/apikeys", json={"scopes": ["annotations:write"]},
                           headers=user).status_code == 200
        r = client.post("/api/v2/apikeys", json={"scopes": ["locations:write"]}, headers=user)
        assert r.status_code == 403 and "(member)" in r.get_json()["message"]
        with psycopg.connect(fresh_world.url) as conn:
            accounts.create_user(conn, org=fresh_world.org_a, email="boss@a.example",
                                 password="boss-password-1", role="owner")
            conn.commit()
        r = client.post("/api/v2/apikeys", json={"scopes": [scope]},
                        headers=basic("boss@a.example", "boss-password-1"))
        assert r.status_code == 200 and r.get_json()["scopes"] == [scope]
    finally:
        close_app(app)


# ---- heavy is what a request costs, not how a number is spelled (issue 30 item 5) ---------


@pytest.fixture
def shipped(fresh_world: World, slot_dir: Path) -> Iterator[Flask]:
    """The heavy-page pool as shipped (SDS_API_HEAVY_ROWS, SDS_API_HEAVY_SLOTS defaults)."""
    from shared.config import Settings

    defaults = Settings()
    app = _app(fresh_world, slot_dir, api_heavy_slots=defaults.api_heavy_slots,
               api_heavy_rows=defaults.api_heavy_rows)
    yield app
    close_app(app)


def _data(world: World, query: str) -> str:
    return f"/api/v2/data/calibrated?device={world.dev_a}&{query}"


YEAR = "start_time=2025-01-01&end_time=2025-12-31"


@pytest.mark.parametrize("spelled", ["%2B10000", "+10000", "%2010000", "10_000", "1e4",
                                     "%EF%BC%91%EF%BC%90%EF%BC%90%EF%BC%90%EF%BC%90",
                                     "10000%20"])
def test_a_big_page_spelled_otherwise_is_refused_never_served_as_small(
        shipped: Flask, fresh_world: World, slot_dir: Path, spelled: str) -> None:
    """The report's bypass: with the pool full, `limit=+10000` was served in full."""
    taken = Slots(slot_dir).try_take(HEAVY, 1)
    assert taken is not None
    try:
        r = shipped.test_client().get(_data(fresh_world, f"limit={spelled}"),
                                      headers=apikey(fresh_world.keys["all"]))
        assert r.status_code == 400, r.get_data(as_text=True)
        assert list(r.get_json()["errors"]) == ["limit"]
    finally:
        os.close(taken)


@pytest.mark.parametrize("query", [
    "limit=10000", "limit=%31%30%30%30%30", "limit=2401",
    # A year of day buckets reads the year's readings (105,120 per device), whatever limit.
    f"interval=1d&{YEAR}", f"interval=1d&limit=10&{YEAR}", f"points=400&{YEAR}",
    f"interval=1d&{YEAR}&device=A2,A3"])
def test_a_costly_request_needs_the_heavy_slot(shipped: Flask, fresh_world: World,
                                               slot_dir: Path, query: str) -> None:
    taken = Slots(slot_dir).try_take(HEAVY, 1)
    assert taken is not None
    try:
        r = shipped.test_client().get(_data(fresh_world, query),
                                      headers=apikey(fresh_world.keys["all"]))
        assert r.status_code == 503, r.get_data(as_text=True)
        assert "large page" in r.get_json()["message"]
    finally:
        os.close(taken)


@pytest.mark.parametrize("path", [
    # A page of the table's default size, or a short aggregated window, is no heavy page.
    "data?limit=2400", "data?start_time=2025-01-01", "data?interval=1h&start_time=2025-01-01"
    "&end_time=2025-01-02", "data?points=1000&start_time=2025-01-01&end_time=2025-01-07",
    # The paged listings read the organisation's own records: never heavy, whatever limit.
    "/api/v2/devices?limit=10000", "/api/v2/locations?limit=10000",
    "/api/v2/orgs/{org}/users?limit=10000"])
def test_cheap_requests_never_wait_for_the_heavy_slot(shipped: Flask, fresh_world: World,
                                                      slot_dir: Path, path: str) -> None:
    if path.startswith("data?"):
        path = _data(fresh_world, path[len("data?"):])
    taken = Slots(slot_dir).try_take(HEAVY, 1)
    assert taken is not None
    try:
        r = shipped.test_client().get(path.format(org=fresh_world.org_a),
                                      headers=basic("a1@a.example"))
        assert r.status_code == 200, r.get_data(as_text=True)
    finally:
        os.close(taken)
