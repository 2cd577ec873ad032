"""The fleet pages in-process (issue 34): the device list as a fleet view (latest values in the
user's units, a 24-hour sparkline, "ago", health), and the administrators' forms that add a
device (its password and configuration line shown once, the login hashed into the broker's
password file), give it a new password, move it, retire it (after a confirm step) and create a
location (the zone proposed from its coordinates). Each write goes through the API and is
audited; every form needs the session's CSRF value; a member or viewer sees no form and gets
403; another organisation's device is a 404; bad input is a 4xx saying what was wrong. The pure
parts (sparkline, "ago", the form bodies, the configuration line) are tested alone."""

from __future__ import annotations

import base64
import re
import shlex
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.fernet import Fernet
from flask.testing import FlaskClient

from people import accounts
from serve.web.fleetmodel import ago, spark
from serve.web.fleetpages import _instant, location_body, snippet
from shared import recovery
from tests.support.apps import close_app, make_app
from tests.support.dashboard import World, csrf_of, shows, sign_in

ADMIN = "admin@a.example"
PASSWD_FILE = "passwd"


@pytest.fixture(scope="module")
def broker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the module's app keeps device logins (no broker runs: its reload is skipped)."""
    return tmp_path_factory.mktemp("fleet-broker")


@pytest.fixture(scope="module")
def app_overrides(broker_dir: Path) -> dict[str, Any]:
    return {"broker_passwd_file": str(broker_dir / PASSWD_FILE), "mqtt_port": 18830,
            "device_mqtt_address": "mqtt.farm.example:8883"}


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _said(response: Any) -> str:
    found = re.search(r'<p class="error" id="[a-z-]+"( role="alert")?>([^<]*)</p>', _text(response))
    assert found, _text(response)[:3000]
    return found.group(2)


def _admin(client: FlaskClient) -> str:
    sign_in(client, ADMIN)
    return csrf_of(_text(client.get("/dashboard/fleet/add")))


def _person(world: World, email: str, role: str) -> None:
    with psycopg.connect(world.url) as conn:
        accounts.create_user(conn, org=world.org_a, email=email, password="fleet-pass-1",
                             role=role)


