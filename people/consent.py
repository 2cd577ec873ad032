"""An existing account's consent to join another organisation, and proven emails (issue 30
section 3; migration 0165; docs/auth.md "Proven emails and joining another organisation").

An account whose email was never proven (its invitation link was shown to the inviter, not
mailed) must not join a second organisation: whoever made it may not own the address. An
existing account joins only by its own consent, signed in: `accept_mine` takes one of its
pending invitations (`my_invitations`), and only when its email is proven
(users.email_verified_at), or the link mailed to it is presented. people/links.py makes the
invitations and proves emails on a mailed link's use.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from people import accounts, credentials
from shared import audit
from shared.config import Settings
from shared.db import ROLE_API, role_for
from shared.errors import Conflict, UnknownObject
from shared.timeutil import stamp

UNPROVEN = ("the email of this account is not proven, so it cannot join another organisation: "
            "accept with the link that was mailed to it (\"token\"), reset the password through "
            "a link mailed to it (POST /api/v2/auth/password-reset), or ask the operator to "
            "vouch for it (sds user verify)")
"""The 409 of an unproven account's consent to join an organisation."""


def act_in(conn: psycopg.Connection, settings: Settings, org: UUID) -> None:
    """For the rest of this transaction, work as the API role in the link's organisation: the
    link (or the invitation consented to) is the credential, its organisation the request's
    (row-level security applies)."""
    role = role_for(settings, ROLE_API)
    if role is None:
        conn.execute("SELECT set_config('app.org_id', %s, true)", (str(org),))
    else:
        conn.execute("SELECT set_config('role', %s, true), set_config('app.org_id', %s, true)",
                     (role, str(org)))


def email_proven(conn: psycopg.Connection, user: UUID) -> bool:
    """Whether the account's email was proven (users.email_verified_at, migration 0165)."""
    row = conn.execute("SELECT email_verified_at IS NOT NULL FROM users WHERE id = %s",
                       (user,)).fetchone()
    return bool(row and row[0])


def prove_email(conn: psycopg.Connection, user: UUID) -> None:
    """Record that the account's email is proven now (unless it was already)."""
    conn.execute("UPDATE users SET email_verified_at = now() WHERE id = %s"
                 " AND email_verified_at IS NULL", (user,))


def my_invitations(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """The request's user's pending invitations (app.user_id): live ones of their email into
    organisations they are not in, newest first (sds_my_invitations, migration 0165)."""
    with conn.cursor(row_factory=dict_row) as cur:
        return cur.execute("SELECT id, org_id, org_name, role, teams_only, inviter_label,"
                           " created_at, expires_at FROM sds_my_invitations()").fetchall()


def my_invitation_record(row: dict[str, Any]) -> dict[str, Any]:
    """A served pending invitation of the caller's."""
    return {"id": str(row["id"]), "org_id": str(row["org_id"]), "org_name": row["org_name"],
            "role": row["role"], "teams_only": row["teams_only"],
            "invited_by": row["inviter_label"], "created": stamp(row["created_at"]),
            "expires": stamp(row["expires_at"])}


def accept_mine(conn: psycopg.Connection, settings: Settings, *, user: UUID, link: UUID,
                secret: str | None, actor: audit.Actor) -> dict[str, Any]:
    """The signed-in `user` accepts their pending invitation `link`: they join its
    organisation with its role. Only an account whose email is proven joins (Conflict
    otherwise, and the invitation stays pending); presenting the link's `secret` proves it
    when that link went only to the inbox. UnknownObject for any invitation not theirs."""
    wanted = credentials.digest(secret) if secret and \
        credentials.well_formed(secret, credentials.LINK_PREFIX) else None
    row = conn.execute("SELECT org_id, email, role, teams_only, proven"
                       " FROM sds_my_invitation_use(%s, %s)", (link, wanted)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown invitation '{link}'")
    org, email, role, teams_only, proven_now = row
    if not proven_now and not email_proven(conn, user):
        raise Conflict(UNPROVEN)
    if proven_now:
        prove_email(conn, user)
    act_in(conn, settings, org)
    accounts.add_membership(conn, user=user, org=org, role=role, teams_only=teams_only)
    audit.record(conn, org=org, actor=actor, action="invite.accept", target_type="user",
                 target_id=user, details={"invitation": str(link), "email": email,
                                          "role": role, "teams_only": teams_only,
                                          "account": "existing", "email_proven": proven_now})
    return {"purpose": "invite", "user_id": str(user), "email": email, "org_id": str(org),
            "role": role, "teams_only": teams_only, "account": "existing"}
