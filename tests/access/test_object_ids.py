"""One id parser for every object route (issue 31; serve/ids.py, the `objid` URL converter):
a malformed id is the same 404 JSON as a well-formed id that names nothing, on every route,
and only after the caller is judged (no credentials is still 401, a key without the scope
403). The dashboard's pages use the same converter (their 404 page:
tests/web/test_object_id_pages.py)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.routing import IntegerConverter

from serve import ids
from tests.support.access_world import World, reset_memberships
from tests.support.apps import close_app
from tests.support.invites import A1, link_app

MISSING = "00000000-0000-4000-8000-000000000000"
NOT_IDS = {"name", "device_name", "table", "filename", "version", "rest", "secret", "kind"}
"""Plain path arguments that are not ids: a device's or a table's name, a static file and its
version, the dashboard's catch-all, a one-time link's secret (its own credential), and the list
a team page has no route for (`kind`, always 404)."""
MALFORMED = ("not-a-uuid", "1234", "00000000-0000-4000-8000-00000000000g")
# (method, path with {} for the id, body): object routes of every blueprint that has them.
ROUTES = [
    ("GET", "/api/v2/channels/{}", None),
    ("DELETE", "/api/v2/channels/{}", None),
    ("GET", "/api/v2/alerts/{}", None),
    ("GET", "/api/v2/notifications/{}", None),
    ("GET", "/api/v2/annotations/{}", None),
    ("PUT", "/api/v2/apikeys/{}", {"name": "x"}),
    ("GET", "/api/v2/teams/{}", None),
    ("GET", "/api/v2/users/{}", None),
    ("GET", "/api/v2/orgs/{}", None),
    ("GET", "/api/v2/locations/{}/water", None),
    ("DELETE", "/api/v2/orgs/{}/invitations/" + MISSING, None),
    ("POST", "/api/v2/users/me/invitations/{}/accept", {}),
]


@pytest.fixture
def world(fresh_world: World) -> World:
    """The access world in a database of its own, a1 administering org A."""
    with psycopg.connect(fresh_world.url) as conn:
        reset_memberships(conn, fresh_world)
    return fresh_world


@pytest.fixture
def client(world: World) -> Iterator[FlaskClient]:
    app = link_app(world)
    try:
        yield app.test_client()
    finally:
        close_app(app)


def _answer(client: FlaskClient, method: str, path: str, body: object, **headers: str
            ) -> tuple[int, object]:
    r = client.open(path, method=method, json=body, headers=headers)
    return r.status_code, r.get_json()


def test_a_malformed_id_is_the_same_404_as_a_missing_one(client: FlaskClient) -> None:
    for method, path, body in ROUTES:
        status, missing = _answer(client, method, path.format(MISSING), body, **A1)
        assert status == 404, (path, missing)
        for bad in MALFORMED:
            status, malformed = _answer(client, method, path.format(bad), body, **A1)
            assert status == 404, (path, bad, malformed)
            # The one answer: the same JSON, naming what was asked for.
            assert malformed == {**missing, "message": missing["message"].replace(MISSING, bad)}
            assert re.fullmatch(r"unknown [a-zA-Z ]+ '.*'", malformed["message"]), malformed


def test_the_caller_is_judged_before_the_id(client: FlaskClient) -> None:
    """Without credentials a malformed id is still 401; the converter never stops a route
    from matching."""
    for method, path, body in ROUTES:
        status, answer = _answer(client, method, path.format("not-a-uuid"), body)
        assert status == 401, (method, path, answer)


def test_every_object_route_parses_its_ids_with_the_converter(world: World) -> None:
    """No object route of the API or the dashboard takes its id as a plain string (which its
    view would parse by hand, or pass on unparsed): every `..._id` path argument is an
    `objid` (a quarantine row's number is an `int`)."""
    app: Flask = link_app(world)
    try:
        rules = [rule for rule in app.url_map.iter_rules()
                 if rule.rule.startswith(("/api/v2/", "/dashboard/"))]
        plain = [rule.rule for rule in rules for name, conv in rule._converters.items()
                 if name.endswith("_id")
                 and not isinstance(conv, (ids.ObjectId, IntegerConverter))]
        # Every other plain argument is a name, not an id (the team pages once took a member's
        # or location's id as a plain `<target>`, passed on to the API as typed).
        named = sorted({f"{name} {rule.rule}" for rule in rules
                        for name, conv in rule._converters.items()
                        if not isinstance(conv, (ids.ObjectId, IntegerConverter))
                        and name not in NOT_IDS})
        pages = [rule.rule for rule in rules if rule.rule.startswith("/dashboard/")
                 and any(isinstance(c, ids.ObjectId) for c in rule._converters.values())]
    finally:
        close_app(app)
    assert plain == []
    assert named == [], "\n".join(named)
    assert len(pages) >= 25, pages  # the dashboard's object pages are covered too
