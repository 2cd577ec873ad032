"""Dashboard sessions: a signed, HttpOnly cookie holding an encrypted bearer token, and CSRF
tokens.

Signing in trades email and password for an ordinary bearer token (`Authenticator.login`, so
the same failed-login throttling as Basic and `POST /auth/token`), kept in Flask's signed
session cookie. Every later request checks that token like a bearer header (expiry,
revocation, password change, the per-user rate limit), so `sds access logout`, a password
change or signing out elsewhere ends a dashboard session at once. The cookie is also accepted
by the API, for GET and HEAD only and only without an Authorization header: that is what
lets a plain link download `/api/v2/data/...&format=csv` and lets the pages' scripts read the
API without the token ever being visible to JavaScript.

CSRF: every state-changing dashboard request (sign in, sign out) is a POST carrying the
session's random `csrf` value in a form field; the cookie is SameSite=Lax, so other sites'
pages cannot send it along with their subrequests; and the API never takes the cookie for a
method other than GET or HEAD.

The token in the cookie is encrypted (Fernet, issue 20 item 5): Flask's cookie is signed but
readable, and a raw bearer token read from a stolen cookie would be sent as `Authorization:
Bearer` and could write (create API keys). Encrypted, the cookie is only ever a cookie: it reads
through the API (GET and HEAD) and shows the dashboard, and writes nothing; signing out or
`sds access logout` still ends it. Answers the API gives to the cookie say `Cache-Control:
private, no-store`: they are a signed-in person's data, fetched by a browser.

The signing and encryption keys are derived from the cursor key (`SDS_CURSOR_SECRET`, or the
random one in the database), so every worker shares them; changing that secret signs every
dashboard user out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from cryptography.fernet import Fernet, InvalidToken
from flask import Flask, Response, current_app, g, request, session

from people import credentials
from people.principal import Principal
from serve.auth import Credentials, authenticator, client_address
from serve.pool import pool
from shared.config import Settings
from shared.errors import BadRequest

COOKIE = "sds_session"
CSRF_FIELD = "csrf"
# Where the API looks for the cookie reader (serve.auth); set by init_app.
EXTENSION = "session_credentials"
SAFE_METHODS = ("GET", "HEAD")
CIPHER = "session_cipher"
NO_STORE = "private, no-store"


def init_app(app: Flask, settings: Settings) -> None:
    """Session cookie settings and signing key; the API's cookie reader."""
    key: bytes = app.extensions["cursor_key"]
    app.secret_key = hmac.new(key, b"sds dashboard session cookie", hashlib.sha256).digest()
    app.config.update(
        SESSION_COOKIE_NAME=COOKIE,
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=settings.dashboard_cookie_secure,
        SESSION_COOKIE_PATH="/",  # the API reads it too (CSV links, the charts' data)
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=settings.token_ttl),
        # No Set-Cookie on ordinary requests: the cookie changes only at sign-in and sign-out.
        SESSION_REFRESH_EACH_REQUEST=False,
    )
    app.extensions[EXTENSION] = cookie_credentials
    app.extensions[CIPHER] = Fernet(base64.urlsafe_b64encode(
        hmac.new(key, b"sds dashboard session token", hashlib.sha256).digest()))
    app.after_request(_no_store_for_cookie_reads)


def _cipher() -> Fernet:
    cipher: Fernet = current_app.extensions[CIPHER]
    return cipher


def seal(app: Flask, token: str) -> str:
    """`token` encrypted as the session cookie holds it."""
    cipher: Fernet = app.extensions[CIPHER]
    return cipher.encrypt(token.encode()).decode()


def session_token() -> str | None:
    """The bearer token of this session, decrypted; None when signed out or not ours."""
    sealed = session.get("token")
    if not isinstance(sealed, str):
        return None
    try:
        return _cipher().decrypt(sealed.encode()).decode()
    except (InvalidToken, UnicodeDecodeError):
        return None


def _no_store_for_cookie_reads(response: Response) -> Response:
    """after_request: an API answer read with the cookie is kept by no cache."""
    if g.get("cookie_read"):
        response.headers["Cache-Control"] = NO_STORE
    return response


def cookie_credentials() -> Credentials | None:
    """The bearer token of the session cookie, for the API's GET and HEAD requests; None when
    there is no signed-in session (or for other methods: the cookie never authorizes writes)."""
    if request.method not in SAFE_METHODS or COOKIE not in request.cookies:
        return None
    token = session_token()
    if token is None or not credentials.well_formed(token, credentials.TOKEN_PREFIX):
        return None
    g.cookie_read = True
    return Credentials("bearer", token)


