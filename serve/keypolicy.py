"""Who may hold which API keys (issue 20 items 4 and 5; docs/auth.md "API keys").

- Scopes that manage the organisation and its people (`ADMIN_ONLY_SCOPES`: orgs:write,
  users:write, teams:write) may be put on a key only by an administrator of the organisation
  (`users.is_admin`); anyone else asking for one gets 403 naming it. Every other scope is the
  user's own to grant. The routes that honour them (/orgs, /users) also check at every
  request that the key's owner still is an administrator, so demoting a user demotes their
  keys at once.
- A user holds at most SDS_API_MAX_KEYS_PER_USER keys (deactivated ones count: they can be
  reactivated); the next POST /apikeys is 409 saying so. The count is taken under a transaction
  lock per user, so parallel requests cannot pass the cap together.
"""

from __future__ import annotations

from collections.abc import Iterable

import psycopg

from serve.principal import Principal
from shared.errors import Conflict, Forbidden
from shared.locks import lock_key

ADMIN_ONLY_SCOPES = frozenset({"orgs:write", "users:write", "teams:write"})


def is_admin(conn: psycopg.Connection, principal: Principal) -> bool:
    """Whether the caller administers their organisation."""
    row = conn.execute("SELECT is_admin FROM users WHERE id = %s AND org_id = %s",
                       (principal.user_id, principal.org_id)).fetchone()
    return bool(row and row[0])


def check_scopes(conn: psycopg.Connection, principal: Principal, scopes: Iterable[str]) -> None:
    """Forbidden when a non-administrator asks for an administrators' scope."""
    wanted = sorted(ADMIN_ONLY_SCOPES.intersection(scopes))
    if wanted and not is_admin(conn, principal):
        raise Forbidden(f"only an administrator of the organisation may grant {', '.join(wanted)}")


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
