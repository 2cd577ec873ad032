"""One-time links (issue 23, docs/auth.md "Invitations and password reset"): invitations into an
organisation and password resets, made by the API (serve/api/invitations.py) and `sds user
invite|reset-link` (admin/invites.py), accepted at POST /api/v2/auth/accept.

A link is `SDS_PUBLIC_URL/dashboard/accept/<secret>`; the database keeps the secret's SHA-256
digest only (migration 0160). It works once, until it expires (SDS_INVITE_TTL, SDS_RESET_TTL)
or is revoked; a newer link of the same kind for the same email (or user) revokes the older
one. Accepting is throttled like a sign-in (serve.authenticator) and an unknown, used, expired,
revoked or malformed secret gets the one same 400. Every step is in the audit log.

Proven emails (issue 30, migration 0165, docs/auth.md "Proven emails and joining another
organisation"): a link whose secret went only to the email's inbox (`mailed_only`: a mailed
invitation, a reset asked for by email) proves the email when used; a link shown to its maker
proves nothing. An existing account is never joined to an organisation by a link alone: the
invitation waits until that account, signed in, accepts it (people/consent.py), and only an
account whose email is proven may.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from people import accounts, consent, credentials, logins, members, roles
from shared import audit, mail, mailbox
from shared.config import Settings
from shared.errors import BadParameter, BadRequest, Conflict, Forbidden, UnknownObject
from shared.timeutil import stamp

ACCEPT_PATH = "/dashboard/accept/"
"""Where a link points under SDS_PUBLIC_URL: the dashboard's accept page (serve/web/views.py)."""

REFUSED = ("this link is invalid, expired, revoked or already used; ask for a new one")
"""The one answer to every secret that does not accept (no oracle of which it was)."""


@dataclass(frozen=True)
class Issued:
    """A new link: its record id, the URL holding the secret (shown or mailed once), expiry."""

    id: UUID
    url: str
    expires: datetime


def link_url(settings: Settings, secret: str) -> str:
    """The accept page's URL for `secret`, under SDS_PUBLIC_URL (never a request's Host
    header, which a caller chooses)."""
    return settings.public_url.rstrip("/") + ACCEPT_PATH + secret


def _email(value: str) -> str:
    """An invited email, lower-cased (accounts' emails are matched without case)."""
    email = value.strip().lower()
    if "@" not in email or any(c.isspace() for c in email) or len(email) > 320 or \
            email.startswith("@") or email.endswith("@"):
        raise BadParameter(f"email: {value[:80]!r} is not an email address")
    return email


_REVOKE_INVITE_SQL = ("UPDATE one_time_links SET revoked_at = now() WHERE org_id = %s AND"
                      " purpose = %s AND email = %s AND used_at IS NULL AND revoked_at IS NULL")
_REVOKE_RESET_SQL = ("UPDATE one_time_links SET revoked_at = now() WHERE org_id = %s AND"
                     " purpose = %s AND user_id = %s AND used_at IS NULL AND revoked_at IS NULL")


def _insert(conn: psycopg.Connection, settings: Settings, *, purpose: str, org: UUID,
            email: str, actor: audit.Actor, ttl: int, role: str | None = None,
            teams_only: bool = False, user: UUID | None = None) -> Issued:
    """Store a new link (revoking the pending one it replaces) and return it."""
    # The pending link it replaces: an invitation by email (lower case), a reset by user.
    conn.execute(_REVOKE_INVITE_SQL if purpose == "invite" else _REVOKE_RESET_SQL,
                 (org, purpose, email if purpose == "invite" else user))
    secret = credentials.new_link()
    row = conn.execute(
        "INSERT INTO one_time_links (purpose, org_id, email, role, teams_only, user_id, inviter,"
        " inviter_label, digest, expires_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " now() + make_interval(secs => %s)) RETURNING id, expires_at",
        (purpose, org, email, role, teams_only, user, actor.user_id, actor.label[:320],
         secret.digest, ttl)).fetchone()
    assert row is not None
    return Issued(row[0], link_url(settings, secret.value), row[1])


# ---- invitations ---------------------------------------------------------------------------


