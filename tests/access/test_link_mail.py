"""The one durable mail outbox (issue 31; migration 0180, shared/mailbox.py): invitation and
password-reset mail is a row written with its link and sent by the deliverer process, so it
survives a mail server that is down and an API worker's restart, and is never queued for a
link that was rolled back. Real PostgreSQL, the real deliverer (python -m alerts.delivery) and
a real SMTP sink process (testbed/smtp_sink.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from people import links
from shared import audit
from shared.config import Settings
from testbed.receivers import smtp_sink
from tests.support.access_world import World, reset_memberships
from tests.support.apps import close_app
from tests.support.ingesting import wait_for
from tests.support.invites import (
    A1,
    answer,
    link_app,
    link_in,
    mail_deliverer,
    mail_sink,
    smtp_settings,
)

pytestmark = pytest.mark.usefixtures("processes")


@pytest.fixture
def world(fresh_world: World) -> World:
    """The access world in a database of its own, a1 administering org A."""
    with psycopg.connect(fresh_world.url) as conn:
        reset_memberships(conn, fresh_world)
    return fresh_world


def _outbox(world: World) -> list[Any]:
    """(recipient, state, body erased, attempts) of every queued mail, by recipient."""
    with psycopg.connect(world.url) as conn:
        return conn.execute("SELECT recipient, state, body IS NULL, attempts FROM mail_outbox"
                            " ORDER BY recipient").fetchall()


def _reset_requests(world: World) -> list[str]:
    """The emails of the queued password-reset requests (migration 0255)."""
    with psycopg.connect(world.url) as conn:
        return [r[0] for r in conn.execute("SELECT email FROM reset_requests ORDER BY email")]


def test_mail_queued_while_the_deliverer_and_smtp_are_down_arrives_after_a_restart(
        world: World, tmp_path: Path) -> None:
    """Mail asked for while nothing can send it (no deliverer, the SMTP server down) is kept
    through the API's restart, retried while the server refuses, and delivered once it is
    back. The per-worker queue thread this replaced tried once and dropped it."""
    down = smtp_sink(tmp_path)
    port = down.port
    down.stop()  # its port now refuses connections: the mail server is down
    app = link_app(world, None, **smtp_settings(port))
    try:
        client = app.test_client()
        made = answer(client.post(f"/api/v2/orgs/{world.org_a}/invitations", headers=A1,
                                  json={"email": "late@a.example", "role": "member"}), 201)
        assert made["mailed"] is True and "link" not in made
        assert client.post("/api/v2/auth/password-reset",
                           json={"email": "a2@a.example"}).status_code == 202
    finally:
        close_app(app)  # the API worker restarts: nothing of the mail lived in it
    # The invitation's mail is queued with its link; the reset request is queued whole, for
    # the deliverer to make its link and mail (migration 0255).
    assert _outbox(world) == [("late@a.example", "pending", False, 0)]
    assert _reset_requests(world) == ["a2@a.example"]
    deliverer = mail_deliverer(world, port, tmp_path / "deliverer.log",
                               delivery_max_attempts=1000).start()
    sink = None
    try:
        # The deliverer tries while the server is down: failed attempts, kept for a retry.
        wait_for(lambda: len(_outbox(world)) == 2 and all(r[3] >= 1 for r in _outbox(world)),
                 60, what="a failed attempt of each mail")
        assert _reset_requests(world) == []
        assert {r[1] for r in _outbox(world)} == {"pending"}
        sink = smtp_sink(tmp_path, port)  # the mail server is back
        mails = wait_for(lambda: len(sink.received()) == 2 and sink.received(), 60,
                         what="both emails")
        by_to = {m["rcpt_tos"][0]: m for m in mails}
        assert sorted(by_to) == ["a2@a.example", "late@a.example"]
        assert "You are invited to Org A" in by_to["late@a.example"]["data"]
        assert "Reset your password" in by_to["a2@a.example"]["data"]
        wait_for(lambda: {r[1] for r in _outbox(world)} == {"sent"}, 30, what="mail sent")
        assert all(r[2] for r in _outbox(world))  # the secrets are erased once sent
        # The mailed invitation works, and proves the email (it went only to the inbox).
        app = link_app(world, sink)
        try:
            done = answer(app.test_client().post("/api/v2/auth/accept", json={
                "token": link_in(by_to["late@a.example"]), "password": "a-fresh-pass-42"}), 200)
            assert done["account"] == "created"
        finally:
            close_app(app)
    finally:
        deliverer.stop()
        if sink is not None:
            sink.stop()


def test_the_mail_is_kept_or_dropped_with_its_link(world: World) -> None:
    """Queued in the link's transaction: a rolled-back invitation leaves no mail, and only a
    link made in the same transaction can be mailed (the API role cannot mail an older one)."""
    settings = Settings(public_url="http://sds.example")
    with psycopg.connect(world.url) as conn:
        issued = links.invite(conn, settings, org=world.org_a, email="gone@a.example",
                              role="member", teams_only=False, actor=audit.OPERATOR,
                              by_owner=True)
        links.queue_mail(conn, settings, issued, purpose="invite", org_name="Org A",
                         role="member", mailed_only=True)
        conn.rollback()
        kept = links.invite(conn, settings, org=world.org_a, email="kept@a.example",
                            role="member", teams_only=False, actor=audit.OPERATOR,
                            by_owner=True)
        conn.commit()
        with pytest.raises(RuntimeError, match="not made in this transaction"):
            links.queue_mail(conn, settings, kept, purpose="invite", org_name="Org A",
                             role="member", mailed_only=True)
    assert _outbox(world) == []


def test_a_sealed_mail_is_opened_and_delivered(
        world: World, tmp_path: Path) -> None:
    """With a seal key, the stored body (which holds the link's secret) is sealed, and the
    deliverer opens it with the same key."""
    with mail_sink(world, tmp_path) as sink:
        app = link_app(world, sink)
        try:
            answer(app.test_client().post("/api/v2/auth/password-reset",
                                          json={"email": "a2@a.example"}), 202)
        finally:
            close_app(app)
        mail = wait_for(sink.received, 60, what="the reset email")[0]
        with psycopg.connect(world.url) as conn:
            row = conn.execute("SELECT sealed FROM mail_outbox").fetchone()
        assert row == (True,)
        assert mail["rcpt_tos"] == ["a2@a.example"]
        assert link_in(mail).startswith("sdsl_")
