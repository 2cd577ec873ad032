"""The dashboard's alert pages in-process: the rules page lists, creates (the API's 400 shown on
the form) and deletes rules through /api/v2/alerts; the inbox lists events made by the API's
own "send test" action and acknowledges them; adding an annotation from a chart goes through
/api/v2/annotations. Every form needs the session's CSRF value, and another organisation's
rule or event answers 404 like a missing one."""

from __future__ import annotations

import re
from typing import Any

from flask.testing import FlaskClient

from tests.support.dashboard import csrf_of, sign_in


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _create_rule(client: FlaskClient, **fields: str) -> Any:
    page = client.get("/dashboard/alerts")
    assert page.status_code == 200, _text(page)
    form = {"csrf": csrf_of(_text(page)), "name": "Frost", "kind": "threshold",
            "table": "calibrated", "column": "tair", "scope": "device", "device": "A1",
            "op": "<", "threshold": "32", "for_minutes": "15", "clear_op": ">=",
            "clear_threshold": "34", "unit": "f", **fields}
    return client.post("/dashboard/alerts", data=form)


def test_rules_page_creates_lists_and_deletes(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    made = _create_rule(client)
    assert made.status_code == 303, _text(made)
    page = _text(client.get("/dashboard/alerts"))
    assert "Frost" in page and "Air temperature (each 5-minute reading)" in page \
        and "device A1" in page
    rules = client.get("/api/v2/alerts").get_json()["items"]
    frost = next(r for r in rules if r["name"] == "Frost")
    # 32 F and 34 F stored canonical (0 C, 1.11 C); 15 minutes as 900 seconds.
    assert frost["for"] == 900 and frost["scope"] == {"device": "A1"}
    # The API's own 400 comes back on the form, which keeps what was typed.
    bad = _create_rule(client, name="Broken", column="no_such_column")
    assert bad.status_code == 400 and "column: must be a numeric column" in _text(bad)
    assert 'value="Broken"' in _text(bad)
    # Delete needs the CSRF value; another organisation's rule is the same 404 as none.
    assert client.post(f"/dashboard/alerts/{frost['id']}/delete").status_code == 400
    csrf = csrf_of(_text(client.get("/dashboard/alerts")))
    other = client.application.test_client()
    sign_in(other, "user@b.example")
    other_csrf = csrf_of(_text(other.get("/dashboard/alerts")))
    theirs = other.post(f"/dashboard/alerts/{frost['id']}/delete",
                        data={"csrf": other_csrf, "confirm": "yes"})
    missing = other.post("/dashboard/alerts/00000000-0000-0000-0000-000000000000/delete",
                         data={"csrf": other_csrf, "confirm": "yes"})
    assert theirs.status_code == missing.status_code == 404
    # Without the confirmation's "yes" nothing is deleted.
    kept = client.post(f"/dashboard/alerts/{frost['id']}/delete", data={"csrf": csrf})
    assert kept.status_code == 400 and "confirm" in _text(kept)
    gone = client.post(f"/dashboard/alerts/{frost['id']}/delete",
                       data={"csrf": csrf, "confirm": "yes"})
    assert gone.status_code == 303
    assert f'data-id="{frost["id"]}"' not in _text(client.get("/dashboard/alerts"))


def test_inbox_lists_and_acknowledges_events(client: FlaskClient) -> None:
    sign_in(client, "admin@a.example")
    page = client.get("/dashboard/notifications")
    assert page.status_code == 200 and "No notifications" in _text(page)
    # A real event: the channel's "send test" action (API key with the write scope).
    key = client.post("/api/v2/apikeys", json={"scopes": ["notifications:write",
                                                          "notifications:read"]})
    assert key.status_code == 401  # the cookie never writes: make the key with a password
    auth = {"Authorization": "Basic " + __import__("base64").b64encode(
        b"admin@a.example:admin-a-password").decode()}
    channel = client.post("/api/v2/channels", headers=auth,
                          json={"name": "site controller", "kind": "mqtt"})
    assert channel.status_code == 201, _text(channel)
    sent = client.post(f"/api/v2/channels/{channel.get_json()['id']}/test", headers=auth)
    assert sent.status_code in (200, 201, 202), _text(sent)
    inbox = _text(client.get("/dashboard/notifications?kind=test"))
    event_id = re.search(r'data-id="([0-9a-f-]{36})" data-kind="test"', inbox)
    assert event_id, inbox
    assert "Acknowledge" in inbox
    csrf = csrf_of(inbox)
    assert client.post(f"/dashboard/notifications/{event_id.group(1)}/ack").status_code == 400
    done = client.post(f"/dashboard/notifications/{event_id.group(1)}/ack",
                       data={"csrf": csrf, "back": "/dashboard/notifications?kind=test"})
    assert done.status_code == 303
    assert done.headers["Location"].endswith("/dashboard/notifications?kind=test")
    after = _text(client.get("/dashboard/notifications?acknowledged=false"))
    assert event_id.group(1) not in after
    # An off-site `back` is ignored; another organisation's event is a 404.
    other = client.application.test_client()
    sign_in(other, "user@b.example")
    other_csrf = csrf_of(_text(other.get("/dashboard/notifications")))
    assert other.post(f"/dashboard/notifications/{event_id.group(1)}/ack",
                      data={"csrf": other_csrf}).status_code == 404
    assert "site controller" not in _text(other.get("/dashboard/notifications"))
    assert client.get("/dashboard/notifications?kind=bogus").status_code == 400


def test_annotation_from_the_chart_goes_through_the_api(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/devices/A1")))
    form = {"csrf": csrf, "device": "A1", "start_time": "2026-03-07T06:00:00Z",
            "end_time": "2026-03-07T09:00:00Z", "text": "frost cloth on", "tags": "frost, cloth"}
    assert client.post("/dashboard/annotations", data={**form, "csrf": ""}).status_code == 400
    made = client.post("/dashboard/annotations", data=form)
    assert made.status_code == 201, _text(made)
    record = made.get_json()
    assert record["author"] == "user@a.example" and record["tags"] == ["frost", "cloth"]
    listed = client.get("/api/v2/annotations?device=A1").get_json()["items"]
    assert [a["id"] for a in listed] == [record["id"]]
    bad = client.post("/dashboard/annotations", data={**form, "text": ""})
    assert bad.status_code == 400 and "text" in bad.get_json()["message"]
    # Org B cannot annotate A's device through the dashboard either.
    other = client.application.test_client()
    sign_in(other, "user@b.example")
    other_csrf = csrf_of(_text(other.get("/dashboard/")))
    assert other.post("/dashboard/annotations",
                      data={**form, "csrf": other_csrf}).status_code == 400
