"""Key retrieval as the interface spec says (2.7, 3, 4.8; issue 11, finding 6), without raw keys
at rest: the owner (basic or bearer) reads key values in listings and PUT answers, deactivated
keys included; API-key callers see masked values; show-once mode; seal-key rotation with
`sds apikey reseal`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from admin.cli import main as sds
from people import credentials
from shared import sealing
from tests.support.access_world import PASSWORDS, World, apikey, basic, bearer
from tests.support.apps import close_app, make_app
from tests.support.figures import Figures

A1 = basic("a1@a.example")
SEAL = sealing.new_key()


@pytest.fixture
def sealed_app(fresh_world: World) -> Iterator[Flask]:
    """The app as deploy/run.sh runs it: retrieval on, one generated seal key."""
    app = make_app(fresh_world.url, apikey_seal_keys=SEAL)
    yield app
    close_app(app)


def _listed(client: FlaskClient, headers: dict[str, str]) -> dict[str, dict[str, Any]]:
    r = client.get("/api/v2/apikeys", headers=headers)
    assert r.status_code == 200, r.get_json()
    assert r.headers["Cache-Control"] == "no-store"
    return {k["name"]: k for k in r.get_json()}


def _sealed_column(url: str, key_id: str) -> bytes | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT sealed FROM api_keys WHERE id = %s", (key_id,)).fetchone()
    assert row is not None
    return None if row[0] is None else bytes(row[0])


def test_legacy_client_second_run(fresh_world: World, figures: Figures) -> None:
    """First run: create `data apikey` with basic auth. Second run (a new process, same
    settings): list the keys, pick `data apikey`, use its `apikey` field: 200, not 401."""
    first = make_app(fresh_world.url, apikey_seal_keys=SEAL)
    try:
        r = first.test_client().post("/api/v2/apikeys", headers=A1, json={
            "scopes": ["data:read", "devices:read"], "name": "data apikey", "active": True})
        assert r.status_code == 200
        created = r.get_json()["apikey"]
    finally:
        close_app(first)
    second = make_app(fresh_world.url, apikey_seal_keys=SEAL)
    try:
        client = second.test_client()
        token = client.post("/api/v2/auth/token", json={
            "email": "a1@a.example", "password": PASSWORDS["a1@a.example"]}).get_json()["token"]
        for headers in (A1, bearer(token)):
            key = _listed(client, headers)["data apikey"]["apikey"]
            assert key == created
            r = client.get(f"/api/v2/data/calibrated?device={fresh_world.dev_a}",
                           headers=apikey(key))
            assert r.status_code == 200, r.get_json()
    finally:
        close_app(second)
    # At rest: the digest and a sealed copy, never the value.
    sealed = _sealed_column(fresh_world.url, _listed_id(fresh_world, "data apikey"))
    assert sealed is not None and created.encode() not in sealed
    figures.record("legacy_client_second_run", "200 with basic and bearer",
                   section="security",
                   title="Legacy client's second run: lists keys, picks 'data apikey', uses its "
                         "apikey field on /data (key at rest: digest + Fernet-sealed copy)",
                   target="200 (was 401: listings were masked)",
                   source="tests/access/test_key_retrieval.py::test_legacy_client_second_run")


def _listed_id(world: World, name: str) -> str:
    with psycopg.connect(world.url) as conn:
        row = conn.execute("SELECT id FROM api_keys WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return str(row[0])


def test_deactivated_key_stays_retrievable(sealed_app: Flask, fresh_world: World) -> None:
    client = sealed_app.test_client()
    made = client.post("/api/v2/apikeys", headers=A1,
                       json={"scopes": ["devices:read"], "name": "pausable"}).get_json()
    r = client.put(f"/api/v2/apikeys/{made['id']}", headers=A1, json={"active": False})
    assert r.status_code == 200 and r.headers["Cache-Control"] == "no-store"
    assert r.get_json()["apikey"] == made["apikey"] and r.get_json()["active"] is False
    assert client.get("/api/v2/devices", headers=apikey(made["apikey"])).status_code == 401
    listed = _listed(client, A1)["pausable"]
    assert listed["apikey"] == made["apikey"] and listed["active"] is False
    assert client.put(f"/api/v2/apikeys/{made['id']}", headers=A1,
                      json={"active": True}).status_code == 200
    assert client.get("/api/v2/devices", headers=apikey(made["apikey"])).status_code == 200


def test_api_key_callers_see_masked_values(sealed_app: Flask, fresh_world: World) -> None:
    """Retrieval is for the owner with basic or bearer credentials: a key with apikeys:read
    (its own included) lists masked values; another user of the same organisation lists none
    of a1's keys."""
    client = sealed_app.test_client()
    made = client.post("/api/v2/apikeys", headers=A1,
                       json={"scopes": ["apikeys:read"], "name": "lister"}).get_json()
    via_key = _listed(client, apikey(made["apikey"]))
    assert via_key["lister"]["apikey"] == credentials.mask(made["apikey"][:9],
                                                            made["apikey"][-4:])
    assert all("..." in k["apikey"] for k in via_key.values())
    a2 = _listed(client, basic("a2@a.example"))
    assert "lister" not in a2
    assert made["apikey"] not in str(client.get("/api/v2/apikeys",
                                                headers=basic("b1@b.example")).get_json())


