"""Who is calling: the `Principal` an authenticated request carries, and `USER_ONLY`.

Its own module so that request authentication (`serve.auth`), the rate limiter
(`serve.ratelimit`) and the views can all name the caller without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from people import credentials, roles

# The "scope" of actions no API key may take (key and token management): basic or bearer only.
USER_ONLY = "user"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the user, the organisation the request acts in, their role there (and
    whether they see only their teams), how they authenticated and, for an API key, its
    scopes. Every scope is capped by the role (people.roles.ROLE_SCOPES)."""

    user_id: UUID
    org_id: UUID
    kind: str  # 'basic' | 'bearer' | 'apikey'
    scopes: frozenset[str] = field(default_factory=lambda: frozenset(credentials.SCOPES))
    token_id: UUID | None = None
    key_id: UUID | None = None
    via_query: bool = False  # authenticated with the deprecated ?apikey=
    role: str = "viewer"  # the membership's role in org_id, read at every request
    teams_only: bool = False  # sees only their teams' devices and locations (app.teams_only)

    @property
    def manages(self) -> bool:
        """True for an owner or admin of the request's organisation."""
        return roles.manages(self.role)

    @property
    def owns(self) -> bool:
        """True for an owner of the request's organisation (who alone acts on owners)."""
        return roles.is_owner(self.role)

    def allows(self, scope: str) -> bool:
        """True when this caller may act under `scope`: their role allows it and, for an API
        key, the key holds it (USER_ONLY: any role, but not with an API key)."""
        if scope == USER_ONLY:
            return self.kind != "apikey"
        if not roles.role_allows(self.role, scope):
            return False
        return self.kind != "apikey" or scope in self.scopes
