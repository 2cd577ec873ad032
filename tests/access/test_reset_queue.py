"""Password-reset requests as a queue (migration 0255, people/links.py `request_reset`,
shared/mailbox.py `resolve_reset_requests`): the request writes the same one row whatever the
email, so neither its answer nor its time says whether an account exists; the deliverer turns
an account's request into its link, its mail and its audit entry, and drops the others.

Before, the request wrote the link, the mail and the audit entry for an account and nothing for
an unknown email: an account's request was measurably slower (the HTTP-level figure is
tests/access/test_invitations.py::test_reset_requests_are_no_account_oracle)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import psycopg

from people import links
from shared import db, mailbox
from shared.config import Settings
from tests.support.access_world import World
from tests.support.delivery import SEAL_KEY

SETTINGS = Settings(public_url="http://sds.example", smtp_host="127.0.0.1",
                    smtp_security="none", smtp_from="sds@sds.example",
                    apikey_seal_keys=SEAL_KEY)
"""Mail on (so the request carries a sealed mail), as the API has it."""

WRITES = ("SELECT relname, n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_xact_user_tables"
          " WHERE n_tup_ins + n_tup_upd + n_tup_del > 0 ORDER BY relname")
"""The rows this transaction wrote, by table (the backend's own counters)."""


def _writes(url: str, email: str) -> list[Any]:
    """What one reset request for `email` writes, table by table, as the API's role."""
    with db.connect(url, role=db.ROLE_AUTH) as conn:
        conn.execute("SELECT 1")  # the transaction the counters are of
        links.request_reset(conn, SETTINGS, email=email, address="192.0.2.7")
        rows = conn.execute(WRITES).fetchall()
        conn.rollback()
    return rows


def test_a_reset_request_writes_the_same_whatever_the_email(link_world: World) -> None:
    """The same tables and row counts for an account, an account in another case, and no
    account: the one queued request (before, an account's request wrote its link, mail and
    audit entry, and no account's request wrote nothing)."""
    known = _writes(link_world.url, "a2@a.example")
    assert known == [("reset_requests", 1, 0, 0)]
    assert _writes(link_world.url, "A2@A.example") == known
    assert _writes(link_world.url, "nobody@a.example") == known
    assert _writes(link_world.url, "not an email at all") == known


def _count(conn: psycopg.Connection, sql: str, *args: Any) -> int:
    row = conn.execute(sql, args).fetchone()
    assert row is not None
    return int(row[0])


def test_the_deliverer_makes_an_accounts_link_and_drops_the_rest(link_world: World) -> None:
    """Resolved by the deliverer's step (as its role): an account's request becomes its
    link (mailed only, at the request's time and expiry), its sealed mail in the outbox and its
    audit entry with the requester's address; no account's request and an expired one are
    dropped; nothing of either is written before."""
    with db.connect(link_world.url, role=db.ROLE_AUTH) as conn:
        for email in ("A2@a.example", "nobody@a.example", "a1@a.example"):
            links.request_reset(conn, SETTINGS, email=email, address="192.0.2.7")
            conn.commit()
    with psycopg.connect(link_world.url) as owner:
        # a1's request outlived its link's hour unresolved: nothing is worth making of it.
        owner.execute("UPDATE reset_requests SET expires_at = now() - interval '1 second'"
                      " WHERE email = 'a1@a.example'")
        owner.commit()
        assert _count(owner, "SELECT count(*) FROM reset_requests") == 3
        for table in ("one_time_links", "mail_outbox"):
            assert _count(owner, f"SELECT count(*) FROM {table}") == 0, table
        assert _count(owner, "SELECT count(*) FROM audit_log WHERE action ="
                             " 'user.reset_request'") == 0
        asked = owner.execute("SELECT requested_at, expires_at FROM reset_requests"
                              " WHERE email = 'A2@a.example'").fetchone()
    with db.connect(link_world.url, role=db.ROLE_ALERTS) as deliverer:
        assert mailbox.resolve_reset_requests(deliverer) == 3
        assert mailbox.resolve_reset_requests(deliverer) == 0
    with psycopg.connect(link_world.url) as owner:
        assert _count(owner, "SELECT count(*) FROM reset_requests") == 0
        made = owner.execute("SELECT user_id, email, created_at, expires_at, mailed_only,"
                             " inviter_label FROM one_time_links").fetchall()
        assert made == [(link_world.a2, "a2@a.example", *asked, True, "self")]
        mail = owner.execute("SELECT recipient, sealed, state, expires_at FROM mail_outbox"
                             ).fetchall()
        assert mail == [("a2@a.example", True, "pending", asked[1])]
        audit = owner.execute("SELECT actor_user, via, address, at FROM audit_log WHERE action"
                              " = 'user.reset_request'").fetchall()
        assert audit == [(link_world.a2, "link", "192.0.2.7", asked[0])]


def test_a_reset_request_takes_the_same_time_in_the_database(link_world: World,
                                                              figures: Any) -> None:
    """The request's own database work, committed, timed without the HTTP stack: the median of
    150 paired differences (an account's minus no account's, alternating order) stays under a
    quarter of one request's median. Before, an account's request wrote three rows more."""
    with db.connect(link_world.url, role=db.ROLE_AUTH) as conn:

        def ask(email: str) -> float:
            start = time.perf_counter()
            links.request_reset(conn, SETTINGS, email=email, address="192.0.2.7")
            conn.commit()
            return time.perf_counter() - start

        for i in range(20):  # warm up both paths
            ask("a2@a.example")
            ask(f"warm{i}@a.example")
        diffs, durations = [], []
        for i in range(150):
            unknown = f"nobody{i}@a.example"
            if i % 2:
                t_known, t_unknown = ask("a2@a.example"), ask(unknown)
            else:
                t_unknown, t_known = ask(unknown), ask("a2@a.example")
            diffs.append(t_known - t_unknown)
            durations.append(t_unknown)
    gap, typical = statistics.median(diffs), statistics.median(durations)
    figures.record("s8_reset_request_db_gap_ms", round(gap * 1e3, 3), section="security",
                   title="Password-reset request, database work only: median time of an "
                         "account's minus no account's (150 pairs)",
                   target="< 25% of one request", source="tests/access/test_reset_queue.py")
    assert abs(gap) < 0.25 * typical, (gap, typical)
