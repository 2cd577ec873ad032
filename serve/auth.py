"""Authentication and authorization of API requests: Basic, Bearer and Apikey credentials,
scopes (docs/spec/reference-facts.md decision 11), failed-login throttling and the deprecated
`?apikey=`.

`init_app(app)` installs a before_request hook that turns the request's credentials into a
`Principal` (or refuses them); views declare what they need with `requires(scope)` or
`requires_user()`, and read the caller with `current_principal()`. Endpoints are closed by
default: a view becomes reachable without credentials only through `public`. The caller is a
`serve.principal.Principal`; account administration (`sds access ...`) is `serve.access`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import wraps
from typing import Any, TypeVar, cast
from uuid import UUID

import psycopg
from flask import Flask, Response, current_app, g, request
from psycopg_pool import ConnectionPool

from serve.pool import pool
from serve.principal import USER_ONLY, Principal
from serve.ratelimit import RateLimiter, Verdict
from shared import credentials
from shared.config import Settings
from shared.errors import (
    BadRequest,
    Forbidden,
    TooManyRequests,
    Unauthorized,
)

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# docs/spec/reference-facts.md decision 10: the URL form of API keys passed its sunset on this date.
APIKEY_QUERY_SUNSET = datetime(2021, 5, 14, tzinfo=UTC)
# The public material states the sunset but not when the deprecation was announced, so the
# Deprecation header names the sunset instant too (RFC 9745 only needs Sunset >= Deprecation).
APIKEY_QUERY_DEPRECATED = APIKEY_QUERY_SUNSET
# last_seen of an API key is written at most this often (per key, across all workers).
LAST_SEEN_INTERVAL = 60.0
# Stale failed-login counts are purged at most this often per process (seconds).
PURGE_INTERVAL = 60.0
# Bound on remembered basic credentials per process; oldest are dropped first.
BASIC_CACHE_SIZE = 4096

# Decision 11 for views that do not declare their own need: the first matching path prefix
# (and method) gives the scope an API key must hold. USER_ONLY means no API key may call it.
_SCOPE_TABLE: tuple[tuple[str, frozenset[str] | None, str], ...] = (
    ("/api/v2/data", None, "data:read"),
    ("/api/v2/schemas", None, "data:read"),
    ("/api/v2/devices", None, "devices:read"),
    ("/api/v2/locations", frozenset({"GET", "HEAD"}), "locations:read"),
    ("/api/v2/locations", None, "locations:write"),
    ("/api/v2/apikeys", frozenset({"GET", "HEAD"}), "apikeys:read"),
    ("/api/v2/apikeys", None, USER_ONLY),
    ("/api/v2/auth", None, USER_ONLY),
)


# ---- view decorators ---------------------------------------------------------------------


def public(view: F) -> F:
    """Mark a view as reachable without credentials (e.g. POST /auth/token)."""
    view._sds_access = None  # type: ignore[attr-defined]
    return view


def requires(scope: str) -> Callable[[F], F]:
    """Require credentials; an API key must also hold `scope` (else 403)."""

    def decorate(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _check_access(scope)
            return view(*args, **kwargs)

        wrapper._sds_access = scope  # type: ignore[attr-defined]
        return cast(F, wrapper)

    return decorate


def requires_user() -> Callable[[F], F]:
    """Require basic or bearer credentials: an API key gets 403 (key and token management)."""
    return requires(USER_ONLY)


def current_principal() -> Principal:
    """The authenticated caller of this request; Unauthorized when there is none."""
    principal: Principal | None = g.get("principal")
    if principal is None:
        raise Unauthorized("credentials required", scheme="Basic")
    return principal


def _check_access(scope: str) -> None:
    principal = current_principal()
    if principal.allows(scope):
        return
    if scope == USER_ONLY:
        raise Forbidden("an API key cannot do this; use basic or bearer credentials")
    raise Forbidden(f"this API key lacks the scope {scope!r} needed here")


def scope_for(path: str, method: str) -> str | None:
    """The scope decision 11 requires for `method path`; None for paths it does not name."""
    for prefix, methods, scope in _SCOPE_TABLE:
        if (path == prefix or path.startswith(prefix + "/")) and (
                methods is None or method in methods):
            return scope
    return None


# ---- header parsing (pure) ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Credentials:
    """Credentials as sent: scheme ('basic' | 'bearer' | 'apikey') and the secret part."""

    scheme: str
    value: str
    via_query: bool = False


_SCHEMES = {"basic": "basic", "bearer": "bearer", "apikey": "apikey"}


def parse_authorization(header: str) -> Credentials:
    """Split an Authorization header into scheme and value; scheme names are case-insensitive
    and any run of spaces or tabs separates them. Unauthorized for anything else."""
    parts = header.strip().split(None, 1)
    if not parts:
        raise Unauthorized("empty Authorization header", scheme="Basic")
    if len(parts) == 1 and parts[0].startswith(credentials.API_KEY_PREFIX):
        # A bare API key (what Swagger UI's apiKey scheme sends when the key is pasted as
        # it is): the sdsk_ prefix and its check suffix say what it is, no scheme needed.
        if "," in parts[0]:
            raise BadRequest("send one Authorization header holding one credential")
        return Credentials("apikey", parts[0])
    scheme = _SCHEMES.get(parts[0].lower())
    if scheme is None:
        raise Unauthorized(
            "unsupported authorization scheme; use Basic, Bearer or Apikey", scheme="Basic")
    value = parts[1].strip() if len(parts) == 2 else ""
    if not value:
        raise Unauthorized(f"{parts[0]} credentials are empty", scheme=_challenge(scheme))
    if any(c == "," or c.isspace() for c in value):
        # Servers join repeated Authorization headers with ", ": two credentials, ambiguous.
        raise BadRequest("send one Authorization header holding one credential")
    return Credentials(scheme, value)


def decode_basic(value: str) -> tuple[str, str]:
    """(email, password) from the Base64 part of a Basic header; the password may hold ':'."""
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise Unauthorized("Basic credentials are not valid Base64 of email:password",
                           scheme="Basic") from None
    email, sep, password = text.partition(":")
    if not sep or not email or not password:
        raise Unauthorized("Basic credentials must be email:password", scheme="Basic")
    return email.strip(), password


def _challenge(scheme: str) -> str:
    return {"basic": "Basic", "bearer": "Bearer", "apikey": "Apikey"}[scheme]


# ---- the authenticator -------------------------------------------------------------------


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


def _subject(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def clear_account_failures(conn: psycopg.Connection, email: str) -> int:
    """Forget the failed logins counted against an account (its lockout ends; the address's
    count stays); the number of rows removed."""
    cur = conn.execute("DELETE FROM login_failures WHERE kind = 'account' AND subject = %s",
                       (_subject(email.strip().lower()),))
    return cur.rowcount


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
            ("account", _subject(email.strip().lower()), self.settings.login_max_failures),
            ("address", _subject(address), self.settings.login_address_max_failures),
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
              *, use_cache: bool = True) -> tuple[UUID, UUID]:
        """(user_id, org_id) for a correct email and password; otherwise Unauthorized.

        Throttling is checked first. An unknown email pays the same argon2 verify as a wrong
        password (shared.credentials' dummy hash), and both fail with the same message.
        """
        self.check_throttle(conn, email, address)
        # PostgreSQL text cannot hold NUL: such an email names no one (and still costs a verify).
        # sds_auth_user & co. (migration 0052): one row by the exact credential, the only
        # read of credentials the pre-authentication database role (sds_auth) may make.
        row = None if "\x00" in email else conn.execute(
            "SELECT id, org_id, password_hash, active FROM sds_auth_user(%s)",
            (email.strip(),)).fetchone()
        fp = self.basic_cache.fingerprint(email, password)
        if row and row[3] and use_cache and self.basic_cache.get(
                fp, user_id=row[0], password_hash=row[2]):
            return row[0], row[1]
        ok = credentials.verify_password(row[2] if row else None, password)
        if not ok or row is None or not row[3]:
            self.record_failure(conn, email, address)
            conn.commit()  # the count must survive the 401 that follows
            raise Unauthorized("wrong email or password", scheme="Basic")
        if credentials.needs_rehash(row[2]):
            new_hash = credentials.hash_password(password)
            # Same password, stronger parameters: not a password change, so tokens stay valid.
            conn.execute("UPDATE users SET password_hash = %s WHERE id = %s", (new_hash, row[0]))
            row = (row[0], row[1], new_hash, row[3])
        clear_account_failures(conn, email)  # a successful login ends the account's back-off
        if use_cache:
            self.basic_cache.put(fp, user_id=row[0], password_hash=row[2])
        return row[0], row[1]

    # -- tokens ------------------------------------------------------------------------------

    def issue_token(self, conn: psycopg.Connection, user: UUID) -> str:
        """A new bearer token for `user`; only its digest is stored."""
        secret = credentials.new_token()
        conn.execute(
            "INSERT INTO auth_tokens (user_id, digest, expires_at)"
            " VALUES (%s, %s, now() + make_interval(secs => %s))",
            (user, secret.digest, self.settings.token_ttl))
        return secret.value

    def bearer(self, conn: psycopg.Connection, token: str) -> Principal:
        """The principal of a bearer token; Unauthorized (invalid_token) when it is not live."""
        if not credentials.well_formed(token, credentials.TOKEN_PREFIX):
            raise Unauthorized("invalid bearer token", scheme="Bearer", error="invalid_token")
        wanted = credentials.digest(token)
        row = conn.execute(  # live: not revoked or expired, user active, after passwd change
            "SELECT id, user_id, org_id, digest, live FROM sds_auth_token(%s)",
            (wanted,)).fetchone()
        if row is None or not hmac.compare_digest(bytes(row[3]), wanted) or not row[4]:
            raise Unauthorized("invalid, expired or revoked bearer token", scheme="Bearer",
                               error="invalid_token")
        return Principal(row[1], row[2], "bearer", token_id=row[0])

    # -- API keys ----------------------------------------------------------------------------

    def apikey(self, conn: psycopg.Connection, key: str, *, via_query: bool = False) -> Principal:
        """The principal of an API key; Unauthorized when unknown, expired or deactivated.

        A value without the key prefix and check suffix is refused without a query.
        """
        if not credentials.well_formed(key, credentials.API_KEY_PREFIX):
            raise Unauthorized("invalid API key", scheme="Apikey", error="invalid_key")
        wanted = credentials.digest(key)
        row = conn.execute(  # live: key and user active, not expired; stale: last_seen old
            "SELECT id, user_id, org_id, digest, scopes, live, stale"
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
                         via_query=via_query)

    # -- one request -------------------------------------------------------------------------

    def authenticate(self, creds: Credentials, address: str,
                     counted: Callable[[Verdict], None] | None = None) -> Principal:
        """The principal for `creds`, using one pooled connection (committed). `counted`, when
        given, receives the rate limiter's verdict (also for a refused request)."""
        prefix = {"apikey": credentials.API_KEY_PREFIX, "bearer": credentials.TOKEN_PREFIX}
        if creds.scheme in prefix and not credentials.well_formed(creds.value,
                                                                  prefix[creds.scheme]):
            # Forged or mistyped: refused without touching the pool or the database.
            if creds.scheme == "bearer":
                raise Unauthorized("invalid bearer token", scheme="Bearer",
                                   error="invalid_token")
            raise Unauthorized("invalid API key", scheme="Apikey", error="invalid_key")
        if creds.scheme == "basic":
            email, password = decode_basic(creds.value)
        with self.pool.connection() as conn:
            if creds.scheme == "apikey":
                principal = self.apikey(conn, creds.value, via_query=creds.via_query)
            elif creds.scheme == "bearer":
                principal = self.bearer(conn, creds.value)
            else:
                user, org = self.login(conn, email, password, address)
                principal = Principal(user, org, "basic")
            # Counted on the same connection and committed with it: one more statement.
            verdict = self.rate_limiter.hit(conn, principal)
        if counted is not None:
            counted(verdict)
        if not verdict.allowed:
            raise TooManyRequests(self.rate_limiter.message(principal, verdict),
                                  retry_after=verdict.retry_after)
        return principal


# ---- Flask wiring ------------------------------------------------------------------------


def _settings_of(app: Flask) -> Settings:
    found = app.extensions.get("settings") or app.config.get("SETTINGS")
    if isinstance(found, Settings):
        return found
    return Settings()


def authenticator(app: Flask) -> Authenticator:
    """The app's Authenticator, created on first use (the pool may be opened after init_app)."""
    auth = app.extensions.get("auth")
    if auth is None:
        auth = Authenticator(_settings_of(app), pool(app))
        app.extensions["auth"] = auth
    return cast(Authenticator, auth)


def _is_public(app: Flask) -> bool:
    if request.method == "OPTIONS":
        return True  # CORS preflight carries no credentials
    if request.routing_exception is not None or request.url_rule is None:
        return True  # let the 404/405 through; nothing is served
    endpoint = request.endpoint or ""
    if endpoint == "static" or endpoint.startswith("api-docs."):
        return True  # the OpenAPI document and its docs page describe no one's data
    view = app.view_functions.get(endpoint)
    return view is not None and getattr(view, "_sds_access", "") is None


def client_address(settings: Settings) -> str:
    """The caller's address for throttling: the socket peer, or with `trusted_proxy_hops` set,
    the X-Forwarded-For entry that the outermost trusted proxy saw (clients can forge the
    entries to its left, never that one)."""
    peer = request.remote_addr or "unknown"
    hops = settings.trusted_proxy_hops
    if hops <= 0:
        return peer
    joined = ",".join(request.headers.getlist("X-Forwarded-For"))
    forwarded = [a.strip() for a in joined.split(",") if a.strip()]
    if len(forwarded) < hops:
        return forwarded[0] if forwarded else peer
    return forwarded[-hops]


def _credentials(settings: Settings) -> Credentials | None:
    headers = request.headers.getlist("Authorization")
    query = request.args.getlist("apikey")
    if len(headers) > 1:
        raise BadRequest("send one Authorization header, not several")
    if query and headers:
        raise BadRequest("send the API key either in the Authorization header or in ?apikey=, "
                         "not both")
    if headers:
        return parse_authorization(headers[0])
    if query:
        if not settings.apikey_query_enabled:
            raise Unauthorized(
                "the ?apikey= query parameter is no longer accepted (sunset 2021-05-14); send "
                "the key in the header 'Authorization: Apikey <key>'",
                scheme="Apikey", error="query_apikey_disabled")
        if len(query) > 1 or not query[0].strip():
            raise BadRequest("send exactly one non-empty ?apikey=")
        if request.method not in ("GET", "HEAD"):
            raise BadRequest("?apikey= is accepted only on GET; send 'Authorization: Apikey "
                             "<key>'")
        return Credentials("apikey", query[0].strip(), via_query=True)
    # Neither header nor ?apikey=: a signed-in dashboard session's cookie, for GET and HEAD
    # only (serve.web.session: links such as CSV downloads; never a write, so no CSRF risk).
    reader = current_app.extensions.get("session_credentials")
    return reader() if reader is not None else None


def _authenticate() -> None:
    from flask import current_app

    app = cast(Flask, current_app._get_current_object())  # type: ignore[attr-defined]
    g.principal = None
    if "\x00" in request.path or any("\x00" in k or "\x00" in v
                                      for k, v in request.args.items(multi=True)):
        # No name, id or parameter holds NUL, and PostgreSQL text cannot: refuse it here,
        # once for every endpoint, rather than as a database error deep in a query.
        raise BadRequest("NUL bytes (%00) are not accepted in the URL")
    if _is_public(app):
        return
    auth = authenticator(app)
    creds = _credentials(auth.settings)
    if creds is None:
        raise Unauthorized("credentials required: send 'Authorization: Basic', 'Bearer' or "
                           "'Apikey'", scheme="Basic")
    principal = auth.authenticate(creds, client_address(auth.settings),
                                  counted=lambda verdict: setattr(g, "rate", verdict))
    g.principal = principal
    view = app.view_functions.get(request.endpoint or "")
    declared = getattr(view, "_sds_access", "")
    needed = declared if declared else scope_for(request.path, request.method)
    if principal.kind == "apikey":
        # Fail closed: a route decision 11 does not name is not open to API keys.
        _check_access(needed or USER_ONLY)


def _response_headers(response: Response) -> Response:
    """Rate-limit headers for every counted request (a 429 too), and the deprecation headers
    for the deprecated `?apikey=`."""
    verdict: Verdict | None = g.get("rate")
    if verdict is not None:
        from flask import current_app

        app = cast(Flask, current_app._get_current_object())  # type: ignore[attr-defined]
        response.headers.update(authenticator(app).rate_limiter.headers(verdict))
    principal: Principal | None = g.get("principal")
    if principal is not None and principal.via_query:
        response.headers["Deprecation"] = f"@{int(APIKEY_QUERY_DEPRECATED.timestamp())}"
        response.headers["Sunset"] = format_datetime(APIKEY_QUERY_SUNSET, usegmt=True)
    return response


def is_script_request() -> bool:
    """Whether the request comes from a page's script (fetch or XMLHttpRequest), as browsers
    say with Sec-Fetch-Dest: empty, or libraries with X-Requested-With: XMLHttpRequest."""
    return (request.headers.get("Sec-Fetch-Dest", "").lower() == "empty"
            or request.headers.get("X-Requested-With", "").lower() == "xmlhttprequest")


def _no_basic_prompt(response: Response) -> Response:
    """A 401 to a page's script challenges with Apikey instead of Basic: a Basic challenge
    makes the browser take the request over with its own password dialog (Swagger UI's "Try
    it out" with a missing or mistyped key), where the page wants to show the JSON error."""
    challenge = response.headers.get("WWW-Authenticate", "")
    if response.status_code == 401 and challenge.startswith("Basic") and is_script_request():
        response.headers["WWW-Authenticate"] = "Apikey" + challenge[len("Basic"):]
    return response


def init_app(app: Flask) -> None:
    """Authenticate every request of `app` before its view runs (closed by default)."""
    app.before_request(_authenticate)
    app.after_request(_response_headers)
    app.after_request(_no_basic_prompt)
