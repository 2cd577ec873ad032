"""Issue 33's notification policy in the dashboard, in-process: quiet hours added from their form
(POST /api/v2/silences as a mute) and deleted, the daily digest set from its form (PUT
/api/v2/digest), a rule's repeat interval on the rule form (in minutes), each refused form shown
again with what was wrong in the form's words; a viewer sees the policy without any form."""

from __future__ import annotations

import base64
import re
from typing import Any

import psycopg
from flask.testing import FlaskClient

from people import accounts
from tests.support.dashboard import World, csrf_of, sign_in

USER = {"Authorization": "Basic " + base64.b64encode(b"user@a.example:user-a-password").decode()}
POLICY = "/dashboard/notifications/policy"
FROST = {"name": "Frost", "kind": "threshold", "table": "calibrated", "column": "tair",
         "scope": "device", "device": "A1", "op": "<", "threshold": "0", "unit": "c",
         "for_minutes": "15", "clear_op": ">=", "clear_threshold": "1"}


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _error(page: str, element_id: str) -> str:
    found = re.search(rf'<p class="error" id="{element_id}">(.*?)</p>', page, re.S)
    assert found, page
    return found.group(1).replace("&#39;", "'")


def _mutes(page: str) -> list[str]:
    return re.findall(r'<li class="mute" data-id="([0-9a-f-]{36})">', page)


def _rule(client: FlaskClient, name: str) -> dict[str, Any]:
    made = client.post("/api/v2/alerts", headers=USER, json={
        "name": name, "table": "calibrated", "column": "tair", "scope": {"device": "A1"},
        "condition": {"op": "<", "threshold": 0}})
    assert made.status_code == 201, made.get_json()
    return dict(made.get_json())


def test_quiet_hours_from_the_form_then_delete(client: FlaskClient, world: World) -> None:
    rule = _rule(client, "Quiet frost")
    sign_in(client, "user@a.example")
    page = _text(client.get(POLICY))
    assert 'id="quiet-form"' in page and 'id="digest-form"' in page
    csrf = csrf_of(page)
    form = {"weekdays": ["1", "2", "3", "4", "5"], "from": "22:00", "to": "06:00",
            "time_zone": "Europe/Paris", "rule": rule["id"], "device": "A1",
            "comment": "nights"}
    assert client.post(f"{POLICY}/quiet-hours", data=form).status_code == 400  # no CSRF
    # Refused forms come back with what was wrong in words, the fields as they were sent.
    bad = client.post(f"{POLICY}/quiet-hours",
                      data={**form, "csrf": csrf, "weekdays": [], "from": "25:00"})
    assert bad.status_code == 400
    said = _error(_text(bad), "quiet-error")
    assert "Days: tick at least one day, Monday to Sunday." in said
    assert "From: a time of day, like 22:00." in said
    assert 'value="25:00"' in _text(bad)
    zone = client.post(f"{POLICY}/quiet-hours",
                       data={**form, "csrf": csrf, "time_zone": "Mars/Olympus"})
    assert zone.status_code == 400
    assert _error(_text(zone), "quiet-error") == (
        "Time zone: not a time zone name; write one like Europe/Paris or UTC.")
    same = client.post(f"{POLICY}/quiet-hours", data={**form, "csrf": csrf, "to": "22:00"})
    assert same.status_code == 400 and _error(_text(same), "quiet-error").startswith("Until:")
    # Accepted: a mute of that rule at that device, listed on the page.
    done = client.post(f"{POLICY}/quiet-hours", data={**form, "csrf": csrf})
    assert done.status_code == 303 and done.headers["Location"].endswith("#quiet-hours")
    made = [s for s in client.get(f"/api/v2/silences?rule={rule['id']}",
                                  headers=USER).get_json()["items"] if s["kind"] == "mute"]
    assert len(made) == 1
    assert {k: made[0][k] for k in ("weekdays", "from", "to", "time_zone", "device",
                                    "comment")} == {
        "weekdays": [1, 2, 3, 4, 5], "from": "22:00", "to": "06:00",
        "time_zone": "Europe/Paris", "device": "A1", "comment": "nights"}
    page = _text(client.get(POLICY))
    assert made[0]["id"] in _mutes(page)
    item = re.search(rf'<li class="mute" data-id="{made[0]["id"]}">(.*?)</li>', page, re.S)
    assert item and "Mon, Tue, Wed, Thu, Fri" in item.group(1) and "Quiet frost" in item.group(1)
    # Every rule and every device when none is chosen.
    whole = client.post(f"{POLICY}/quiet-hours", data={
        "csrf": csrf, "weekdays": [str(d) for d in range(1, 8)], "from": "12:00",
        "to": "13:00", "time_zone": "UTC", "rule": "", "device": ""})
    assert whole.status_code == 303
    lunch = [s for s in client.get("/api/v2/silences", headers=USER).get_json()["items"]
             if s["kind"] == "mute" and s["from"] == "12:00"]
    assert len(lunch) == 1 and lunch[0]["rule_id"] is None and lunch[0]["device"] is None
    for mute in made + lunch:
        assert client.post(f"/dashboard/silences/{mute['id']}/delete",
                           data={"csrf": csrf}).status_code == 303
        assert client.get(f"/api/v2/silences/{mute['id']}", headers=USER).status_code == 404
    assert not set(_mutes(_text(client.get(POLICY)))) & {m["id"] for m in made + lunch}


