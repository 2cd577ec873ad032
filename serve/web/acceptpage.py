"""The dashboard's accept page, `/dashboard/accept/<secret>`: where an invitation or password
reset link leads (people/links.py). It shows what the link is for (organisation, role, email)
and a form for the new password (a reset's with "sign out everywhere"; an invitation for an
email that has an account shows no form: that account accepts it signed in, on the account
page); the form posts back here with the session's CSRF value and
is accepted by the API's own rules (`links.accept`: throttled, one answer for any link that
does not work). Then the browser goes to the sign-in form with the email filled in.
"""

from __future__ import annotations

import hmac
from typing import Any, cast

from flask import Response, current_app, redirect, render_template, request, url_for

from people import links
from serve.auth import authenticator, client_address, public
from serve.errors import status_of
from serve.pool import pool
from serve.web import session as web_session
from serve.web.views import PREFIX, _html, blp
from shared.errors import ServiceError, TooManyRequests

FIELD_MAX = 1024  # a longer password or name is refused before the database is asked


def _page(secret: str, link: dict[str, Any] | None, *, error: str | None = None,
          status: int = 200) -> Response:
    return _html(render_template("web/accept.html", secret=secret, link=link, error=error,
                                 refused=links.REFUSED), status)


def _peek(secret: str) -> dict[str, Any] | None:
    with pool().connection() as conn:  # nobody signed in: the sds_auth role
        return links.peek(conn, secret)


@blp.route(f"{PREFIX}/accept/<secret>", methods=["GET"])
@public
def accept(secret: str) -> Response:
    """What the link is for, and the password form (a link that does not work: one message)."""
    link = _peek(secret)
    return _page(secret, link, status=200 if link else 400)


@blp.route(f"{PREFIX}/accept/<secret>", methods=["POST"])
@public
def accept_post(secret: str) -> Response:
    """Accept the link with the form's password (and name), then sign in."""
    web_session.check_csrf()
    password = request.form.get("password", "")
    name = request.form.get("name", "").strip() or None
    link = _peek(secret)
    if len(password) > FIELD_MAX or (name and len(name) > 200):
        return _page(secret, link, error="The password or name is too long.", status=400)
    again = request.form.get("again", password)
    if not hmac.compare_digest(password.encode(), again.encode()):
        return _page(secret, link, error="The two passwords differ.", status=400)
    auth = authenticator(current_app)
    try:
        with pool().connection() as conn:
            done = links.accept(conn, auth, secret=secret, password=password or None, name=name,
                                address=client_address(auth.settings),
                                everywhere=request.form.get("everywhere") == "1")
    except TooManyRequests as exc:
        response = _page(secret, link, error=exc.message, status=429)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    except ServiceError as exc:  # the API's 4xx: its message, on the page
        return _page(secret, link, error=exc.message, status=status_of(exc))
    return cast(Response, redirect(url_for("web.login", accepted=done["email"]), code=303))
