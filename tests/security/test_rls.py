"""S20: database least privilege and row-level security as defence in depth.

Against the seeded two-organisation world (tests/support/access_world.py) on a real PostgreSQL:
the process roles of migration 0050 own nothing, the tenant tables have forced row-level
security, the API role with `app.org_id` = A sees none of B's rows and changes none of them,
sees nothing at all without `app.org_id`, the ingester can insert readings but not rewrite them
or read accounts, and the aggregate role can run the rollups. Seeding and checks run as the
deployment's login role `sds` (the owner, through its `owner_all` policies; testbed/database.py);
the probes run as the roles, exactly as the services switch
to them (shared.db.set_request_scope / set_role).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from uuid import UUID

import psycopg
import pytest
from psycopg import errors

from aggregate import jobs
from people import links
from shared import audit, db
from shared.config import Settings
from tests.support.access_world import World
from tests.support.figures import Figures

# Tenant table -> SQL giving its rows of organisation %(org)s (run as the superuser).
TENANT_ROWS = {
    "organisations": "SELECT id::text FROM organisations WHERE id = %(org)s",
    "users": "SELECT u.id::text FROM users u JOIN memberships m ON m.user_id = u.id"
             " WHERE m.org_id = %(org)s",
    "memberships": "SELECT user_id::text || org_id FROM memberships WHERE org_id = %(org)s",
    "locations": "SELECT id::text FROM locations WHERE org_id = %(org)s",
    "crop_coefficients": "SELECT c.location_id::text || c.start_date FROM crop_coefficients c"
                         " JOIN locations l ON l.id = c.location_id WHERE l.org_id = %(org)s",
    "devices": "SELECT id::text FROM devices WHERE org_id = %(org)s",
    "deployments": "SELECT d.id::text FROM deployments d JOIN devices v ON v.id = d.device_id"
                   " WHERE v.org_id = %(org)s",
    "api_keys": "SELECT id::text FROM api_keys WHERE org_id = %(org)s",
    "auth_tokens": "SELECT id::text FROM auth_tokens WHERE org_id = %(org)s",
    "alert_events": "SELECT id::text FROM alert_events WHERE org_id = %(org)s",
    "alert_rules": "SELECT id::text FROM alert_rules WHERE org_id = %(org)s",
    "alert_states": "SELECT rule_id::text || device FROM alert_states WHERE org_id = %(org)s",
    "alert_channels": "SELECT id::text FROM alert_channels WHERE org_id = %(org)s",
    "alert_deliveries": "SELECT id::text FROM alert_deliveries WHERE org_id = %(org)s",
    "org_smtp_settings": "SELECT org_id::text FROM org_smtp_settings WHERE org_id = %(org)s",
    "cold_files": "SELECT id::text FROM cold_files WHERE org_id = %(org)s",
    "alert_silences": "SELECT id::text FROM alert_silences WHERE org_id = %(org)s",
    "alert_digests": "SELECT org_id::text FROM alert_digests WHERE org_id = %(org)s",
    "audit_log": "SELECT id::text FROM audit_log WHERE org_id = %(org)s",
    "annotations": "SELECT id::text FROM annotations WHERE org_id = %(org)s",
    "teams": "SELECT id::text FROM teams WHERE org_id = %(org)s",
    "team_members": "SELECT team_id::text || user_id FROM team_members WHERE org_id = %(org)s",
    "team_devices": "SELECT team_id::text || device_id FROM team_devices"
                    " WHERE org_id = %(org)s",
    "team_locations": "SELECT team_id::text || location_id FROM team_locations"
                      " WHERE org_id = %(org)s",
    "one_time_links": "SELECT id::text FROM one_time_links WHERE org_id = %(org)s",
    "water_settings": "SELECT w.location_id::text FROM water_settings w JOIN locations l"
                      " ON l.id = w.location_id WHERE l.org_id = %(org)s",
    "irrigation_events": "SELECT e.id::text FROM irrigation_events e JOIN locations l"
                         " ON l.id = e.location_id WHERE l.org_id = %(org)s",
}
# The same key expression as the role sees it, and a harmless column to UPDATE in place.
KEY_OF = {
    "organisations": ("id::text", "name"),
    "users": ("id::text", "name"),
    "memberships": ("user_id::text || org_id", "role"),
    "locations": ("id::text", "name"),
    "crop_coefficients": ("location_id::text || start_date", "kc"),
    "devices": ("id::text", "model"),
    "deployments": ("id::text", "during"),
    "api_keys": ("id::text", "name"),
    "auth_tokens": ("id::text", "revoked_at"),
    "audit_log": ("id::text", "actor"),
    "alert_events": ("id::text", "acknowledged_at"),
    "alert_rules": ("id::text", "name"),
    "alert_states": ("rule_id::text || device", "value"),
    "alert_channels": ("id::text", "name"),
    "alert_deliveries": ("id::text", "last_error"),
    "org_smtp_settings": ("org_id::text", "host"),
    "cold_files": ("id::text", "path"),
    "alert_silences": ("id::text", "comment"),
    "alert_digests": ("org_id::text", "hour"),
    "annotations": ("id::text", "text"),
    "teams": ("id::text", "name"),
    "team_members": ("team_id::text || user_id", "added"),
    "team_devices": ("team_id::text || device_id", "added"),
    "team_locations": ("team_id::text || location_id", "added"),
    "one_time_links": ("id::text", "revoked_at"),
    "water_settings": ("location_id::text", "p"),
    "irrigation_events": ("id::text", "note"),
}
# What the API role may change at all (grants); RLS must hold on these. audit_log is
# append-only (INSERT and SELECT): its rows can be neither changed nor deleted.
API_WRITABLE = {"organisations": "UPDATE", "users": "UPDATE", "api_keys": "UPDATE DELETE",
                "memberships": "UPDATE DELETE", "deployments": "UPDATE",
                "auth_tokens": "UPDATE",
                "locations": "UPDATE", "crop_coefficients": "DELETE",
                "alert_events": "UPDATE", "alert_rules": "UPDATE DELETE",
                "alert_states": "DELETE", "alert_channels": "UPDATE DELETE",
                "org_smtp_settings": "UPDATE DELETE",
                "alert_silences": "UPDATE DELETE", "alert_digests": "UPDATE DELETE",
                "annotations": "UPDATE DELETE", "one_time_links": "UPDATE",
                "teams": "UPDATE DELETE", "team_members": "UPDATE DELETE",
                "team_devices": "UPDATE DELETE", "team_locations": "UPDATE DELETE",
                "water_settings": "UPDATE DELETE", "irrigation_events": "UPDATE DELETE"}

# Data hypertables: keyed by device name; a device belongs to one organisation (0051).
DATA_TABLES = ("calibrated", "hourly", "local_hourly", "daily", "health", "water_balance")

# Tables outside any organisation, and why RLS does not apply to them. With TENANT_ROWS and
# DATA_TABLES this classifies every table, so a new one cannot skip the review of its grants.
SERVICE_TABLES = {
    "quarantine": "bad MQTT input before a device is trusted; the ingester may only INSERT "
                  "(with COPY, which RLS would refuse); the API reads its organisation's rows "
                  "only through the view org_quarantine (0070)",
    "quarantine_budget": "what each device's quarantine rows cost per hour (0163); the ingester's "
                         "bookkeeping, not granted to the API",
    "quarantine_unkept": "rejections counted, not kept, over a device's budget (0163); read by "
                         "the operator's `sds quarantine stats`, not granted to the API",
    "rollup_dirty": "per-device bucket marks; written by the ingester, claimed by the rollups",
    "cold_relabels": "device moves over cold readings, queued by the move (INSERT only for the "
                     "API) and applied by the scheduler only when the location is of the "
                     "device's organisation (0230)",
    "recovery_files": "the recovery kit (0177): .state's files sealed with SDS_RECOVERY_KEY, "
                      "which the database never holds; written and read by the operator's "
                      "`sds`/run.sh as the owner, granted to no process role",
    "mail_outbox": "the durable outbox of link mail (0180): written only through owner's-rights "
                   "functions that mail a link made in the same transaction to its own email; "
                   "read and updated by the deliverer; not granted to the API",
    "reset_requests": "password-reset requests queued whatever the email (0255): written only "
                      "through an owner's-rights function the API calls, resolved and deleted by "
                      "the deliverer; not readable by the API",
    "aggregate_runs": "the rollup jobs' progress; not granted to the API",
    "job_runs": "the scheduler's run log; not granted to the API",
    "service_secrets": "the cursor HMAC secret, one row for the whole service",
    "login_failures": "the login throttle, keyed by a digest of the name tried",
    "request_rate": "rate-limit counters keyed by credential id",
    "schema_migrations": "applied migrations and their checksums; owner only",
    "alert_cursors": "how far the alert evaluator has read, per source table and device; "
                     "not granted to the API",
    "alert_event_fanout": "which alert events the deliverer has fanned out into deliveries "
                          "(event ids only); not granted to the API",
    "water_balance_dirty": "per device and location, the first day of the water balance to "
                           "recompute; written by a trigger and an owner's-rights function, "
                           "claimed by the rollups; not granted to the API",
}

_tally = {"tables": 0, "forced": 0, "data_tables": 0, "data_forced": 0, "cross_org_visible": 0,
          "cross_org_changed": 0}


@pytest.fixture(scope="module")
def rls_world(world: World) -> World:
    """The access world plus a crop coefficient schedule, an audit entry, alert rows, an
    annotation and a team in each organisation."""
    with psycopg.connect(world.url) as conn:
        for org in (world.org_a, world.org_b):
            audit.record(conn, org=org, actor=audit.OPERATOR, action="org.note",
                         target_type="org", target_id=org)
        conn.execute("INSERT INTO crop_coefficients (location_id, start_date, kc)"
                     " VALUES (%s, '2024-04-01', 0.4), (%s, '2024-04-01', 0.6)",
                     (world.loc_a, world.loc_b))
        for loc in (world.loc_a, world.loc_b):
            conn.execute("INSERT INTO water_settings (location_id, theta_fc, theta_wp,"
                         " root_depth, p) VALUES (%s, 0.3, 0.1, 1.0, 0.5)", (loc,))
            conn.execute("INSERT INTO irrigation_events (location_id, day, depth_mm)"
                         " VALUES (%s, '2024-04-01', 20)", (loc,))
        for table in DATA_TABLES:  # calibrated already holds both devices' readings
            if table != "calibrated":
                conn.execute(f"INSERT INTO {table} (time, device, location) VALUES"
                             " ('2024-04-01', %s, %s), ('2024-04-01', %s, %s)",
                             (world.dev_a, world.loc_a, world.dev_b, world.loc_b))
        conn.execute("INSERT INTO alert_events (org_id, kind, at, title) VALUES"
                     " (%s, 'test', now(), 'a'), (%s, 'test', now(), 'b')",
                     (world.org_a, world.org_b))
        for org in (world.org_a, world.org_b):
            conn.execute("WITH r AS (INSERT INTO alert_rules (org_id, name, kind, source,"
                         " column_name, op, threshold, clear_op, clear_threshold) VALUES"
                         " (%s, 'r', 'threshold', 'calibrated', 'tair', '<', 0, '>=', 0)"
                         " RETURNING id, org_id) INSERT INTO alert_states (rule_id, device,"
                         " org_id, status) SELECT id, 'd', org_id, 'ok' FROM r", (org,))
            conn.execute("WITH c AS (INSERT INTO alert_channels (org_id, name, kind) VALUES"
                         " (%s, 'c', 'mqtt') RETURNING id, org_id) INSERT INTO alert_deliveries"
                         " (event_id, org_id, channel_id) SELECT e.id, c.org_id, c.id FROM c"
                         " JOIN alert_events e ON e.org_id = c.org_id", (org,))
            conn.execute("INSERT INTO org_smtp_settings (org_id, host, port, security,"
                         " from_address) VALUES (%s, 'smtp.x.example', 587, 'starttls',"
                         " 'a@x.example')", (org,))
            conn.execute("INSERT INTO cold_files (org_id, month, path) VALUES"
                         " (%s, '2024-04-01', %s)", (org, f"org={org}/2024-04-x.parquet"))
            conn.execute("INSERT INTO alert_silences (org_id, kind, weekdays, start_minute,"
                         " end_minute, time_zone) VALUES (%s, 'mute', '{1}', 0, 60, 'UTC')",
                         (org,))
            conn.execute("INSERT INTO alert_digests (org_id) VALUES (%s)", (org,))
        for org, user, loc in ((world.org_a, world.a1, world.loc_a),
                               (world.org_b, world.b1, world.loc_b)):
            conn.execute("INSERT INTO annotations (org_id, location_id, start_time, text,"
                         " author_id) VALUES (%s, %s, now(), 'note', %s)", (org, loc, user))
            # A team of the organisation's user, location and device (migration 0155).
            team = conn.execute("INSERT INTO teams (org_id, name) VALUES (%s, 't')"
                                " RETURNING id", (org,)).fetchone()
            conn.execute("INSERT INTO team_members (team_id, org_id, user_id)"
                         " VALUES (%s, %s, %s)", (team[0], org, user))
            conn.execute("INSERT INTO team_locations (team_id, org_id, location_id)"
                         " VALUES (%s, %s, %s)", (team[0], org, loc))
            conn.execute("INSERT INTO team_devices (team_id, org_id, device_id)"
                         " SELECT %s, org_id, id FROM devices WHERE org_id = %s",
                         (team[0], org))
            links.invite(conn, Settings(), org=org, email="rls@x.example", role="member",
                         teams_only=False, actor=audit.OPERATOR, by_owner=True)
    return world


@contextmanager
def as_role(url: str, role: str, org: UUID | None = None) -> Iterator[psycopg.Connection]:
    """A connection switched to `role` (and organisation) the way the services switch; every
    change it makes is rolled back."""
    with psycopg.connect(url) as conn:
        db.set_request_scope(conn, role, org)
        try:
            yield conn
        finally:
            conn.rollback()


def rows_of(url: str, table: str, org: UUID) -> set[str]:
    """Keys of `table`'s rows of organisation `org`, seen by the superuser."""
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(TENANT_ROWS[table], {"org": org})}


