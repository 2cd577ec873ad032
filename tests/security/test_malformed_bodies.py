"""Every malformed body or query is a 4xx with a message, never a 5xx, on every route (issue 20
item 2): deep, huge, invalid and wrongly typed JSON, forms and bytes.

The routes come from the app's url_map, so a route added later is covered without editing this
file. API routes answer with the JSON error body; the dashboard's pages answer with an HTML page.
A 5xx, or any ERROR log record (an unhandled exception writes a traceback), fails the test.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.routing import Rule

from tests.support.access_world import World, apikey, basic, bearer, reset_memberships
from tests.support.apps import plain_rule

IMPLICIT = {"HEAD", "OPTIONS"}
# Field names the API's bodies know, so wrongly typed values reach the schemas' fields.
FIELDS = ["email", "password", "scopes", "name", "exp", "active", "next", "csrf", "apikey",
          "token", "id", "user_id"]


def routes(app: Flask) -> list[tuple[Rule, str]]:
    """(rule, method) for every route and method the app serves (HEAD and OPTIONS aside)."""
    return sorted(((rule, method) for rule in app.url_map.iter_rules()
                   for method in (rule.methods or set()) - IMPLICIT),
                  key=lambda pair: (pair[0].rule, pair[1]))


def path_of(rule: Rule, value: str) -> str:
    """The rule's path with each placeholder filled (`1` for int converters, `value` else)."""
    def fill(match: re.Match[str]) -> str:
        return "1" if match.group(1) == "int" else value
    return re.sub(r"<(?:([^:<>]+):)?[^<>]+>", fill, rule.rule)


def deep(depth: int, inner: str = "[]") -> bytes:
    """A JSON body nested `depth` deep: lists, objects, or a mix."""
    return ("[" * depth + inner + "]" * depth).encode()


def deep_objects(depth: int) -> bytes:
    return ('{"a":' * depth + "1" + "}" * depth).encode()


JSON_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                        st.text(max_size=20))
JSON_VALUE = st.recursive(JSON_SCALAR, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.sampled_from(FIELDS), kids, max_size=4)),
    max_leaves=12)
DEPTH = st.sampled_from([17, 100, 999, 1000, 1025, 5000, 100_000])

BODY = st.one_of(
    DEPTH.map(deep),
    DEPTH.map(deep_objects),
    DEPTH.map(lambda d: b'{"email": ' + deep(d) + b', "password": "x"}'),
    DEPTH.map(lambda d: b'{"scopes": ' + deep(d, '"data:read"') + b', "name": "n"}'),
    st.dictionaries(st.sampled_from(FIELDS), JSON_VALUE, max_size=6).map(
        lambda d: json.dumps(d).encode()),
    JSON_VALUE.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=200),
    st.sampled_from([b"", b"{", b'{"a":', b"NaN", b'{"a": NaN}', b"\xff\xfe", b'"\\ud800"',
                     b'{"email": "a\x00b", "password": "p"}', b"1" * 5000,
                     b"[" * 600_000, b'{"a": 1}' + b" " * 2_000_000]),
)
CONTENT_TYPE = st.sampled_from([
    "application/json", "application/merge-patch+json", "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x", "text/plain", "", "application/json; charset=latin-1"])
QUERY = st.dictionaries(st.sampled_from(["next", "limit", "page", "device", "days", "before",
                                         "ended", "temp", "cursor", "x"]),
                        st.text(max_size=30), max_size=3)


@pytest.fixture(scope="module")
def credentials(world: World) -> list[dict[str, str]]:
    """None, a user's password, a user's bearer token, and a key with every read scope."""
    return [{}, basic("a1@a.example"), bearer(world.tokens["live"]),
            apikey(world.keys["all"])]


