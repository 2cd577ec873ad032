"""Per-credential request rate limit (reliability plan S6): each API key, and each user calling
with basic or bearer credentials, may make `SDS_API_RATE_LIMIT` requests per
`SDS_API_RATE_WINDOW` seconds; the next one gets 429 with `Retry-After`.

The counters live in PostgreSQL (table `request_rate`, migration 0041), so the limit holds
across gunicorn workers and hosts: one upsert per authenticated request, on the connection the
authentication already holds. A window starts with a subject's first request and ends
`window` seconds later (a fixed window, like the failed-login count), so a client can make at
most twice the limit within any stretch of `window` seconds that straddles two windows.

flask-limiter / limits were considered: their shared storages are Redis, Memcached, MongoDB and
etcd, none of which this service runs, and pyrate-limiter's PostgreSQL bucket creates tables at
run time and refuses requests whenever two workers contend for its table lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import psycopg

from serve.principal import Principal

MAX_LIMIT = 2**31 - 2  # larger limits are this one (no one makes 2 billion requests a window)

# One statement: count this request in the subject's window, or start a new window when the
# old one has passed. LEAST caps a hammering client's count so the integer cannot overflow.
_HIT = (
    "INSERT INTO request_rate AS r (subject, window_start, requests) VALUES (%(s)s, now(), 1)"
    " ON CONFLICT (subject) DO UPDATE SET"
    " requests = CASE WHEN r.window_start + make_interval(secs => %(w)s) <= now() THEN 1"
    "   ELSE LEAST(r.requests + 1, %(cap)s) END,"
    " window_start = CASE WHEN r.window_start + make_interval(secs => %(w)s) <= now()"
    "   THEN now() ELSE r.window_start END"
    " RETURNING requests,"
    " extract(epoch FROM r.window_start + make_interval(secs => %(w)s) - now())::float8"
)


def subject_of(principal: Principal) -> str:
    """Whose budget a request spends: the API key's own, or the user's for basic and bearer
    (a user who mints more tokens gets no more requests)."""
    if principal.kind == "apikey" and principal.key_id is not None:
        return f"key:{principal.key_id}"
    return f"user:{principal.user_id}"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of counting one request: allowed, or refused with seconds to wait."""

    allowed: bool
    requests: int
    retry_after: int
    reset: int = 0  # seconds until the window ends (0 when no limit is configured)


class RateLimiter:
    """Counts requests per subject in the database; `limit` <= 0 turns the limit off."""

    def __init__(self, limit: int, window: int) -> None:
        # The count is a PostgreSQL integer and is capped at limit + 1: keep that in range.
        self.limit = min(limit, MAX_LIMIT)
        self.window = max(1, window)

    @property
    def enabled(self) -> bool:
        """False when no limit is configured."""
        return self.limit > 0

    def hit(self, conn: psycopg.Connection, principal: Principal) -> Verdict:
        """Count one request of `principal` (the caller commits) and say whether it may run."""
        if not self.enabled:
            return Verdict(True, 0, 0)
        row = conn.execute(_HIT, {"s": subject_of(principal), "w": self.window,
                                  "cap": self.limit + 1}).fetchone()
        assert row is not None  # INSERT ... RETURNING always returns the row
        requests, left = int(row[0]), float(row[1])
        reset = max(1, math.ceil(left))
        if requests <= self.limit:
            return Verdict(True, requests, 0, reset)
        return Verdict(False, requests, reset, reset)

    def headers(self, verdict: Verdict) -> dict[str, str]:
        """`RateLimit-Limit`, `-Remaining` and `-Reset` (seconds) for a counted request, so a
        client can pace itself before it meets a 429; none when no limit is configured."""
        if not self.enabled or not verdict.reset:
            return {}
        return {"RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": str(max(0, self.limit - verdict.requests)),
                "RateLimit-Reset": str(verdict.reset)}

    def message(self, principal: Principal, retry_after: int) -> str:
        """The 429 message: which budget ran out and when to retry."""
        whose = "this API key" if principal.kind == "apikey" else "this user"
        return (f"rate limit exceeded: {self.limit} requests per {self.window} s for {whose}; "
                f"retry in {retry_after} s")
