"""Keyset paging of /data: no duplicates or gaps in either order, shared timestamps across
devices, cursors bound to their parameters, garbled or altered cursors refused."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.support.data_world import STEPS, World

URL = "/api/v2/data"


def walk(client: FlaskClient, world: World, table: str, **params: Any) -> list[list[dict]]:
    """Every page of a listing, following X-Cursor-Next (bounded)."""
    pages: list[list[dict]] = []
    cursor = None
    for _ in range(1000):
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        response = client.get(f"{URL}/{table}", query_string=query, headers=world.headers())
        assert response.status_code == 200, response.get_data(as_text=True)
        pages.append(response.get_json())
        cursor = response.headers.get("X-Cursor-Next")
        if cursor is None:
            return pages
    raise AssertionError("paging did not end")


def listing(client: FlaskClient, world: World, table: str, **params: Any) -> list[dict]:
    """The whole listing in one request (limit 10000)."""
    response = client.get(f"{URL}/{table}", query_string=dict(params, limit=10000),
                          headers=world.headers())
    assert response.status_code == 200 and "X-Cursor-Next" not in response.headers
    return response.get_json()


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 3, 7, 64, 863, 864])
def test_location_pages_cover_everything_once_with_shared_timestamps(
        client: FlaskClient, world: World, order: str, limit: int) -> None:
    params = dict(location=str(world.ny), select="time,device", start_time="2024-07-01",
                  end_time="2024-07-03", order=order)
    whole = listing(client, world, "calibrated", **params)
    assert len(whole) == STEPS + STEPS // 2  # D2 two days + D1 its first day at NY
    keys = [(r["time"], r["device"]) for r in whole]
    assert keys == sorted(keys, reverse=(order == "desc"))
    if limit < 7:
        # Walking 864 rows a row at a time is slow in a test; a window with shared stamps is
        # enough to cross many (time, device) boundaries.
        params["end_time"] = "2024-07-01T01:00:00Z"
        whole = listing(client, world, "calibrated", **params)
    pages = walk(client, world, "calibrated", limit=limit, **params)
    flat = [r for page in pages for r in page]
    assert flat == whole  # no duplicates, no gaps, same order
    assert all(len(page) == limit for page in pages[:-1])
    assert 0 < len(pages[-1]) <= limit


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_device_pages_in_both_orders(client: FlaskClient, world: World, order: str) -> None:
    params = dict(device="D1", select="time", start_time="2024-07-01", order=order)
    whole = listing(client, world, "calibrated", **params)
    pages = walk(client, world, "calibrated", limit=100, **params)
    assert [r for p in pages for r in p] == whole and len(whole) == STEPS
    assert len(pages) == 6


def test_last_full_page_has_no_cursor(client: FlaskClient, world: World) -> None:
    response = client.get(f"{URL}/hourly", query_string=dict(
        device="D1", start_time="2024-07-01", limit=48), headers=world.headers())
    assert len(response.get_json()) == 48 and "X-Cursor-Next" not in response.headers


def test_defaulted_window_is_carried_by_the_cursor(client: FlaskClient, world: World) -> None:
    # end_time defaults to now; the cursor keeps the first request's window, so the listing
    # stays the same listing on later pages.
    first = client.get(f"{URL}/calibrated", query_string=dict(
        device="D4", start_time="2024-07-01", limit=2000, select="time"), headers=world.headers())
    cursor = first.headers["X-Cursor-Next"]
    second = client.get(f"{URL}/calibrated", query_string=dict(
        device="D4", start_time="2024-07-01", limit=2000, select="time", cursor=cursor),
        headers=world.headers())
    assert len(second.get_json()) == 500
    assert second.get_json()[0]["time"] > first.get_json()[-1]["time"]


def test_select_units_limit_and_local_time_may_change_between_pages(
        client: FlaskClient, world: World) -> None:
    first = client.get(f"{URL}/hourly", query_string=dict(
        device="D1", start_time="2024-07-01", limit=10), headers=world.headers())
    cursor = first.headers["X-Cursor-Next"]
    second = client.get(f"{URL}/hourly", query_string=dict(
        device="D1", start_time="2024-07-01", limit=5, cursor=cursor, select="time,tair",
        temp="f", local_time="UTC"), headers=world.headers())
    assert second.status_code == 200
    assert second.get_json()[0] == {"time": "2024-07-01T10:00:00Z", "tair": 70.34,
                                    "local_time": "2024-07-01T10:00:00+0000"}


@pytest.mark.parametrize("change", [
    {"device": "D2"}, {"order": "desc"}, {"start_time": "2024-07-01T00:05:00Z"},
    {"end_time": "2024-07-05"}, {"location": "NY field"},
], ids=["device", "order", "start_time", "end_time", "location"])
def test_cursor_replayed_with_other_parameters_is_400(
        client: FlaskClient, world: World, change: dict[str, str]) -> None:
    base = dict(device="D1", start_time="2024-07-01", limit=10, select="time")
    cursor = client.get(f"{URL}/calibrated", query_string=base,
                        headers=world.headers()).headers["X-Cursor-Next"]
    response = client.get(f"{URL}/calibrated", query_string=dict(base, cursor=cursor, **change),
                          headers=world.headers())
    assert response.status_code == 400
    body = response.get_json()
    assert body["message"].startswith("cursor:") and "other parameters" in body["message"]


def test_cursor_of_another_table_or_organisation_is_400(client: FlaskClient,
                                                        world: World) -> None:
    base = dict(device="D1", start_time="2024-07-01", limit=10)
    cursor = client.get(f"{URL}/calibrated", query_string=base,
                        headers=world.headers()).headers["X-Cursor-Next"]
    other = client.get(f"{URL}/hourly", query_string=dict(base, cursor=cursor),
                       headers=world.headers())
    assert other.status_code == 400
    b_cursor = client.get(f"{URL}/calibrated", query_string=dict(base, device="B1"),
                          headers=world.headers("b")).headers["X-Cursor-Next"]
    # Org A replaying org B's cursor for its own device D1: bound to another organisation.
    assert client.get(f"{URL}/calibrated", query_string=dict(base, cursor=b_cursor),
                      headers=world.headers()).status_code == 400


def _flip(cursor: str, index: int) -> str:
    raw = bytearray(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    raw[index] ^= 0x01
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


@pytest.mark.parametrize("mangle", [
    lambda c: "garbage",
    lambda c: c[:-2],
    lambda c: c + "AA",
    lambda c: c[:10],
    lambda c: "!!!" + c,
    lambda c: _flip(c, 3),   # the time
    lambda c: _flip(c, 30),  # the parameter fingerprint
    lambda c: _flip(c, -1),  # the tag
    lambda c: base64.urlsafe_b64encode(b"\x01" * 40).decode(),
    lambda c: "A" * 2000,
], ids=["garbage", "truncated", "extended", "short", "bad_chars", "time", "fingerprint", "tag",
        "forged", "huge"])
def test_garbled_or_altered_cursor_is_400(client: FlaskClient, world: World,
                                          mangle: Callable[[str], str]) -> None:
    base = dict(device="D1", start_time="2024-07-01", limit=10)
    cursor = client.get(f"{URL}/calibrated", query_string=base,
                        headers=world.headers()).headers["X-Cursor-Next"]
    response = client.get(f"{URL}/calibrated", query_string=dict(base, cursor=mangle(cursor)),
                          headers=world.headers())
    assert response.status_code == 400, response.get_data(as_text=True)
    body = response.get_json()
    assert body["message"].startswith("cursor:") and body["errors"]["cursor"]


def test_cursor_with_padding_is_accepted(client: FlaskClient, world: World) -> None:
    base = dict(device="D1", start_time="2024-07-01", limit=10, select="time")
    cursor = client.get(f"{URL}/calibrated", query_string=base,
                        headers=world.headers()).headers["X-Cursor-Next"]
    padded = cursor + "=" * (-len(cursor) % 4)
    response = client.get(f"{URL}/calibrated", query_string=dict(base, cursor=padded),
                          headers=world.headers())
    assert response.status_code == 200
    assert response.get_json()[0]["time"] == "2024-07-01T00:50:00Z"


def test_cursors_survive_an_app_restart_with_the_same_secret(world: World) -> None:
    from tests.support.apps import close_app, make_app

    base = dict(device="D1", start_time="2024-07-01", limit=10, select="time")
    first_app = make_app(world.url, cursor_secret="s1")
    try:
        cursor = first_app.test_client().get(f"{URL}/calibrated", query_string=base,
                                             headers=world.headers()).headers["X-Cursor-Next"]
    finally:
        close_app(first_app)
    same, other = make_app(world.url, cursor_secret="s1"), make_app(world.url, cursor_secret="s2")
    try:
        ok = same.test_client().get(f"{URL}/calibrated", query_string=dict(base, cursor=cursor),
                                    headers=world.headers())
        assert ok.status_code == 200
        refused = other.test_client().get(f"{URL}/calibrated",
                                          query_string=dict(base, cursor=cursor),
                                          headers=world.headers())
        assert refused.status_code == 400
    finally:
        close_app(same)
        close_app(other)


def test_unset_secret_uses_one_key_shared_through_the_database(world: World) -> None:
    from tests.support.apps import close_app, make_app

    one, two = make_app(world.url, cursor_secret=None), make_app(world.url, cursor_secret=None)
    try:
        assert one.extensions["cursor_key"] == two.extensions["cursor_key"]
        base = dict(device="D1", start_time="2024-07-01", limit=10)
        cursor = one.test_client().get(f"{URL}/calibrated", query_string=base,
                                       headers=world.headers()).headers["X-Cursor-Next"]
        assert two.test_client().get(f"{URL}/calibrated", query_string=dict(base, cursor=cursor),
                                     headers=world.headers()).status_code == 200
    finally:
        close_app(one)
        close_app(two)


def test_rows_added_behind_the_cursor_do_not_shift_pages(world: World, client: FlaskClient) -> None:
    """Keyset, not OFFSET: a late row before the cursor position changes nothing after it."""
    import psycopg

    base = dict(device="D3", start_time="2024-11-03", limit=2, select="time")
    first = client.get(f"{URL}/hourly", query_string=base, headers=world.headers())
    cursor = first.headers["X-Cursor-Next"]
    with psycopg.connect(world.url) as conn:
        conn.execute("INSERT INTO hourly (time, device, tair) VALUES"
                     " ('2024-11-03T04:30:00Z', 'D3', 1)")
        conn.commit()
    try:
        second = client.get(f"{URL}/hourly", query_string=dict(base, cursor=cursor),
                            headers=world.headers())
        assert [r["time"][11:16] for r in second.get_json()] == ["06:00", "07:00"]
    finally:
        with psycopg.connect(world.url) as conn:
            conn.execute("DELETE FROM hourly WHERE device = 'D3' AND time = "
                         "'2024-11-03T04:30:00Z'")
            conn.commit()


def test_foreign_device_deployed_at_a_location_stays_invisible(world: World,
                                                               client: FlaskClient) -> None:
    """Should another organisation's device ever be deployed at our location, its rows there
    are still not ours: the listing keeps to the caller's devices."""
    import psycopg

    from shared import places
    from tests.support.data_world import T0

    params = dict(location=str(world.la), select="device", start_time="2024-07-02", limit=10000)
    before = listing(client, world, "calibrated", **params)
    with psycopg.connect(world.url) as conn:
        places.deploy_device(conn, device="B1", location=world.la, start=T0.replace(year=2030))
        conn.execute("UPDATE calibrated SET location = %s WHERE device = 'B1'"
                     " AND time = '2024-07-02T00:00:00Z'", (world.la,))
        conn.commit()
    try:
        after = listing(client, world, "calibrated", **params)
        assert after == before and {r["device"] for r in after} == {"D1"}
        pages = walk(client, world, "calibrated", **dict(params, limit=100))
        assert [r for p in pages for r in p] == before
    finally:
        with psycopg.connect(world.url) as conn:
            conn.execute("UPDATE calibrated SET location = %s WHERE device = 'B1'"
                         " AND location = %s", (world.bl, world.la))
            conn.execute("DELETE FROM deployments WHERE location_id = %s AND device_id ="
                         " (SELECT id FROM devices WHERE name = 'B1')", (world.la,))
            conn.commit()
