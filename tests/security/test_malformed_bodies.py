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

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from werkzeug.routing import Rule

from tests.support.access_world import World, apikey, basic, bearer

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
    paths = {rule.rule for rule, _ in routes(app)}
    assert {"/api/v2/auth/token", "/api/v2/apikeys", "/api/v2/apikeys/<key_id>",
            "/dashboard/login", "/api/v2/data/<table>"} <= paths
    assert len(routes(app)) >= 25
