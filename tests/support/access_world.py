"""The access world: a seeded two-organisation database for the access and security tests.

Org A has users a1 and a2, two devices (one deployed) and a location; org B has user b1, a
device and a location. a1 holds API keys of every kind the authorization matrix needs (one per
scope, one without any needed scope, expired, deactivated, deleted) and bearer tokens (live,
expired, revoked). Read-mostly tests share it in a module-scoped database; tests that change
it seed a database of their own (`fresh_world`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
import pytest

from people import accounts, credentials
from shared import places
from tests.support import readings
from tests.support.ingesting import now_slot

PASSWORDS = {"a1@a.example": "a1-correct-horse", "a2@a.example": "a2-battery-staple",
             "b1@b.example": "b1-tr0ub4dor-and"}
ALL_READ = ["data:read", "devices:read", "locations:read", "apikeys:read"]
KEY_SCOPES = {
    "all": ALL_READ,
    "data": ["data:read"],
    "devices": ["devices:read"],
    "locations": ["locations:read"],
    "apikeys": ["apikeys:read"],
    "notifications_read": ["notifications:read"],
    "notifications_write": ["notifications:write"],
    "annotations_read": ["annotations:read"],
    "annotations_write": ["annotations:write"],
    "notifications": ["notifications:read", "notifications:write"],
    "users": ["users:read"],
    "users_write": ["users:write"],
    "orgs": ["orgs:read"],
    "orgs_write": ["orgs:write"],
    "teams_read": ["teams:read"],
    "teams_write": ["teams:write"],
    "none": ["teams:read"],  # a valid scope; the matrix uses "data" where teams:read is needed
    "expired": ALL_READ,
    "inactive": ALL_READ,
    "deleted": ALL_READ,
}


@dataclass
class World:
    """Ids, names and raw secrets of the seeded objects (secrets exist only here and in the
    responses that hand them out; the database holds digests)."""

    url: str
    org_a: UUID
    org_b: UUID
    a1: UUID
    a2: UUID
    b1: UUID
    loc_a: UUID
    loc_b: UUID
    dev_a: str = "A000101"
    dev_a_idle: str = "A000102"
    dev_b: str = "B000201"
    keys: dict[str, str] = field(default_factory=dict)
    key_ids: dict[str, UUID] = field(default_factory=dict)
    tokens: dict[str, str] = field(default_factory=dict)
    channel_a: UUID | None = None  # an alert delivery channel of org A (issue 24)
    silence_a: UUID | None = None  # an expired silence of org A's device (holds nothing)
    annotation_a: UUID | None = None  # an annotation of org A on its location

    def secrets(self) -> list[str]:
        """Every raw password, key and token of the world."""
        return [*PASSWORDS.values(), *self.keys.values(), *self.tokens.values()]


def basic(email: str, password: str | None = None) -> dict[str, str]:
    """Authorization header for Basic email:password (the seeded password by default)."""
    raw = f"{email}:{PASSWORDS[email] if password is None else password}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def bearer(token: str) -> dict[str, str]:
    """Authorization header for a bearer token."""
    return {"Authorization": f"Bearer {token}"}


def apikey(key: str) -> dict[str, str]:
    """Authorization header for an API key."""
    return {"Authorization": f"Apikey {key}"}


def reset_memberships(conn: psycopg.Connection, world: World) -> None:
    """a1 administers org A, a2 is a member of it, b1 administers org B, all active and at
    home there, and no other membership (tests that change memberships call this first)."""
    conn.execute("DELETE FROM memberships")
    conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s, 'admin'),"
                 " (%s, %s, 'member'), (%s, %s, 'admin')",
                 (world.a1, world.org_a, world.a2, world.org_a, world.b1, world.org_b))
    conn.execute("UPDATE users SET active = true, org_id = CASE WHEN id = %s THEN %s::uuid"
                 " ELSE %s::uuid END", (world.b1, world.org_b, world.org_a))


def insert_token(conn: psycopg.Connection, user: UUID, *, expires_in: timedelta,
                 revoked: bool = False) -> str:
    """A bearer token stored as the service stores it (digest only)."""
    secret = credentials.new_token()
    conn.execute(
        "INSERT INTO auth_tokens (user_id, digest, expires_at, revoked_at)"
        " VALUES (%s, %s, now() + %s, CASE WHEN %s THEN now() END)",
        (user, secret.digest, expires_in, revoked))
    return secret.value


def new_key(conn: psycopg.Connection, user: UUID, scopes: list[str]) -> tuple[UUID, str]:
    """(id, value) of a new API key of `user`."""
    record = accounts.create_api_key(conn, user=user, scopes=scopes, name="test")
    return record["id"], record["apikey"]


def _readings(conn: psycopg.Connection, device: str, location: UUID, n: int) -> None:
    readings.insert_readings(conn, device, location, readings.series(
        now_slot(60), n=n, tair=lambda i, _t: 20.0 + i, rh=0.5, precip=0.2))
    # The ingester keeps these on the devices row as messages arrive; seeded the same way.
    conn.execute("UPDATE devices SET last_seen = now(), last_post = now(), batt_pct = 87.5,"
                 " signal_strength = -71 WHERE name = %s", (device,))


def seed(url: str) -> World:
    """Create the world in the database at `url`."""
    with psycopg.connect(url) as conn:
        org_a = accounts.create_org(conn, name="Org A")
        org_b = accounts.create_org(conn, name="Org B")
        a1 = accounts.create_user(conn, org=org_a, email="a1@a.example",
                                  password=PASSWORDS["a1@a.example"])
        a2 = accounts.create_user(conn, org=org_a, email="a2@a.example",
                                  password=PASSWORDS["a2@a.example"])
        b1 = accounts.create_user(conn, org=org_b, email="b1@b.example",
                                  password=PASSWORDS["b1@b.example"])
        loc_a = places.create_location(conn, org=org_a, loc=places.LocationInput(
            name="North field", tz_name="America/Chicago", lat=41.9, lon=-93.6, elev=290))
        loc_b = places.create_location(conn, org=org_b, loc=places.LocationInput(
            name="South vineyard", tz_name="Australia/Sydney", lat=-33.9, lon=151.2))
        world = World(url, org_a, org_b, a1, a2, b1, loc_a, loc_b)
        places.register_device(conn, org=org_a, name=world.dev_a, model="Mark 3")
        places.register_device(conn, org=org_a, name=world.dev_a_idle)
        places.register_device(conn, org=org_b, name=world.dev_b)
        since = datetime.now(UTC) - timedelta(days=2)
        places.deploy_device(conn, device=world.dev_a, location=loc_a, start=since)
        places.deploy_device(conn, device=world.dev_b, location=loc_b, start=since)
        _readings(conn, world.dev_a, loc_a, 6)
        _readings(conn, world.dev_b, loc_b, 6)
        for name, scopes in KEY_SCOPES.items():
            world.key_ids[name], world.keys[name] = new_key(conn, a1, scopes)
        # Org B's key reads whatever org A's callers read, so its cells differ by tenancy only.
        world.key_ids["b_all"], world.keys["b_all"] = new_key(
            conn, b1, [*ALL_READ, "users:read", "users:write", "orgs:read",
                       "notifications:read", "notifications:write", "teams:read"])
        world.key_ids["a2_all"], world.keys["a2_all"] = new_key(conn, a2, ALL_READ)
        row = conn.execute("INSERT INTO alert_channels (org_id, name, kind) VALUES"
                           " (%s, 'valve', 'mqtt') RETURNING id", (org_a,)).fetchone()
        world.channel_a = row[0] if row else None
        row = conn.execute("INSERT INTO alert_silences (org_id, kind, device, starts_at, ends_at)"
                           " VALUES (%s, 'silence', %s, now() - interval '2 days',"
                           " now() - interval '1 day')"
                           " RETURNING id", (org_a, world.dev_a)).fetchone()
        world.silence_a = row[0] if row else None
        conn.execute("UPDATE api_keys SET exp = now() - interval '1 hour' WHERE id = %s",
                     (world.key_ids["expired"],))
        conn.execute("UPDATE api_keys SET active = false WHERE id = %s",
                     (world.key_ids["inactive"],))
        conn.execute("DELETE FROM api_keys WHERE id = %s", (world.key_ids["deleted"],))
        world.tokens["live"] = insert_token(conn, a1, expires_in=timedelta(hours=1))
        world.tokens["expired"] = insert_token(conn, a1, expires_in=timedelta(seconds=-1))
        world.tokens["revoked"] = insert_token(conn, a1, expires_in=timedelta(hours=1),
                                               revoked=True)
        world.tokens["b_live"] = insert_token(conn, b1, expires_in=timedelta(hours=1))
        row = conn.execute("INSERT INTO annotations (org_id, location_id, start_time, text,"
                           " author_id) VALUES (%s, %s, now(), 'hail', %s) RETURNING id",
                           (org_a, loc_a, a1)).fetchone()
        world.annotation_a = row[0] if row else None
        conn.commit()
    return world


# ---- fixtures (a conftest registers them by importing them) -----------------------------------


@pytest.fixture(scope="module")
def world(module_db: str) -> World:
    """The seeded world, shared by a module."""
    return seed(module_db)


@pytest.fixture(scope="module")
def admins(world: World) -> None:
    """a1 administers org A and b1 org B; a2 is a plain member of org A (a module that needs
    this asks with `pytestmark = pytest.mark.usefixtures("admins")`)."""
    with psycopg.connect(world.url) as conn:
        conn.execute("UPDATE memberships SET role = 'admin' WHERE user_id IN (%s, %s)",
                     (world.a1, world.b1))


@pytest.fixture(scope="module")
def app_overrides() -> dict[str, Any]:
    """Throttling thresholds high, so repeated wrong passwords in the matrix are 401s, not
    429s (throttling has its own tests)."""
    return {"login_max_failures": 10_000, "login_address_max_failures": 10_000}


@pytest.fixture
def fresh_world(database_url: str) -> World:
    """The world in a database of its own (for tests that change or count things)."""
    return seed(database_url)
