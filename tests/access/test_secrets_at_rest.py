"""No raw password, token or API key in the database or the logs (reliability plan S9-S11).

Every kind of credential is exercised through the API (logins, token, key creation, use,
failures, throttling, retrieval of a key by its owner, logout) with logs captured at DEBUG and
key retrieval on (keys kept sealed); then a pg_dump of the whole database
and the captured log text are searched for each raw secret."""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path

import psycopg
import pytest

from people import credentials
from shared import sealing
from tests.support.access_world import (
    PASSWORDS,
    World,
    apikey,
    basic,
    bearer,
    reset_memberships,
)
from tests.support.apps import close_app, make_app
from tests.support.databases import as_role

PG_DUMP = Path("/usr/lib/postgresql/15/bin/pg_dump")


def _dump(url: str) -> str:
    """The database as SQL text: pg_dump when installed, else every row of every table. As the
    cluster's superuser: every row of every table, whatever the row-level security (pg_dump
    refuses to run under a policy, and the login role is subject to FORCE ROW LEVEL SECURITY)."""
    url = as_role(url, "postgres")
    tool = str(PG_DUMP) if PG_DUMP.exists() else shutil.which("pg_dump")
    if tool:
        return subprocess.run([tool, "--data-only", "--inserts", url], check=True,
                              capture_output=True, text=True, timeout=120).stdout
    parts = []
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT quote_ident(table_schema) || '.' || quote_ident(table_name)"
            " FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
            " AND table_schema NOT IN ('pg_catalog', 'information_schema')").fetchall()
        for (name,) in tables:
            for (row,) in conn.execute(f"SELECT t::text FROM {name} t"):  # noqa: S608
                parts.append(row)
    return "\n".join(parts)


def test_no_raw_secret_in_database_or_logs(fresh_world: World,
                                           caplog: pytest.LogCaptureFixture) -> None:
    with psycopg.connect(fresh_world.url) as conn:
        reset_memberships(conn, fresh_world)  # b1 administers org B: makes links below
    # Key retrieval on (as deploy/run.sh runs it): keys are kept sealed, never raw.
    app = make_app(fresh_world.url, login_max_failures=3, apikey_seal_keys=sealing.new_key())
    made: list[str] = []
    try:
        client = app.test_client()
        with caplog.at_level(logging.DEBUG):
            assert client.get("/api/v2/devices", headers=basic("a1@a.example")).status_code == 200
            for _ in range(4):  # failures, then throttled
                client.get("/api/v2/devices", headers=basic("a2@a.example", "wrong-guess-1"))
            r = client.post("/api/v2/auth/token",
                            json={"email": "b1@b.example", "password": PASSWORDS["b1@b.example"]})
            token = r.get_json()["token"]
            made.append(token)
            assert client.get("/api/v2/locations", headers=bearer(token)).status_code == 200
            r = client.post("/api/v2/apikeys", headers=bearer(token),
                            json={"scopes": ["locations:read"], "name": "dump"})
            key = r.get_json()["apikey"]
            made.append(key)
            assert client.get("/api/v2/locations", headers=apikey(key)).status_code == 200
            # Retrieved by its owner: in the answer, never in the log.
            listed = client.get("/api/v2/apikeys", headers=bearer(token)).get_json()
            assert [k["apikey"] for k in listed if k["name"] == "dump"] == [key]
            client.get("/api/v2/devices", headers=apikey(key))  # 403
            client.get("/api/v2/devices", headers=apikey(key[:-1] + "x"))  # bad check
            client.get("/api/v2/devices", headers=bearer(fresh_world.tokens["revoked"]))
            assert client.delete("/api/v2/auth/token", headers=bearer(token)).status_code == 204
            # One-time links (invitation and reset): shown once, accepted, never stored raw.
            invited = client.post(f"/api/v2/orgs/{fresh_world.org_b}/invitations",
                                  headers=basic("b1@b.example"),
                                  json={"email": "dump@b.example", "role": "member"})
            reset = client.post(f"/api/v2/orgs/{fresh_world.org_b}/users/{fresh_world.b1}"
                                "/reset-link", headers=basic("b1@b.example"))
            for answer in (invited, reset):
                secret = answer.get_json()["link"].rsplit("/", 1)[1]
                made.append(secret)
                assert client.post("/api/v2/auth/accept", json={
                    "token": secret, "password": "dump-new-password-1"}).status_code == 200
            client.post("/api/v2/auth/password-reset", json={"email": "b1@b.example"})
    finally:
        close_app(app)
    dump = _dump(fresh_world.url)
    assert "auth_tokens" in dump and "api_keys" in dump  # the dump did include the tables
    assert "one_time_links" in dump
    logged = caplog.text + "\n".join(str(r.args) for r in caplog.records)
    for secret in [*fresh_world.secrets(), *made]:
        assert secret not in dump, "a raw secret is stored in the database"
        assert secret not in logged, "a raw secret was logged"
    # The token's digest is what is stored.
    with psycopg.connect(fresh_world.url) as conn:
        row = conn.execute("SELECT count(*) FROM auth_tokens WHERE digest = %s",
                           (credentials.digest(made[0]),)).fetchone()
        assert row == (1,)


def test_password_hashes_are_argon2id_with_unique_salts(fresh_world: World) -> None:
    with psycopg.connect(fresh_world.url) as conn:
        hashes = [r[0] for r in conn.execute("SELECT password_hash FROM users")]
    salts = set()
    for h in hashes:
        m = re.fullmatch(r"\$argon2id\$v=19\$m=(\d+),t=(\d+),p=(\d+)\$([^$]+)\$[^$]+", h)
        assert m, h
        assert int(m.group(1)) >= 19456 and int(m.group(2)) >= 2 and int(m.group(3)) >= 1
        salts.add(m.group(4))
    assert len(salts) == len(hashes)


def test_secret_comparisons_are_constant_time() -> None:
    """S11 grep test: no `==` on a digest, key, token or password in the auth code."""
    root = Path(__file__).resolve().parents[2]
    for path in (root / "serve" / "auth.py", root / "serve" / "authenticator.py",
                 root / "serve" / "authheader.py", root / "people" / "credentials.py"):
        text = path.read_text()
        assert "compare_digest" in text or path.name != "authenticator.py"
        for line in text.splitlines():
            code = line.split("#", 1)[0]
            if re.search(r"(digest|password|token|secret|apikey|\bkey\b)\S*\s*[!=]=", code):
                raise AssertionError(f"{path.name}: non-constant-time comparison: {line.strip()}")
