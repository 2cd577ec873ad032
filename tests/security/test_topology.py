"""The suite runs on the role topology that ships (issue 30).

deploy/services.sh makes the service's database from deploy/db/roles.sql and
deploy/db/extensions.sql and `deploy/run.sh` migrates it as the login role `sds`: no superuser,
owner of everything, member of the process roles. The tests' databases come from the same
files by the same steps (testbed/database.py), so what only a superuser gets away with (a policy
that recurses for the owner, a grant the owner lacks) fails here. These tests hold the suite to
that, and keep the one regression it let through: a teams-only member in a team.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from people import accounts, teams
from shared import db, places
from testbed import database

REPO = Path(__file__).resolve().parents[2]


def test_tests_connect_as_the_deployments_login_role(conn: psycopg.Connection) -> None:
    row = conn.execute(
        "SELECT current_user, rolsuper, rolbypassrls, rolcreaterole, rolcreatedb"
        " FROM pg_roles WHERE rolname = current_user").fetchone()
    assert row == (database.LOGIN_ROLE, False, False, False, False)
    member_of = {r for (r,) in conn.execute(
        "SELECT rolname FROM pg_roles WHERE pg_has_role(current_user, oid, 'MEMBER')"
        " AND rolname <> current_user AND rolname NOT LIKE 'pg\\_%'")}
    assert member_of == set(db.ROLES)
    owner = conn.execute("SELECT pg_get_userbyid(datdba) FROM pg_database"
                         " WHERE datname = current_database()").fetchone()
    assert owner == (database.LOGIN_ROLE,)


def test_the_login_role_owns_everything_the_migrations_made(conn: psycopg.Connection) -> None:
    foreign = conn.execute(
        "SELECT c.relname, pg_get_userbyid(c.relowner) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'v', 'm', 'p', 'S')"
        "   AND c.relowner <> 'sds'::regrole AND NOT EXISTS (SELECT 1 FROM pg_depend d"
        "   WHERE d.objid = c.oid AND d.deptype = 'e')"
        " UNION ALL"
        " SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p"
        " JOIN pg_namespace n ON n.oid = p.pronamespace"
        " WHERE n.nspname = 'public' AND p.proowner <> 'sds'::regrole"
        "   AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid"
        "   AND d.deptype = 'e')").fetchall()
    # The extensions' own objects (timescaledb, btree_gist) are the superuser's, as deployed.
    assert foreign == []


def test_deploy_makes_its_database_from_the_same_files() -> None:
    services = (REPO / "deploy" / "services.sh").read_text()
    for path in (database.ROLES_SQL, database.EXTENSIONS_SQL):
        assert path.exists()
        assert f'"$REPO/deploy/db/{path.name}"' in services
    # No second copy of the role list in the script: one way to make the roles.
    assert "CREATE ROLE %I NOLOGIN" not in services
    assert "CREATE EXTENSION" not in services


@pytest.fixture
def team_world(conn: psycopg.Connection) -> dict[str, object]:
    """One organisation, two devices, a team holding one of them and a teams-only member."""
    org = accounts.create_org(conn, name="Topology Org")
    uid = accounts.create_user(conn, org=org, email="t@example.org",
                               password="topology-password-1", role="member")
    places.register_device(conn, org=org, name="T1")
    places.register_device(conn, org=org, name="T2")
    team = teams.create_team(conn, org, "North field")["id"]
    teams.add_link(conn, org, team, "member", uid)
    teams.add_link(conn, org, team, "device", teams.device_of_org(conn, org, "T1"))
    conn.execute("UPDATE memberships SET teams_only = true WHERE user_id = %s", (uid,))
    conn.commit()
    return {"org": org, "user": uid}


def test_teams_only_member_reads_their_team_as_the_api_role(
        database_url: str, team_world: dict[str, object]) -> None:
    """On today's main this was `stack depth limit exceeded`: the team policies applied again
    inside the owner's-rights functions they call (migration 0162)."""
    with psycopg.connect(database_url) as c:
        db.set_request_scope(c, db.ROLE_API, team_world["org"], team_world["user"],
                             teams_only=True)
        names = [n for (n,) in c.execute("SELECT name FROM devices ORDER BY name")]
        team_names = [n for (n,) in c.execute("SELECT name FROM teams")]
    assert names == ["T1"]
    assert team_names == ["North field"]