def csrf_token() -> str:
    """This session's CSRF value, made on first use (templates put it in every form)."""
    value = session.get(CSRF_FIELD)
    if not isinstance(value, str) or len(value) < 32:
        value = secrets.token_urlsafe(32)
        session[CSRF_FIELD] = value
    return value


def check_csrf() -> None:
    """BadRequest unless the POSTed form carries this session's CSRF value and, when the
    browser says where the form came from, it came from this site."""
    sent = request.form.get(CSRF_FIELD, "")
    held = session.get(CSRF_FIELD)
    if not isinstance(held, str) or not sent or not hmac.compare_digest(sent, held):
        raise BadRequest("the form is out of date or did not come from this site (CSRF check "
                         "failed): reload the page and try again; cookies must be enabled")
    origin = request.headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.host:
        raise BadRequest("the form was sent from another site (Origin does not match)")


CSRF_HEADER = "X-CSRF-Token"


def check_csrf_header() -> None:
    """BadRequest unless a script's JSON request carries this session's CSRF value in the
    X-CSRF-Token header (from the page's csrf-token meta tag) and, when the browser says
    where it came from, it came from this site. Another site can neither read the value nor
    send the header without a CORS preflight, which this site never grants."""
    sent = request.headers.get(CSRF_HEADER, "")
    held = session.get(CSRF_FIELD)
    if not isinstance(held, str) or not sent or not hmac.compare_digest(sent, held):
        raise BadRequest(f"the request did not come from this site's pages (the {CSRF_HEADER} "
                         "header is missing or out of date): reload the page and try again")
    origin = request.headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.host:
        raise BadRequest("the request was sent from another site (Origin does not match)")


def sign_in(email: str, password: str) -> Principal:
    """Check the password (throttled as every login is), issue a bearer token and start a
    fresh session holding it. Unauthorized / TooManyRequests as the API's login."""
    auth = authenticator(current_app)
    with pool().connection() as conn:  # no principal yet: the sds_auth role
        login = auth.login(conn, email, password, client_address(auth.settings),
                           use_cache=False)
        token = auth.issue_token(conn, login.user_id, login.org_id)
    session.clear()  # nothing of the signed-out session carries over (csrf included)
    session.permanent = True
    session["token"] = seal(current_app, token)
    csrf_token()
    return replace(login, kind="bearer")


def current() -> Principal | None:
    """The signed-in caller of this request, authenticated from the session's token like a
    bearer header (rate limit counted); None when signed out. Unauthorized when the token
    has expired or was revoked (the caller clears the session), TooManyRequests over the
    rate limit."""
    found: Principal | None = g.get("principal")
    if found is not None:
        return found
    token = session_token()
    if token is None:
        return None
    auth = authenticator(current_app)
    principal = auth.authenticate(Credentials("bearer", token), client_address(auth.settings),
                                  counted=lambda verdict: setattr(g, "rate", verdict))
    g.principal = principal  # the pool's checkout hook scopes connections to its organisation
    return principal


def sign_out() -> None:
    """Revoke the session's token (when still live) and forget the session."""
    principal: Principal | None = g.get("principal")
    if principal is not None and principal.token_id is not None:
        with pool().connection() as conn:
            conn.execute("UPDATE auth_tokens SET revoked_at = now() WHERE id = %s"
                         " AND revoked_at IS NULL", (principal.token_id,))
    session.clear()


def is_admin(principal: Principal) -> bool:
    """Whether the caller is an owner or administrator of the organisation the session acts
    in (sees raw payloads); the role was read with the session's token at this request."""
    return principal.manages


def template_globals() -> dict[str, Any]:
    """Names every dashboard template may use."""
    return {"csrf_token": csrf_token, "csrf_field": CSRF_FIELD, "may": may,
            "manages": manages}


def may(scope: str) -> bool:
    """Whether the signed-in user's role allows `scope` (pages show no form the API would
    refuse them: a viewer sees no rule form, note form or Audit link)."""
    principal = g.get("principal")
    return principal is not None and principal.allows(scope)


def manages() -> bool:
    """Whether the signed-in user manages the organisation (owner, admin): the audit log is
    theirs."""
    principal = g.get("principal")
    return principal is not None and principal.manages
