"""Authentication and authorization of API requests: Basic, Bearer and Apikey credentials,
scopes (docs/spec/reference-facts.md decision 11), failed-login throttling and the deprecated
`?apikey=`.

`init_app(app)` installs a before_request hook that turns the request's credentials into a
`Principal` (or refuses them); views declare what they need with `requires(scope)` or
`requires_user()`, and read the caller with `current_principal()`. Endpoints are closed by
default: a view becomes reachable without credentials only through `public`. The caller is a
`people.principal.Principal`; account administration (`sds access ...`) is `people.logins`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import wraps
from typing import Any, TypeVar, cast

import psycopg
from flask import Flask, Response, current_app, g, request

from people import roles
from people.principal import USER_ONLY, Principal
from serve.authenticator import Authenticator
from serve.authheader import Credentials, parse_authorization
from serve.pool import pool
from serve.ratelimit import Verdict
from shared import audit
from shared.config import Settings
from shared.errors import (
    BadRequest,
    Forbidden,
    Unauthorized,
)

log = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# docs/spec/reference-facts.md decision 10: the URL form of API keys passed its sunset on this date.
APIKEY_QUERY_SUNSET = datetime(2021, 5, 14, tzinfo=UTC)
# The public material states the sunset but not when the deprecation was announced, so the
# Deprecation header names the sunset instant too (RFC 9745 only needs Sunset >= Deprecation).
APIKEY_QUERY_DEPRECATED = APIKEY_QUERY_SUNSET

API_PREFIX = "/api/v2"
"""Every route under it states its access exactly once, by one decorator (`check_statements`)."""


# ---- view decorators ---------------------------------------------------------------------


def _stated(view: Callable[..., Any], access: str | None) -> None:
    """Record a view's access statement, and how many it has (one, `check_statements`)."""
    view._sds_access = access  # type: ignore[attr-defined]
    view._sds_statements = getattr(view, "_sds_statements", 0) + 1  # type: ignore[attr-defined]


def public(view: F) -> F:
    """Mark a view as reachable without credentials (e.g. POST /auth/token)."""
    _stated(view, None)
    return view


def requires(scope: str) -> Callable[[F], F]:
    """Require credentials; an API key must also hold `scope` (else 403)."""

    def decorate(view: F) -> F:
        @wraps(view)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            _check_access(scope)
            return view(*args, **kwargs)

        _stated(wrapper, scope)  # @wraps copied the inner view's count: a second one shows
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
    if not roles.role_allows(principal.role, scope):
        raise Forbidden(f"your role in this organisation ({principal.role}) does not allow "
                        f"{scope!r}, which is needed here")
    raise Forbidden(f"this API key lacks the scope {scope!r} needed here")


def check_statements(app: Flask) -> list[str]:
    """The API routes (under API_PREFIX) whose view does not state its access exactly once
    with `requires`, `requires_user` or `public`, as "METHOD rule (n statements)": decision 11
    is each route's decorator, and nothing else. The OpenAPI document and its docs page are
    public by `_is_public`. `create_app` refuses to start when any is found."""
    wrong = []
    for rule in app.url_map.iter_rules():
        if not (rule.rule == API_PREFIX or rule.rule.startswith(API_PREFIX + "/")) or \
                rule.endpoint == "static" or rule.endpoint.startswith("api-docs."):
            continue
        count = getattr(app.view_functions.get(rule.endpoint), "_sds_statements", 0)
        if count != 1:
            methods = ",".join(sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}))
            wrong.append(f"{methods} {rule.rule} ({count} statements)")
    return sorted(wrong)


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


def audit_actor(conn: psycopg.Connection) -> audit.Actor:
    """The caller as the audit log names them: their email now (kept if they are renamed or
    removed later), the key they used, how they authenticated, and their address."""
    principal = current_principal()
    row = conn.execute("SELECT email FROM users WHERE id = %s", (principal.user_id,)).fetchone()
    return audit.Actor(label=row[0] if row else str(principal.user_id), via=principal.kind,
                       user_id=principal.user_id, key_id=principal.key_id,
                       address=client_address(_settings_of(current_app)))


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
    # The view's one statement (check_statements); checked here, before the view runs, so a
    # refusal costs no work. Fail closed: a view without one is not open to API keys.
    needed = getattr(view, "_sds_access", "")
    if principal.kind == "apikey":
        _check_access(needed or USER_ONLY)
    elif needed:
        _check_access(needed)  # the caller's role caps a password or token as it caps a key


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
    """Authenticate every request of `app` before its view runs (closed by default). Call
    after the API's blueprints are registered: a route without exactly one access statement
    stops the app here (`check_statements`)."""
    wrong = check_statements(app)
    if wrong:
        raise RuntimeError("API routes must state their access exactly once (requires, "
                           "requires_user or public): " + "; ".join(wrong))
    app.before_request(_authenticate)
    app.after_request(_response_headers)
    app.after_request(_no_basic_prompt)