def _basic(email: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{email}:{password}".encode()).decode()}


def _audit(world: World, action: str, target: str) -> list[dict[str, Any]]:
    with psycopg.connect(world.url) as conn:
        rows = conn.execute("SELECT actor, details FROM audit_log WHERE action = %s"
                            " AND %s IN (target_id, details->>'name', details->>'device')",
                            (action, target)).fetchall()
    return [{"actor": r[0], "details": r[1]} for r in rows]


def _secret(page: str) -> dict[str, str]:
    """The password and the configuration line a secret page shows."""
    password = re.search(r'id="mqtt-password" readonly value="([^"]+)"', page)
    line = re.search(r'<textarea id="mqtt-snippet"[^>]*>([^<]+)</textarea>', page)
    assert password and line, page[:3000]
    return {"password": password.group(1), "snippet": line.group(1)}


# ---- pure parts --------------------------------------------------------------------------


def test_ago_says_the_largest_whole_unit() -> None:
    now = datetime(2026, 11, 28, 12, tzinfo=UTC)
    assert ago(None, now) == "never"
    assert ago(now - timedelta(seconds=20), now) == "just now"
    assert ago(now - timedelta(minutes=3, seconds=50), now) == "3 min ago"
    assert ago(now - timedelta(hours=5), now) == "5 h ago"
    assert ago(now - timedelta(days=2, hours=23), now) == "2 d ago"


def test_the_sparkline_spans_the_day_and_breaks_where_buckets_are_missing() -> None:
    drawn = spark([(0, 10.0), (1, 20.0), (4, 15.0), (47, 10.0)])
    assert (drawn.low, drawn.high, drawn.points) == (10.0, 20.0, 4)
    # A line of the first two buckets, then two buckets alone between gaps: dots.
    assert len(drawn.lines) == 1
    first = [tuple(float(c) for c in p.split(",")) for p in drawn.lines[0].split()]
    assert first == [(0.0, 26.0), (2.6, 2.0)]  # x at the bucket's place, y high at the top
    assert drawn.dots == [(10.2, 14.0), (120.0, 26.0)]  # the last bucket at the right edge
    assert spark([]).lines == [] and spark([]).points == 0
    flat = spark([(0, 5.0), (1, 5.0)])
    assert flat.lines == ["0.0,14.0 2.6,14.0"]  # equal values: a flat line in the middle


def test_the_configuration_line_publishes_as_the_device_on_the_grid() -> None:
    line = snippet({"host": "mqtt.farm.example", "port": 8883, "username": "E7",
                    "client_id": "E7", "password": "-abc_DEF", "topic": "sensors/E7/readings"})
    argv = shlex.split(line)
    assert argv[:2] == ["mosquitto_pub", "-h"]
    opts = dict(zip(argv[1:-1:2], argv[2::2], strict=False))
    assert opts["-h"] == "mqtt.farm.example" and opts["-p"] == "8883"
    assert opts["-u"] == "E7" and opts["-i"] == "E7" and opts["-P"] == "-abc_DEF"
    assert opts["-t"] == "sensors/E7/readings" and opts["-q"] == "1"
    assert "/ 300 * 300" in opts["-m"] and '"tair":21.5' in opts["-m"]


def test_form_bodies() -> None:
    assert _instant("") is None
    assert _instant("2026-11-28T10:05") == "2026-11-28T10:05:00Z"
    assert _instant("2026-11-28T10:05:30") == "2026-11-28T10:05:30Z"
    assert _instant("yesterday") == "yesterday"  # passed on: the API's 400 names `from`
    assert location_body({"name": "East", "tz_name": "Europe/Paris", "lat": "48.85",
                          "lon": "2.35", "elev": "", "kc": "0.8"}) == {
        "name": "East", "tz_name": "Europe/Paris", "gps": [2.35, 48.85], "kc": 0.8}
    assert location_body({"name": "E", "tz_name": "UTC", "lat": "north"})["gps"] == [
        None, "north"]


# ---- the list ----------------------------------------------------------------------------


def test_the_list_shows_latest_values_sparklines_and_when_last_heard(
        client: FlaskClient, world: World) -> None:
    sign_in(client, ADMIN)
    page = _text(client.get("/dashboard/"))
    rows = dict(re.findall(r'<tr data-device="(\w+)">(.*?)</tr>', page, re.S))
    # A3's reading ten minutes ago: 21.5 C and 50 % as it is the user's default units.
    assert re.search(r'class="latest tair" data-sort-value="21.5">21.5<', rows["A3"])
    assert re.search(r'class="latest rh" data-sort-value="50.0">50.0<', rows["A3"])
    assert 'svg class="spark"' in rows["A3"] and 'data-points="1"' in rows["A3"]
    # A1's week ended long ago: its latest value, but nothing in the last 24 hours.
    assert 'class="latest tair" data-sort-value="' in rows["A1"]
    assert "no readings" in rows["A1"] and "svg" not in rows["A1"]
    assert re.search(r'<time class="ago"[^>]*>(just now|\d+ min ago)</time>', rows["A1"])
    assert re.search(r'<time class="ago"[^>]*>2 d ago</time>', rows["A2"])
    assert 'data-sort="number">Air temp. (°C)' in page
    assert 'id="add-device"' in page and 'class="manage-link"' in page
    # In Fahrenheit when the user asks for it (the API's own conversion).
    page = _text(client.get("/dashboard/?temp=f"))
    assert 'data-sort-value="70.7">70.7<' in page and "Air temp. (°F)" in page


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_members_and_viewers_see_no_form_and_are_refused(
        client: FlaskClient, world: World, role: str) -> None:
    email = f"{role}-fleet@a.example"
    _person(world, email, role)
    sign_in(client, email, "fleet-pass-1")
    page = _text(client.get("/dashboard/"))
    assert shows(page, "A1") and 'id="add-device"' not in page and "manage-link" not in page
    csrf = csrf_of(page)
    for path in ("/dashboard/fleet/add", "/dashboard/fleet/A1", "/dashboard/locations/new"):
        assert client.get(path).status_code == 403, path
    for path, data in (("/dashboard/fleet/add", {"name": "V1", "location": str(world.north)}),
                       ("/dashboard/fleet/A1/password", {}),
                       ("/dashboard/fleet/A1/retire", {"confirm": "yes"}),
                       ("/dashboard/fleet/A1/move", {"location": str(world.north)}),
                       ("/dashboard/locations/new", {"name": "V", "tz_name": "UTC"})):
        answer = client.post(path, data={"csrf": csrf, **data})
        assert answer.status_code == 403, path
    # The API's own answer to the same writes with this user's password.
    auth = (email, "fleet-pass-1")
    with client.application.test_client() as api:
        headers = _basic(*auth)
        assert api.post("/api/v2/devices", headers=headers, json={
            "name": "V1", "location": str(world.north)}).status_code == 403
        assert api.post("/api/v2/locations", headers=headers, json={
            "name": "V", "tz_name": "UTC"}).status_code == 403
        assert api.post("/api/v2/devices/A1/retire", headers=headers,
                        json={}).status_code == 403
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT state FROM devices WHERE name = 'A1'").fetchone() == (
            "Active",)


