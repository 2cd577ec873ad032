"""Email while the server has no SMTP settings: an email channel is refused with the reason
(it used to be accepted, fail 15 times and be disabled); an owner's own SMTP settings at
`/api/v2/email-settings` (roles, bad input, the password sealed and never shown, audited),
taken up by a running deliverer at its next send without a restart, with the SMTP server's
reply kept as the channel's `last_delivery.answer`."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from flask.testing import FlaskClient

from admin.cli import main as sds
from people import accounts
from shared import sealing
from testbed.receivers import Receiver, smtp_sink
from tests.support.delivery import (
    PASSWORD,
    SEAL_KEY,
    DelivererProcess,
    Org,
    deliverer_env,
    insert_event,
)
from tests.support.ingesting import wait_for

SMTP_PASSWORD = "smtp-secret-Pw-1"


@pytest.fixture
def channels_overrides() -> dict[str, Any]:
    """No SMTP host: this module tests email while the server has none."""
    return {"smtp_host": None}


ORG_NAME = "farm-m"
"""The name of the test's organisation (the `org` fixture, tests/support/delivery.py)."""


def _user(conn: psycopg.Connection, org: Org, role: str) -> dict[str, str]:
    email = f"{role}@{org.name}.example"
    accounts.create_user(conn, org=org.id, email=email, password=PASSWORD, role=role)
    conn.commit()
    return {"Authorization": "Basic " + base64.b64encode(f"{email}:{PASSWORD}".encode()).decode()}


def _settings(port: int, **extra: Any) -> dict[str, Any]:
    return {"host": "127.0.0.1", "port": port, "security": "none",
            "from": "alerts@farm.example", **extra}


def test_an_email_channel_is_refused_while_there_are_no_smtp_settings(
        channels_client: FlaskClient, org: Org) -> None:
    r = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "grower", "kind": "email", "recipients": ["g@farm.example"]})
    assert r.status_code == 409, r.get_json()
    assert r.get_json()["message"].startswith("email is off: this server has no SMTP settings")
    assert "kind" in r.get_json()["errors"]["json"]
    assert channels_client.get("/api/v2/email-settings", headers=org.auth).get_json() == {
        "source": "none"}


def test_owner_sets_smtp_settings_sealed_and_audited(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection) -> None:
    member = _user(conn, org, "member")
    r = channels_client.put("/api/v2/email-settings", headers=member, json=_settings(25))
    assert r.status_code == 403 and "only an owner" in r.get_json()["message"]
    for body, field in ((_settings(0), "port"), (_settings(25, security="ssl"), "security"),
                        (_settings(25, host="a b"), "host"),
                        ({**_settings(25), "from": "nobody"}, "from"),
                        (_settings(25, username="x\ny"), "username"),
                        (_settings(25, source="organisation"), "source")):
        r = channels_client.put("/api/v2/email-settings", headers=org.auth, json=body)
        assert r.status_code == 400 and field in r.get_json()["errors"]["json"], r.get_json()
    r = channels_client.put("/api/v2/email-settings", headers=org.auth,
                   json=_settings(2525, username="alerts", password=SMTP_PASSWORD))
    assert r.status_code == 200, r.get_json()
    got = r.get_json()
    assert got["source"] == "organisation" and got["password_set"] is True
    assert SMTP_PASSWORD not in r.get_data(as_text=True)
    sealed = conn.execute("SELECT password_sealed FROM org_smtp_settings WHERE org_id = %s",
                          (org.id,)).fetchone()[0]
    assert SMTP_PASSWORD.encode() not in bytes(sealed)
    # The form leaves the password empty: kept.
    r = channels_client.put("/api/v2/email-settings", headers=org.auth, json=_settings(2526))
    assert r.get_json()["password_set"] is True and r.get_json()["port"] == 2526
    seen = channels_client.get("/api/v2/email-settings", headers=member).get_json()
    assert seen["host"] == "127.0.0.1" and "password" not in seen
    log = channels_client.get("/api/v2/audit?limit=5", headers=org.auth).get_json()["items"]
    updates = [e for e in log if e["action"] == "email_settings.update"]
    assert len(updates) == 2 and updates[-1]["details"]["password"] == "set"
    assert SMTP_PASSWORD not in str(log)
    r = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "grower", "kind": "email", "recipients": ["g@farm.example"]})
    assert r.status_code == 201, r.get_json()
    assert channels_client.delete("/api/v2/email-settings", headers=org.auth).get_json() == {
        "source": "none"}