def test_every_table_is_classified(rls_world: World) -> None:
    """A table added later must be placed in one of the three groups above, and tenant and data
    tables must be the ones with forced RLS (no other table has it)."""
    with psycopg.connect(rls_world.url) as conn:
        tables = dict(conn.execute(
            "SELECT c.relname, c.relrowsecurity AND c.relforcerowsecurity FROM pg_class c"
            " JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')").fetchall())
    classified = set(TENANT_ROWS) | set(DATA_TABLES) | set(SERVICE_TABLES)
    assert set(tables) - classified == set(), "classify these tables (tenant, data or service)"
    assert classified - set(tables) == set(), "classified tables that no longer exist"
    assert {t for t, forced in tables.items() if forced} == set(TENANT_ROWS) | set(DATA_TABLES)


def test_process_roles_own_nothing_and_cannot_log_in(rls_world: World) -> None:
    with psycopg.connect(rls_world.url) as conn:
        owned = conn.execute(
            "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner"
            " WHERE r.rolname = ANY(%s)", (list(db.ROLES),)).fetchone()
        funcs = conn.execute(
            "SELECT count(*) FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner"
            " WHERE r.rolname = ANY(%s)", (list(db.ROLES),)).fetchone()
        flags = conn.execute(
            "SELECT rolname, rolsuper, rolbypassrls, rolcanlogin, rolcreaterole, rolcreatedb"
            " FROM pg_roles WHERE rolname = ANY(%s) ORDER BY rolname",
            (list(db.ROLES),)).fetchall()
    assert owned == (0,) and funcs == (0,)
    assert [f[0] for f in flags] == sorted(db.ROLES)
    assert all(not any(f[1:]) for f in flags), flags