def invite(conn: psycopg.Connection, settings: Settings, *, org: UUID, email: str, role: str,
           teams_only: bool, actor: audit.Actor, by_owner: bool) -> Issued:
    """Invite `email` into `org` with `role` (and `teams_only`): a new link (the previous
    pending invitation of that email is revoked). Only an owner (`by_owner`; the operator
    counts as one) invites an owner; Conflict when the email already is an active member."""
    email = _email(email)
    roles.check_teams_only(roles.check_role(role), teams_only)
    roles.check_owner_rule(by_owner=by_owner, roles=(role,), action="invites an owner")
    if _is_member(conn, org=org, email=email):
        raise Conflict(f"{email} is already a member of the organisation")
    issued = _insert(conn, settings, purpose="invite", org=org, email=email, actor=actor,
                     ttl=settings.invite_ttl, role=role, teams_only=teams_only)
    audit.record(conn, org=org, actor=actor, action="invite.create", target_type="invite",
                 target_id=issued.id, details={"email": email, "role": role,
                                               "teams_only": teams_only,
                                               "expires": stamp(issued.expires)})
    return issued


_INVITE_SQL = ("SELECT id, email, role, teams_only, inviter, inviter_label, created_at,"
               " expires_at FROM one_time_links")
# A page of pending invitations: the same columns, as one literal (no concatenation).
_PENDING_SQL = ("SELECT id, email, role, teams_only, inviter, inviter_label, created_at,"
                " expires_at FROM one_time_links WHERE org_id = %s AND purpose = 'invite' AND"
                " used_at IS NULL AND revoked_at IS NULL AND expires_at > now()"
                " ORDER BY created_at DESC, id LIMIT %s OFFSET %s")


def invite_record(row: dict[str, Any]) -> dict[str, Any]:
    """A served invitation (never its secret, which only its answer at creation holds)."""
    return {"id": str(row["id"]), "email": row["email"], "role": row["role"],
            "teams_only": row["teams_only"],
            "invited_by": {"user_id": None if row["inviter"] is None else str(row["inviter"]),
                           "label": row["inviter_label"]},
            "created": stamp(row["created_at"]), "expires": stamp(row["expires_at"])}


def fetch_invite(conn: psycopg.Connection, org: UUID, link: UUID) -> dict[str, Any]:
    """One pending invitation of `org`; UnknownObject for any other id."""
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute(_INVITE_SQL + " WHERE id = %s AND org_id = %s AND purpose = 'invite'"
                          " AND used_at IS NULL AND revoked_at IS NULL AND expires_at > now()",
                          (link, org)).fetchone()
    if row is None:
        raise UnknownObject(f"unknown invitation '{link}'")
    return row


def pending_invites(conn: psycopg.Connection, org: UUID, limit: int, offset: int
                    ) -> tuple[list[dict[str, Any]], int]:
    """One page of the organisation's pending invitations (newest first) and their total."""
    total = conn.execute("SELECT count(*) FROM one_time_links WHERE org_id = %s AND purpose ="
                         " 'invite' AND used_at IS NULL AND revoked_at IS NULL AND expires_at"
                         " > now()", (org,)).fetchone()
    with conn.cursor(row_factory=dict_row) as cur:
        rows = cur.execute(_PENDING_SQL, (org, limit, offset)).fetchall()
    return rows, int(total[0]) if total else 0


def revoke_invite(conn: psycopg.Connection, *, org: UUID, link: UUID,
                  actor: audit.Actor) -> None:
    """Revoke a pending invitation: its link answers like an unknown one from now on."""
    row = fetch_invite(conn, org, link)
    conn.execute("UPDATE one_time_links SET revoked_at = now() WHERE id = %s", (link,))
    audit.record(conn, org=org, actor=actor, action="invite.revoke", target_type="invite",
                 target_id=link, details={"email": row["email"], "role": row["role"]})


# ---- password reset links ------------------------------------------------------------------


