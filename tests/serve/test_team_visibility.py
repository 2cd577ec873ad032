"""Teams in the database (migration 0155): a teams-only member sees exactly their teams'
devices and locations in every table and view the API role reads, and everyone else sees the
whole organisation, at the same cost.

On the data world (tests/support/data_world.py), team "West" holds location LA and device D3:
its teams-only member sees LA, D1 (deployed at LA on day 2, so LA's whole history reads as it
does for anyone), D3, and nothing of NY, D2 or D4. The probes run as the API role with the
session settings the API sets per request (shared.db.set_request_scope).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from shared import db
from tests.support.data_world import T0, World, get, rows
from tests.support.figures import Figures

ALL_DEVICES = {"D1", "D2", "D3", "D4"}
TEAM_DEVICES = {"D1", "D3"}
PAIRS = 45  # timed request pairs in the cost comparison


@pytest.fixture(scope="module")
def teams_world(world: World) -> dict[str, Any]:
    """Team West (LA, D3) with member w1; user n1 in no team; annotations, alert rules,
    states, events and quarantine rows about D1, D2, LA and NY."""
    with psycopg.connect(world.url) as conn:
        w1, n1 = (accounts.create_user(conn, org=world.org_a, email=f"{who}@a.example",
                                       password=f"{who}-password") for who in ("w1", "n1"))
        team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'West') RETURNING id",
                            (world.org_a,)).fetchone()[0]
        d3 = conn.execute("SELECT id FROM devices WHERE name = 'D3'").fetchone()[0]
        conn.execute("INSERT INTO team_members (team_id, org_id, user_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, w1))
        conn.execute("INSERT INTO team_devices (team_id, org_id, device_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, d3))
        conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                     " VALUES (%s, %s, %s)", (team, world.org_a, world.la))
        other = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'East') RETURNING id",
                             (world.org_a,)).fetchone()[0]
        conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                     " VALUES (%s, %s, %s)", (other, world.org_a, world.ny))
        ids = dict(conn.execute("SELECT name, id FROM devices").fetchall())
        for subject, column in (("D1", "device_id"), ("D2", "device_id")):
            conn.execute(f"INSERT INTO annotations (org_id, {column}, start_time, text)"
                         " VALUES (%s, %s, %s, %s)", (world.org_a, ids[subject], T0, subject))
        for loc, label in ((world.la, "LA"), (world.ny, "NY")):
            conn.execute("INSERT INTO annotations (org_id, location_id, start_time, text)"
                         " VALUES (%s, %s, %s, %s)", (world.org_a, loc, T0, label))
        rule_sql = ("INSERT INTO alert_rules (org_id, name, kind, source, column_name, op,"
                    " threshold, clear_op, clear_threshold, device_id, location_id) VALUES"
                    " (%s, %s, 'threshold', 'calibrated', 'tair', '<', 0, '>=', 0, %s, %s)"
                    " RETURNING id")
        org_rule = conn.execute(rule_sql, (world.org_a, "org", None, None)).fetchone()[0]
        conn.execute(rule_sql, (world.org_a, "D2", ids["D2"], None))
        conn.execute(rule_sql, (world.org_a, "NY", None, world.ny))
        conn.execute(rule_sql, (world.org_a, "LA", None, world.la))
        for device in ("D1", "D2"):
            conn.execute("INSERT INTO alert_states (rule_id, device, org_id, status)"
                         " VALUES (%s, %s, %s, 'ok')", (org_rule, device, world.org_a))
        for title, device, loc in (("D1", "D1", None), ("D2", "D2", None), ("LA", None, world.la),
                                   ("NY", None, world.ny), ("test", None, None)):
            conn.execute("INSERT INTO alert_events (org_id, kind, device, location_id, at,"
                         " title) VALUES (%s, 'firing', %s, %s, now(), %s)",
                         (world.org_a, device, loc, title))
        for device in ("D1", "D2", "D4"):
            conn.execute("INSERT INTO quarantine (topic, device, reason, detail, payload)"
                         " VALUES ('t', %s, 'bad_json', 'x', '\\x00')", (device,))
        conn.commit()
    return {"w1": w1, "n1": n1, "team": team, "east": other}


@contextmanager
def api_as(world: World, user: UUID | None, teams_only: bool) -> Iterator[psycopg.Connection]:
    """A connection as the API role for org A and `user`, teams-only or not; rolled back."""
    with psycopg.connect(world.url) as conn:
        db.set_request_scope(conn, db.ROLE_API, world.org_a, user, teams_only)
        try:
            yield conn
        finally:
            conn.rollback()


def _col(conn: psycopg.Connection, query: str) -> set[Any]:
    return {r[0] for r in conn.execute(query)}


# What each read path's table or view shows, as (query, everyone, teams-only member of West).
def _expected(world: World) -> dict[str, tuple[str, set[Any], set[Any]]]:
    return {
        "devices": ("SELECT name FROM devices", ALL_DEVICES, TEAM_DEVICES),
        "locations": ("SELECT id FROM locations", {world.ny, world.la}, {world.la}),
        "deployments": ("SELECT d.name FROM deployments p JOIN devices d ON d.id = p.device_id",
                        {"D1", "D2"}, {"D1"}),
        "calibrated": ("SELECT DISTINCT device FROM calibrated", ALL_DEVICES - {"D3"}, {"D1"}),
        "hourly": ("SELECT DISTINCT device FROM hourly", {"D1", "D3"}, {"D1", "D3"}),
        "local_hourly": ("SELECT DISTINCT device FROM local_hourly", {"D1"}, {"D1"}),
        "daily": ("SELECT DISTINCT device FROM daily", {"D1"}, {"D1"}),
        "health": ("SELECT DISTINCT device FROM health", {"D1"}, {"D1"}),
        "annotations": ("SELECT text FROM annotations", {"D1", "D2", "LA", "NY"}, {"D1", "LA"}),
        "alert_rules": ("SELECT name FROM alert_rules", {"org", "D2", "NY", "LA"},
                        {"org", "LA"}),
        "alert_states": ("SELECT device FROM alert_states", {"D1", "D2"}, {"D1"}),
        "alert_events": ("SELECT title FROM alert_events", {"D1", "D2", "LA", "NY", "test"},
                         {"D1", "LA", "test"}),
        "org_quarantine": ("SELECT device FROM org_quarantine", {"D1", "D2", "D4"}, {"D1"}),
        "teams": ("SELECT name FROM teams", {"West", "East"}, {"West"}),
        "team_locations": ("SELECT location_id FROM team_locations", {world.la, world.ny},
                           {world.la}),
    }


def test_teams_only_member_sees_their_teams_everywhere(world: World,
                                                       teams_world: dict[str, Any]) -> None:
    for path, (query, everyone, member) in _expected(world).items():
        with api_as(world, teams_world["w1"], teams_only=True) as conn:
            assert _col(conn, query) == member, path
        # The same user, not limited to teams, and a user without any team: everything.
        with api_as(world, teams_world["w1"], teams_only=False) as conn:
            assert _col(conn, query) == everyone, path
        with api_as(world, teams_world["n1"], teams_only=False) as conn:
            assert _col(conn, query) == everyone, path


def test_teams_only_without_a_team_or_user_sees_nothing(world: World,
                                                        teams_world: dict[str, Any]) -> None:
    """Fail closed: a teams-only session of a user in no team, or with no user, sees no
    device or location (an org-wide alert rule, and an event about no device or location,
    name neither and stay readable)."""
    for user in (teams_world["n1"], None):
        for path, (query, _everyone, _member) in _expected(world).items():
            with api_as(world, user, teams_only=True) as conn:
                seen = _col(conn, query)
            neither = {"alert_rules": {"org"}, "alert_events": {"test"}}.get(path, set())
            assert seen == neither, (path, user, seen)


def test_teams_only_member_cannot_link_or_write_past_their_teams(
        world: World, teams_world: dict[str, Any]) -> None:
    with api_as(world, teams_world["w1"], teams_only=True) as conn:
        assert conn.execute("UPDATE locations SET notes = 'x' WHERE id = %s",
                            (world.ny,)).rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                         " VALUES (%s, %s, %s)", (teams_world["east"], world.org_a, world.la))


def test_cross_organisation_links_are_refused_by_the_schema(world: World,
                                                            teams_world: dict[str, Any]) -> None:
    """Even the owner cannot put org B's location or device into an org A team."""
    with psycopg.connect(world.url) as conn:
        b1 = conn.execute("SELECT id FROM devices WHERE name = 'B1'").fetchone()[0]
        for sql, target in (("INSERT INTO team_locations (team_id, org_id, location_id)"
                             " VALUES (%s, %s, %s)", world.bl),
                            ("INSERT INTO team_devices (team_id, org_id, device_id)"
                             " VALUES (%s, %s, %s)", b1)):
            for org in (world.org_a, world.org_b):
                with pytest.raises(psycopg.errors.ForeignKeyViolation), conn.transaction():
                    conn.execute(sql, (teams_world["team"], org, target))