@pytest.mark.parametrize("table", sorted(TENANT_ROWS))
def test_tenant_table_has_forced_rls(rls_world: World, table: str) -> None:
    with psycopg.connect(rls_world.url) as conn:
        row = conn.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class"
                           " WHERE oid = to_regclass(%s)", (table,)).fetchone()
    _tally["tables"] += 1
    _tally["forced"] += int(row == (True, True))
    assert row == (True, True)


@pytest.mark.parametrize("table", sorted(TENANT_ROWS))
def test_api_role_sees_only_its_organisation(rls_world: World, table: str) -> None:
    mine = rows_of(rls_world.url, table, rls_world.org_a)
    theirs = rows_of(rls_world.url, table, rls_world.org_b)
    assert mine and theirs, "the world must hold rows of both organisations"
    key, _col = KEY_OF[table]
    with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn:
        # No WHERE on the organisation: the query-scoping bug RLS exists to contain.
        seen = {r[0] for r in conn.execute(f"SELECT {key} FROM {table}")}
    _tally["cross_org_visible"] += len(seen & theirs)
    assert seen == mine


@pytest.mark.parametrize("table", sorted(TENANT_ROWS))
def test_api_role_changes_no_row_of_another_organisation(rls_world: World, table: str) -> None:
    theirs = sorted(rows_of(rls_world.url, table, rls_world.org_b))
    key, col = KEY_OF[table]
    allowed = API_WRITABLE.get(table, "")
    for verb, stmt in (("UPDATE", f"UPDATE {table} SET {col} = {col} WHERE {key} = ANY(%s)"),
                       ("DELETE", f"DELETE FROM {table} WHERE {key} = ANY(%s)")):
        with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn:
            if verb in allowed:
                changed = conn.execute(stmt, (theirs,)).rowcount
                _tally["cross_org_changed"] += changed
                assert changed == 0, f"{verb} {table} reached {changed} rows of org B"
            else:
                with pytest.raises(errors.InsufficientPrivilege):
                    conn.execute(stmt, (theirs,))
    assert sorted(rows_of(rls_world.url, table, rls_world.org_b)) == theirs