@pytest.fixture
def errors_logged() -> Iterator[list[logging.LogRecord]]:
    """ERROR records logged while the test runs (an unhandled exception logs one)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.ERROR)
    logging.getLogger().addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger().removeHandler(handler)


def check(response: Any, path: str, what: object) -> None:
    """A client error with a message: JSON on the API, an HTML page on the dashboard."""
    status = response.status_code
    assert status < 500, (what, status, response.get_data()[:500])
    if status < 400:
        return
    if path.startswith("/api/"):
        body = response.get_json()
        assert response.mimetype == "application/json" and body["message"], what
        assert body["code"] == status
    else:
        assert response.get_data(), what


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(body=BODY, content_type=CONTENT_TYPE, query=QUERY, who=st.integers(0, 3),
       placeholder=st.sampled_from(["A000101", "hourly", "x", "%00", "..", "a" * 300]))
def test_no_malformed_body_or_query_gets_a_server_error(
        app: Flask, credentials: list[dict[str, str]], errors_logged: list[logging.LogRecord],
        body: bytes, content_type: str, query: dict[str, str], who: int,
        placeholder: str) -> None:
    """Each drawn body, content type, query and credential goes to every route and method."""
    headers = dict(credentials[who])
    if content_type:
        headers["Content-Type"] = content_type
    client = app.test_client()
    for rule, method in routes(app):
        path = path_of(rule, placeholder)
        what = (method, path, content_type, body[:80], query)
        response = client.open(path, method=method, data=body, headers=headers,
                               query_string=query)
        check(response, path, what)
        assert not errors_logged, (what, [r.getMessage() for r in errors_logged])


# The three routes of the report, at the depth of the report: each was a 500 with a traceback.
@pytest.mark.parametrize("method,path,who", [
    ("POST", "/api/v2/auth/token", None), ("POST", "/api/v2/apikeys", "user"),
    ("PUT", "/api/v2/apikeys/{id}", "user")])
@pytest.mark.parametrize("body", [deep(1000), deep_objects(1000), deep(20)],
                         ids=["lists", "objects", "shallow-but-too-deep"])
def test_deep_json_is_a_400_on_the_reported_routes(
        app: Flask, world: World, errors_logged: list[logging.LogRecord], method: str,
        path: str, who: str | None, body: bytes) -> None:
    headers = {"Content-Type": "application/json"}
    if who:
        headers.update(basic("a1@a.example"))
    response = app.test_client().open(path.format(id=world.key_ids["all"]), method=method,
                                      data=body, headers=headers)
    assert response.status_code == 400, response.get_data()[:300]
    assert "deeper than" in response.get_json()["message"] or "not valid JSON" in (
        response.get_json()["message"])
    assert not errors_logged


def test_every_route_is_enumerated(app: Flask) -> None:
    """The property test's route list is the url_map's, API and dashboard alike."""
    paths = {plain_rule(rule.rule) for rule, _ in routes(app)}
    assert {"/api/v2/auth/token", "/api/v2/apikeys", "/api/v2/apikeys/<key_id>",
            "/dashboard/login", "/api/v2/data/<table>"} <= paths
    assert len(routes(app)) >= 25


# ---- control characters in body strings (issue 30 item 6.2) -----------------------------------
# NUL reached PostgreSQL (which cannot hold it in text) as a 500 on POST/PATCH /teams,
# PATCH /orgs/{id}, /locations/{id}, /users/me, POST /orgs/{id}/invitations and /users. The
# cases come from the OpenAPI document: every property of every request body, so a route or
# field added later is covered without editing this file.

def _resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return spec["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


def body_fields(spec: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(method, path, content type, property) for every property of every request body."""
    found = []
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {}) \
                if isinstance(operation, dict) else {}
            for ctype in ("application/json", "application/x-www-form-urlencoded"):
                if ctype in content:
                    schema = _resolve(spec, content[ctype]["schema"])
                    found.extend((method.upper(), path, ctype, prop)
                                 for prop in schema.get("properties", {}))
                    break
    return sorted(found)