def test_digest_from_the_form(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    csrf = csrf_of(_text(client.get(POLICY)))
    bad = client.post(f"{POLICY}/digest", data={"csrf": csrf, "active": "1", "hour": "6",
                                                "time_zone": "Mars/Olympus"})
    assert bad.status_code == 400
    assert _error(_text(bad), "digest-error") == (
        "Time zone: not a time zone name; write one like Europe/Paris or UTC.")
    assert 'value="Mars/Olympus"' in _text(bad)
    hour = client.post(f"{POLICY}/digest", data={"csrf": csrf, "active": "1", "hour": "24",
                                                 "time_zone": "UTC"})
    assert hour.status_code == 400
    assert _error(_text(hour), "digest-error") == "Hour: a whole hour from 0 to 23."
    done = client.post(f"{POLICY}/digest", data={"csrf": csrf, "active": "1", "hour": "6",
                                                 "time_zone": "Europe/Paris"})
    assert done.status_code == 303
    got = client.get("/api/v2/digest", headers=USER).get_json()
    assert (got["active"], got["hour"], got["time_zone"]) == (True, 6, "Europe/Paris")
    page = _text(client.get(POLICY))
    assert re.search(r'<p id="digest-state" data-active="true">Each day at 06:00 Europe/Paris',
                     page)
    assert re.search(r'<input type="checkbox" name="active" id="digest-active" value="1"\s+'
                     r'checked>', page)
    # The box unticked turns it off; the hour and zone stay.
    assert client.post(f"{POLICY}/digest", data={"csrf": csrf, "hour": "6",
                                                 "time_zone": "Europe/Paris"}).status_code == 303
    got = client.get("/api/v2/digest", headers=USER).get_json()
    assert (got["active"], got["hour"]) == (False, 6)


def test_repeat_interval_on_the_rule_form(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/alerts")))
    form = {**FROST, "name": "Frost reminded", "csrf": csrf}
    short = client.post("/dashboard/alerts", data={**form, "repeat_minutes": "1"})
    assert short.status_code == 400
    assert _error(_text(short), "rule-error") == (
        "Remind again every: from 5 minutes to 7 days (10,080 minutes), or empty to announce "
        "a firing rule once.")
    assert client.post("/dashboard/alerts",
                       data={**form, "repeat_minutes": "60"}).status_code == 303
    rules = {r["name"]: r for r in client.get("/api/v2/alerts?limit=1000",
                                              headers=USER).get_json()["items"]}
    made = rules["Frost reminded"]
    assert made["repeat_interval"] == 3600
    row = re.search(rf'<tr data-id="{made["id"]}".*?</tr>',
                    _text(client.get("/dashboard/alerts")), re.S)
    assert row and '<span class="repeat">reminds every 1 h</span>' in row.group(0)
    edit = _text(client.get(f"/dashboard/alerts/{made['id']}/edit"))
    assert re.search(r'name="repeat_minutes" id="rule-repeat" value="60"', edit)
    # Emptied: announced once again.
    assert client.post(f"/dashboard/alerts/{made['id']}",
                       data={**form, "repeat_minutes": ""}).status_code == 303
    assert client.get(f"/api/v2/alerts/{made['id']}",
                      headers=USER).get_json()["repeat_interval"] is None


def test_viewer_sees_the_policy_without_forms(client: FlaskClient, world: World) -> None:
    rule = _rule(client, "Viewer frost")
    mute = client.post("/api/v2/silences", headers=USER, json={
        "kind": "mute", "rule": rule["id"], "weekdays": [6, 7], "from": "20:00", "to": "07:00",
        "time_zone": "UTC"}).get_json()
    with psycopg.connect(world.url) as conn:
        if not conn.execute("SELECT 1 FROM users WHERE email = 'viewer4@a.example'").fetchone():
            accounts.create_user(conn, org=world.org_a, email="viewer4@a.example",
                                 password="viewer-a-password", role="viewer")
    sign_in(client, "viewer4@a.example", "viewer-a-password")
    page = _text(client.get(POLICY))
    assert mute["id"] in _mutes(page) and "Sat, Sun" in page
    for form_id in ("quiet-form", "digest-form"):
        assert f'id="{form_id}"' not in page
    assert 'class="delete-mute"' not in page and 'class="expire"' not in page
    assert 'id="rule-repeat"' not in _text(client.get("/dashboard/alerts"))