def _time_data(client: FlaskClient, world: World, rounds: int) -> float:
    """The median seconds of a /data page of one device (D1, two days of readings)."""
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        got = rows(get(client, world, "calibrated", device="D1", start_time=T0.isoformat(),
                       limit=500))
        took.append(time.perf_counter() - start)
        assert len(got) == 500
    return sorted(took)[len(took) // 2]


def test_unrestricted_data_requests_cost_the_same(client: FlaskClient, world: World,
                                                  teams_world: dict[str, Any],
                                                  figures: Figures) -> None:
    """The restrictive policies on devices and locations, with and without: an unrestricted
    caller's /data page. Interleaved rounds, so a busy machine weighs on both alike."""
    policies = ("devices", "locations")
    ratios: list[float] = []
    _time_data(client, world, 5)  # warm the pool and the caches
    try:
        for _ in range(5):
            with_policy = _time_data(client, world, 11)
            with psycopg.connect(world.url) as conn:
                for table in policies:
                    conn.execute(f"ALTER POLICY api_teams ON {table} USING (true)")
            ratios.append(with_policy / _time_data(client, world, 11))
            with psycopg.connect(world.url) as conn:
                for table, ids in (("devices", "sds_request_team_device_ids()"),
                                   ("locations", "sds_request_team_location_ids()")):
                    conn.execute(f"ALTER POLICY api_teams ON {table} USING"
                                 f" (NOT sds_request_teams_only() OR id IN (SELECT {ids}))")
    finally:
        with psycopg.connect(world.url) as conn:
            qual = conn.execute("SELECT count(*) FROM pg_policies WHERE policyname = 'api_teams'"
                                " AND tablename IN ('devices', 'locations')"
                                " AND qual LIKE '%sds_request_teams_only%'").fetchone()[0]
        assert qual == 2, "the team policies were not restored"
    ratio = sorted(ratios)[len(ratios) // 2]
    figures.record("teams_unrestricted_data_ratio", round(ratio, 2), section="security",
                   title="/data page of an unrestricted caller, team policies on / off "
                         "(median of 5 rounds of 11 requests each way)",
                   target="<= 1.1 on a quiet machine", source="tests/serve/test_team_visibility.py")
    # A gross-regression guard that a loaded machine (2 cores, other test runs) still passes.
    assert ratio <= 1.5, ratios


# ---- end to end through the API: the member's membership says teams_only -------------------

READ_SCOPES = ["data:read", "devices:read", "locations:read", "notifications:read",
               "annotations:read", "teams:read"]


@pytest.fixture(scope="module")
def member_keys(world: World, teams_world: dict[str, Any]) -> dict[str, str]:
    """Read keys of w1 (teams-only in org A from here on) and of a1 (an ordinary member)."""
    with psycopg.connect(world.url) as conn:
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s",
                     (teams_world["w1"],))
        a1 = conn.execute("SELECT id FROM users WHERE email = 'a1@a.example'").fetchone()[0]
        made = {who: accounts.create_api_key(conn, user=user, scopes=READ_SCOPES)["apikey"]
                for who, user in (("w1", teams_world["w1"]), ("a1", a1))}
        conn.commit()
    return made


def _api(client: FlaskClient, key: str, path: str, **params: Any) -> Any:
    return client.get(f"/api/v2/{path}", query_string=params,
                      headers={"Authorization": f"Apikey {key}"})


def _items(client: FlaskClient, key: str, path: str, field: str, **params: Any) -> set[Any]:
    got = _api(client, key, path, **params)
    assert got.status_code == 200, got.get_data(as_text=True)
    body = got.get_json()
    items = body["items"] if isinstance(body, dict) else body
    return {item[field] for item in items}


def test_teams_only_member_through_the_api(client: FlaskClient, world: World,
                                           member_keys: dict[str, str]) -> None:
    """Every read path of the issue, for the teams-only member w1 and the ordinary member a1."""
    w1, a1 = member_keys["w1"], member_keys["a1"]
    la, ny = str(world.la), str(world.ny)
    for key, devices, locations in ((w1, TEAM_DEVICES, {la}), (a1, ALL_DEVICES, {la, ny})):
        assert _items(client, key, "devices", "name") == devices
        assert _items(client, key, "locations", "id") == locations
        assert _items(client, key, "locations/summary", "id") == locations
    assert _items(client, w1, "alerts", "name") == {"org", "LA"}
    assert _items(client, a1, "alerts", "name") == {"org", "D2", "NY", "LA"}
    assert _items(client, w1, "notifications", "title") == {"D1", "LA", "test"}
    assert _items(client, w1, "annotations", "text") == {"D1", "LA"}
    assert _items(client, a1, "annotations", "text") == {"D1", "D2", "LA", "NY"}
    assert _items(client, w1, "teams", "name") == {"West"}

    since = {"start_time": T0.isoformat(), "limit": 100}
    # /data: one device, several devices, a location, changed rows, CSV export.
    assert _items(client, w1, "data/calibrated", "device", device="D1", **since) == {"D1"}
    assert _items(client, w1, "data/hourly", "device", device="D1,D3",
                  start_time="2024-01-01T00:00:00Z", limit=100) == {"D1", "D3"}
    assert _items(client, w1, "data/calibrated", "location", location=la, **since) == {la}
    assert _items(client, w1, "data/hourly", "device", device="D1",
                  updated_since="2000-01-01T00:00:00Z", limit=100) == {"D1"}
    csv = _api(client, w1, "data/calibrated", device="D1", format="csv", **since)
    assert csv.status_code == 200 and "D1" in csv.get_data(as_text=True)
    assert _items(client, a1, "data/calibrated", "device", device="D1,D2", **since) == {
        "D1", "D2"}
    # What is outside the team answers as what does not exist: the same 404, word for word.
    for path, params, hidden, missing in (
            ("devices/D2", {}, "D2", "D9"),
            (f"locations/{ny}", {}, ny, "00000000-0000-4000-8000-000000000000"),
            ("data/calibrated", {"device": "D2", **since}, "D2", "D9"),
            ("data/calibrated", {"device": "D1,D2", **since}, "D2", "D9"),
            ("data/calibrated", {"location": ny, **since}, ny,
             "00000000-0000-4000-8000-000000000000"),
            ("data/calibrated", {"device": "D2", "format": "csv", **since}, "D2", "D9")):
        shown = _api(client, w1, path, **params)
        absent = _api(client, w1, path.replace(hidden, missing),
                      **{k: str(v).replace(hidden, missing) for k, v in params.items()})
        assert shown.status_code == absent.status_code == 404, (path, params)
        assert shown.get_data(as_text=True).replace(hidden, "X") == \
            absent.get_data(as_text=True).replace(missing, "X"), (path, params)
        assert _api(client, a1, path, **params).status_code == 200, (path, params)


def test_teams_only_data_requests_cost_about_the_same(client: FlaskClient, world: World,
                                                      member_keys: dict[str, str],
                                                      figures: Figures) -> None:
    """The same /data page (D1, which both may read) for the teams-only member and for an
    ordinary member: the team lookup runs once per statement, not per row.

    Measured in back-to-back pairs, the order alternating, and compared as the median of the
    pairs' ratios: the machine's load (4 workers on 2 shared cores) changes 3-fold within
    seconds, and it reaches both requests of a pair alike, where blocks of one kind then the
    other (the earlier form, once 2.6 under load) caught different load phases."""
    def took(key: str) -> float:
        start = time.perf_counter()
        got = _api(client, key, "data/calibrated", device="D1", start_time=T0.isoformat(),
                   limit=500)
        elapsed = time.perf_counter() - start
        assert got.status_code == 200 and len(got.get_json()) == 500
        return elapsed

    member, teams_only = member_keys["a1"], member_keys["w1"]
    took(member), took(teams_only)  # warm up
    ratios = []
    for i in range(PAIRS):
        if i % 2:
            t_w = took(teams_only)
            ratios.append(t_w / took(member))
        else:
            t_a = took(member)
            ratios.append(took(teams_only) / t_a)
    ratio = statistics.median(ratios)
    figures.record("teams_only_data_ratio", round(ratio, 2), section="security",
                   title="/data page of a teams-only member / of an ordinary member "
                         f"(median of {PAIRS} back-to-back pairs' ratios)",
                   target="<= 2", source="tests/serve/test_team_visibility.py")
    # A few statements per request each ask for the team's devices once (1.1-1.25x on a
    # page of 500 rows, loaded machine or not: 8 trials at load 10 gave 1.08-1.24); 2x leaves
    # room for noise yet fails a per-row lookup.
    assert ratio <= 2, sorted(round(r, 2) for r in ratios)


def test_team_device_at_a_location_outside_the_team(client: FlaskClient, world: World,
                                                    member_keys: dict[str, str]) -> None:
    """A teams-only member whose team holds D2 (standing at NY) but not NY: D2 and its data
    read as usual, with no location; NY stays a 404; nothing answers 5xx."""
    with psycopg.connect(world.url) as conn:
        user = accounts.create_user(conn, org=world.org_a, email="d2@a.example",
                                    password="d2-only-password")
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (user,))
        conn.execute("WITH t AS (INSERT INTO teams (org_id, name) VALUES (%s, 'D2 only')"
                     " RETURNING id) INSERT INTO team_members (team_id, org_id, user_id)"
                     " SELECT id, %s, %s FROM t", (world.org_a, world.org_a, user))
        conn.execute("INSERT INTO team_devices (team_id, org_id, device_id) SELECT t.id,"
                     " t.org_id, d.id FROM teams t, devices d WHERE t.name = 'D2 only'"
                     " AND d.name = 'D2'")
        key = accounts.create_api_key(conn, user=user, scopes=READ_SCOPES)["apikey"]
        conn.commit()
    assert _items(client, key, "devices", "name") == {"D2"}
    record = _api(client, key, "devices/D2").get_json()
    assert record["name"] == "D2" and record["current_location"] is None  # NY is not theirs
    assert _items(client, key, "locations", "id") == set()
    since = {"start_time": T0.isoformat(), "limit": 50}
    for table, extra in (("calibrated", {}), ("calibrated", {"local_time": "America/New_York"}),
                         ("hourly", {}), ("daily", {"start_time": "2024-01-01T00:00:00Z"}),
                         ("calibrated", {"format": "csv"})):
        got = _api(client, key, f"data/{table}", device="D2", **{**since, **extra})
        assert got.status_code == 200, (table, extra, got.get_data(as_text=True))
    assert _api(client, key, "data/calibrated", location=str(world.ny),
                **since).status_code == 404