def test_api_role_cannot_write_into_another_organisation(rls_world: World) -> None:
    with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn:
        with pytest.raises(errors.InsufficientPrivilege):  # WITH CHECK (org_id = app.org_id)
            conn.execute(
                "INSERT INTO api_keys (user_id, org_id, prefix, last4, digest, scopes,"
                " created_by) VALUES (%s, %s, 'x', 'x', 'x', '{}', %s)",
                (rls_world.b1, rls_world.org_b, rls_world.b1))
    with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn, \
            pytest.raises(errors.InsufficientPrivilege):
        conn.execute("UPDATE api_keys SET org_id = %s WHERE id = %s",
                     (rls_world.org_b, rls_world.key_ids["a2_all"]))


def test_api_role_adds_devices_and_locations_to_its_own_organisation_only(
        rls_world: World) -> None:
    """Migration 0200 lets the API role insert devices and locations (issue 34's fleet
    forms): api_tenant's WITH CHECK refuses a row of another organisation, and the role may
    set no column beyond the granted ones (a device's owner, a location's archived flag)."""
    for stmt, args in (
            ("INSERT INTO devices (org_id, name) VALUES (%s, 'rls-intruder')",
             (rls_world.org_b,)),
            ("INSERT INTO locations (org_id, name, tz_name) VALUES (%s, 'rls-intruder', 'UTC')",
             (rls_world.org_b,)),
            ("INSERT INTO devices (org_id, name, owner_id) VALUES (%s, 'rls-owned', %s)",
             (rls_world.org_a, rls_world.b1)),
            ("INSERT INTO locations (org_id, name, tz_name, archived) VALUES"
             " (%s, 'rls-archived', 'UTC', true)", (rls_world.org_a,))):
        with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn, \
                pytest.raises(errors.InsufficientPrivilege):
            conn.execute(stmt, args)
    with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn:
        conn.execute("INSERT INTO devices (org_id, name) VALUES (%s, 'rls-own-device')",
                     (rls_world.org_a,))  # allowed (rolled back by as_role)