@pytest.mark.parametrize("overrides", [{"apikey_retrievable": False, "apikey_seal_keys": SEAL},
                                       {}], ids=["retrievable-false", "no-seal-key"])
def test_show_once_mode(fresh_world: World, overrides: dict[str, Any]) -> None:
    app = make_app(fresh_world.url, **overrides)
    try:
        client = app.test_client()
        made = client.post("/api/v2/apikeys", headers=A1,
                           json={"scopes": ["devices:read"], "name": "once"}).get_json()
        assert credentials.well_formed(made["apikey"], credentials.API_KEY_PREFIX)
        assert _listed(client, A1)["once"]["apikey"].endswith("..." + made["apikey"][-4:])
        put = client.put(f"/api/v2/apikeys/{made['id']}", headers=A1, json={"name": "once2"})
        assert "..." in put.get_json()["apikey"]
        assert _sealed_column(fresh_world.url, made["id"]) is None
    finally:
        close_app(app)
    # Turning retrieval on later does not reveal keys made show-once: nothing was kept.
    app = make_app(fresh_world.url, apikey_seal_keys=SEAL)
    try:
        assert "..." in _listed(app.test_client(), A1)["once2"]["apikey"]
    finally:
        close_app(app)


def _reseal(url: str, keys: str) -> Any:
    return CliRunner().invoke(sds, ["apikey", "reseal"],
                              env={"SDS_DATABASE_URL": url, "SDS_APIKEY_SEAL_KEYS": keys})


def test_seal_key_rotation(fresh_world: World) -> None:
    old, new = SEAL, sealing.new_key()
    app = make_app(fresh_world.url, apikey_seal_keys=old)
    try:
        made = app.test_client().post("/api/v2/apikeys", headers=A1, json={
            "scopes": ["devices:read"], "name": "rotated"}).get_json()
    finally:
        close_app(app)
    # 1. New key first, old one still listed: values open; reseal moves them to the new key.
    result = _reseal(fresh_world.url, f"{new},{old}")
    assert result.exit_code == 0, result.output
    assert "resealed 1" in result.output
    assert "resealed 0, already under the first key 1" in _reseal(
        fresh_world.url, f"{new},{old}").output
    # 2. The old key removed: still retrievable.
    app = make_app(fresh_world.url, apikey_seal_keys=new)
    try:
        assert _listed(app.test_client(), A1)["rotated"]["apikey"] == made["apikey"]
    finally:
        close_app(app)
    # Negative control: only the old key no longer opens it (masked, still usable).
    app = make_app(fresh_world.url, apikey_seal_keys=old)
    try:
        client = app.test_client()
        assert "..." in _listed(client, A1)["rotated"]["apikey"]
        assert client.get("/api/v2/devices", headers=apikey(made["apikey"])).status_code == 200
    finally:
        close_app(app)
    # A key dropped before resealing is reported, with a non-zero exit.
    lost = _reseal(fresh_world.url, sealing.new_key())
    assert lost.exit_code != 0 and "opened by no key 1" in lost.output


def test_credential_checks_cannot_read_the_sealed_copy(fresh_world: World) -> None:
    """sds_auth (credential lookups) has column grants that leave `sealed` out."""
    with psycopg.connect(fresh_world.url) as conn:
        conn.execute("SET ROLE sds_auth")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("SELECT sealed FROM api_keys").fetchall()
