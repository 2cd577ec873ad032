"""Issue 33's rules page in-process: columns picked by name and unit, devices and locations from
lists, defaults valid for every kind (the clear comparison follows the condition), the rules
table in words, edit, pause, duplicate, templates that are valid rules, the API's "did you
mean", and the preview, which must give exactly what the evaluator's state machine gives on
the same readings. A viewer is shown no form it could not submit."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import psycopg
from flask.testing import FlaskClient

from alerts.evaluator import machine
from people import accounts
from serve.web.alertwords import TEMPLATES, duration
from shared import alertrules
from tests.support.dashboard import END, World, csrf_of, sign_in

BASIC = {"Authorization": "Basic " + __import__("base64").b64encode(
    b"user@a.example:user-a-password").decode()}
FROST = {"name": "Frost", "kind": "threshold", "table": "calibrated", "column": "tair",
         "scope": "device", "device": "A1", "op": "<", "threshold": "32", "unit": "f",
         "for_minutes": "15", "clear_op": ">=", "clear_threshold": "34"}


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _post(client: FlaskClient, path: str, **form: str) -> Any:
    csrf = csrf_of(_text(client.get("/dashboard/alerts")))
    return client.post(path, data={"csrf": csrf, **form})


def _rules(client: FlaskClient) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in client.get("/api/v2/alerts", headers=BASIC).get_json()["items"]}


def _row(page: str, rule_id: str) -> str:
    found = re.search(rf'<tr data-id="{rule_id}".*?</tr>', page, re.S)
    assert found, page
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", found.group(0)))


def _clean(client: FlaskClient) -> None:
    for rule in _rules(client).values():
        client.delete(f"/api/v2/alerts/{rule['id']}", headers=BASIC)


def test_form_offers_names_units_devices_and_locations(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    page = _text(client.get("/dashboard/alerts"))
    assert '<option value="tair" data-param="temp" selected>Air temperature (tair)</option>' \
        in page
    devices = re.search(r'<select name="device" id="rule-device">(.*?)</select>', page, re.S)
    assert devices and re.findall(r'value="([^"]+)"', devices.group(1)) == ["A1", "A2", "A3"]
    places = re.search(r'<select name="location" id="rule-location">(.*?)</select>', page, re.S)
    assert places and ">North field</option>" in places.group(1) and "B field" not in page
    # The unit menu holds every unit; the script shows those of the chosen column.
    assert 'value="f" data-param="temp"' in page and 'value="kph" data-param="speed"' in page


def test_api_says_did_you_mean(client: FlaskClient) -> None:
    body = {"name": "x", "table": "calibrated", "scope": {"device": "A1"},
            "condition": {"op": "<", "threshold": 0}}
    for typed, meant in (("temperature", "tair"), ("tiar", "tair"), ("wind", "wind_speed")):
        answer = client.post("/api/v2/alerts", headers=BASIC, json={**body, "column": typed})
        assert answer.status_code == 400
        message = answer.get_json()["errors"]["json"]["column"][0]
        assert message.startswith("did you mean") and f"'{meant}'" in message, message
    assert alertrules.did_you_mean("calibrated", "zzzz") == []


def test_defaults_are_valid_for_every_kind(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    _clean(client)
    # A clear comparison left pointing the same way as a changed condition is turned round.
    made = _post(client, "/dashboard/alerts", **{**FROST, "name": "Heat", "op": ">",
                                                "threshold": "95", "clear_op": ">=",
                                                "clear_threshold": "90"})
    assert made.status_code == 303, _text(made)
    heat = _rules(client)["Heat"]
    assert heat["clear"] == {"op": "<=", "threshold": 90.0} and heat["units"] == {"temp": "f"}
    # A built-in kind never sends the comparison the form shows for measured values.
    for kind, threshold in (("silent", "6"), ("battery", "20"), ("quarantine", "3"),
                            ("depletion", "2")):
        made = _post(client, "/dashboard/alerts", name=f"k-{kind}", kind=kind, op="<",
                     threshold=threshold, scope="device", device="A1", table="daily",
                     column="precip", for_minutes="0")
        assert made.status_code == 303, (kind, _text(made))
    page = _text(client.get("/dashboard/alerts"))
    rules = _rules(client)
    assert "no reading for more than 30 min" in _row(page, rules["k-silent"]["id"])
    assert "below 20 %" in _row(page, rules["k-battery"]["id"])


def test_rules_table_edit_pause_duplicate_and_templates(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")
    _clean(client)
    assert _post(client, "/dashboard/alerts", **FROST).status_code == 303
    frost = _rules(client)["Frost"]
    row = _row(_text(client.get("/dashboard/alerts")), frost["id"])
    assert "Air temperature (each 5-minute reading)" in row and "device A1" in row
    assert "below 32 °F for 15 min" in row and "at or above 34 °F" in row and "active" in row
    # Edit: the form holds the rule; saving changes it through PATCH.
    edit = _text(client.get(f"/dashboard/alerts/{frost['id']}/edit"))
    assert f'action="/dashboard/alerts/{frost["id"]}"' in edit
    assert 'id="rule-threshold" required value="32"' in edit
    changed = _post(client, f"/dashboard/alerts/{frost['id']}",
                    **{**FROST, "threshold": "30", "for_minutes": "20"})
    assert changed.status_code == 303, _text(changed)
    assert _rules(client)["Frost"]["condition"]["threshold"] == 30.0
    assert _rules(client)["Frost"]["for"] == 1200
    # Pause and resume keep the rule.
    assert _post(client, f"/dashboard/alerts/{frost['id']}/active", active="0").status_code == 303
    assert _rules(client)["Frost"]["active"] is False
    assert "paused" in _row(_text(client.get("/dashboard/alerts")), frost["id"])
    assert _post(client, f"/dashboard/alerts/{frost['id']}/active", active="x").status_code == 400
    assert _post(client, f"/dashboard/alerts/{frost['id']}/active", active="1").status_code == 303
    assert _rules(client)["Frost"]["active"] is True
    # Duplicate: the form holds a copy under a new name.
    copy = _text(client.get(f"/dashboard/alerts?copy={frost['id']}"))
    assert 'id="rule-name" maxlength="120" required value="Copy of Frost"' in copy
    assert client.get("/dashboard/alerts?template=nope").status_code == 400
    # Every template, with a device chosen, is a valid rule the API takes.
    for key, template in TEMPLATES.items():
        page = _text(client.get(f"/dashboard/alerts?template={key}"))
        assert f'value="{template["form"]["name"]}"' in page
        made = _post(client, "/dashboard/alerts",
                     **{**template["form"], "name": f"t-{key}", "scope": "device", "device": "A1"})
        assert made.status_code == 303, (key, _text(made))
    rules = _rules(client)
    assert rules["t-wind"]["units"] == {"speed": "kph"} and \
        rules["t-wind"]["condition"] == {"op": ">", "threshold": 15.0}
    assert rules["t-silent"]["condition"]["threshold"] == 6.0
    # CSRF is needed for every change.
    assert client.post(f"/dashboard/alerts/{frost['id']}", data=FROST).status_code == 400
    assert client.post(f"/dashboard/alerts/{frost['id']}/active",
                       data={"active": "0"}).status_code == 400


def test_durations_read_like_people_write_them() -> None:
    assert [duration(s) for s in (0, 45, 900, 913.3, 3600, 5400, 86400, 172800)] == [
        "0 s", "45 s", "15 min", "15 min", "1 h", "1 h 30 min", "1 day", "2 days"]


def test_viewer_sees_no_forms(client: FlaskClient, world: World) -> None:
    with psycopg.connect(world.url) as conn:
        if not conn.execute("SELECT 1 FROM users WHERE email = 'viewer@a.example'").fetchone():
            accounts.create_user(conn, org=world.org_a, email="viewer@a.example",
                                 password="viewer-a-password", role="viewer")
    sign_in(client, "user@a.example")
    _clean(client)
    assert _post(client, "/dashboard/alerts", **FROST).status_code == 303
    viewer = client.application.test_client()
    sign_in(viewer, "viewer@a.example", "viewer-a-password")
    page = _text(viewer.get("/dashboard/alerts"))
    assert "Frost" in page and 'id="rule-form"' not in page and "delete-rule" not in page
    assert 'href="/dashboard/audit"' not in page
    assert 'id="note-form"' not in _text(viewer.get("/dashboard/devices/A1"))
    # Posting the form anyway: the API's 403, shown.
    csrf = csrf_of(page)
    refused = viewer.post("/dashboard/alerts", data={"csrf": csrf, **FROST})
    assert refused.status_code == 403
    admin = client.application.test_client()
    sign_in(admin, "admin@a.example")
    assert 'href="/dashboard/audit"' in _text(admin.get("/dashboard/alerts"))


def _series(world: World, end: datetime) -> list[tuple[datetime, float | None]]:
    with psycopg.connect(world.url) as conn:
        rows = conn.execute("SELECT time, tair FROM calibrated WHERE device = 'A1' AND time >= %s"
                            " AND time < %s ORDER BY time",
                            (end - timedelta(days=7), end)).fetchall()
    return [(t, v) for t, v in rows]


def test_preview_equals_the_evaluators_state_machine(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/alerts")))
    # The seeded air temperature swings 7..23 C each day: below 50 F (10 C) for 30 minutes,
    # clearing at 54 F (12.2 C) after 10 minutes, fires once a night.
    form = {**FROST, "threshold": "50", "for_minutes": "30", "clear_threshold": "54",
            "clear_for_minutes": "10", "csrf": csrf, "preview_end": END.isoformat()}
    answer = client.post("/dashboard/alerts/preview", data=form)
    assert answer.status_code == 200, _text(answer)
    got = answer.get_json()
    rule = alertrules.parse({"name": "p", "table": "calibrated", "column": "tair",
                             "scope": {"device": "A1"}, "units": {"temp": "f"},
                             "condition": {"op": "<", "threshold": 50}, "for": 1800,
                             "clear": {"op": ">=", "threshold": 54}, "clear_for": 600})
    _state, expected = machine.run(rule, _series(world, END))
    assert got["fired"] == sum(1 for t in expected if t.kind == "firing") >= 6
    assert [(e["kind"], e["at"]) for e in got["events"]] == \
        [(t.kind, int(t.at.timestamp())) for t in expected]
    assert got["summary"] == f"would have fired {got['fired']} times in the last 7 days"
    assert got["threshold"] == 50.0 and got["clear_threshold"] == 54.0 and got["unit"] == "°F"
    assert len(got["times"]) == len(got["values"]) == 7 * 288
    # Hysteresis: without the gap and the hold the same readings fire more often.
    loose = client.post("/dashboard/alerts/preview", data={
        **form, "for_minutes": "0", "clear_for_minutes": "0", "clear_threshold": ""}).get_json()
    assert loose["fired"] >= got["fired"]
    # Bad input: no CSRF, a bad column, a built-in kind, another organisation's device.
    assert client.post("/dashboard/alerts/preview",
                       data={**form, "csrf": ""}).status_code == 400
    bad = client.post("/dashboard/alerts/preview", data={**form, "column": "temperature"})
    assert bad.status_code == 400 and "did you mean" in bad.get_json()["message"]
    builtin = client.post("/dashboard/alerts/preview",
                          data={**form, "kind": "silent", "threshold": "6", "clear_threshold": ""})
    assert builtin.status_code == 400 and "kind" in builtin.get_json()["message"]
    theirs = client.post("/dashboard/alerts/preview", data={**form, "device": "B1"})
    assert 400 <= theirs.status_code < 500
    when = client.post("/dashboard/alerts/preview", data={**form, "preview_end": "soon"})
    assert when.status_code == 400 and "preview_end" in when.get_json()["message"]


def test_battery_preview_reads_the_health_reports(client: FlaskClient, world: World) -> None:
    # A day of hourly health reports of A3: 40 % down to 10 % and back up to 50 %.
    levels = [40 - 2 * i for i in range(16)] + [12 + 5 * i for i in range(8)]
    start = END - timedelta(days=2)
    with psycopg.connect(world.url) as conn:
        conn.execute("DELETE FROM health WHERE device = 'A3'")
        for i, level in enumerate(levels):
            conn.execute("INSERT INTO health (time, device, location, batt_pct) VALUES"
                         " (%s, 'A3', %s, %s)", (start + timedelta(hours=i), world.north, level))
        series = conn.execute("SELECT time, batt_pct FROM health WHERE device = 'A3'"
                              " AND time >= %s ORDER BY time", (END - timedelta(days=7),)
                              ).fetchall()
    sign_in(client, "user@a.example")
    csrf = csrf_of(_text(client.get("/dashboard/alerts")))
    form = {**TEMPLATES["battery"]["form"], "scope": "device", "device": "A3", "csrf": csrf,
            "preview_end": END.isoformat()}
    answer = client.post("/dashboard/alerts/preview", data=form)
    assert answer.status_code == 200, _text(answer)
    got = answer.get_json()
    rule = alertrules.parse({"name": "b", "kind": "battery", "scope": {"device": "A3"},
                             "condition": {"threshold": 20},
                             "clear": {"op": ">=", "threshold": 30}})
    _state, expected = machine.run(rule, [(t, v) for t, v in series])
    assert [(e["kind"], e["at"]) for e in got["events"]] == \
        [(t.kind, int(t.at.timestamp())) for t in expected]
    assert [t.kind for t in expected] == ["firing", "resolved"]
    assert got["summary"] == "would have fired once in the last 7 days" and got["unit"] == "%"
