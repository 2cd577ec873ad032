"""Alert delivery test support: an organisation with an admin, the API app to make channels
with, events inserted as the evaluator inserts them, and the deliverer as a real process
(`python -m alerts.delivery`) that tests SIGKILL and restart. Used by tests/alerts and bench."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient
from psycopg.types.json import Jsonb

from people import accounts
from shared import sealing
from shared.config import PREFIX
from testbed.process import kill_process, stop_process
from testbed.receivers import Receiver
from tests.support.apps import close_app, make_app

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "delivery-test-password-1"
SEAL_KEY = sealing.new_key()


@dataclass
class Org:
    """An organisation with one administrator (and their Basic credentials)."""

    id: uuid.UUID
    name: str
    admin_email: str

    @property
    def auth(self) -> dict[str, str]:
        raw = f"{self.admin_email}:{PASSWORD}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def make_org(conn: psycopg.Connection, name: str) -> Org:
    """A new organisation and its administrator (committed)."""
    org = accounts.create_org(conn, name=name)
    email = f"admin@{name}.example"
    accounts.create_user(conn, org=org, email=email, password=PASSWORD, role="owner")
    conn.commit()
    return Org(org, name, email)


def insert_event(conn: psycopg.Connection, org: uuid.UUID, *, kind: str = "firing",
                 device: str = "dev-1", value: float = -0.5, title: str | None = None,
                 channels: list[uuid.UUID] | None = None) -> uuid.UUID:
    """An alert event as the evaluator writes it (committed); its id."""
    row = conn.execute(
        "INSERT INTO alert_events (org_id, kind, device, column_name, value, unit, at, title,"
        " body, channels) VALUES (%s, %s, %s, 'tair', %s, 'C', now(), %s, %s, %s) RETURNING id",
        (org, kind, device, value, title or f"Frost: tair < 0 C at {device}",
         Jsonb({"rule": {"name": "Frost"}, "state": kind}), channels)).fetchone()
    conn.commit()
    assert row is not None
    return uuid.UUID(str(row[0]))


def deliverer_env(database_url: str, **settings: Any) -> dict[str, str]:
    """The environment of a deliverer process: the test's database, fast retries, loopback
    webhooks allowed, no metrics endpoint; keyword arguments are further settings
    (smtp_port=..., delivery_metrics_port=...)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    values: dict[str, Any] = {"database_url": database_url, "apikey_seal_keys": SEAL_KEY,
                              "webhook_allow_private": "true", "delivery_retry_base": "0.2",
                              "delivery_retry_cap": "1", "delivery_sweep_interval": "0.5",
                              # metrics off unless asked for: the default port is one per host
                              "delivery_metrics_port": "0", "log_level": "INFO", **settings}
    env.update({PREFIX + k.upper(): str(v) for k, v in values.items()})
    return env


class DelivererProcess:
    """`python -m alerts.delivery` (or another `module`: alerts.evaluator) as a child process,
    its log in `log_path`."""

    def __init__(self, env: dict[str, str], log_path: Path, module: str = "alerts.delivery"
                 ) -> None:
        self.env = env
        self.log_path = log_path
        self.module = module
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DelivererProcess:
        """Start (or restart) the process."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", self.module], env=self.env,
                                         cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        """SIGKILL: the process dies mid-attempt, holding whatever it held."""
        if self.proc is not None:
            kill_process(self.proc)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 20 s)."""
        if self.proc is not None:
            stop_process(self.proc, timeout=20)

    def log(self) -> str:
        """What the process wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_deliverer(deliverers: list[DelivererProcess], log_dir: Path, database_url: str,
                    **settings: Any) -> DelivererProcess:
    """Start a deliverer on `database_url` (further settings as for `deliverer_env`), its log
    in `log_dir`, and add it to `deliverers` (the fixture stops them)."""
    d = DelivererProcess(deliverer_env(database_url, **settings),
                         log_dir / f"deliverer-{len(deliverers)}.log").start()
    deliverers.append(d)
    return d


# ---- fixtures (tests/alerts/conftest.py registers them) ---------------------------------------


@pytest.fixture
def channels_overrides() -> dict[str, Any]:
    """Settings of `channels_client`'s app that differ from its defaults (none; a module that
    needs, say, no SMTP host overrides this fixture)."""
    return {}


@pytest.fixture
def channels_client(database_url: str, channels_overrides: dict[str, Any]
                    ) -> Iterator[FlaskClient]:
    """A client of the API on the test's database, with the seal key the deliverers use,
    webhooks to loopback allowed (the receivers listen there) and an SMTP host named (an email
    channel is refused while the server has no SMTP settings; each deliverer gets its sink's);
    `channels_overrides` changes these."""
    settings = {"apikey_seal_keys": SEAL_KEY, "webhook_allow_private": True,
                "smtp_host": "127.0.0.1", **channels_overrides}
    application = make_app(database_url, **settings)
    try:
        yield application.test_client()
    finally:
        close_app(application)


@pytest.fixture
def org(conn: psycopg.Connection, request: pytest.FixtureRequest) -> Org:
    """A new organisation and its owner (`make_org`), named by the test module's `ORG_NAME`
    (default `farm-a`)."""
    return make_org(conn, getattr(request.module, "ORG_NAME", "farm-a"))


@pytest.fixture
def receivers() -> Iterator[list[Receiver]]:
    """Receivers a test starts (testbed.receivers); stopped afterwards."""
    started: list[Receiver] = []
    yield started
    for r in started:
        r.stop()


@pytest.fixture
def deliverers() -> Iterator[list[DelivererProcess]]:
    """Deliverers a test starts (`start_deliverer`); stopped afterwards."""
    started: list[DelivererProcess] = []
    yield started
    for d in started:
        d.stop()
