"""Secrets are never echoed back (reliability plan S11, S12, S13).

Every route and method is sent refused credentials of each kind: an unknown but well-formed API
key or token, one with a broken check suffix, a key sent as a token and a token as a key, a
valid key lacking the route's scope, a key inside a header that holds two credentials, and the
deprecated `?apikey=` (disabled, enabled, and on a write). The refused value must appear
nowhere in the answer (body or any header) nor in the log. Wrong passwords get the same check
on a few routes and on the login body. tests/access/test_header_fuzz.py fuzzes header shapes
on one route; this module covers every route and the other places a secret can travel.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from people import credentials
from tests.support.access_world import World, apikey, basic, bearer
from tests.support.apps import close_app, make_app, plain_rule
from tests.support.figures import Figures

ZERO = "00000000-0000-4000-8000-000000000000"
WRONG_PASSWORD = "Wrong-Pass-7781-zq"
_counts = {"requests": 0, "echoes": 0}


def route_samples(app: Flask, world: World) -> list[tuple[str, str]]:
    """(method, concrete path) for every API rule and method of the app."""
    values = {"<table>": "hourly", "<name>": world.dev_a, "<location_id>": str(world.loc_a),
              "<key_id>": str(world.key_ids["all"]), "<path:filename>": "swagger-ui.css"}
    out = []
    for rule in app.url_map.iter_rules():
        path = plain_rule(rule.rule)
        for placeholder, value in values.items():
            path = path.replace(placeholder, value)
        if "/data/" in path:
            path += f"?device={world.dev_a}"
        out += [(m, path) for m in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"})]
    return sorted(set(out))


def _assert_not_echoed(response: Any, secret: str, what: str) -> None:
    _counts["requests"] += 1
    seen = response.get_data(as_text=True) + "\n" + "\n".join(
        f"{k}: {v}" for k, v in response.headers.items())
    # The secret, its distinctive body (without the public prefix) and its Base64 form.
    probes = {secret, secret[5:-8] if secret.startswith("sds") else secret,
              base64.b64encode(secret.encode()).decode()}
    for probe in probes:
        if len(probe) >= 8 and probe in seen:
            _counts["echoes"] += 1
            raise AssertionError(f"{what}: the secret is echoed in {response.status_code}: "
                                 f"{seen[:300]}")


@pytest.fixture(scope="module")
def query_app(world: World) -> Iterator[Flask]:
    """The app with the deprecated ?apikey= enabled."""
    application = make_app(world.url, apikey_query_enabled=True, login_max_failures=10_000,
                           login_address_max_failures=10_000)
    try:
        yield application
    finally:
        close_app(application)


def _refused_headers(world: World) -> dict[str, tuple[str, dict[str, str]]]:
    unknown_key = credentials.new_api_key().value
    unknown_token = credentials.new_token().value
    key, token = world.keys["all"], world.tokens["live"]
    return {
        "unknown_key": (unknown_key, apikey(unknown_key)),
        "broken_key": (unknown_key[:-1] + ("0" if unknown_key[-1] != "0" else "1"),
                       apikey(unknown_key[:-1] + ("0" if unknown_key[-1] != "0" else "1"))),
        "unknown_token": (unknown_token, bearer(unknown_token)),
        "key_as_token": (key, bearer(key)),
        "token_as_key": (token, apikey(token)),
        "two_credentials": (key, {"Authorization": f"Apikey {key}, Bearer {token}"}),
        "unscoped_key": (world.keys["none"], apikey(world.keys["none"])),
        "expired_key": (world.keys["expired"], apikey(world.keys["expired"])),
        "revoked_token": (world.tokens["revoked"], bearer(world.tokens["revoked"])),
    }


def test_refused_credentials_are_not_echoed_on_any_route(
        app: Flask, client: FlaskClient, world: World,
        caplog: pytest.LogCaptureFixture) -> None:
    cases = _refused_headers(world)
    with caplog.at_level(logging.DEBUG):
        for method, path in route_samples(app, world):
            if method == "DELETE" and "apikeys" in path:
                path = path.replace(str(world.key_ids["all"]), ZERO)  # refused anyway
            for name, (secret, headers) in cases.items():
                r = client.open(path, method=method, headers=headers,
                                json={"name": "x", "scopes": ["data:read"]}
                                if method in ("PUT", "POST") else None)
                _assert_not_echoed(r, secret, f"{name} {method} {path}")
                r.close()
    for _name, (secret, _headers) in cases.items():
        assert secret not in caplog.text, f"{_name} logged"


def test_wrong_passwords_are_not_echoed(client: FlaskClient, world: World,
                                        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG):
        for path in ("/api/v2/devices", "/api/v2/apikeys", f"/api/v2/locations/{world.loc_a}"):
            for email in ("a1@a.example", "nobody@nowhere.example"):
                raw = base64.b64encode(f"{email}:{WRONG_PASSWORD}".encode()).decode()
                r = client.get(path, headers={"Authorization": f"Basic {raw}"})
                assert r.status_code == 401
                _assert_not_echoed(r, WRONG_PASSWORD, f"basic {path}")
                _assert_not_echoed(r, raw, f"basic {path}")
        for body in ({"email": "a1@a.example", "password": WRONG_PASSWORD},
                     {"email": "a1@a.example", "password": WRONG_PASSWORD * 60},  # > max length
                     {"email": WRONG_PASSWORD, "password": WRONG_PASSWORD},
                     {"password": WRONG_PASSWORD}):
            r = client.post("/api/v2/auth/token", json=body)
            assert r.status_code in (400, 401), r.status_code
            _assert_not_echoed(r, WRONG_PASSWORD, f"login {sorted(body)}")
            r = client.post("/api/v2/auth/token", data=body)  # the form-encoded login
            _assert_not_echoed(r, WRONG_PASSWORD, f"form login {sorted(body)}")
    assert WRONG_PASSWORD not in caplog.text


def test_keys_in_bodies_are_not_echoed(client: FlaskClient, world: World) -> None:
    """Fields where a key belongs or could be mistaken for one. (A validation message may quote
    an ordinary field's bad value, e.g. an unknown scope, to the caller that sent it; that is by
    design and not checked here.)"""
    key = world.keys["all"]
    for body in ({"apikey": key}, {"name": "x", "digest": key}, {"key_hash": key},
                 {"exp": key}, {"name": key * 10}):
        for method, path in (("PUT", f"/api/v2/apikeys/{world.key_ids['data']}"),
                             ("POST", "/api/v2/apikeys")):
            r = client.open(path, method=method, headers=basic("a1@a.example"), json=body)
            assert r.status_code == 400, (body, r.status_code)
            _assert_not_echoed(r, key, f"{method} body {sorted(body)}")


@pytest.mark.parametrize("enabled", [False, True], ids=["disabled", "enabled"])
def test_query_keys_are_not_echoed(client: FlaskClient, query_app: Flask, world: World,
                                   enabled: bool, caplog: pytest.LogCaptureFixture) -> None:
    c = query_app.test_client() if enabled else client
    unknown = credentials.new_api_key().value
    cases = [("GET", f"/api/v2/devices?apikey={unknown}", unknown, 401),
             ("GET", f"/api/v2/devices?apikey={world.keys['none']}", world.keys["none"],
              403 if enabled else 401),
             ("POST", f"/api/v2/apikeys?apikey={world.keys['all']}", world.keys["all"],
              400 if enabled else 401),
             ("GET", f"/api/v2/devices?apikey={unknown}&apikey={unknown}", unknown,
              400 if enabled else 401)]
    with caplog.at_level(logging.DEBUG):
        for method, path, secret, status in cases:
            r = c.open(path, method=method, json={"scopes": ["data:read"]}
                       if method == "POST" else None)
            assert r.status_code == status, (path, r.status_code, r.get_json())
            _assert_not_echoed(r, secret, f"{method} {path[:30]}")
        # With a header as well: 400, and neither value echoed.
        r = c.get(f"/api/v2/devices?apikey={unknown}", headers=apikey(world.keys["all"]))
        assert r.status_code in (400, 401)
        _assert_not_echoed(r, unknown, "query+header")
        _assert_not_echoed(r, world.keys["all"], "query+header")
    for _method, _path, secret, _status in cases:
        assert secret not in caplog.text


def test_record_figures(figures: Figures) -> None:
    """Runs last in this module: how many answers were searched for echoed secrets."""
    if not _counts["requests"]:
        pytest.skip("run with the probes above to record their totals")
    figures.record("s11_echo_probes", _counts["requests"], section="security",
                   title="Answers searched for an echoed key, token or password",
                   target="recorded", source="tests/security/test_echo.py")
    figures.record("s11_echoed_secrets", _counts["echoes"], section="security",
                   title="Raw keys, tokens or passwords echoed in answers", target="0",
                   source="tests/security/test_echo.py")
    assert _counts["echoes"] == 0