# ---- adding, re-keying, moving, retiring -------------------------------------------------


def test_an_admin_adds_a_device_sees_its_password_once_and_it_is_audited(
        client: FlaskClient, world: World, broker_dir: Path) -> None:
    csrf = _admin(client)
    answer = client.post("/dashboard/fleet/add", data={
        "csrf": csrf, "name": "F1", "model": "ATMOS 41", "location": str(world.north),
        "from": "2026-11-01T00:00"})
    assert answer.status_code == 200, _text(answer)[:2000]
    shown = _secret(_text(answer))
    argv = shlex.split(shown["snippet"])
    assert argv[argv.index("-P") + 1] == shown["password"] and len(shown["password"]) == 24
    assert argv[argv.index("-h") + 1] == "mqtt.farm.example"
    assert argv[argv.index("-p") + 1] == "8883"
    assert argv[argv.index("-t") + 1] == "sensors/F1/readings"
    passwd = (broker_dir / PASSWD_FILE).read_text()
    assert re.search(r"^F1:\$7\$", passwd, re.M) and shown["password"] not in passwd
    # Shown once: nowhere else, not in the list or the device's page.
    for path in ("/dashboard/", "/dashboard/fleet/F1", "/dashboard/devices/F1"):
        assert shown["password"] not in _text(client.get(path)), path
    with psycopg.connect(world.url) as conn:
        found = conn.execute(
            "SELECT d.model, lower(dp.during), l.name FROM devices d JOIN deployments dp ON"
            " dp.device_id = d.id JOIN locations l ON l.id = dp.location_id"
            " WHERE d.name = 'F1'").fetchone()
    assert found == ("ATMOS 41", datetime(2026, 11, 1, tzinfo=UTC), "North field")
    [entry] = _audit(world, "device.add", "F1")
    assert entry["actor"] == ADMIN and entry["details"]["location"] == str(world.north)
    assert "password" not in str(entry["details"])


def test_bad_input_is_refused_with_what_was_wrong_and_leaves_nothing(
        client: FlaskClient, world: World, broker_dir: Path) -> None:
    csrf = _admin(client)
    cases = (({"name": "bad name", "location": str(world.north)}, 400, "1-64 letters"),
             ({"name": "ingester", "location": str(world.north)}, 400, "reserved"),
             ({"name": "A1", "location": str(world.north)}, 409, "already registered"),
             ({"name": "F9", "location": str(world.b_field)}, 404, "unknown location"),
             ({"name": "F9", "location": str(world.north), "from": "soon"}, 400, "from"),
             ({"name": "", "location": str(world.north)}, 400, "name"))
    for data, status, words in cases:
        answer = client.post("/dashboard/fleet/add", data={"csrf": csrf, **data})
        assert answer.status_code == status, (data, _text(answer)[:1500])
        assert words in _said(answer), (data, _said(answer))
        assert 'id="add-device-form"' in _text(answer)  # the form again, as typed
    # Without the session's CSRF value nothing is written.
    answer = client.post("/dashboard/fleet/add", data={"name": "F8",
                                                       "location": str(world.north)})
    assert answer.status_code == 400 and "CSRF" in _text(answer)
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM devices WHERE name IN ('F8', 'F9')"
                            ).fetchone() == (0,)
    assert "F8:" not in (broker_dir / PASSWD_FILE).read_text()


