"""A route's scope is stated once (issue 31): by its view's decorator (`requires`,
`requires_user` or `public`, serve/auth.py), never again in a table beside it. Every API route
of the app has exactly one statement, a route with none or two is found and stops the app, and
the statements follow decision 11 (docs/auth.md)."""

from __future__ import annotations

import pytest
from flask import Flask

from people.principal import USER_ONLY
from serve import auth
from tests.support.apps import plain_rule


def _scopes(app: Flask) -> dict[tuple[str, str], str | None]:
    """(method, rule) -> the access its view states, for every API route of `app`."""
    found = {}
    for rule in app.url_map.iter_rules():
        view = app.view_functions[rule.endpoint]
        if rule.rule.startswith(auth.API_PREFIX) and hasattr(view, "_sds_access"):
            for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
                found[(method, plain_rule(rule.rule))] = view._sds_access
    return found


def test_every_api_route_states_its_access_exactly_once(app: Flask) -> None:
    assert auth.check_statements(app) == []
    assert len(_scopes(app)) > 60  # the whole API was looked at, not an empty map


@pytest.mark.parametrize("method, rule, scope", [
    ("GET", "/api/v2/data/<table>", "data:read"),
    ("GET", "/api/v2/schemas", "data:read"),
    ("GET", "/api/v2/devices", "devices:read"),
    ("GET", "/api/v2/locations", "locations:read"),
    ("PATCH", "/api/v2/locations/<location_id>", "locations:write"),
    ("GET", "/api/v2/apikeys", "apikeys:read"),
    ("POST", "/api/v2/apikeys", USER_ONLY),
    ("DELETE", "/api/v2/auth/token", USER_ONLY),
    ("POST", "/api/v2/auth/token", None),
    ("POST", "/api/v2/auth/password-reset", None),
])
def test_statements_follow_decision_11(app: Flask, method: str, rule: str,
                                       scope: str | None) -> None:
    assert _scopes(app)[(method, rule)] == scope


def _tiny_app() -> Flask:
    app = Flask("tiny")

    @app.get("/api/v2/stated")
    @auth.requires("data:read")
    def stated() -> str:
        return "ok"

    @app.get("/api/v2/open")
    @auth.public
    def opened() -> str:
        return "ok"

    @app.get("/dashboard/page")  # not the API's: the dashboard's own session rules
    def page() -> str:
        return "ok"
    return app


def test_a_route_without_a_statement_or_with_two_fails_the_check() -> None:
    app = _tiny_app()
    assert auth.check_statements(app) == []
    auth.init_app(app)  # starts

    bare, twice = _tiny_app(), _tiny_app()

    @bare.get("/api/v2/forgotten")
    def forgotten() -> str:
        return "ok"

    @twice.post("/api/v2/twice")
    @auth.requires("data:read")
    @auth.requires_user()
    def stated_twice() -> str:
        return "ok"

    assert auth.check_statements(bare) == ["GET /api/v2/forgotten (0 statements)"]
    assert auth.check_statements(twice) == ["POST /api/v2/twice (2 statements)"]
    for wrong in (bare, twice):
        with pytest.raises(RuntimeError, match="exactly once"):
            auth.init_app(wrong)
