"""`sds access passwd|unlock|logout`: the operator's tools for passwords, lockouts and tokens."""

from __future__ import annotations

import psycopg
from click.testing import CliRunner

from admin.access import access_cli
from admin.cli import main
from tests.support.access_world import PASSWORDS, World, apikey, basic, bearer
from tests.support.apps import close_app, make_app

A1_LOGIN = {"email": "a1@a.example", "password": PASSWORDS["a1@a.example"]}


def _run(world: World, *args: str, password: str | None = None) -> str:
    env = {"SDS_DATABASE_URL": world.url}
    if password:
        env["SDS_USER_PASSWORD"] = password
    result = CliRunner().invoke(access_cli, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_group_is_an_sds_command() -> None:
    result = CliRunner().invoke(main, ["access", "--help"])
    assert result.exit_code == 0 and "passwd" in result.output and "unlock" in result.output


def test_passwd_ends_tokens_and_lockout_keeps_keys(fresh_world: World) -> None:
    app = make_app(fresh_world.url, login_max_failures=2)
    try:
        client = app.test_client()
        token = client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
        for _ in range(2):
            client.get("/api/v2/devices", headers=basic("a1@a.example", "wrong-guess"))
        assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 429
        out = _run(fresh_world, "passwd", "A1@a.example", password="a-new-password-9")
        assert "changed" in out and "a-new-password-9" not in out
        assert client.get("/api/v2/devices", headers=bearer(token)).status_code == 401
        assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 401
        new = basic("a1@a.example", "a-new-password-9")
        assert client.get("/api/v2/devices", headers=new).status_code == 200
        assert client.get("/api/v2/devices",
                          headers=apikey(fresh_world.keys["devices"])).status_code == 200
    finally:
        close_app(app)


def test_passwd_refuses_short_passwords_and_unknown_users(fresh_world: World) -> None:
    env = {"SDS_DATABASE_URL": fresh_world.url, "SDS_USER_PASSWORD": "short"}
    result = CliRunner().invoke(access_cli, ["passwd", "a1@a.example"], env=env)
    assert result.exit_code != 0 and "8 characters" in result.output
    env["SDS_USER_PASSWORD"] = "long-enough-pw"
    result = CliRunner().invoke(access_cli, ["passwd", "ghost@a.example"], env=env)
    assert result.exit_code != 0 and "no user" in result.output


def test_unlock_lifts_a_lockout(fresh_world: World) -> None:
    app = make_app(fresh_world.url, login_max_failures=2)
    try:
        client = app.test_client()
        for _ in range(2):
            client.get("/api/v2/devices", headers=basic("a2@a.example", "wrong-guess"))
        assert client.get("/api/v2/devices", headers=basic("a2@a.example")).status_code == 429
        assert "lockout lifted" in _run(fresh_world, "unlock", "a2@a.example")
        assert client.get("/api/v2/devices", headers=basic("a2@a.example")).status_code == 200
        assert "no failed logins" in _run(fresh_world, "unlock", "a2@a.example")
    finally:
        close_app(app)


def test_logout_revokes_every_token(fresh_world: World) -> None:
    app = make_app(fresh_world.url)
    try:
        client = app.test_client()
        tokens = [client.post("/api/v2/auth/token", json=A1_LOGIN).get_json()["token"]
                  for _ in range(2)]
        out = _run(fresh_world, "logout", "a1@a.example")
        assert "3 bearer token(s)" in out  # two new ones and the seeded live one
        for token in tokens:
            assert client.get("/api/v2/devices", headers=bearer(token)).status_code == 401
    finally:
        close_app(app)
    with psycopg.connect(fresh_world.url) as conn:
        live = conn.execute("SELECT count(*) FROM auth_tokens WHERE user_id = %s"
                            " AND revoked_at IS NULL", (fresh_world.a1,)).fetchone()
    assert live == (1,)  # only the seeded already-expired one stays unrevoked