def reset_link(conn: psycopg.Connection, settings: Settings, *, org: UUID, user: UUID,
               actor: audit.Actor, by_owner: bool) -> Issued:
    """A password-reset link for `user`, a member of `org` (made by a manager or the operator,
    and shown to them). UnknownObject for anyone else; Forbidden where the link would reach
    beyond what its maker manages (`_check_reset_allowed`)."""
    row = members.fetch_user(conn, user, org)
    if not row["active"]:
        raise UnknownObject(f"unknown user {user}")  # removed: no longer a member
    if actor != audit.OPERATOR:  # the operator reaches every organisation anyway
        _check_reset_allowed(conn, user=user, role=row["role"], by_owner=by_owner)
    issued = _insert(conn, settings, purpose="password_reset", org=org, email=row["email"],
                     actor=actor, ttl=settings.reset_ttl, user=user)
    audit.record(conn, org=org, actor=actor, action="user.reset_link", target_type="user",
                 target_id=user, details={"email": row["email"],
                                          "expires": stamp(issued.expires)})
    return issued


def request_reset(conn: psycopg.Connection, settings: Settings, *, email: str,
                  address: str) -> None:
    """POST /auth/password-reset: queue the request (migration 0255's `reset_requests`), one
    row whatever `email` is, with a new link's digest and its mail (SMTP configured), sealed
    before the call. The deliverer (python -m alerts.delivery) resolves it: for an active
    account the link, its mail in the durable outbox and the audit entry; any other request is
    dropped there. So the request does the same work for an account and for no account, and
    neither its answer nor its time tells which. Runs as sds_auth (before anyone is signed
    in)."""
    secret = credentials.new_link()
    expires = datetime.now(UTC) + timedelta(seconds=settings.reset_ttl)
    subject, text = message_text(purpose="password_reset", url=link_url(settings, secret.value),
                                 org_name="", role=None, expires=expires)
    on = mail.configured(settings)
    body = mailbox.seal(settings, text)
    # PostgreSQL text holds no NUL (the body loader refuses one anyway): a character no
    # account's email has stands in, so such a request is queued and dropped like any other.
    email = email.strip().replace("\x00", "\ufffd")[:320]
    with conn.transaction():
        conn.execute("SELECT sds_reset_request_queue(%s, %s, %s, %s, %s, %s, %s)",
                     (email, secret.digest,
                      settings.reset_ttl, address, subject if on else None,
                      body.data if on else None, body.sealed))


# ---- the membership step: what joining an organisation writes ----------------------------


def _is_member(conn: psycopg.Connection, *, org: UUID, email: str) -> bool:
    """Whether `email` is an active member of `org`."""
    try:
        user = accounts.user_id(conn, email)
        return bool(members.fetch_user(conn, user, org)["active"])
    except UnknownObject:  # no account, or (row-level security) none in this organisation
        return False


def _grant(conn: psycopg.Connection, *, org: UUID, user: UUID, role: str,
           teams_only: bool) -> bool:
    """Make `user` a member of `org` with `role`; False when they are one already (they keep
    the role they have: an invitation never demotes, nor promotes past a later change)."""
    try:
        accounts.add_membership(conn, user=user, org=org, role=role, teams_only=teams_only)
    except Conflict:
        return False
    return True


def _check_reset_allowed(conn: psycopg.Connection, *, user: UUID, role: str,
                         by_owner: bool) -> None:
    """A reset link taken by a manager opens the whole account: refused (403) for an owner
    unless the maker is one, and for a user who also belongs to another organisation, whose
    data this organisation's managers must not reach (they ask for a reset by email)."""
    roles.check_owner_rule(by_owner=by_owner, roles=(role,),
                           action="makes a reset link for an owner")
    row = conn.execute("SELECT sds_link_other_orgs(%s)", (user,)).fetchone()
    if row and row[0]:
        raise Forbidden("this user belongs to other organisations too: they reset their "
                        "password themselves (POST /api/v2/auth/password-reset), or the "
                        "operator makes the link (sds user reset-link)")


class Throttle(Protocol):
    """What accepting a link needs of the sign-in throttle (serve.authenticator.Authenticator):
    its settings, and the failure count per subject and address."""

    settings: Settings

    def check_throttle(self, conn: psycopg.Connection, email: str, address: str) -> None:
        """Raise when the subject or the address is locked out."""

    def record_failure(self, conn: psycopg.Connection, email: str, address: str) -> None:
        """Count one failure against the subject and the address."""