def test_teams_only_member_is_refused_without_database_roles(
        world: World, member_keys: dict[str, str]) -> None:
    """With SDS_DB_ROLES=false the API runs as the login role, which no policy limits: a
    teams-only member gets 403 rather than the whole organisation; others work as before."""
    from tests.support.apps import close_app, make_app

    app = make_app(world.url, db_roles=False)
    try:
        client = app.test_client()
        refused = _api(client, member_keys["w1"], "devices")
        assert refused.status_code == 403, refused.get_data(as_text=True)
        assert "SDS_DB_ROLES" in refused.get_json()["message"]
        assert _items(client, member_keys["a1"], "devices", "name") == ALL_DEVICES
    finally:
        close_app(app)


def test_quarantine_api_is_tenant_and_team_scoped(client: FlaskClient, world: World,
                                                  member_keys: dict[str, str]) -> None:
    """GET /api/v2/quarantine (issue 34): org A never sees org B's rows nor B theirs; the
    teams-only member sees only their team's devices' rows; a hidden device is the same 404
    as a missing one; payloads only for administrators."""
    with psycopg.connect(world.url) as conn:
        conn.execute("INSERT INTO quarantine (topic, device, reason, detail, payload)"
                     " VALUES ('t', 'B1', 'out_of_range', 'tair: ''B-secret''', 'B-raw')")
        conn.commit()
    w1, a1 = member_keys["w1"], member_keys["a1"]
    assert _items(client, a1, "quarantine", "device") == {"D1", "D2", "D4"}
    assert _items(client, w1, "quarantine", "device") == {"D1"}
    assert _items(client, a1, "quarantine", "device", device="D2") == {"D2"}
    shown, absent = (_api(client, w1, "quarantine", device=d) for d in ("D2", "D9"))
    assert shown.status_code == absent.status_code == 404
    assert shown.get_json()["message"].replace("D2", "X") == \
        absent.get_json()["message"].replace("D9", "X")
    page = _api(client, a1, "quarantine", limit=2).get_json()
    assert (page["total"], len(page["items"])) == (3, 2)
    assert all("payload_base64" not in r for r in page["items"])  # a1 is a plain member
    assert page["items"][0]["reason_text"] == "payload is not JSON"
    b1 = ("b1@b.example", "b1-password")
    with psycopg.connect(world.url) as conn:
        role = conn.execute("SELECT m.role FROM memberships m JOIN users u ON u.id = m.user_id"
                            " WHERE u.email = 'b1@b.example'").fetchone()[0]
        conn.execute("UPDATE memberships SET role = 'member' FROM users u"
                     " WHERE u.id = user_id AND u.email = 'b1@b.example'")
    try:
        (row,) = client.get("/api/v2/quarantine", auth=b1).get_json()["items"]
        assert row["device"] == "B1" and "payload_base64" not in row
        assert "B-secret" not in row["detail"] and "(hidden)" in row["detail"]
        with psycopg.connect(world.url) as conn:
            conn.execute("UPDATE memberships SET role = 'admin' FROM users u"
                         " WHERE u.id = user_id AND u.email = 'b1@b.example'")
        (row,) = client.get("/api/v2/quarantine", auth=b1).get_json()["items"]
        assert row["payload_base64"] == "Qi1yYXc=" and "B-secret" in row["detail"]
    finally:
        with psycopg.connect(world.url) as conn:
            conn.execute("UPDATE memberships SET role = %s FROM users u"
                         " WHERE u.id = user_id AND u.email = 'b1@b.example'", (role,))
    assert _api(client, a1, "quarantine", reason="nope").status_code == 400
    doc = client.get("/api/v2/openapi.json").get_json()["paths"]["/api/v2/quarantine"]["get"]
    assert {p["name"] for p in doc["parameters"]} >= {"limit", "page", "device", "reason"}