def test_rotate_move_and_retire_through_the_forms(
        client: FlaskClient, world: World, broker_dir: Path) -> None:
    csrf = _admin(client)
    shown = _secret(_text(client.post("/dashboard/fleet/add", data={
        "csrf": csrf, "name": "F2", "location": str(world.north)})))
    before = (broker_dir / PASSWD_FILE).read_text()
    page = _text(client.get("/dashboard/fleet/F2"))
    assert 'id="rotate-password"' in page and 'id="retire-device"' in page

    rotated = client.post("/dashboard/fleet/F2/password", data={"csrf": csrf})
    assert rotated.status_code == 200
    again = _secret(_text(rotated))
    assert again["password"] != shown["password"]
    after = (broker_dir / PASSWD_FILE).read_text()
    line = [x for x in after.splitlines() if x.startswith("F2:")]
    assert len(line) == 1 and line[0] not in before
    assert len(_audit(world, "device.rotate_password", "F2")) == 1

    with psycopg.connect(world.url) as conn:
        other = conn.execute("INSERT INTO locations (org_id, name, tz_name) VALUES"
                             " (%s, 'South field', 'America/Chicago') RETURNING id",
                             (world.org_a,)).fetchone()[0]  # type: ignore[index]
    moved = client.post("/dashboard/fleet/F2/move", data={"csrf": csrf, "location": str(other)})
    assert moved.status_code == 303, _text(moved)[:1500]
    page = _text(client.get(moved.headers["Location"]))
    assert 'id="device-moved"' in page and "Moved to South field" in page
    assert len(_audit(world, "device.move", "F2")) == 1
    bad = client.post("/dashboard/fleet/F2/move", data={"csrf": csrf, "location": "nowhere"})
    assert bad.status_code == 404 and "unknown location" in _said(bad)

    # Retire: a confirm step first, which changes nothing.
    ask = client.post("/dashboard/fleet/F2/retire", data={"csrf": csrf})
    assert ask.status_code == 200 and 'id="confirm-retire"' in _text(ask)
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT state FROM devices WHERE name = 'F2'").fetchone() == ("New",)
    done = client.post("/dashboard/fleet/F2/retire", data={"csrf": csrf, "confirm": "yes"})
    assert done.status_code == 303
    page = _text(client.get(done.headers["Location"]))
    assert 'id="device-retired"' in page
    assert "F2:" not in (broker_dir / PASSWD_FILE).read_text()
    with psycopg.connect(world.url) as conn:
        state, upper = conn.execute(
            "SELECT d.state, upper(dp.during) FROM devices d JOIN deployments dp ON"
            " dp.device_id = d.id WHERE d.name = 'F2' ORDER BY lower(dp.during) DESC LIMIT 1"
        ).fetchone()  # type: ignore[misc]
    assert state == "Retired" and upper is not None
    [entry] = _audit(world, "device.retire", "F2")
    assert entry["details"]["deployment_ended"] is True
    # Retired: no password, no second retirement.
    assert client.post("/dashboard/fleet/F2/password", data={"csrf": csrf}).status_code == 409
    again_retired = client.post("/dashboard/fleet/F2/retire",
                                data={"csrf": csrf, "confirm": "yes"})
    assert again_retired.status_code == 409 and "already retired" in _said(again_retired)


@pytest.mark.parametrize("path", ["/dashboard/fleet/A3/password", "/dashboard/fleet/A3/move",
                                  "/dashboard/fleet/A3/retire", "/dashboard/locations/new"])
def test_every_fleet_form_needs_the_sessions_csrf_value(
        client: FlaskClient, world: World, broker_dir: Path, path: str) -> None:
    _admin(client)
    before = (broker_dir / PASSWD_FILE).read_text() if (broker_dir / PASSWD_FILE).exists() \
        else ""
    for csrf in (None, "forged-value"):
        data = {"confirm": "yes", "location": str(world.north), "name": "Forged",
                "tz_name": "UTC", **({"csrf": csrf} if csrf else {})}
        answer = client.post(path, data=data)
        assert answer.status_code == 400 and "CSRF" in _text(answer), path
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT state FROM devices WHERE name = 'A3'").fetchone() != (
            "Retired",)
        assert conn.execute("SELECT count(*) FROM deployments dp JOIN devices d ON"
                            " d.id = dp.device_id WHERE d.name = 'A3'").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM locations WHERE name = 'Forged'"
                            ).fetchone() == (0,)
    after = (broker_dir / PASSWD_FILE).read_text() if (broker_dir / PASSWD_FILE).exists() \
        else ""
    assert after == before


def test_another_organisations_device_is_a_404(client: FlaskClient, world: World) -> None:
    sign_in(client, "user@b.example")
    csrf = csrf_of(_text(client.get("/dashboard/")))
    assert client.get("/dashboard/fleet/A1").status_code == 404
    for path in ("/dashboard/fleet/A1/password", "/dashboard/fleet/A1/retire"):
        assert client.post(path, data={"csrf": csrf, "confirm": "yes"}).status_code == 404
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT state FROM devices WHERE name = 'A1'").fetchone() == (
            "Active",)


# ---- locations ---------------------------------------------------------------------------