# ---- acceptance ----------------------------------------------------------------------------


def accept(conn: psycopg.Connection, auth: Throttle, *, secret: str, password: str | None,
           name: str | None, address: str, everywhere: bool = False) -> dict[str, Any]:
    """Accept a link: an invitation makes the account (Conflict for an email that has an
    active one: it accepts signed in, people.consent.accept_mine), a reset sets its password
    and revokes its bearer tokens (`everywhere`: and every API key, in every organisation).
    Throttled per link and per address like a sign-in; the caller commits (a failure rolls
    the link's use back, so a refused password keeps it)."""
    wanted = credentials.digest(secret)
    subject = "link:" + wanted.hex()
    auth.check_throttle(conn, subject, address)
    if password is not None and (problem := credentials.password_problem(password)):
        raise BadParameter(problem)
    row = conn.execute(
        "SELECT id, purpose, org_id, email, role, teams_only, user_id, mailed_only"
        " FROM sds_link_use(%s)",
        (wanted,)).fetchone() if credentials.well_formed(secret, credentials.LINK_PREFIX) \
        else None
    if row is None:
        auth.record_failure(conn, subject, address)
        conn.commit()  # the count must survive the 400 that follows
        raise BadRequest(REFUSED)
    link, purpose, org, email, role, teams_only, user, mailed_only = row
    existing = conn.execute("SELECT id, org_id, password_hash, active FROM sds_auth_user(%s)",
                            (email,)).fetchone()
    consent.act_in(conn, auth.settings, org)
    if purpose == "password_reset":
        return _accept_reset(conn, link=link, org=org, user=user, email=email,
                             password=password, address=address, mailed_only=mailed_only,
                             everywhere=everywhere)
    return _accept_invite(conn, link=link, org=org, email=email, role=role,
                          teams_only=teams_only, existing=existing, password=password,
                          name=name, address=address, mailed_only=mailed_only)


def _accept_reset(conn: psycopg.Connection, *, link: UUID, org: UUID, user: UUID, email: str,
                  password: str | None, address: str, mailed_only: bool,
                  everywhere: bool) -> dict[str, Any]:
    if password is None:
        raise BadParameter("password: required to reset the password")
    proven_before = consent.email_proven(conn, user)
    # A mailed reset of an account whose email was never proven is its recovery by the
    # email's owner: whatever the earlier holder made (tokens, keys, in any organisation) ends.
    recovered = mailed_only and not proven_before
    tokens = logins.revoke_tokens(conn, user=user)
    logins.change_password(conn, user=user, password=password)
    if mailed_only:
        consent.prove_email(conn, user)
    else:
        # A link shown to its maker (a manager, the operator) hands the account to whoever it
        # was given: that holder has not shown that the address is theirs.
        conn.execute("UPDATE users SET email_verified_at = NULL WHERE id = %s", (user,))
    # A reset link ends the other reset links of the user: one new password, one way in.
    conn.execute("UPDATE one_time_links SET revoked_at = now() WHERE user_id = %s"
                 " AND used_at IS NULL AND revoked_at IS NULL", (user,))
    done: dict[str, Any] = {"purpose": "password_reset", "user_id": str(user), "email": email,
                            "org_id": str(org), "tokens_revoked": tokens}
    if everywhere or recovered:
        ended = logins.revoke_everything(conn, user=user)
        done.update(tokens_revoked=tokens + ended.tokens, keys_deactivated=ended.keys,
                    signed_out_everywhere=True)
    audit.record(conn, org=org, actor=audit.Actor(label=email, via="link", user_id=user,
                                                  address=address),
                 action="user.password_reset", target_type="user", target_id=user,
                 details={"link": str(link), "email_proven": mailed_only,
                          **{k: v for k, v in done.items()
                             if k in ("tokens_revoked", "keys_deactivated",
                                      "signed_out_everywhere")}})
    return done


EXISTING_ACCOUNT = ("this email already has an account: sign in as it and accept the invitation "
                    "there (GET /api/v2/users/me/invitations, then POST "
                    "/api/v2/users/me/invitations/{id}/accept; the dashboard's Invitations "
                    "page). If the account is not yours, ask for a password reset by email "
                    "(POST /api/v2/auth/password-reset) or the operator")
