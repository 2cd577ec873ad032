"""Roles of a membership (docs/auth.md "Roles"): the one home of every role rule.

Which roles there are, which manage an organisation, which may be limited to the member's
teams, what each may do (its scopes), and that only an owner makes, unmakes, invites, removes
or resets an owner. Membership changes (people/members.py), invitations (people/links.py),
account creation (people/accounts.py), request authorisation (people/principal.py), the API
(serve/api/orgs.py) and the `sds` commands all ask here.
"""

from __future__ import annotations

from collections.abc import Iterable

from people.credentials import SCOPES
from shared.errors import BadParameter, Forbidden

OWNER = "owner"

ROLES = (OWNER, "admin", "member", "viewer")
"""Roles of a membership in an organisation, strongest first."""

MANAGER_ROLES = frozenset({OWNER, "admin"})
"""Roles that manage the organisation: its people, locations, the audit log, raw payloads."""

TEAMS_ONLY_ROLES = ("member", "viewer")
"""Roles that may be limited to the member's teams (memberships.teams_only, migration 0150)."""

_READ = frozenset(s for s in SCOPES if s.endswith(":read"))
# What each role may do. Every request's caller is capped by it: an API key acts with its own
# scopes intersected with its user's role's, a password or token caller with the role's, so a
# demotion demotes every key at the next request. users:write is everyone's: it is one's own
# name and preferences (PATCH /users/me); the views keep other people's records to the managers.
ROLE_SCOPES: dict[str, frozenset[str]] = {
    OWNER: frozenset(SCOPES),
    "admin": frozenset(SCOPES),
    "member": _READ | {"users:write", "annotations:write", "notifications:write"},
    "viewer": _READ | {"users:write"},
}


def role_allows(role: str | None, scope: str) -> bool:
    """Whether `role` (None: no membership) may act under `scope`."""
    return role is not None and scope in ROLE_SCOPES.get(role, frozenset())


def manages(role: str | None) -> bool:
    """Whether `role` manages the organisation (an owner or an admin)."""
    return role in MANAGER_ROLES


def is_owner(role: str | None) -> bool:
    """Whether `role` is the owner's (the only one that makes or unmakes owners)."""
    return role == OWNER


def check_role(role: str) -> str:
    """`role` when it is one of ROLES; BadParameter naming them otherwise."""
    if role not in ROLES:
        raise BadParameter(f"role: one of {', '.join(ROLES)}")
    return role


def check_teams_only(role: str, teams_only: bool) -> bool:
    """`teams_only` when `role` may be limited to its teams; BadParameter otherwise."""
    if teams_only and role not in TEAMS_ONLY_ROLES:
        raise BadParameter(f"teams_only: only for the roles {' and '.join(TEAMS_ONLY_ROLES)}")
    return teams_only


def keeps_teams_only(role: str, teams_only: bool) -> bool:
    """Whether a member limited to their teams (`teams_only`) stays so on taking `role`."""
    return teams_only and role in TEAMS_ONLY_ROLES


def check_owner_rule(*, by_owner: bool, roles: Iterable[str | None], action: str) -> None:
    """Only an owner (`by_owner`; the operator counts as one) acts on an owner: Forbidden
    ("only an owner of the organisation <action>") when one of `roles` (the role given, the
    role held) is the owner's and the caller is not one."""
    if not by_owner and OWNER in roles:
        raise Forbidden(f"only an owner of the organisation {action}")


def require_owner(role: str | None, action: str) -> None:
    """Forbidden ("only an owner of the organisation <action>") unless `role` is the owner's
    (the organisation's own SMTP settings: its email's sender and password)."""
    if not is_owner(role):
        raise Forbidden(f"only an owner of the organisation {action}")