@pytest.fixture
def sinks(tmp_path: Path, processes: None) -> Iterator[list[Receiver]]:
    started = [smtp_sink(tmp_path), smtp_sink(tmp_path)]
    try:
        yield started
    finally:
        for s in started:
            s.stop()


def test_the_running_deliverer_takes_new_settings_without_a_restart(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, sinks: list[Receiver]) -> None:
    first, second = sinks
    assert channels_client.put("/api/v2/email-settings", headers=org.auth,
                      json=_settings(first.port)).status_code == 200
    channel = channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "grower", "kind": "email", "recipients": ["g@farm.example"]}).get_json()
    deliverer = DelivererProcess(deliverer_env(database_url), tmp_path / "d.log").start()
    try:
        one = insert_event(conn, org.id)
        got = wait_for(lambda: first.received(), 30, what="the email at the first server")
        assert got[0]["mail_from"] == "alerts@farm.example" and str(one) in got[0]["data"]
        assert channels_client.put("/api/v2/email-settings", headers=org.auth,
                          json=_settings(second.port)).status_code == 200
        r = channels_client.post(f"/api/v2/channels/{channel['id']}/test", headers=org.auth)
        assert r.status_code == 202
        test_id = r.get_json()["event_id"]
        got = wait_for(lambda: second.received(), 30, what="the test at the second server")
        assert test_id in got[0]["data"] and len(first.received()) == 1

        def answered() -> Any:
            last = channels_client.get(f"/api/v2/channels/{channel['id']}",
                              headers=org.auth).get_json()["last_delivery"]
            return last if last and last["state"] == "delivered" else None

        last = wait_for(answered, 30, what="the test's outcome")
        assert last["event_id"] == test_id and last["answer"].startswith("250 ")
    finally:
        deliverer.stop()


@pytest.fixture
def login_sink(tmp_path: Path, processes: None) -> Iterator[Receiver]:
    sink = smtp_sink(tmp_path, auth=f"alerts:{SMTP_PASSWORD}")
    try:
        yield sink
    finally:
        sink.stop()


def test_reseal_moves_the_smtp_password_to_a_new_seal_key(
        channels_client: FlaskClient, org: Org, conn: psycopg.Connection, database_url: str,
        tmp_path: Path, login_sink: Receiver) -> None:
    """`sds apikey reseal` with a new key first: the organisation's SMTP password (and a
    webhook secret) then open with the new key alone, and a deliverer holding only it logs
    in to an SMTP server that requires the password and sends (until issue 33 the reseal
    left SMTP passwords under the old key: the deliverer sent no password, refused 535)."""
    assert channels_client.put("/api/v2/email-settings", headers=org.auth, json=_settings(
        login_sink.port, username="alerts", password=SMTP_PASSWORD)).status_code == 200
    assert channels_client.post("/api/v2/channels", headers=org.auth, json={
        "name": "grower", "kind": "email", "recipients": ["g@farm.example"]}).status_code == 201
    new = sealing.new_key()
    env = {"SDS_DATABASE_URL": database_url, "SDS_APIKEY_SEAL_KEYS": f"{new},{SEAL_KEY}"}
    result = CliRunner().invoke(sds, ["apikey", "reseal"], env=env)
    assert result.exit_code == 0, result.output
    assert "SMTP passwords: resealed 1, already under the first key 0" in result.output
    assert "SMTP passwords: resealed 0, already under the first key 1" in CliRunner().invoke(
        sds, ["apikey", "reseal"], env=env).output
    sealed = conn.execute("SELECT password_sealed FROM org_smtp_settings WHERE org_id = %s",
                          (org.id,)).fetchone()[0]
    assert sealing.Sealer([new]).open(sealed) == SMTP_PASSWORD
    deliverer = DelivererProcess(deliverer_env(database_url, apikey_seal_keys=new),
                                 tmp_path / "d.log").start()
    try:
        one = insert_event(conn, org.id)
        got = wait_for(lambda: login_sink.received(), 30, what="the email, logged in")
        assert got[0]["login"] == "alerts" and str(one) in got[0]["data"]
    finally:
        deliverer.stop()