def test_annotation_cannot_name_another_organisations_device_or_location(
        rls_world: World) -> None:
    """Migration 0110's WITH CHECK: an annotation of org A on org B's device or location is
    refused even with org A's own org_id (the subqueries see org A's devices only)."""
    with psycopg.connect(rls_world.url) as conn:
        dev_b = conn.execute("SELECT id FROM devices WHERE name = %s",
                             (rls_world.dev_b,)).fetchone()
    for column, target in (("device_id", dev_b[0] if dev_b else None),
                           ("location_id", rls_world.loc_b)):
        with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn, \
                pytest.raises(errors.InsufficientPrivilege):
            conn.execute(f"INSERT INTO annotations (org_id, {column}, start_time, text)"
                         " VALUES (%s, %s, now(), 'x')", (rls_world.org_a, target))


@pytest.mark.parametrize("table", sorted(TENANT_ROWS))
def test_api_role_without_organisation_sees_nothing(rls_world: World, table: str) -> None:
    with as_role(rls_world.url, db.ROLE_API, None) as conn:
        assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,)


@pytest.mark.parametrize("table", DATA_TABLES)
def test_api_role_reads_only_its_devices_data(rls_world: World, table: str) -> None:
    with psycopg.connect(rls_world.url) as conn:
        stored = {r[0] for r in conn.execute(f"SELECT DISTINCT device FROM {table}")}
    assert {rls_world.dev_a, rls_world.dev_b} <= stored
    with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn:
        seen = {r[0] for r in conn.execute(f"SELECT DISTINCT device FROM {table}")}
        # By location too: another organisation's location gives nothing either.
        foreign = conn.execute(f"SELECT count(*) FROM {table} WHERE location = %s",
                               (rls_world.loc_b,)).fetchone()
        with pytest.raises(errors.InsufficientPrivilege):
            conn.execute(f"DELETE FROM {table}")
    with as_role(rls_world.url, db.ROLE_API, None) as conn:
        nothing = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    _tally["data_tables"] += 1
    _tally["data_forced"] += int(_forced(rls_world.url, table))
    _tally["cross_org_visible"] += len(seen - {rls_world.dev_a, rls_world.dev_a_idle})
    assert seen == {rls_world.dev_a} and foreign == (0,) and nothing == (0,)


