"""Invitation and reset links in tests (people/links.py): an app whose links point at
http://sds.example (with a real SMTP sink when given), the secret in a shown link or a received
email, and a JSON answer of an expected status."""

from __future__ import annotations

import email
import email.policy
import re
from typing import Any

from flask import Flask

from testbed.receivers import Receiver
from tests.support.access_world import World, basic
from tests.support.apps import make_app

A1 = basic("a1@a.example")
"""Org A's administrator (the access world, after reset_memberships)."""
LINK = re.compile(r"http://sds\.example/dashboard/accept/(sdsl_[A-Za-z0-9_-]{51})")
NEW_PASSWORD = "a-fresh-passphrase-42"


def link_app(world: World, sink: Receiver | None = None, **extra: Any) -> Flask:
    """An app of the world's database, links under http://sds.example, mail to `sink`."""
    mail = {} if sink is None else {"smtp_host": "127.0.0.1", "smtp_port": sink.port,
                                    "smtp_security": "none", "smtp_from": "sds@sds.example"}
    return make_app(world.url, public_url="http://sds.example", **mail, **extra)


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