"""The 409 of a link for an email that has an active account: a link alone never joins it."""


def _accept_invite(conn: psycopg.Connection, *, link: UUID, org: UUID, email: str, role: str,
                   teams_only: bool, existing: Any, password: str | None, name: str | None,
                   address: str, mailed_only: bool) -> dict[str, Any]:
    if existing is not None and existing[3]:
        # An active account is joined only by its own consent, signed in (consent.py): whoever
        # holds a link may not be whoever holds the account (issue 30). Rolled back by the
        # caller, so the invitation stays pending for that consent.
        raise Conflict(EXISTING_ACCOUNT)
    if password is None:
        raise BadParameter("password: required to create the account")
    account = "created" if existing is None else "reactivated"
    if existing is None:
        # The email is proven only when the link went to its inbox alone, never when it was
        # shown to the inviter (SMTP off, or the mail refused).
        user = accounts.create_user(conn, org=org, email=email, password=password,
                                    name=name, role=role, email_proven=mailed_only)
        if teams_only:
            members.set_role(conn, org=org, user=user, role=role, teams_only=True,
                             by_owner=True)  # the inviter's right was checked at invite
    else:
        # An account whose memberships had all ended (deactivated): the new one brings it
        # back, and the password of the link's taker replaces the forgotten old one. The
        # taker is a new holder: nothing of the old one's stays, and the email is proven
        # as this link proves it.
        user = existing[0]
        _grant(conn, org=org, user=user, role=role, teams_only=teams_only)
        logins.change_password(conn, user=user, password=password)
        logins.revoke_everything(conn, user=user)
        conn.execute("UPDATE users SET email_verified_at = CASE WHEN %s THEN now() END"
                     " WHERE id = %s", (mailed_only, user))
    audit.record(conn, org=org, actor=audit.Actor(label=email, via="link", user_id=user,
                                                  address=address),
                 action="invite.accept", target_type="user", target_id=user,
                 details={"link": str(link), "email": email, "role": role,
                          "teams_only": teams_only, "account": account})
    return {"purpose": "invite", "user_id": str(user), "email": email, "org_id": str(org),
            "role": role, "teams_only": teams_only, "account": account}


def peek(conn: psycopg.Connection, secret: str) -> dict[str, Any] | None:
    """What the accept page shows of a live link (purpose, email, role, organisation, expiry,
    whether the email has an account); None for any other secret."""
    if not credentials.well_formed(secret, credentials.LINK_PREFIX):
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        row = cur.execute("SELECT purpose, email, role, org_name, expires_at, account"
                          " FROM sds_link_peek(%s)", (credentials.digest(secret),)).fetchone()
    return row


# ---- mail ----------------------------------------------------------------------------------


def message_text(*, purpose: str, url: str, org_name: str, role: str | None,
                 expires: datetime) -> tuple[str, str]:
    """(subject, text) of a link's email."""
    until = expires.strftime("%Y-%m-%d %H:%M UTC")
    if purpose == "invite":
        return (f"You are invited to {org_name}",
                f"You are invited to join {org_name} as {role}.\n\nOpen this link to accept "
                f"(it works once, until {until}):\n\n{url}\n\nIf you did not expect this, "
                "ignore this email.\n")
    return ("Reset your password",
            f"Someone (hopefully you) asked to reset the password of this account.\n\nOpen this "
            f"link to choose a new one (it works once, until {until}):\n\n{url}\n\nIf you did not "
            "ask, ignore this email: your password stays as it is.\n")


def queue_mail(conn: psycopg.Connection, settings: Settings, issued: Issued, *, purpose: str,
               org_name: str, role: str | None, mailed_only: bool) -> None:
    """Queue the email of a link made in this same transaction in the durable outbox
    (shared/mailbox.py): committed with the link, sent and retried by the deliverer.
    `mailed_only`: the link is not also shown, so using it proves the email."""
    subject, text = message_text(purpose=purpose, url=issued.url, org_name=org_name, role=role,
                                 expires=issued.expires)
    mailbox.queue_link(conn, settings, link=issued.id, subject=subject, text=text,
                       mailed_only=mailed_only)
