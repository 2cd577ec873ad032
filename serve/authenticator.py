"""Credentials checked against the database: logins (argon2id, with the short-lived cache of
verified Basic credentials), bearer tokens and API keys, and failed-login throttling per account
and per address. One `Authenticator` per app (serve/auth.py builds it and calls it per
request)."""

from __future__ import annotations

import hmac
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

import psycopg
from psycopg_pool import ConnectionPool

from people import credentials
from people.logins import clear_account_failures, failure_subject
from people.principal import Principal
from serve import metrics
from serve.authheader import Credentials, decode_basic
from serve.ratelimit import RateLimiter, Verdict
from shared.config import Settings
from shared.errors import (
    TooManyRequests,
    Unauthorized,
)

log = logging.getLogger(__name__)

# last_seen of an API key is written at most this often (per key, across all workers).
LAST_SEEN_INTERVAL = 60.0
# Stale failed-login counts are purged at most this often per process (seconds).
PURGE_INTERVAL = 60.0
# Bound on remembered basic credentials per process; oldest are dropped first.
BASIC_CACHE_SIZE = 4096

@dataclass(slots=True)
class _CachedLogin:
    user_id: UUID
    password_hash: str
    expires: float


class BasicCache:
    """Verified basic credentials remembered for a short time, so repeated requests do not pay
    an argon2 verify each. Keyed by an HMAC (process-random key) of email and password; an
    entry only counts while the user's stored hash is still the one it was verified against,
    so a password change (in any process) invalidates it at once."""

    def __init__(self, ttl: float, size: int = BASIC_CACHE_SIZE) -> None:
        self.ttl = ttl
        self.size = size
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[bytes, _CachedLogin] = OrderedDict()
        self._lock = threading.Lock()

    def fingerprint(self, email: str, password: str) -> bytes:
        """The cache key of a credential pair; never the credentials themselves."""
        return hmac.new(self._key, f"{email.lower()}\0{password}".encode(), "sha256").digest()

    def get(self, fp: bytes, *, user_id: UUID, password_hash: str) -> bool:
        """True when `fp` was verified for this user against this very hash and is fresh."""
        if self.ttl <= 0:
            return False
        with self._lock:
            entry = self._entries.get(fp)
            if entry is None:
                return False
            if entry.expires < time.monotonic():
                del self._entries[fp]
                return False
        return entry.user_id == user_id and hmac.compare_digest(
            entry.password_hash, password_hash)

    def put(self, fp: bytes, *, user_id: UUID, password_hash: str) -> None:
        """Remember a successful verify."""
        if self.ttl <= 0:
            return
        with self._lock:
            self._entries[fp] = _CachedLogin(user_id, password_hash, time.monotonic() + self.ttl)
            self._entries.move_to_end(fp)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        """Forget everything (tests, benchmarks)."""
        with self._lock:
            self._entries.clear()


