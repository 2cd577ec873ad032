"""The deprecated `?apikey=` (docs/spec/reference-facts.md decision 10, reliability plan S12,
S13): off by default with a 401 naming the header form; when an operator turns it on, it works
on GET with Deprecation and Sunset headers; never together with an Authorization header."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared.config import Settings
from tests.support.access_world import World, apikey, basic
from tests.support.apps import close_app, make_app


@pytest.fixture(scope="module")
def enabled_app(world: World) -> Iterator[Flask]:
    """The app with the operator setting SDS_APIKEY_QUERY_ENABLED on."""
    app = make_app(world.url, apikey_query_enabled=True)
    yield app
    close_app(app)


def test_disabled_by_default_with_a_401_naming_the_header(client: FlaskClient,
                                                          world: World) -> None:
    r = client.get(f"/api/v2/locations/summary?apikey={world.keys['all']}")
    assert r.status_code == 401
    body = r.get_json()
    assert "Authorization: Apikey <key>" in body["message"]
    assert r.headers["WWW-Authenticate"].startswith("Apikey")
    assert 'error="query_apikey_disabled"' in r.headers["WWW-Authenticate"]
    assert world.keys["all"] not in r.get_data(as_text=True)
    assert "Deprecation" not in r.headers


def test_enabled_works_with_deprecation_headers(enabled_app: Flask, world: World) -> None:
    client = enabled_app.test_client()
    r = client.get(f"/api/v2/locations/summary?apikey={world.keys['all']}")
    assert r.status_code == 200, r.get_json()
    deprecation = r.headers["Deprecation"]
    assert deprecation.startswith("@")
    sunset = parsedate_to_datetime(r.headers["Sunset"])
    assert sunset.year == 2021 and sunset.month == 5 and sunset.day == 14
    assert sunset.timestamp() >= int(deprecation[1:])
    # The header form carries no deprecation notice.
    plain = client.get("/api/v2/locations/summary", headers=apikey(world.keys["all"]))
    assert plain.status_code == 200 and "Deprecation" not in plain.headers


def test_enabled_still_enforces_scope_and_validity(enabled_app: Flask, world: World) -> None:
    client = enabled_app.test_client()
    assert client.get(f"/api/v2/locations?apikey={world.keys['data']}").status_code == 403
    for name in ("expired", "inactive", "deleted"):
        assert client.get(f"/api/v2/locations?apikey={world.keys[name]}").status_code == 401
    assert client.get("/api/v2/locations?apikey=sdsk_bogus").status_code == 401


def test_query_and_header_together_are_400(enabled_app: Flask, client: FlaskClient,
                                           world: World) -> None:
    for c in (client, enabled_app.test_client()):
        r = c.get(f"/api/v2/locations?apikey={world.keys['all']}",
                  headers=apikey(world.keys["all"]))
        assert r.status_code == 400
        r = c.get(f"/api/v2/locations?apikey={world.keys['all']}", headers=basic("a1@a.example"))
        assert r.status_code == 400


def test_query_key_refused_on_writes_and_when_repeated(enabled_app: Flask,
                                                       world: World) -> None:
    client = enabled_app.test_client()
    r = client.post(f"/api/v2/apikeys?apikey={world.keys['all']}", json={"scopes": ["data:read"]})
    assert r.status_code == 400
    key = world.keys["all"]
    assert client.get(f"/api/v2/locations?apikey={key}&apikey={key}").status_code == 400
    assert client.get("/api/v2/locations?apikey=").status_code == 400


def test_query_key_never_logged(enabled_app: Flask, world: World,
                                caplog: pytest.LogCaptureFixture) -> None:
    client = enabled_app.test_client()
    with caplog.at_level(logging.DEBUG):
        for name in ("all", "data", "expired"):
            client.get(f"/api/v2/locations?apikey={world.keys[name]}")
    text = caplog.text + "".join(str(r.args) for r in caplog.records)
    for name in ("all", "data", "expired"):
        assert world.keys[name] not in text


def test_query_key_use_is_reported_per_key_and_minute(fresh_world: World, figures: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """S13: operators see which keys still use the URL form: one INFO line per key and
    minute, naming the key by id (never its value), however many requests it makes."""
    app = make_app(fresh_world.url, apikey_query_enabled=True)
    key, key_id = fresh_world.keys["locations"], str(fresh_world.key_ids["locations"])
    try:
        client = app.test_client()
        with caplog.at_level(logging.INFO, logger="serve.authenticator"):
            statuses = {client.get(f"/api/v2/locations?apikey={key}").status_code
                        for _ in range(20)}
            # The header form is not reported.
            client.get("/api/v2/locations", headers=apikey(fresh_world.keys["all"]))
    finally:
        close_app(app)
    lines = [r.getMessage() for r in caplog.records if "deprecated ?apikey=" in r.getMessage()]
    sunset = datetime(2021, 5, 14, tzinfo=UTC)
    figures.record("s13_query_apikey", {
        "enabled_by_default": Settings().apikey_query_enabled,
        "usage_lines_for_20_requests_of_one_key": len(lines),
        "days_since_sunset": (datetime.now(UTC) - sunset).days},
        section="security",
        title="S13 ?apikey=: off by default (sunset 2021-05-14 passed); when enabled, use is "
              "reported per key by id, once a minute",
        target="disabled; per-key usage visible", source="tests/access/test_query_apikey.py")
    assert statuses == {200}
    assert lines == [f"API key {key_id} used the deprecated ?apikey= query form"]
    assert key not in caplog.text
