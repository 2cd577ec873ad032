"""Who is calling: the `Principal` an authenticated request carries, and `USER_ONLY`.

Its own module so that request authentication (`serve.auth`), the rate limiter
(`serve.ratelimit`) and the views can all name the caller without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from uuid import UUID

from shared import credentials

# The "scope" of actions no API key may take (key and token management): basic or bearer only.
USER_ONLY = "user"


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the user, their organisation, how they authenticated and, for an API
    key, its scopes (basic and bearer callers carry all of the user's rights)."""

    user_id: UUID
    org_id: UUID
    kind: str  # 'basic' | 'bearer' | 'apikey'
    scopes: frozenset[str] = field(default_factory=lambda: frozenset(credentials.SCOPES))
    token_id: UUID | None = None
    key_id: UUID | None = None
    via_query: bool = False  # authenticated with the deprecated ?apikey=

    def allows(self, scope: str) -> bool:
        """True when this caller may act under `scope` (USER_ONLY: not with an API key)."""
        if self.kind != "apikey":
            return True
        return scope != USER_ONLY and scope in self.scopes