def _forced(url: str, table: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT relrowsecurity AND relforcerowsecurity FROM pg_class"
                           " WHERE oid = to_regclass(%s)", (table,)).fetchone()
    return bool(row and row[0])


def test_auth_role_reaches_one_credential_at_a_time(rls_world: World) -> None:
    """Before the organisation is known, credentials are looked up one row at a time through
    migration 0052's functions; the tables themselves give sds_auth ids and last_seen only."""
    with as_role(rls_world.url, db.ROLE_AUTH) as conn:
        row = conn.execute("SELECT org_id FROM sds_auth_user('B1@b.example')").fetchone()
        assert row == (rls_world.org_b,)
        assert conn.execute("SELECT count(*) FROM sds_auth_user('nobody@b.example')"
                            ).fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM sds_auth_api_key('\\x00', 60)").fetchone() == (0,)
    refused = ("SELECT email FROM users", "SELECT password_hash FROM users",
               "SELECT digest FROM api_keys", "SELECT scopes FROM api_keys",
               "SELECT * FROM auth_tokens", "SELECT * FROM devices", "SELECT * FROM locations",
               "SELECT * FROM calibrated", "SELECT * FROM organisations",
               "DELETE FROM api_keys", "UPDATE api_keys SET scopes = '{}'",
               "UPDATE users SET email = 'x@y.z'")
    for stmt in refused:
        with as_role(rls_world.url, db.ROLE_AUTH) as conn, \
                pytest.raises(errors.InsufficientPrivilege):
            conn.execute(stmt)
    for role in (db.ROLE_API, db.ROLE_INGEST, db.ROLE_AGGREGATE):  # the lookups are sds_auth's
        with as_role(rls_world.url, role) as conn, \
                pytest.raises(errors.InsufficientPrivilege):
            conn.execute("SELECT * FROM sds_auth_user('a1@a.example')")


