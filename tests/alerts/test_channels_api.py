"""`/api/v2/channels` on a real database: create, list, change, delete, send test; the secret
shown once and sealed at rest; bad input a 400 naming the field; another organisation's channel
the same 404 as a missing one; scopes; webhook targets on non-public addresses refused; an IRI
stored as its URI, or refused naming `url`."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from people import accounts
from tests.support.apps import close_app, make_app
from tests.support.delivery import SEAL_KEY, Org, make_org

PUBLIC_URL = "https://93.184.215.14/hook"  # an address literal: no DNS needed to judge it


@pytest.fixture
def app(database_url: str) -> Iterator[Flask]:
    # The server has SMTP settings: email channels are accepted (test_email_needs_smtp: not).
    application = make_app(database_url, apikey_seal_keys=SEAL_KEY, smtp_host="127.0.0.1")
    try:
        yield application
    finally:
        close_app(application)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def orgs(conn: psycopg.Connection) -> tuple[Org, Org]:
    return make_org(conn, "farm-a"), make_org(conn, "farm-b")


def _key(conn: psycopg.Connection, org: Org, scopes: list[str]) -> dict[str, str]:
    user = accounts.user_id(conn, org.admin_email)
    key = accounts.create_api_key(conn, user=user, scopes=scopes)
    conn.commit()
    return {"Authorization": f"Apikey {key['apikey']}"}


def test_crud_secret_once_and_sealed(client: FlaskClient, orgs: tuple[Org, Org],
                                     conn: psycopg.Connection) -> None:
    a, _ = orgs
    r = client.post("/api/v2/channels", headers=a.auth,
                    json={"name": "ops", "kind": "webhook", "url": PUBLIC_URL})
    assert r.status_code == 201, r.get_json()
    made = r.get_json()
    secret = made["secret"]
    assert secret.startswith("whsec_") and made["secret_hint"] == f"whsec_...{secret[-4:]}"
    assert r.headers["Cache-Control"] == "no-store"
    got = client.get(f"/api/v2/channels/{made['id']}", headers=a.auth).get_json()
    assert "secret" not in got and got["url"] == PUBLIC_URL and got["disabled_at"] is None
    sealed = conn.execute("SELECT secret_sealed FROM alert_channels WHERE id = %s",
                          (made["id"],)).fetchone()[0]
    assert secret.encode() not in bytes(sealed) and secret[6:].encode() not in bytes(sealed)

    r = client.post("/api/v2/channels", headers=a.auth, json={"name": "valve", "kind": "mqtt"})
    assert r.status_code == 201
    assert r.get_json()["topic"] == f"alerts/{a.id}/#"
    r = client.post("/api/v2/channels", headers=a.auth,
                    json={"name": "mail", "kind": "email", "recipients": ["g@farm.example"]})
    assert r.status_code == 201
    page = client.get("/api/v2/channels", headers=a.auth).get_json()
    assert page["total"] == 3 and [c["name"] for c in page["items"]] == ["ops", "valve", "mail"]

    r = client.patch(f"/api/v2/channels/{made['id']}", headers=a.auth,
                     json={"name": "ops-2", "active": False})
    assert r.status_code == 200 and r.get_json()["name"] == "ops-2"
    assert r.get_json()["active"] is False
    r = client.post("/api/v2/channels", headers=a.auth, json={"name": "ops-2", "kind": "mqtt"})
    assert r.status_code == 409 and "name" in r.get_json()["errors"]["json"]
    r = client.post(f"/api/v2/channels/{made['id']}/test", headers=a.auth)
    assert r.status_code == 409 and "paused" in r.get_json()["message"]  # receives nothing
    client.patch(f"/api/v2/channels/{made['id']}", headers=a.auth, json={"active": True})
    r = client.post(f"/api/v2/channels/{made['id']}/test", headers=a.auth)
    assert r.status_code == 202
    row = conn.execute("SELECT kind, channels, org_id FROM alert_events WHERE id = %s",
                       (r.get_json()["event_id"],)).fetchone()
    assert row[0] == "test" and [str(x) for x in row[1]] == [made["id"]] and row[2] == a.id
    assert client.delete(f"/api/v2/channels/{made['id']}", headers=a.auth).status_code == 204
    assert client.get(f"/api/v2/channels/{made['id']}", headers=a.auth).status_code == 404


def test_another_organisations_channel_is_a_404(client: FlaskClient,
                                                orgs: tuple[Org, Org]) -> None:
    a, b = orgs
    made = client.post("/api/v2/channels", headers=a.auth,
                       json={"name": "valve", "kind": "mqtt"}).get_json()
    missing = "00000000-0000-4000-8000-000000000000"
    for target in (made["id"], missing, "not-a-uuid"):
        for method, path in (("get", ""), ("patch", ""), ("delete", ""), ("post", "/test")):
            kwargs = {"json": {"name": "x"}} if method == "patch" else {}
            r = getattr(client, method)(f"/api/v2/channels/{target}{path}", headers=b.auth,
                                        **kwargs)
            assert r.status_code == 404, (method, target, r.get_json())
            assert r.get_json()["message"] == f"unknown channel {target!r}"
    assert client.get("/api/v2/channels", headers=b.auth).get_json()["total"] == 0
    assert client.get(f"/api/v2/channels/{made['id']}", headers=a.auth).status_code == 200


@pytest.mark.parametrize(("body", "field"), [
    ({"kind": "mqtt"}, "name"),
    ({"name": "x", "kind": "sms"}, "kind"),
    ({"name": "x", "kind": "webhook"}, "url"),
    ({"name": "x", "kind": "webhook", "url": "ftp://example.org/"}, "url"),
    ({"name": "x", "kind": "webhook", "url": "https://u:p@93.184.215.14/"}, "url"),
    ({"name": "x", "kind": "email"}, "recipients"),
    ({"name": "x", "kind": "email", "recipients": ["not-an-address"]}, "recipients"),
    ({"name": "x", "kind": "email", "recipients": []}, "recipients"),
    ({"name": "x", "kind": "mqtt", "url": PUBLIC_URL}, "url"),
    ({"name": "x", "kind": "mqtt", "secret": "whsec_abc"}, "secret"),
    ({"name": "x", "kind": "mqtt", "disabled_at": None}, "disabled_at"),
    ({"name": "x\x00", "kind": "mqtt"}, "name"),
    ({"name": "x", "kind": "mqtt", "colour": "red"}, "colour"),
])
def test_bad_input_is_a_400_naming_the_field(client: FlaskClient, orgs: tuple[Org, Org],
                                             body: dict[str, object], field: str) -> None:
    r = client.post("/api/v2/channels", headers=orgs[0].auth, json=body)
    assert r.status_code == 400, r.get_json()
    assert field in r.get_json()["errors"]["json"], r.get_json()


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/hook", "http://localhost:8080/", "http://10.1.2.3/", "http://192.168.1.1/",
    "http://172.16.0.1/", "http://169.254.169.254/latest/meta-data/", "http://[::1]/",
    "http://[::ffff:127.0.0.1]/", "http://100.64.0.1/", "http://0.0.0.0/", "http://[fe80::1]/",
    "http://224.0.0.1/", "http://2130706433/",
    # IPv6 forms embedding a non-public IPv4 address (issue 30 item 6.3)
    "http://[::127.0.0.1]/", "http://[::ffff:0:10.0.0.1]/", "http://[64:ff9b::169.254.169.254]/",
    "http://[64:ff9b:1::7f00:1]/", "http://[2002:a9fe:a9fe::1]/",
    "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
])
def test_non_public_webhook_targets_are_refused(client: FlaskClient, orgs: tuple[Org, Org],
                                                url: str) -> None:
    r = client.post("/api/v2/channels", headers=orgs[0].auth,
                    json={"name": "x", "kind": "webhook", "url": url})
    assert r.status_code == 400, (url, r.get_json())
    assert "url" in r.get_json()["errors"]["json"]
    made = client.post("/api/v2/channels", headers=orgs[0].auth,
                       json={"name": "ok", "kind": "webhook", "url": PUBLIC_URL}).get_json()
    r = client.patch(f"/api/v2/channels/{made['id']}", headers=orgs[0].auth, json={"url": url})
    assert r.status_code == 400 and "url" in r.get_json()["errors"]["json"]


def test_scopes(client: FlaskClient, orgs: tuple[Org, Org], conn: psycopg.Connection) -> None:
    a, _ = orgs
    reader = _key(conn, a, ["notifications:read"])
    writer = _key(conn, a, ["notifications:write"])
    other = _key(conn, a, ["data:read"])
    body = {"name": "valve", "kind": "mqtt"}
    assert client.post("/api/v2/channels", headers=reader, json=body).status_code == 403
    assert client.get("/api/v2/channels", headers=other).status_code == 403
    made = client.post("/api/v2/channels", headers=writer, json=body)
    assert made.status_code == 201
    assert client.get("/api/v2/channels", headers=reader).status_code == 200
    cid = made.get_json()["id"]
    assert client.post(f"/api/v2/channels/{cid}/test", headers=reader).status_code == 403
    assert client.delete(f"/api/v2/channels/{cid}", headers=reader).status_code == 403


def test_an_iri_is_stored_as_its_uri(client: FlaskClient, orgs: tuple[Org, Org],
                                     conn: psycopg.Connection) -> None:
    """A non-ASCII path (which http.client cannot put in a request line) is percent-encoded
    as UTF-8 at creation and on change: what is stored, shown and sent is the URI."""
    a, _ = orgs
    r = client.post("/api/v2/channels", headers=a.auth,
                    json={"name": "x", "kind": "webhook", "url": "http://8.8.8.8/\u00e9?q=\u00fc"})
    assert r.status_code == 201, r.get_json()
    made = r.get_json()
    assert made["url"] == "http://8.8.8.8/%C3%A9?q=%C3%BC"
    stored = conn.execute("SELECT url FROM alert_channels WHERE id = %s",
                          (made["id"],)).fetchone()[0]
    assert stored == "http://8.8.8.8/%C3%A9?q=%C3%BC"
    r = client.patch(f"/api/v2/channels/{made['id']}", headers=a.auth,
                     json={"url": "https://93.184.215.14/caf\u00e9/\u2603"})
    assert r.status_code == 200, r.get_json()
    assert r.get_json()["url"] == "https://93.184.215.14/caf%C3%A9/%E2%98%83"
    r = client.patch(f"/api/v2/channels/{made['id']}", headers=a.auth,
                     json={"url": "https://" + "\u00fc" * 70 + ".example/"})
    assert r.status_code == 400 and "url" in r.get_json()["errors"]["json"], r.get_json()