def _filled(path: str, world: World) -> str:
    """`path` with each {placeholder} an object of org A that a1 may change."""
    ids = {"org_id": world.org_a, "location_id": world.loc_a, "channel_id": world.channel_a,
           "annotation_id": world.annotation_a, "key_id": world.key_ids["all"],
           "user_id": world.a2, "name": world.dev_a}
    return re.sub(r"\{([^}]+)\}", lambda m: str(ids.get(m.group(1),
                                                        "00000000-0000-4000-8000-000000000000")),
                  path)


@pytest.fixture(scope="module")
def spec(app: Flask, world: World) -> dict[str, Any]:
    return app.test_client().get("/api/v2/openapi.json", headers=basic("a1@a.example")
                                 ).get_json()


def test_every_body_field_is_enumerated(spec: dict[str, Any]) -> None:
    """The reported routes and fields are among the generated cases."""
    cases = {(m, p, f) for m, p, _, f in body_fields(spec)}
    assert {("POST", "/api/v2/teams", "name"), ("PATCH", "/api/v2/teams/{team_id}", "name"),
            ("PATCH", "/api/v2/orgs/{org_id}", "name"),
            ("PATCH", "/api/v2/locations/{location_id}", "name"),
            ("PATCH", "/api/v2/users/me", "name"),
            ("POST", "/api/v2/orgs/{org_id}/invitations", "email"),
            ("POST", "/api/v2/orgs/{org_id}/users", "email")} <= cases
    assert len(cases) >= 40


def test_a_control_character_in_any_body_field_is_a_400_naming_it(
        fresh_app: Flask, fresh_world: World, spec: dict[str, Any],
        errors_logged: list[logging.LogRecord]) -> None:
    """Every field of every body route, as org A's administrator: a 400 naming the field."""
    with psycopg.connect(fresh_world.url) as conn:
        reset_memberships(conn, fresh_world)  # a1 administers org A
    client = fresh_app.test_client()
    wrong = []
    for char in ("\x00", "\x01", "\x1b", "\x1f"):
        for method, path, ctype, field in body_fields(spec):
            value = f"a{char}b"
            headers = {**basic("a1@a.example"), "Content-Type": ctype}
            data = (json.dumps({field: value}) if ctype == "application/json"
                    else {field: value})
            response = client.open(_filled(path, fresh_world), method=method, data=data,
                                   headers=headers)
            body = response.get_json(silent=True) or {}
            if response.status_code != 400 \
                    or field not in body.get("errors", {}).get("json", {}) \
                    or "control character" not in body.get("message", ""):
                wrong.append((repr(char), method, path, field, response.status_code,
                              body.get("message")))
    assert not wrong, "\n".join(map(str, wrong))
    assert not errors_logged, [r.getMessage() for r in errors_logged]


def test_nested_strings_and_keys_are_checked(app: Flask, world: World) -> None:
    """A NUL deep inside a field (an alert rule's scope, a list item) names the top field."""
    client = app.test_client()
    for body, field in [({"name": "r", "scope": {"device": "A\x00"}}, "scope"),
                        ({"name": "k", "scopes": ["data:read", "x\x00"]}, "scopes"),
                        ({"na\x00me": "x"}, "na\\x00me")]:
        response = client.post("/api/v2/alerts" if "scope" in body else "/api/v2/apikeys",
                               json=body, headers=basic("a1@a.example"))
        assert response.status_code == 400, response.get_data()
        assert field in response.get_json()["errors"]["json"], response.get_json()
        assert "\x00" not in response.get_data(as_text=True)


def test_tab_and_newlines_stay_allowed_in_free_text(fresh_app: Flask,
                                                    fresh_world: World) -> None:
    """Notes may span lines and hold tabs: the body rule lets these three through."""
    text = "hail\tdamage\r\nrows 3-5\nchecked"
    response = fresh_app.test_client().post(
        "/api/v2/annotations", json={"location": str(fresh_world.loc_a),
                                     "start_time": "2026-01-01T00:00:00Z", "text": text},
        headers=basic("a1@a.example"))
    assert response.status_code == 201, response.get_data()
    assert response.get_json()["text"] == text
