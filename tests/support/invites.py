"""Invitation and reset links in tests (people/links.py): an app whose links point at
http://sds.example (with a real SMTP sink when given), the secret in a shown link or a received
email, a JSON answer of an expected status, and the fixtures the link tests share
(tests/access/conftest.py registers them): `link_world` (the access world in a database of its
own, memberships reset), `sink` (a real SMTP server and the deliverer process that sends the
durable outbox's mail to it, shared/mailbox.py) and `plain` (a client of an app without
SMTP: links are shown to the inviter)."""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from flask import Flask
from flask.testing import FlaskClient

from shared import db, mailbox
from testbed.receivers import Receiver, smtp_sink
from tests.support.access_world import World, basic, reset_memberships
from tests.support.apps import close_app, make_app
from tests.support.delivery import SEAL_KEY, DelivererProcess, deliverer_env

A1 = basic("a1@a.example")
"""Org A's administrator (the access world, after reset_memberships)."""
LINK = re.compile(r"http://sds\.example/dashboard/accept/(sdsl_[A-Za-z0-9_-]{51})")
NEW_PASSWORD = "a-fresh-passphrase-42"


def smtp_settings(port: int) -> dict[str, Any]:
    """Settings of mail to a loopback SMTP sink on `port`."""
    return {"smtp_host": "127.0.0.1", "smtp_port": port, "smtp_security": "none",
            "smtp_from": "sds@sds.example"}


def link_app(world: World, sink: Receiver | None = None, **extra: Any) -> Flask:
    """An app of the world's database, links under http://sds.example, mail to `sink` (queued
    in the outbox, sealed with the deliverer's key)."""
    mail = {} if sink is None else smtp_settings(sink.port)
    return make_app(world.url, public_url="http://sds.example", apikey_seal_keys=SEAL_KEY,
                    **mail, **extra)


def mail_deliverer(world: World, port: int, log: Path, **settings: Any) -> DelivererProcess:
    """The deliverer process (python -m alerts.delivery) of the world's database, sending mail
    to the SMTP sink on `port`; not started yet."""
    return DelivererProcess(deliverer_env(world.url, **smtp_settings(port), **settings), log)


@contextmanager
def mail_sink(world: World, directory: Path) -> Iterator[Receiver]:
    """A real SMTP sink and a running deliverer sending the world's queued mail to it (request
    the `processes` fixture)."""
    sink = smtp_sink(directory)
    deliverer = mail_deliverer(world, sink.port, directory / "deliverer.log").start()
    try:
        yield sink
    finally:
        deliverer.stop()
        sink.stop()


def resolve_resets(world: World) -> int:
    """Run the deliverer's resolution of queued password-reset requests (shared/mailbox.py),
    as its role, where a test has no deliverer process; how many were resolved."""
    with db.connect(world.url, role=db.ROLE_ALERTS) as conn:
        return mailbox.resolve_reset_requests(conn)


def answer(r: Any, status: int) -> Any:
    """The JSON body of a response that must have `status`."""
    assert r.status_code == status, (r.status_code, r.get_data(as_text=True)[:400])
    return r.get_json()


def secret_of(url: str) -> str:
    """The secret in a shown link."""
    found = LINK.fullmatch(url)
    assert found, url
    return found.group(1)


def link_in(received: dict[str, Any]) -> str:
    """The link's secret in a received email (its text part decoded)."""
    text = email.message_from_string(received["data"], policy=email.policy.default)
    found = LINK.search(text.get_content())  # type: ignore[attr-defined]
    assert found, received["data"]
    return found.group(1)


@pytest.fixture
def link_world(fresh_world: World) -> World:
    """The access world in a database of its own: a1 administers org A, b1 org B (named apart
    from the access conftest's module-scoped `world`)."""
    with psycopg.connect(fresh_world.url) as conn:
        reset_memberships(conn, fresh_world)
    return fresh_world


@pytest.fixture
def sink(link_world: World, tmp_path: Path, processes: None) -> Iterator[Receiver]:
    """A real SMTP server on loopback, and the deliverer that sends the outbox's mail to it."""
    with mail_sink(link_world, tmp_path) as server:
        yield server


@pytest.fixture
def plain(link_world: World) -> Iterator[FlaskClient]:
    """A client of an app without SMTP (invitation links are shown to the inviter)."""
    app = link_app(link_world)
    try:
        yield app.test_client()
    finally:
        close_app(app)
