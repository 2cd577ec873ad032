"""The dashboard of a teams-only member (issue 23, docs/auth.md "Teams"): on the dashboard's
seeded world, team "A2 only" holds device A2 and no location; its teams-only member sees A2
in the device list and its page, and nothing of A1, A3 or North field: device pages and the
quarantine of the others are the same 404 as a missing device. The pages read through the
same database policies as the API (migration 0155)."""

from __future__ import annotations

import re

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from tests.support.dashboard import World, sign_in

EMAIL, PASSWORD = "team@a.example", "team-a-password"


@pytest.fixture(scope="module")
def team_member(world: World) -> None:
    """A teams-only member of org A in team "A2 only" (device A2)."""
    with psycopg.connect(world.url) as conn:
        user = accounts.create_user(conn, org=world.org_a, email=EMAIL, password=PASSWORD,
                                    role="viewer")
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (user,))
        team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'A2 only')"
                            " RETURNING id", (world.org_a,)).fetchone()[0]
        conn.execute("INSERT INTO team_members (team_id, org_id, user_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, user))
        conn.execute("INSERT INTO team_devices (team_id, org_id, device_id)"
                     " SELECT %s, org_id, id FROM devices WHERE name = 'A2'", (team,))


def _named_as(page: str, name: str) -> str:
    """`page` with the device name in it as X, the session's random CSRF token masked first
    (a token can contain the name: "A3" was once replaced inside one)."""
    token = re.search(r'name="csrf-token" content="([^"]+)"', page)
    masked = page.replace(token.group(1), "CSRF") if token else page
    return masked.replace(name, "X")


def _page(client: FlaskClient, path: str) -> tuple[int, str]:
    r = client.get(path)
    return r.status_code, r.get_data(as_text=True)


def test_teams_only_member_sees_their_team_on_the_dashboard(client: FlaskClient, world: World,
                                                            team_member: None) -> None:
    sign_in(client, EMAIL, PASSWORD)
    status, listing = _page(client, "/dashboard/")
    assert status == 200 and "/dashboard/devices/A2" in listing
    assert "/dashboard/devices/A1" not in listing and "/dashboard/devices/A3" not in listing
    assert _page(client, "/dashboard/devices/A2")[0] == 200
    for hidden in ("A1", "A3"):
        shown = _page(client, f"/dashboard/devices/{hidden}")
        missing = _page(client, "/dashboard/devices/Z9")
        assert shown[0] == missing[0] == 404
        assert _named_as(shown[1], hidden) == _named_as(missing[1], "Z9")
        assert _page(client, f"/dashboard/quarantine?device={hidden}")[0] == 404
    status, bad = _page(client, "/dashboard/quarantine")
    rows = bad.split('id="reason-codes"')[0]  # the page ends with every code explained
    assert status == 200 and "sensors/A1/readings" not in bad and "out_of_range" not in rows
    status, places = _page(client, "/dashboard/locations")
    assert status == 200 and "North field" not in places


def test_other_members_see_the_whole_organisation(client: FlaskClient, world: World,
                                                  team_member: None) -> None:
    sign_in(client, "user@a.example")
    status, listing = _page(client, "/dashboard/")
    assert status == 200 and all(f"/dashboard/devices/A{i}" in listing for i in (1, 2, 3))
    assert _page(client, "/dashboard/devices/A1")[0] == 200
    status, bad = _page(client, "/dashboard/quarantine")
    assert status == 200 and "out_of_range" in bad  # what the teams-only member must not see
    status, places = _page(client, "/dashboard/locations")
    assert status == 200 and "North field" in places


def test_a_teams_only_member_in_no_team_is_told_so(client: FlaskClient, world: World) -> None:
    """Outside any team, the device list said "No devices in this organisation yet. Operators
    add them with sds device add", which is not true (issue 30 item 6.8): it says they are in
    no team and whom to ask. In a team without devices, it says that instead."""
    email, password = "loner@a.example", "loner-a-password"
    with psycopg.connect(world.url) as conn:
        user = accounts.create_user(conn, org=world.org_a, email=email, password=password,
                                    role="member")
        conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (user,))
    sign_in(client, email, password)
    status, listing = _page(client, "/dashboard/")
    assert status == 200 and "/dashboard/devices/" not in listing
    assert "you are in no team yet" in listing and "add you to a team" in listing
    assert "No devices in this organisation" not in listing and "sds device add" not in listing

    with psycopg.connect(world.url) as conn:
        team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 'Empty')"
                            " RETURNING id", (world.org_a,)).fetchone()[0]
        conn.execute("INSERT INTO team_members (team_id, org_id, user_id) VALUES (%s, %s, %s)",
                     (team, world.org_a, user))
    status, listing = _page(client, "/dashboard/")
    assert status == 200 and "your teams hold no devices or\nlocations yet" in listing
    assert "No devices in this organisation" not in listing
