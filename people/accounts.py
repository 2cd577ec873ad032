"""Organisations, users, memberships and API keys: the write operations shared by the operator
CLI, the demo and the API. Functions take `conn` first and never commit. (Locations, devices and
deployments: shared/places.py.)"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID, uuid4

import psycopg
from psycopg import errors as pgerr
from psycopg.rows import dict_row

from people import credentials, roles
from shared.errors import BadParameter, Conflict, DuplicateName, UnknownObject

if TYPE_CHECKING:
    from shared.sealing import Sealer


def create_org(conn: psycopg.Connection, *, name: str) -> UUID:
    """A new organisation; DuplicateName when the name is taken."""
    try:
        with conn.transaction():
            row = conn.execute(
                "INSERT INTO organisations (name) VALUES (%s) RETURNING id", (name,)).fetchone()
    except pgerr.UniqueViolation:
        raise DuplicateName(f"organisation {name!r} already exists") from None
    assert row
    return cast(UUID, row[0])


def org_id(conn: psycopg.Connection, name_or_id: str) -> UUID:
    """The id of the organisation named (or identified by) `name_or_id`."""
    row = conn.execute(
        "SELECT id FROM organisations WHERE name = %s OR id::text = %s",
        (name_or_id, name_or_id)).fetchone()
    if not row:
        raise UnknownObject(f"unknown organisation {name_or_id!r}")
    return cast(UUID, row[0])


def create_user(
    conn: psycopg.Connection, *, org: UUID, email: str, password: str, name: str | None = None,
    role: str = "member", email_proven: bool = True,
) -> UUID:
    """A new user with an argon2id password hash, a member of `org` (their home organisation)
    with `role`; DuplicateName for a taken email (any case). `email_proven`: whether the email
    is proven (users.email_verified_at, migration 0165): the operator's accounts are vouched
    for; an account made from an invitation link shown to its inviter is not."""
    problem = credentials.password_problem(password)
    if problem:
        raise BadParameter(problem)
    if "@" not in email:
        raise BadParameter(f"email: {email!r} is not an email address")
    roles.check_role(role)
    # The id is made here, not RETURNING'd: under the API role (an accepted invitation,
    # people/links.py) the new row is not visible until its membership exists, and RETURNING
    # would have to read it.
    user = uuid4()
    try:
        with conn.transaction():
            conn.execute(
                "INSERT INTO users (id, org_id, email, name, password_hash, email_verified_at)"
                " VALUES (%s, %s, %s, %s, %s, CASE WHEN %s THEN now() END)",
                (user, org, email.strip(), name, credentials.hash_password(password),
                 email_proven))
            conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s, %s)",
                         (user, org, role))
    except pgerr.UniqueViolation:
        raise DuplicateName(f"a user with email {email!r} already exists") from None
    return user


def add_membership(conn: psycopg.Connection, *, user: UUID, org: UUID, role: str,
                   teams_only: bool = False) -> None:
    """Make an existing user a member of `org` with `role` (reactivating an account whose
    last membership had ended); Conflict when they are a member already."""
    roles.check_teams_only(roles.check_role(role), teams_only)
    try:
        with conn.transaction():
            conn.execute("INSERT INTO memberships (user_id, org_id, role, teams_only)"
                         " VALUES (%s, %s, %s, %s)", (user, org, role, teams_only))
            # A user whose memberships had all ended was deactivated (migration 0150); the new
            # one brings them back, homed in it.
            conn.execute("UPDATE users SET active = true, org_id = %s WHERE id = %s"
                         " AND NOT active", (org, user))
    except pgerr.UniqueViolation:
        raise Conflict("that user is a member of the organisation already") from None


def user_id(conn: psycopg.Connection, email: str) -> UUID:
    """The id of the user with `email` (case-insensitive)."""
    row = conn.execute(
        "SELECT id FROM users WHERE lower(email) = lower(%s)", (email,)).fetchone()
    if not row:
        raise UnknownObject(f"unknown user {email!r}")
    return cast(UUID, row[0])


def create_api_key(
    conn: psycopg.Connection, *, user: UUID, scopes: list[str], name: str = "",
    exp: datetime | None = None, active: bool = True, sealer: Sealer | None = None,
    org: UUID | None = None,
) -> dict[str, Any]:
    """A new API key for `user`, acting in `org` (None: their home organisation); the
    returned record holds the key value. With a `sealer`
    its sealed copy is stored too, so the owner can read it again (shared.sealing); without,
    the value is shown this once."""
    unknown = sorted(set(scopes) - set(credentials.SCOPES))
    if not scopes:
        raise BadParameter("scopes: at least one scope is required")
    if unknown:
        raise BadParameter(f"scopes: unknown scope(s) {', '.join(unknown)}; valid: "
                           + ", ".join(credentials.SCOPES))
    if exp is not None and exp <= datetime.now(UTC):
        raise BadParameter("exp: must be in the future")
    secret = credentials.new_api_key()
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(
            "INSERT INTO api_keys (user_id, org_id, name, prefix, last4, digest, sealed, scopes,"
            " exp, active, created_by) SELECT u.id, coalesce(%s, u.org_id), %s, %s, %s, %s, %s,"
            " %s, %s, %s, u.id FROM users u WHERE u.id = %s"
            " RETURNING id, name, scopes, exp, active, created, updated, created_by, last_seen",
            (org, name, secret.prefix, secret.last4, secret.digest,
             sealer.seal(secret.value) if sealer is not None else None, sorted(set(scopes)),
             exp, active, user))
        record = cur.fetchone()
    if record is None:
        raise UnknownObject(f"unknown user {user}")
    record["apikey"] = secret.value
    return record