def test_api_role_reads_its_devices_quarantine_only_through_the_view(rls_world: World) -> None:
    """Migration 0070: org_quarantine shows the rows of the request organisation's devices;
    nothing without an organisation, nothing of unregistered devices, no table access."""
    with psycopg.connect(rls_world.url) as conn:
        for device in (rls_world.dev_a, rls_world.dev_b, "never-registered"):
            conn.execute("INSERT INTO quarantine (topic, device, reason, detail, payload)"
                         " VALUES (%s, %s, 'bad_json', 'probe', 'x')",
                         (f"sensors/{device}/readings", device))
    seen = {}
    for org in (rls_world.org_a, rls_world.org_b, None):
        with as_role(rls_world.url, db.ROLE_API, org) as conn:
            seen[org] = {r[0] for r in conn.execute("SELECT device FROM org_quarantine")}
    assert seen[rls_world.org_a] == {rls_world.dev_a}
    assert seen[rls_world.org_b] == {rls_world.dev_b}
    assert seen[None] == set()
    for stmt in ("SELECT * FROM quarantine", "DELETE FROM org_quarantine",
                 "UPDATE org_quarantine SET reason = 'x'"):
        # Refused by grants, or as a view no one can write through: either way no change.
        with as_role(rls_world.url, db.ROLE_API, rls_world.org_a) as conn, \
                pytest.raises((errors.InsufficientPrivilege,
                               errors.ObjectNotInPrerequisiteState)):
            conn.execute(stmt)
    _tally["cross_org_visible"] += len(seen[rls_world.org_a] - {rls_world.dev_a})


def test_ingest_role_inserts_but_never_rewrites(rls_world: World) -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    with as_role(rls_world.url, db.ROLE_INGEST) as conn:
        conn.execute("INSERT INTO calibrated (time, device, location, tair)"
                     " VALUES (%s, %s, %s, 1.5)", (t, rls_world.dev_a, rls_world.loc_a))
        conn.execute("INSERT INTO quarantine (topic, reason, detail, payload)"
                     " VALUES ('sensors/x/readings', 'bad_json', 'probe', '\\x00')")
        conn.execute("INSERT INTO rollup_dirty (rollup, device, bucket) VALUES"
                     " ('hourly', %s, %s)", (rls_world.dev_a, t))
        assert conn.execute("SELECT count(*) FROM devices").fetchone()[0] >= 3
    refused = ("UPDATE calibrated SET tair = 0", "DELETE FROM calibrated",
               "TRUNCATE calibrated", "UPDATE health SET rssi = 0", "DELETE FROM quarantine",
               "SELECT * FROM quarantine", "DELETE FROM rollup_dirty",
               "UPDATE hourly SET tair = 0", "INSERT INTO daily (time, device) VALUES (now(), 'x')",
               "SELECT * FROM users", "SELECT * FROM api_keys", "SELECT * FROM auth_tokens",
               "SELECT * FROM organisations", "SELECT * FROM login_failures",
               "UPDATE devices SET org_id = org_id", "DELETE FROM devices",
               "UPDATE locations SET name = name")
    for stmt in refused:
        with as_role(rls_world.url, db.ROLE_INGEST) as conn, \
                pytest.raises(errors.InsufficientPrivilege):
            conn.execute(stmt)