class Authenticator:
    """Checks credentials against the database; one per app."""

    def __init__(self, settings: Settings, pool: ConnectionPool) -> None:
        self.settings = settings
        self.pool = pool
        self.basic_cache = BasicCache(settings.basic_auth_cache_ttl)
        self.rate_limiter = RateLimiter.from_settings(settings)
        self._next_purge = 0.0  # monotonic time of the next purge of stale failure counts

    # -- throttling ------------------------------------------------------------------------

    def _throttle_subjects(self, email: str, address: str) -> list[tuple[str, bytes, int]]:
        return [
            ("account", failure_subject(email.strip().lower()), self.settings.login_max_failures),
            ("address", failure_subject(address), self.settings.login_address_max_failures),
        ]

    def check_throttle(self, conn: psycopg.Connection, email: str, address: str) -> None:
        """TooManyRequests when the account or the address has too many recent failures.

        Runs before any password hash is computed, so a throttled attempt costs one query.
        """
        subjects = self._throttle_subjects(email, address)
        limits = {kind: limit for kind, _subject, limit in subjects}
        rows = conn.execute(
            "SELECT kind, failures, extract(epoch FROM first_failed"
            " + make_interval(secs => %s) - now()) FROM login_failures"
            " WHERE (kind = %s AND subject = %s) OR (kind = %s AND subject = %s)",
            (self.settings.login_window, subjects[0][0], subjects[0][1], subjects[1][0],
             subjects[1][1])).fetchall()
        wait = 0
        for kind, failures, left in rows:
            if failures >= limits[kind] and left > 0:
                wait = max(wait, math.ceil(left))
        if wait:
            metrics.refused("login_throttle")
            raise TooManyRequests(
                f"too many failed logins; try again in {wait} s", retry_after=wait)

    def record_failure(self, conn: psycopg.Connection, email: str, address: str) -> None:
        """Count a failed login against the account and the address (window restarts when the
        previous one has passed)."""
        for kind, subject, _limit in self._throttle_subjects(email, address):
            conn.execute(
                "INSERT INTO login_failures AS f (kind, subject, failures, first_failed,"
                " last_failed) VALUES (%(kind)s, %(subject)s, 1, now(), now())"
                " ON CONFLICT (kind, subject) DO UPDATE SET"
                " failures = CASE WHEN f.first_failed + make_interval(secs => %(window)s)"
                "   <= now() THEN 1 ELSE f.failures + 1 END,"
                " first_failed = CASE WHEN f.first_failed + make_interval(secs => %(window)s)"
                "   <= now() THEN now() ELSE f.first_failed END,"
                " last_failed = now()",
                {"kind": kind, "subject": subject, "window": self.settings.login_window})
        if time.monotonic() >= self._next_purge:
            self.purge_failures(conn)

    def purge_failures(self, conn: psycopg.Connection) -> int:
        """Drop counts whose window has passed (they throttle nothing); at most once a minute
        per process, from the failure path, so guessing with ever new emails cannot grow the
        table without bound. Returns the number of rows removed."""
        self._next_purge = time.monotonic() + PURGE_INTERVAL
        cur = conn.execute(
            "DELETE FROM login_failures WHERE first_failed + make_interval(secs => %s) < now()",
            (self.settings.login_window,))
        return cur.rowcount

    # -- password login (Basic and POST /auth/token) -----------------------------------------

    def login(self, conn: psycopg.Connection, email: str, password: str, address: str,
              *, use_cache: bool = True) -> Principal:
        """The basic principal (user, home organisation, role there) for a correct email and
        password; otherwise Unauthorized. A user with no membership left is refused alike.

        Throttling is checked first. An unknown email pays the same argon2 verify as a wrong
        password (people.credentials' dummy hash), and both fail with the same message.
        """
        self.check_throttle(conn, email, address)
        # PostgreSQL text cannot hold NUL: such an email names no one (and still costs a verify).
        # sds_auth_user & co. (migration 0052): one row by the exact credential, the only
        # read of credentials the pre-authentication database role (sds_auth) may make.
        row = None if "\x00" in email else conn.execute(
            "SELECT id, org_id, password_hash, active, role, teams_only FROM sds_auth_user(%s)",
            (email.strip(),)).fetchone()
        fp = self.basic_cache.fingerprint(email, password)
        if row and row[3] and use_cache and self.basic_cache.get(
                fp, user_id=row[0], password_hash=row[2]):
            return Principal(row[0], row[1], "basic", role=row[4], teams_only=row[5])
        ok = credentials.verify_password(row[2] if row else None, password)
        if not ok or row is None or not row[3]:
            self.record_failure(conn, email, address)
            conn.commit()  # the count must survive the 401 that follows
            raise Unauthorized("wrong email or password", scheme="Basic")
        if credentials.needs_rehash(row[2]):
            new_hash = credentials.hash_password(password)
            # Same password, stronger parameters: not a password change, so tokens stay valid.
            conn.execute("UPDATE users SET password_hash = %s WHERE id = %s", (new_hash, row[0]))
            row = (row[0], row[1], new_hash, *row[3:])
        clear_account_failures(conn, email)  # a successful login ends the account's back-off
        if use_cache:
            self.basic_cache.put(fp, user_id=row[0], password_hash=row[2])
        return Principal(row[0], row[1], "basic", role=row[4], teams_only=row[5])

    # -- tokens ------------------------------------------------------------------------------

    def issue_token(self, conn: psycopg.Connection, user: UUID, org: UUID | None = None) -> str:
        """A new bearer token for `user`, bound to `org` (None: their home organisation, which
        the database fills in); only its digest is stored."""
        secret = credentials.new_token()
        conn.execute(
            "INSERT INTO auth_tokens (user_id, org_id, digest, expires_at)"
            " VALUES (%s, %s, %s, now() + make_interval(secs => %s))",
            (user, org, secret.digest, self.settings.token_ttl))
        return secret.value

    def membership(self, conn: psycopg.Connection, user: UUID, org: UUID
                   ) -> tuple[str, bool] | None:
        """(role, teams_only) of `user` in `org`, or None when they are not a member there
        (POST /auth/token with `org`, before the request's organisation is known)."""
        row = conn.execute("SELECT role, teams_only FROM sds_auth_membership(%s, %s)",
                           (user, org)).fetchone()
        return (row[0], row[1]) if row else None

    def _bearer(self, conn: psycopg.Connection, token: str) -> Principal:
        """The principal of a well-formed bearer token (`authenticate` checked the form);
        Unauthorized (invalid_token) when it is not live."""
        wanted = credentials.digest(token)
        row = conn.execute(  # live: not revoked or expired, user active, after passwd change
            "SELECT id, user_id, org_id, digest, live, role, teams_only"
            " FROM sds_auth_token(%s)",
            (wanted,)).fetchone()
        if row is None or not hmac.compare_digest(bytes(row[3]), wanted) or not row[4]:
            raise Unauthorized("invalid, expired or revoked bearer token", scheme="Bearer",
                               error="invalid_token")
        return Principal(row[1], row[2], "bearer", token_id=row[0], role=row[5],
                         teams_only=row[6])

    # -- API keys ----------------------------------------------------------------------------

    def _apikey(self, conn: psycopg.Connection, key: str, *, via_query: bool = False
                ) -> Principal:
        """The principal of a well-formed API key (`authenticate` checked the form);
        Unauthorized when unknown, expired or deactivated."""
        wanted = credentials.digest(key)
        row = conn.execute(  # live: key and user active, not expired; stale: last_seen old
            "SELECT id, user_id, org_id, digest, scopes, live, stale, role, teams_only"
            " FROM sds_auth_api_key(%s, %s)", (wanted, LAST_SEEN_INTERVAL)).fetchone()
        if row is None or not hmac.compare_digest(bytes(row[3]), wanted):
            raise Unauthorized("invalid API key", scheme="Apikey", error="invalid_key")
        if not row[5]:
            raise Unauthorized("API key expired or deactivated", scheme="Apikey",
                               error="invalid_key")
        if row[6]:
            if via_query:
                # Operators watch this to see who still has to move to the header form.
                log.info("API key %s used the deprecated ?apikey= query form", row[0])
            # Conditional, so concurrent workers still write at most once per interval.
            conn.execute(
                "UPDATE api_keys SET last_seen = now() WHERE id = %s AND (last_seen IS NULL"
                " OR last_seen <= now() - make_interval(secs => %s))",
                (row[0], LAST_SEEN_INTERVAL))
        return Principal(row[1], row[2], "apikey", scopes=frozenset(row[4]), key_id=row[0],
                         via_query=via_query, role=row[7], teams_only=row[8])

    # -- one request -------------------------------------------------------------------------

    def authenticate(self, creds: Credentials, address: str,
                     counted: Callable[[Verdict], None] | None = None) -> Principal:
        """The principal for `creds`, using one pooled connection (committed). `counted`, when
        given, receives the rate limiter's verdict (also for a refused request)."""
        prefix = {"apikey": credentials.API_KEY_PREFIX, "bearer": credentials.TOKEN_PREFIX}
        if creds.scheme in prefix and not credentials.well_formed(creds.value,
                                                                  prefix[creds.scheme]):
            # Forged or mistyped: refused without touching the pool or the database. The one
            # check of the form (prefix and check suffix) per request.
            if creds.scheme == "bearer":
                raise Unauthorized("invalid bearer token", scheme="Bearer",
                                   error="invalid_token")
            raise Unauthorized("invalid API key", scheme="Apikey", error="invalid_key")
        if creds.scheme == "basic":
            email, password = decode_basic(creds.value)
        with self.pool.connection() as conn:
            if creds.scheme == "apikey":
                principal = self._apikey(conn, creds.value, via_query=creds.via_query)
            elif creds.scheme == "bearer":
                principal = self._bearer(conn, creds.value)
            else:
                principal = self.login(conn, email, password, address)
            # Counted on the same connection and committed with it: one more statement.
            verdict = self.rate_limiter.hit(conn, principal)
        if counted is not None:
            counted(verdict)
        if not verdict.allowed:
            metrics.refused(f"rate_limit_{verdict.kind}")
            raise TooManyRequests(self.rate_limiter.message(principal, verdict),
                                  retry_after=verdict.retry_after)
        return principal
