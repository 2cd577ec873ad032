"""Request rate limits (reliability plan S6, issue 20 item 4): each API key, and each user calling
with basic or bearer credentials, may make `SDS_API_RATE_LIMIT` requests per
`SDS_API_RATE_WINDOW` seconds; on top of that each user, over all their keys and tokens, may make
`SDS_API_USER_RATE_LIMIT`, and each organisation, over all its users, `SDS_API_ORG_RATE_LIMIT`
(so minting more keys buys no more requests). The first budget that runs out answers 429 with
`Retry-After` and says which it was. (Requests in flight at once: serve.fairshare.)

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

from people.principal import Principal
from shared.config import Settings

MAX_LIMIT = 2**31 - 2  # larger limits are this one (no one makes 2 billion requests a window)

# One statement: count this request in each of its subjects' windows, or start a new window
# where the old one has passed. LEAST caps a hammering client's count so the integer cannot
# overflow. Subjects come sorted, so concurrent requests lock shared rows (the organisation's)
# in one order and cannot deadlock.
_HIT = (
    "INSERT INTO request_rate AS r (subject, window_start, requests)"
    " SELECT s, now(), 1 FROM unnest(%(s)s::text[]) AS s ORDER BY s"
    " ON CONFLICT (subject) DO UPDATE SET"
    " requests = CASE WHEN r.window_start + make_interval(secs => %(w)s) <= now() THEN 1"
    "   ELSE LEAST(r.requests + 1, %(cap)s) END,"
    " window_start = CASE WHEN r.window_start + make_interval(secs => %(w)s) <= now()"
    "   THEN now() ELSE r.window_start END"
    " RETURNING subject, requests,"
    " extract(epoch FROM r.window_start + make_interval(secs => %(w)s) - now())::float8"
)
WHOSE = {"key": "this API key", "user": "this user", "user-all": "this user's keys and "
         "tokens together", "org": "this organisation"}


def subject_of(principal: Principal) -> str:
    """Whose budget a request spends: the API key's own, or the user's for basic and bearer
    (a user who mints more tokens gets no more requests)."""
    if principal.kind == "apikey" and principal.key_id is not None:
        return f"key:{principal.key_id}"
    return f"user:{principal.user_id}"


def subjects_of(principal: Principal) -> list[str]:
    """Every budget a request spends: its credential's (subject_of), its user's over all their
    credentials, and its organisation's."""
    return [subject_of(principal), f"user-all:{principal.user_id}", f"org:{principal.org_id}"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of counting one request: allowed, or refused with seconds to wait. For
    headers and messages: the budget closest to running out (or the one that ran out)."""

    allowed: bool
    requests: int
    retry_after: int
    reset: int = 0  # seconds until the window ends (0 when no limit is configured)
    limit: int = 0
    kind: str = "key"  # which budget: a key of WHOSE


class RateLimiter:
    """Counts requests per subject in the database; a limit <= 0 turns that budget off."""

    def __init__(self, limit: int, window: int, *, user_limit: int = 0,
                 org_limit: int = 0) -> None:
        # The count is a PostgreSQL integer and is capped at limit + 1: keep that in range.
        self.limit = min(limit, MAX_LIMIT)
        self.limits = {"key": self.limit, "user": self.limit,
                       "user-all": min(user_limit, MAX_LIMIT), "org": min(org_limit, MAX_LIMIT)}
        self.window = max(1, window)

    @classmethod
    def from_settings(cls, settings: Settings) -> RateLimiter:
        """The limiter of the SDS_API_*RATE_LIMIT settings."""
        return cls(settings.api_rate_limit, settings.api_rate_window,
                   user_limit=settings.api_user_rate_limit,
                   org_limit=settings.api_org_rate_limit)

    @property
    def enabled(self) -> bool:
        """False when no limit is configured."""
        return any(v > 0 for v in self.limits.values())

    def hit(self, conn: psycopg.Connection, principal: Principal) -> Verdict:
        """Count one request of `principal` (the caller commits) and say whether it may run."""
        subjects = [s for s in subjects_of(principal)
                    if self.limits[s.split(":", 1)[0]] > 0]
        if not subjects:
            return Verdict(True, 0, 0)
        rows = conn.execute(_HIT, {"s": sorted(subjects), "w": self.window,
                                   "cap": max(self.limits.values()) + 1}).fetchall()
        verdicts = []
        for subject, requests, left in rows:
            kind, count = str(subject).split(":", 1)[0], int(requests)
            limit, reset = self.limits[kind], max(1, math.ceil(float(left)))
            verdicts.append(Verdict(count <= limit, count, 0 if count <= limit else reset,
                                    reset, limit, kind))
        # A refusal first; among equals, the budget with the least left.
        return min(verdicts, key=lambda v: (v.allowed, v.limit - v.requests))

    def headers(self, verdict: Verdict) -> dict[str, str]:
        """`RateLimit-Limit`, `-Remaining` and `-Reset` (seconds) of the budget closest to
        running out, so a client can pace itself before it meets a 429; none when no limit is
        configured."""
        if not self.enabled or not verdict.reset:
            return {}
        return {"RateLimit-Limit": str(verdict.limit),
                "RateLimit-Remaining": str(max(0, verdict.limit - verdict.requests)),
                "RateLimit-Reset": str(verdict.reset)}

    def message(self, principal: Principal, verdict: Verdict) -> str:
        """The 429 message: which budget ran out and when to retry."""
        whose = WHOSE[verdict.kind]
        if verdict.kind == "user" and principal.kind == "apikey":
            whose = WHOSE["key"]
        return (f"rate limit exceeded: {verdict.limit} requests per {self.window} s for "
                f"{whose}; retry in {verdict.retry_after} s")