def test_a_location_is_created_with_its_zone_proposed_and_audited(
        client: FlaskClient, world: World) -> None:
    csrf = _admin(client)
    zone = client.get("/dashboard/zone?lat=48.8566&lon=2.3522")
    assert zone.status_code == 200 and zone.get_json() == {"tz_name": "Europe/Paris"}
    assert client.get("/dashboard/zone?lat=-33.87&lon=151.21").get_json() == {
        "tz_name": "Australia/Sydney"}
    assert client.get("/dashboard/zone?lat=0&lon=-30").get_json() == {"tz_name": None}
    for query, field in (("lat=91&lon=0", "lat"), ("lat=1&lon=east", "lon"), ("", "lat")):
        bad = client.get(f"/dashboard/zone?{query}")
        assert bad.status_code == 400 and bad.get_json()["message"].startswith(field)
    page = _text(client.get("/dashboard/locations/new"))
    assert 'id="pick-map"' in page and "vendor/leaflet.js" in page
    assert 'data-zone-url="/dashboard/zone"' in page

    answer = client.post("/dashboard/locations/new", data={
        "csrf": csrf, "name": "Paris plot", "lat": "48.8566", "lon": "2.3522",
        "tz_name": "Europe/Paris", "elev": "35", "kc": ""})
    assert answer.status_code == 303, _text(answer)[:2000]
    page = _text(client.get(answer.headers["Location"]))
    assert "<h1>Paris plot</h1>" in page and 'id="pick-map"' in page  # editable, map pick
    [entry] = _audit(world, "location.create", "Paris plot")
    assert entry["details"]["tz_name"] == "Europe/Paris" and entry["actor"] == ADMIN

    for data, status, words in (
            ({"name": "Paris plot", "tz_name": "Europe/Paris"}, 409, "already exists"),
            ({"name": "X", "tz_name": "Mars/Olympus"}, 400, "Mars/Olympus"),
            ({"name": "X", "tz_name": "UTC", "lat": "95", "lon": "0"}, 400, "lat"),
            ({"name": "X", "tz_name": "UTC", "lat": "north", "lon": "0"}, 400, "gps")):
        bad = client.post("/dashboard/locations/new", data={"csrf": csrf, **data})
        assert bad.status_code == status, (data, _text(bad)[:1500])
        assert words in _said(bad), (data, _said(bad))
    assert client.post("/dashboard/locations/new", data={
        "name": "Y", "tz_name": "UTC"}).status_code == 400  # no CSRF value


def test_without_a_password_file_the_api_adds_no_device(world: World) -> None:
    app = make_app(world.url)
    try:
        with app.test_client() as api:
            headers = _basic(ADMIN, "admin-a-password")
            answer = api.post("/api/v2/devices", headers=headers,
                              json={"name": "N1", "location": str(world.north)})
            assert answer.status_code == 409
            assert "SDS_BROKER_PASSWD_FILE" in answer.get_json()["message"]
            assert api.post("/api/v2/devices/A1/password", headers=headers
                            ).status_code == 409
    finally:
        close_app(app)
    with psycopg.connect(world.url) as conn:
        assert conn.execute("SELECT count(*) FROM devices WHERE name = 'N1'").fetchone() == (0,)


def test_a_login_change_through_the_api_is_sealed_into_the_recovery_kit(
        world: World, tmp_path: Path) -> None:
    """A device added, re-keyed or retired in the dashboard was missing from the recovery kit
    until the next start (the API's role could not write it): a whole-machine loss in between
    lost its login. Now each change seals the password file into the kit at once; the API's
    role still cannot read the kit."""
    key = Fernet.generate_key().decode()
    passwd = tmp_path / "passwd"
    app = make_app(world.url, broker_passwd_file=str(passwd), state_dir=str(tmp_path),
                   recovery_key=key)

    def kit() -> str:
        with psycopg.connect(world.url) as conn:
            row = conn.execute("SELECT sealed FROM recovery_files WHERE name ="
                               " 'mosquitto/passwd'").fetchone()
        assert row is not None
        return recovery.open_all({"mosquitto/passwd": bytes(row[0])}, key)[
            "mosquitto/passwd"].decode()

    try:
        with app.test_client() as api:
            headers = _basic(ADMIN, "admin-a-password")
            added = api.post("/api/v2/devices", headers=headers,
                             json={"name": "K1", "location": str(world.north)})
            assert added.status_code == 201, added.get_json()
            assert "recovery kit saved" in added.get_json()["broker"]
            assert re.search(r"^K1:\$7\$", kit(), re.M)
            assert kit() == passwd.read_text()
            rotated = api.post("/api/v2/devices/K1/password", headers=headers)
            assert rotated.status_code == 200 and kit() == passwd.read_text()
            retired = api.post("/api/v2/devices/K1/retire", headers=headers)
            assert retired.status_code == 200, retired.get_json()
            assert not re.search(r"^K1:", kit(), re.M)
    finally:
        close_app(app)
    with psycopg.connect(world.url) as conn, conn.transaction():
        conn.execute("SET LOCAL ROLE sds_api")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT name FROM recovery_files")
