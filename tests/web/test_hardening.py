"""Dashboard items of issue 20 item 5: CR/LF in `next=`, device-sent strings in quarantine
details for non-administrators, the session cookie's token, and Cache-Control on API answers
read with the cookie."""

from __future__ import annotations

import base64
import json
import zlib

import psycopg
import pytest
from flask.testing import FlaskClient

from tests.support.dashboard import PASSWORDS, World, csrf_of, sign_in

DEVICE_SENT = "DEVICE-SENT-7c1d"


def text(response: object) -> str:
    return response.get_data(as_text=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize("target", ["/dashboard/\r\nSet-Cookie: x=1", "/dashboard/\n",
                                    "/dashboard/devices/A1\r", "/dashboard/\x00",
                                    "/dashboard/\t"])
def test_control_characters_in_next_send_to_the_dashboard_not_a_500(
        client: FlaskClient, target: str) -> None:
    page = client.get("/dashboard/login")
    r = client.post("/dashboard/login", data={
        "email": "user@a.example", "password": PASSWORDS["user@a.example"],
        "csrf": csrf_of(text(page)), "next": target})
    assert r.status_code == 303 and r.headers["Location"] == "/dashboard/"
    # Signed in, the form's GET goes on to the same safe place (a NUL in a URL is refused
    # for every route before any view: 400).
    r = client.get("/dashboard/login", query_string={"next": target})
    if "\x00" in target:
        assert r.status_code == 400
    else:
        assert r.status_code == 302 and r.headers["Location"] == "/dashboard/"


@pytest.fixture(scope="module")
def quoted_row(world: World) -> int:
    """A quarantined message of A1 whose detail quotes what the device sent."""
    with psycopg.connect(world.url) as conn:
        row = conn.execute(
            "INSERT INTO quarantine (received_at, topic, device, reason, detail, payload)"
            " VALUES (now(), 'sensors/A1/readings', 'A1', 'bad_time', %s, %s) RETURNING id",
            (f"time: '{DEVICE_SENT}' is not an ISO 8601 date-time",
             f'{{"time": "{DEVICE_SENT}"}}'.encode())).fetchone()
        conn.commit()
    assert row is not None
    return int(row[0])


def test_plain_users_do_not_see_device_sent_strings_in_details(
        client: FlaskClient, quoted_row: int) -> None:
    sign_in(client, "user@a.example")
    page = text(client.get("/dashboard/quarantine"))
    assert DEVICE_SENT not in page
    assert "time: &#39;(hidden)&#39; is not an ISO 8601 date-time" in page
    assert "rh: 1.7 is outside 0..1" in page  # numbers and field names stay


def test_administrators_still_see_the_whole_detail(world: World, quoted_row: int) -> None:
    from tests.support.apps import close_app, make_app

    app = make_app(world.url)
    try:
        admin = app.test_client()
        sign_in(admin, "admin@a.example")
        assert DEVICE_SENT in text(admin.get("/dashboard/quarantine"))
    finally:
        close_app(app)


def _cookie_payload(client: FlaskClient) -> str:
    """The readable part of Flask's signed session cookie (base64 JSON, maybe deflated)."""
    cookie = client.get_cookie("sds_session")
    assert cookie is not None
    value = cookie.value
    compressed = value.startswith(".")
    data = value.lstrip(".").split(".")[0]
    raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    return (zlib.decompress(raw) if compressed else raw).decode()


def test_the_cookie_holds_no_usable_bearer_token(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    payload = json.loads(_cookie_payload(client))
    assert "sdst_" not in json.dumps(payload)
    # What a thief reads from the cookie is no credential.
    stolen = payload["token"]
    assert client.get("/api/v2/devices",
                      headers={"Authorization": f"Bearer {stolen}"}).status_code == 401
    r = client.post("/api/v2/apikeys", json={"scopes": ["data:read"]},
                    headers={"Authorization": f"Bearer {stolen}"})
    assert r.status_code == 401
    # The cookie itself still signs the dashboard in and reads the API.
    assert client.get("/dashboard/").status_code == 200
    assert client.get("/api/v2/devices").status_code == 200


def test_api_answers_read_with_the_cookie_are_not_stored(client: FlaskClient,
                                                         world: World) -> None:
    sign_in(client, "user@a.example")
    for path in ("/api/v2/devices", "/api/v2/devices/A1",
                 "/api/v2/data/calibrated?device=A1&start_time=2026-03-07&limit=3",
                 "/api/v2/data/hourly?device=A1&start_time=2026-03-01&end_time=2026-03-02",
                 "/api/v2/locations"):
        r = client.get(path)
        assert r.status_code == 200, path
        assert r.headers["Cache-Control"] == "private, no-store", path
