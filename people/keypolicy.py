"""Who may hold which API keys (issue 20 items 4 and 5; docs/auth.md "API keys").

- Scopes that manage the organisation and its people (`ADMIN_ONLY_SCOPES`: orgs:write,
  users:write, teams:write) may be put on a key only by an owner or administrator of the
  organisation (the key's organisation: memberships, migration 0150); anyone else asking for
  one gets 403 naming it. A scope the user's role does not allow
  (people.roles.ROLE_SCOPES) is refused alike. Whatever a key holds, every request caps
  it by its user's role read at that request (people.principal), so demoting a user demotes
  their keys at once.
- A user holds at most SDS_API_MAX_KEYS_PER_USER keys (deactivated ones count: they can be
  reactivated); the next POST /apikeys is 409 saying so. The count is taken under a transaction
  lock per user, so parallel requests cannot pass the cap together.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from people import roles
from people.principal import Principal
from shared.errors import Conflict, Forbidden
from shared.locks import lock_key

ADMIN_ONLY_SCOPES = frozenset({"orgs:write", "users:write", "teams:write"})


def is_admin(conn: psycopg.Connection, principal: Principal) -> bool:
    """Whether the caller is an owner or administrator of the request's organisation (the
    role read with their credential at this request; `conn` is not needed for it)."""
    del conn
    return principal.manages


def check_scopes(conn: psycopg.Connection, principal: Principal, scopes: Iterable[str]) -> None:
    """Forbidden when a non-administrator asks for an administrators' scope, or anyone for a
    scope their role does not allow."""
    wanted = set(scopes)
    admins = sorted(ADMIN_ONLY_SCOPES & wanted)
    if admins and not is_admin(conn, principal):
        raise Forbidden(f"only an administrator of the organisation may grant {', '.join(admins)}")
    beyond = sorted(s for s in wanted if not roles.role_allows(principal.role, s))
    if beyond:
        raise Forbidden(f"your role in this organisation ({principal.role}) does not allow "
                        f"{', '.join(beyond)}")


def check_key_cap(conn: psycopg.Connection, principal: Principal, cap: int) -> None:
    """Conflict when the caller already holds `cap` keys (0: no cap). Locks the count until the
    transaction ends, so the key created in it is counted by the next request."""
    if cap <= 0:
        return
    # The shared.locks key scheme; a transaction lock: it ends with the transaction.
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(f"apikeys:{principal.user_id}"),))
    row = conn.execute("SELECT count(*) FROM api_keys WHERE user_id = %s",
                       (principal.user_id,)).fetchone()
    if row is not None and int(row[0]) >= cap:
        raise Conflict(f"you hold {row[0]} API keys, the most one user may have ({cap}); delete "
                       "keys you no longer use (DELETE /api/v2/apikeys/{id}) to make room")
