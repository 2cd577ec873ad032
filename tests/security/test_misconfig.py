"""Misconfiguration (reliability plan S16), with the production configuration.

The app is built as serve.wsgi builds it, from `SDS_*` variables only. Checked: not in debug or
testing mode; an unexpected exception (a plain one, and a real database error) is a 500 with a
generic JSON body and no traceback, SQL or exception text; TRACE is a JSON 405; CORS sends the
configured origin and never reflects a caller's Origin or allows credentials; the headers a
JSON API should send; and no request makes an outbound connection beyond loopback.
tests/serve/test_app.py already covers the plain 500, 503s and the configured CORS value; this
module adds the production build, the database error, TRACE on every rule, and the rest.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.exceptions import MethodNotAllowed

from serve import create_app
from serve.pool import pool
from shared.config import Settings
from tests.support.access_world import World, apikey, basic
from tests.support.apps import close_app, plain_rule

GENERIC_500 = {"code": 500, "status": "Internal Server Error",
               "message": "internal server error"}
PLANTED = "planted-detail-3f9c"  # text an exception carries; must not reach the client


def production_app(url: str, **env: str) -> Flask:
    """The app exactly as serve.wsgi builds it: settings from SDS_* variables only."""
    return create_app(Settings.from_env({"SDS_DATABASE_URL": url, **env}))


def _add_faulty_routes(app: Flask) -> None:
    from serve.auth import public

    @public
    def boom() -> Any:
        raise RuntimeError(f"{PLANTED} Traceback-like text")

    @public
    def bad_sql() -> Any:
        # A real database error: the message holds SQL and the relation's name.
        with pool(app).connection() as conn:
            conn.execute(f"SELECT secret_column FROM no_such_table_{PLANTED[-4:]}")
        return {}

    app.add_url_rule("/api/v2/_boom", "sec_boom", boom)
    app.add_url_rule("/api/v2/_bad_sql", "sec_bad_sql", bad_sql)


@pytest.fixture(scope="module")
def prod_app(world: World) -> Iterator[Flask]:
    """The production-built app plus two throwaway routes that fail."""
    application = production_app(world.url)
    _add_faulty_routes(application)
    try:
        yield application
    finally:
        close_app(application)


@pytest.fixture
def prod(prod_app: Flask) -> FlaskClient:
    """A client of the production-built app."""
    return prod_app.test_client()


def test_production_build_is_not_debug(prod_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    assert prod_app.debug is False and prod_app.testing is False
    assert not prod_app.config["PROPAGATE_EXCEPTIONS"]
    assert prod_app.config["MAX_CONTENT_LENGTH"]


@pytest.mark.parametrize("path", ["/api/v2/_boom", "/api/v2/_bad_sql"])
def test_unexpected_errors_are_a_generic_json_500(prod: FlaskClient, path: str,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    r = prod.get(path)
    assert r.status_code == 500 and r.mimetype == "application/json"
    assert r.get_json() == GENERIC_500
    text = r.get_data(as_text=True)
    for leak in (PLANTED[-4:], "Traceback", "SELECT", "no_such_table", "psycopg", "File \""):
        assert leak not in text
    # The detail goes to the operator's log instead.
    assert PLANTED[-4:] in caplog.text


def test_flask_debug_in_the_environment_does_not_enable_debug(
        world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASK_DEBUG", "1")
    app = production_app(world.url)
    try:
        _add_faulty_routes(app)
        assert app.debug is False
        r = app.test_client().get("/api/v2/_boom")
        assert r.status_code == 500 and r.get_json() == GENERIC_500
    finally:
        close_app(app)


def test_trace_and_other_methods_are_json_405_on_every_rule(prod_app: Flask,
                                                            prod: FlaskClient) -> None:
    # Each concrete path with every method any of its rules serves (PATCH is served by some).
    served: dict[str, set[str]] = {}
    for rule in prod_app.url_map.iter_rules():
        if rule.endpoint.startswith("sec_"):
            continue
        path = (plain_rule(rule.rule).replace("<path:filename>", "swagger-ui.css")
                .replace("<table>", "hourly").replace("<name>", "A000101")
                .replace("<location_id>", "00000000-0000-4000-8000-000000000000")
                .replace("<key_id>", "00000000-0000-4000-8000-000000000000")
                .replace("<int:row_id>", "1"))  # the dashboard's quarantine rows
        served.setdefault(path, set()).update(rule.methods or ())
    assert any("PATCH" in methods for methods in served.values())
    adapter = prod_app.url_map.bind("localhost")
    for path, methods in sorted(served.items()):
        for method in sorted({"TRACE", "CONNECT", "PATCH"} - methods):
            try:  # another rule may serve the method on this path (/locations/<id> for summary)
                adapter.match(path, method=method)
                continue
            except MethodNotAllowed:
                pass
            r = prod.open(path, method=method, headers=basic("a1@a.example"))
            assert r.status_code == 405, (method, path, r.status_code)
            assert r.mimetype == "application/json" and r.get_json()["code"] == 405
            assert method not in r.headers["Allow"]
            assert "Authorization" not in r.get_data(as_text=True)  # TRACE echoes nothing
    r = prod.open("/no/such/path", method="TRACE")
    assert r.status_code == 404 and r.get_json()["code"] == 404


@pytest.mark.parametrize("path", ["/api/v2/auth/token", "/api/v2/apikeys"])
def test_oversized_bodies_are_a_json_413(prod_app: Flask, prod: FlaskClient, path: str) -> None:
    """S6: a body over MAX_CONTENT_LENGTH is refused before it is parsed or authenticated."""
    limit = prod_app.config["MAX_CONTENT_LENGTH"]
    body = b'{"email": "' + b"x" * (limit + 1) + b'"}'
    r = prod.post(path, data=body, content_type="application/json",
                  headers=basic("a1@a.example"))
    assert r.status_code == 413, r.status_code
    assert r.mimetype == "application/json" and r.get_json()["code"] == 413


def test_cors_default_is_any_origin_without_credentials(prod: FlaskClient) -> None:
    r = prod.get("/api/v2/devices", headers={**basic("a1@a.example"),
                                             "Origin": "https://evil.example"})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == Settings().cors_origin == "*"
    # With '*', browsers never send credentials cross-site; the app must not ask for them.
    assert "Access-Control-Allow-Credentials" not in r.headers


def test_cors_configured_origin_is_never_a_reflection(world: World) -> None:
    app = production_app(world.url, SDS_CORS_ORIGIN="https://farm.example")
    try:
        client = app.test_client()
        for path, method, extra in (
                ("/api/v2/devices", "GET", basic("a1@a.example")),
                ("/api/v2/devices", "OPTIONS", {"Access-Control-Request-Method": "GET"}),
                ("/api/v2/nothing", "GET", {})):
            r = client.open(path, method=method,
                            headers={**extra, "Origin": "https://evil.example"})
            assert r.headers["Access-Control-Allow-Origin"] == "https://farm.example"
            assert "evil" not in str(r.headers)
            assert "Access-Control-Allow-Credentials" not in r.headers
    finally:
        close_app(app)


def test_every_answer_says_nosniff(prod: FlaskClient) -> None:
    for path, headers in (("/api/v2/devices", basic("a1@a.example")), ("/api/v2/devices", {}),
                          ("/api/v2/nothing", {}), ("/api/v2/doc", {}),
                          ("/api/v2/openapi.json", {})):
        r = prod.get(path, headers=headers)
        assert r.headers.get("X-Content-Type-Options") == "nosniff", (path, r.status_code)


def test_token_answer_is_not_cacheable(prod: FlaskClient) -> None:
    from tests.support.access_world import PASSWORDS

    r = prod.post("/api/v2/auth/token",
                  json={"email": "a1@a.example", "password": PASSWORDS["a1@a.example"]})
    assert r.status_code == 200 and "no-store" in r.headers["Cache-Control"]


def test_key_creation_answer_is_not_cacheable(prod: FlaskClient) -> None:
    r = prod.post("/api/v2/apikeys", headers=basic("a1@a.example"),
                  json={"scopes": ["data:read"], "name": "cache"})
    assert r.status_code == 200 and r.get_json()["apikey"].startswith("sdsk_")
    assert "no-store" in r.headers.get("Cache-Control", "")


# ---- no outbound connections -----------------------------------------------------------------

class _Outbound:
    """Records (and refuses) every connect or name lookup that leaves the loopback range."""

    def __init__(self) -> None:
        self.attempts: list[str] = []

    @staticmethod
    def _local(host: Any) -> bool:
        if host in (None, "", "localhost"):
            return True
        try:
            return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
        except ValueError:
            return False

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
        real_getaddrinfo = socket.getaddrinfo
        outbound = self

        def check(sock: socket.socket, address: Any) -> None:
            if sock.family in (socket.AF_INET, socket.AF_INET6) and not outbound._local(
                    address[0]):
                outbound.attempts.append(f"connect {address!r}")
                raise OSError(f"outbound connection refused by the test: {address!r}")

        def connect(sock: socket.socket, address: Any) -> None:
            check(sock, address)
            return real_connect(sock, address)

        def connect_ex(sock: socket.socket, address: Any) -> int:
            check(sock, address)
            return real_connect_ex(sock, address)

        def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(host, bytes):
                host = host.decode()
            if not self._local(host):
                outbound.attempts.append(f"lookup {host!r}")
                raise socket.gaierror(f"name lookup refused by the test: {host!r}")
            return real_getaddrinfo(host, *args, **kwargs)

        monkeypatch.setattr(socket.socket, "connect", connect)
        monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
        monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_requests_make_no_outbound_connections(prod: FlaskClient, world: World,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    guard = _Outbound()
    guard.install(monkeypatch)
    # Negative control: the guard does catch a connection to a non-loopback address (TEST-NET-1,
    # refused before any packet is sent).
    with pytest.raises(OSError):
        socket.create_connection(("192.0.2.1", 80), timeout=0.1)
    assert guard.attempts
    guard.attempts.clear()
    user, key = basic("a1@a.example"), apikey(world.keys["all"])
    requests = [
        ("GET", "/api/v2/health", {}), ("GET", "/api/v2/openapi.json", {}),
        ("GET", "/api/v2/doc", {}), ("GET", "/api/v2/doc/assets/swagger-ui-bundle.js", {}),
        ("GET", "/api/v2/devices", user), ("GET", f"/api/v2/devices/{world.dev_a}", key),
        ("GET", "/api/v2/locations", key), ("GET", f"/api/v2/locations/{world.loc_a}", key),
        ("GET", "/api/v2/locations/summary", key), ("GET", "/api/v2/schemas", key),
        ("GET", "/api/v2/schemas/daily", key),
        ("GET", f"/api/v2/data/calibrated?device={world.dev_a}", key),
        ("GET", f"/api/v2/data/hourly?location={world.loc_a}&local_time=America/Chicago", key),
        ("GET", "/api/v2/apikeys", user), ("GET", "/api/v2/apikeys/scopes", user),
        ("POST", "/api/v2/apikeys", user), ("GET", "/api/v2/devices", {}),
        ("GET", "/api/v2/nothing", user), ("GET", "/api/v2/_boom", {}),
    ]
    for method, path, headers in requests:
        body = {"scopes": ["data:read"]} if method == "POST" else None
        r = prod.open(path, method=method, headers=headers, json=body)
        assert r.status_code < 600
        r.close()
    token = prod.post("/api/v2/auth/token", json={"email": "a1@a.example",
                                                  "password": "a1-correct-horse"})
    assert token.status_code == 200
    assert guard.attempts == [], f"outbound attempts during requests: {guard.attempts}"
