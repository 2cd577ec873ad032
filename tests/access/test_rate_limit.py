"""Per-credential request rate limit (reliability plan S6): 429 with Retry-After and the JSON
error body, one budget per API key and one per user (basic and bearer), shared by every app
instance through the database, and a window that ends. The two-worker gunicorn case is in
test_gunicorn.py."""

from __future__ import annotations

from collections.abc import Iterator
from uuid import uuid4

import pytest
from flask import Flask
from flask.testing import FlaskClient

from people.principal import Principal
from serve.ratelimit import RateLimiter, subject_of
from tests.support.access_world import World, apikey, basic, bearer
from tests.support.apps import close_app, make_app
from tests.support.ingesting import wait_for

LIMIT = 5


@pytest.fixture
def limited(fresh_world: World) -> Iterator[Flask]:
    """An app allowing LIMIT requests per credential per minute."""
    app = make_app(fresh_world.url, api_rate_limit=LIMIT, api_rate_window=60)
    yield app
    close_app(app)


def _statuses(client: FlaskClient, headers: dict[str, str], n: int) -> list[int]:
    return [client.get("/api/v2/devices", headers=headers).status_code for _ in range(n)]


def test_exceeding_the_limit_is_429_with_retry_after(limited: Flask, fresh_world: World) -> None:
    client = limited.test_client()
    key = apikey(fresh_world.keys["all"])
    assert _statuses(client, key, LIMIT) == [200] * LIMIT
    r = client.get("/api/v2/devices", headers=key)
    assert r.status_code == 429
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.headers["Content-Type"] == "application/json"
    body = r.get_json()
    assert body["code"] == 429 and body["status"] == "Too Many Requests"
    assert "5 requests per 60 s for this API key" in body["message"]
    assert fresh_world.keys["all"] not in r.get_data(as_text=True)
    # Another key of the same user, and the user's own (basic, bearer) budget, are unaffected.
    assert _statuses(client, apikey(fresh_world.keys["devices"]), LIMIT) == [200] * LIMIT
    assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 200
    # Another organisation's key too.
    assert client.get("/api/v2/devices",
                      headers=apikey(fresh_world.keys["b_all"])).status_code == 200
    # Still refused: the budget does not come back with more requests.
    assert _statuses(client, key, 3) == [429] * 3


def test_every_counted_answer_says_how_much_budget_is_left(limited: Flask,
                                                          fresh_world: World) -> None:
    """RateLimit-Limit/-Remaining/-Reset on each answer, a 429 included, so a client can pace
    itself; none on public routes, which are not counted."""
    client = limited.test_client()
    key = apikey(fresh_world.keys["all"])
    remaining = []
    for _ in range(LIMIT + 1):
        r = client.get("/api/v2/devices", headers=key)
        assert r.headers["RateLimit-Limit"] == str(LIMIT)
        assert 1 <= int(r.headers["RateLimit-Reset"]) <= 60
        remaining.append((r.status_code, int(r.headers["RateLimit-Remaining"])))
    assert remaining == [(200, 4), (200, 3), (200, 2), (200, 1), (200, 0), (429, 0)]
    assert int(r.headers["RateLimit-Reset"]) == int(r.headers["Retry-After"])
    # Browser clients may read them (CORS).
    assert "RateLimit-Remaining" in r.headers["Access-Control-Expose-Headers"]
    public = client.get("/api/v2/openapi.json")
    assert public.status_code == 200 and "RateLimit-Limit" not in public.headers


def test_no_rate_headers_when_the_limit_is_off(fresh_world: World) -> None:
    app = make_app(fresh_world.url, api_rate_limit=0, api_user_rate_limit=0,
                   api_org_rate_limit=0)
    try:
        r = app.test_client().get("/api/v2/devices", headers=apikey(fresh_world.keys["all"]))
        assert r.status_code == 200 and "RateLimit-Limit" not in r.headers
    finally:
        close_app(app)


def test_a_users_tokens_and_basic_share_one_budget(limited: Flask, fresh_world: World) -> None:
    client = limited.test_client()
    token = bearer(fresh_world.tokens["live"])
    assert _statuses(client, token, 3) == [200] * 3
    assert _statuses(client, basic("a1@a.example"), 2) == [200] * 2
    r = client.get("/api/v2/devices", headers=token)
    assert r.status_code == 429 and "for this user" in r.get_json()["message"]
    assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 429
    # a2 has a budget of their own.
    assert client.get("/api/v2/devices", headers=basic("a2@a.example")).status_code == 200


def test_limit_is_shared_by_app_instances(fresh_world: World) -> None:
    """Two apps with their own pools (as two gunicorn workers have) count into one budget."""
    apps = [make_app(fresh_world.url, api_rate_limit=LIMIT, api_rate_window=60)
            for _ in range(2)]
    try:
        clients = [app.test_client() for app in apps]
        key = apikey(fresh_world.keys["all"])
        statuses = [clients[i % 2].get("/api/v2/devices", headers=key).status_code
                    for i in range(2 * LIMIT)]
        assert statuses == [200] * LIMIT + [429] * LIMIT
    finally:
        for app in apps:
            close_app(app)


def test_window_ends_and_the_key_works_again(fresh_world: World) -> None:
    app = make_app(fresh_world.url, api_rate_limit=2, api_rate_window=2)
    try:
        client = app.test_client()
        key = apikey(fresh_world.keys["all"])
        assert _statuses(client, key, 3) == [200, 200, 429]
        r = client.get("/api/v2/devices", headers=key)
        assert r.status_code == 429 and int(r.headers["Retry-After"]) <= 2
        status = wait_for(lambda: (s := client.get("/api/v2/devices", headers=key).status_code)
                          != 429 and s, 10, every=0.2, what="the window's end")
        assert status == 200
    finally:
        close_app(app)


def test_zero_turns_the_limit_off(fresh_world: World) -> None:
    app = make_app(fresh_world.url, api_rate_limit=0)
    try:
        assert _statuses(app.test_client(), apikey(fresh_world.keys["all"]), 30) == [200] * 30
    finally:
        close_app(app)


def test_refused_credentials_spend_no_budget(limited: Flask, fresh_world: World) -> None:
    """Wrong passwords are the login throttle's business; they do not use the user's budget."""
    client = limited.test_client()
    wrong = basic("a1@a.example", "not-the-password")
    assert _statuses(client, wrong, LIMIT + 2) == [401] * (LIMIT + 2)
    assert _statuses(client, basic("a1@a.example"), LIMIT) == [200] * LIMIT


def test_subjects_and_disabled_limiter() -> None:
    user, org, key = uuid4(), uuid4(), uuid4()
    assert subject_of(Principal(user, org, "apikey", key_id=key)) == f"key:{key}"
    assert subject_of(Principal(user, org, "bearer", token_id=uuid4())) == f"user:{user}"
    assert subject_of(Principal(user, org, "basic")) == f"user:{user}"
    off = RateLimiter(0, 60)
    assert not off.enabled
    # Disabled: allowed without touching a connection.
    assert off.hit(None, Principal(user, org, "basic")).allowed  # type: ignore[arg-type]
    assert RateLimiter(5, 0).window == 1
    assert RateLimiter(10**12, 60).limit == 2**31 - 2  # the capped count stays an integer


def test_huge_limit_is_served(fresh_world: World) -> None:
    app = make_app(fresh_world.url, api_rate_limit=10**12)
    try:
        assert _statuses(app.test_client(), apikey(fresh_world.keys["all"]), 3) == [200] * 3
    finally:
        close_app(app)