def test_aggregate_role_runs_the_rollups(rls_world: World) -> None:
    """The rollup jobs, on a pool of the aggregate role, recompute marked buckets."""
    with psycopg.connect(rls_world.url) as conn:
        # Marks as the ingester writes them: UTC hour, and local hour and day in the zone.
        conn.execute(
            "INSERT INTO rollup_dirty (rollup, device, bucket)"
            " SELECT r, %(dev)s, CASE WHEN r = 'daily' THEN date_trunc('day', t, %(tz)s)"
            "  ELSE date_trunc('hour', t) END"
            " FROM (SELECT min(time) AS t FROM calibrated WHERE device = %(dev)s) c,"
            "  unnest(ARRAY['hourly', 'local_hourly', 'daily']) r ON CONFLICT DO NOTHING",
            {"dev": rls_world.dev_a, "tz": "America/Chicago"})
    settings = Settings(database_url=rls_world.url, metrics_port=0, aggregate_metrics_port=0)
    pool = db.make_pool(settings, name="rls-aggregate", role=db.ROLE_AGGREGATE)
    try:
        with pool.connection() as conn:
            assert conn.execute("SELECT current_user").fetchone() == (db.ROLE_AGGREGATE,)
        jobs.run_all(pool, settings, runner="rls-test")
    finally:
        pool.close()
    with psycopg.connect(rls_world.url) as conn:
        assert conn.execute("SELECT count(*) FROM rollup_dirty").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM hourly WHERE device = %s",
                            (rls_world.dev_a,)).fetchone()[0] > 0
        runs = conn.execute("SELECT count(*), bool_and(ok) FROM job_runs"
                            " WHERE runner = 'rls-test'").fetchone()
    assert runs == (3, True)
    with as_role(rls_world.url, db.ROLE_AGGREGATE) as conn, \
            pytest.raises(errors.InsufficientPrivilege):
        conn.execute("SELECT * FROM users")


def test_pool_role_is_set_on_connect_and_can_be_switched_off(rls_world: World) -> None:
    on = Settings(database_url=rls_world.url)
    off = Settings(database_url=rls_world.url, db_roles=False)
    with db.connect(on, role=db.ROLE_INGEST) as conn:
        assert conn.execute("SELECT current_user").fetchone() == (db.ROLE_INGEST,)
    with db.connect(off, role=db.ROLE_INGEST) as conn:
        assert conn.execute("SELECT current_user").fetchone() != (db.ROLE_INGEST,)


def test_record_figures(figures: Figures) -> None:
    """Runs last in this module: the S20 figures."""
    if not _tally["tables"]:
        pytest.skip("run with the tests above to record their totals")
    figures.record("s20_tenant_tables_forced_rls", f"{_tally['forced']}/{_tally['tables']}",
                   section="security", title="Tenant tables with ENABLE + FORCE row-level "
                   "security / tenant tables", target="all",
                   source="tests/security/test_rls.py")
    figures.record("s20_data_tables_forced_rls",
                   f"{_tally['data_forced']}/{_tally['data_tables']}", section="security",
                   title="Data hypertables with ENABLE + FORCE row-level security / data "
                   "hypertables", target="all", source="tests/security/test_rls.py")
    figures.record("s20_cross_org_rows_visible", _tally["cross_org_visible"],
                   section="security", title="Other organisation's rows visible to the API "
                   "role (unscoped SELECT, app.org_id = A)", target="0",
                   source="tests/security/test_rls.py")
    figures.record("s20_cross_org_rows_changed", _tally["cross_org_changed"],
                   section="security", title="Other organisation's rows changed by the API "
                   "role's UPDATE/DELETE", target="0", source="tests/security/test_rls.py")
    assert _tally["forced"] == _tally["tables"] > 0
    assert _tally["data_forced"] == _tally["data_tables"] > 0
    assert _tally["cross_org_visible"] == 0 and _tally["cross_org_changed"] == 0
