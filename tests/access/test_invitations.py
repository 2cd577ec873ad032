"""Invitations and password reset (issue 23; people/links.py): on a real PostgreSQL with the
API's database roles, and a real SMTP server process (testbed.smtp_sink, aiosmtpd) where mail
is configured. Invitations mailed and accepted, shown when there is no SMTP, one same 400 for
an unknown, used, expired, revoked or malformed link, acceptance throttled like a sign-in, a
reset that ends the user's tokens, no account oracle in reset requests, and the CLI."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from click.testing import CliRunner
from flask.testing import FlaskClient

from admin.cli import main
from people import credentials, links
from testbed.receivers import Receiver
from tests.support.access_world import PASSWORDS, World, basic, bearer
from tests.support.apps import close_app
from tests.support.dashboard import csrf_of
from tests.support.ingesting import wait_for
from tests.support.invites import A1, NEW_PASSWORD, resolve_resets
from tests.support.invites import answer as _json
from tests.support.invites import link_app as _app
from tests.support.invites import link_in as _link_in
from tests.support.invites import secret_of as _secret

A2 = basic("a2@a.example")


def _invite(client: FlaskClient, link_world: World, email: str, role: str = "member") -> Any:
    return _json(client.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                             json={"email": email, "role": role}), 201)


def _email_proven(link_world: World, email: str) -> bool:
    """Whether the account's email is proven (users.email_verified_at, migration 0165)."""
    with psycopg.connect(link_world.url) as conn:
        row = conn.execute("SELECT email_verified_at IS NOT NULL FROM users WHERE email = %s",
                           (email,)).fetchone()
    assert row is not None, email
    return bool(row[0])


def _audit(link_world: World, action: str) -> list[Any]:
    with psycopg.connect(link_world.url) as conn:
        return conn.execute("SELECT actor, via, details FROM audit_log WHERE action = %s"
                            " ORDER BY id", (action,)).fetchall()


def test_invitation_is_mailed_and_accepted(link_world: World, sink: Receiver) -> None:
    app = _app(link_world, sink)
    try:
        client = app.test_client()
        made = _invite(client, link_world, "newcomer@a.example", "admin")
        assert made["mailed"] is True and "link" not in made  # mailed: not shown
        assert (made["email"], made["role"], made["invited_by"]["label"]) == (
            "newcomer@a.example", "admin", "a1@a.example")
        mails = wait_for(sink.received, 20, what="the invitation email")
        assert mails[0]["rcpt_tos"] == ["newcomer@a.example"]
        assert "Org A" in mails[0]["data"] and "admin" in mails[0]["data"]
        secret = _link_in(mails[0])
        listed = _json(client.get(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1), 200)
        assert [i["id"] for i in listed["items"]] == [made["id"]]
        assert secret not in str(listed)
        done = _json(client.post("/api/v2/auth/accept", json={
            "token": secret, "password": NEW_PASSWORD, "name": "New Comer"}), 200)
        assert (done["account"], done["role"], done["org_id"]) == ("created", "admin",
                                                                   str(link_world.org_a))
        me = _json(client.get("/api/v2/users/me",
                              headers=basic("newcomer@a.example", NEW_PASSWORD)), 200)
        assert (me["name"], me["role"], me["org_id"]) == ("New Comer", "admin",
                                                          str(link_world.org_a))
        assert _email_proven(link_world, "newcomer@a.example")  # the link went only to the inbox
        # Used: the same 400 as a link that never existed, and no longer pending.
        again = client.post("/api/v2/auth/accept", json={"token": secret,
                                                          "password": NEW_PASSWORD})
        assert _json(again, 400)["message"] == links.REFUSED
        assert _json(client.get(f"/api/v2/orgs/{link_world.org_a}/invitations",
                                headers=A1), 200)["total"] == 0
    finally:
        close_app(app)
    assert [r[2]["email"] for r in _audit(link_world, "invite.create")] == ["newcomer@a.example"]
    accepted = _audit(link_world, "invite.accept")
    assert [(r[0], r[1], r[2]["account"]) for r in accepted] == [
        ("newcomer@a.example", "link", "created")]


def test_without_smtp_the_link_is_shown_to_the_administrator(link_world: World,
                                                            plain: FlaskClient) -> None:
    made = _invite(plain, link_world, "shown@a.example")
    assert made["mailed"] is False and "SDS_SMTP_HOST" in made["not_mailed_because"]
    secret = _secret(made["link"])
    with psycopg.connect(link_world.url) as conn:  # only the digest is stored
        stored = conn.execute("SELECT count(*) FROM one_time_links WHERE digest::text LIKE %s",
                              (f"%{secret}%",)).fetchone()
        assert stored == (0,)
    _json(plain.post("/api/v2/auth/accept", json={"token": secret, "password": NEW_PASSWORD}),
          200)
    assert _json(plain.get("/api/v2/users/me", headers=basic("shown@a.example", NEW_PASSWORD)),
                 200)["role"] == "member"
    assert not _email_proven(link_world, "shown@a.example")  # shown to the inviter: proves nothing


def test_unknown_used_expired_revoked_and_malformed_links_get_one_answer(
        link_world: World, plain: FlaskClient) -> None:
    used = _secret(_invite(plain, link_world, "used@a.example")["link"])
    _json(plain.post("/api/v2/auth/accept", json={"token": used, "password": NEW_PASSWORD}), 200)
    expired = _invite(plain, link_world, "late@a.example")
    revoked = _invite(plain, link_world, "revoked@a.example")
    with psycopg.connect(link_world.url) as conn:
        conn.execute("UPDATE one_time_links SET expires_at = now() - interval '1 s'"
                     " WHERE id = %s", (expired["id"],))
    assert plain.delete(f"/api/v2/orgs/{link_world.org_a}/invitations/{revoked['id']}",
                        headers=A1).status_code == 204
    unknown = credentials.new_link().value  # well-formed, never stored
    answers = set()
    for token in (used, _secret(expired["link"]), _secret(revoked["link"]), unknown,
                  "sdsl_malformed", "sdst_" + "x" * 51):
        r = plain.post("/api/v2/auth/accept", json={"token": token, "password": NEW_PASSWORD})
        answers.add((r.status_code, r.get_data()))
    assert len(answers) == 1, answers
    status, body = answers.pop()
    assert status == 400 and links.REFUSED.encode() in body
    for address in ("late@a.example", "revoked@a.example"):  # no account was made
        assert plain.post("/api/v2/auth/token", json={"email": address, "password": NEW_PASSWORD}
                          ).status_code == 401
    assert [r[2]["email"] for r in _audit(link_world, "invite.revoke")] == ["revoked@a.example"]


def test_a_refused_password_keeps_the_link_and_bad_bodies_are_named(
        link_world: World, plain: FlaskClient) -> None:
    secret = _secret(_invite(plain, link_world, "careful@a.example")["link"])
    short = _json(plain.post("/api/v2/auth/accept", json={"token": secret, "password": "short"}),
                  400)
    assert "password" in short["message"]
    missing = _json(plain.post("/api/v2/auth/accept", json={"token": secret}), 400)
    assert "password" in missing["message"]  # a new account needs one
    _json(plain.post("/api/v2/auth/accept", json={"token": secret, "password": NEW_PASSWORD}),
          200)
    for body, field in (({"email": "x@a.example"}, "role"), ({"role": "member"}, "email"),
                        ({"email": "x@a.example", "role": "emperor"}, "role"),
                        ({"email": "not-an-email", "role": "member"}, "email"),
                        ({"email": "a2@a.example", "role": "member"}, "already a member")):
        r = plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1, json=body)
        assert r.status_code in (400, 409) and field in r.get_json()["message"], body
    # Members cannot invite, list, revoke or make reset links (403 before any lookup).
    for method, path in (("POST", f"/api/v2/orgs/{link_world.org_a}/invitations"),
                         ("GET", f"/api/v2/orgs/{link_world.org_a}/invitations"),
                         ("POST",
                          f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a1}/reset-link")):
        r = plain.open(path, method=method, headers=A2,
                       json={"email": "x@a.example", "role": "member"})
        assert r.status_code == 403, (method, path)


def test_acceptance_is_throttled_like_a_sign_in(link_world: World) -> None:
    app = _app(link_world, login_address_max_failures=3)
    try:
        client = app.test_client()
        secret = _secret(_invite(client, link_world, "patient@a.example")["link"])
        for i in range(3):
            _json(client.post("/api/v2/auth/accept", json={"token": f"sdsl_guess{i}",
                                                           "password": NEW_PASSWORD}), 400)
        r = client.post("/api/v2/auth/accept", json={"token": secret, "password": NEW_PASSWORD})
        assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    finally:
        close_app(app)


def test_an_existing_account_joins_signed_in_with_the_password_it_has(
        link_world: World, plain: FlaskClient) -> None:
    """A link alone never joins an existing account (issue 30): 409, the invitation stays
    pending, and the account accepts it signed in."""
    made = _invite(plain, link_world, "B1@b.example", "viewer")
    r = plain.post("/api/v2/auth/accept", json={"token": _secret(made["link"])})
    assert r.status_code == 409 and r.get_json()["message"] == links.EXISTING_ACCOUNT
    done = _json(plain.post(f"/api/v2/users/me/invitations/{made['id']}/accept",
                            headers=basic("b1@b.example")), 200)
    assert (done["account"], done["user_id"], done["role"]) == ("existing", str(link_world.b1),
                                                                "viewer")
    # The same password, now a viewer of org A too (a token for it), still admin of org B.
    token = _json(plain.post("/api/v2/auth/token", json={
        "email": "b1@b.example", "password": PASSWORDS["b1@b.example"],
        "org": str(link_world.org_a)}), 200)["token"]
    me = _json(plain.get("/api/v2/users/me", headers=bearer(token)), 200)
    assert (me["org_id"], me["role"]) == (str(link_world.org_a), "viewer")
    assert _json(plain.get("/api/v2/users/me", headers=basic("b1@b.example")),
                 200)["role"] == "admin"
    # A manager of org A cannot take over b1's account (it reaches org B) with a reset link.
    r = plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.b1}/reset-link", headers=A1)
    assert r.status_code == 403 and "other organisations" in r.get_json()["message"]


def test_owners_are_invited_and_reset_by_owners_only(link_world: World, plain: FlaskClient) -> None:
    r = plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                   json={"email": "boss@a.example", "role": "owner"})
    assert r.status_code == 403 and "owner" in r.get_json()["message"]
    with psycopg.connect(link_world.url) as conn:
        conn.execute("UPDATE memberships SET role = 'owner' WHERE user_id = %s", (link_world.a2,))
    r = plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}/reset-link", headers=A1)
    assert r.status_code == 403
    owner = basic("a2@a.example")
    made = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=owner,
                            json={"email": "team@a.example", "role": "member",
                                  "teams_only": True}), 201)
    assert made["teams_only"] is True
    done = _json(plain.post("/api/v2/auth/accept", json={"token": _secret(made["link"]),
                                                         "password": NEW_PASSWORD}), 200)
    assert done["teams_only"] is True
    with psycopg.connect(link_world.url) as conn:
        assert conn.execute("SELECT role, teams_only FROM memberships WHERE user_id = %s",
                            (done["user_id"],)).fetchone() == ("member", True)
    r = plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=owner,
                   json={"email": "x@a.example", "role": "admin", "teams_only": True})
    assert r.status_code == 400 and "teams_only" in r.get_json()["message"]


def test_a_removed_member_invited_again_comes_back_with_a_new_password(
        link_world: World, plain: FlaskClient) -> None:
    assert plain.delete(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}",
                        headers=A1).status_code == 204
    secret = _secret(_invite(plain, link_world, "a2@a.example")["link"])
    done = _json(plain.post("/api/v2/auth/accept", json={"token": secret,
                                                         "password": NEW_PASSWORD}), 200)
    assert (done["account"], done["user_id"]) == ("reactivated", str(link_world.a2))
    assert plain.get("/api/v2/users/me", headers=A2).status_code == 401  # the old password
    assert plain.get("/api/v2/users/me",
                     headers=basic("a2@a.example", NEW_PASSWORD)).status_code == 200


def test_reset_by_email_mails_a_link_that_sets_the_password_and_ends_tokens(
        link_world: World, sink: Receiver) -> None:
    app = _app(link_world, sink)
    try:
        client = app.test_client()
        token = _json(client.post("/api/v2/auth/token", json={
            "email": "a2@a.example", "password": PASSWORDS["a2@a.example"]}), 200)["token"]
        r = client.post("/api/v2/auth/password-reset", json={"email": "A2@a.example"})
        assert r.status_code == 202
        mails = wait_for(sink.received, 20, what="the reset email")
        assert mails[0]["rcpt_tos"] == ["a2@a.example"]
        secret = _link_in(mails[0])
        assert client.get("/api/v2/users/me", headers=bearer(token)).status_code == 200
        done = _json(client.post("/api/v2/auth/accept", json={"token": secret,
                                                              "password": NEW_PASSWORD}), 200)
        assert (done["purpose"], done["tokens_revoked"]) == ("password_reset", 1)
        assert client.get("/api/v2/users/me", headers=bearer(token)).status_code == 401
        assert client.get("/api/v2/users/me", headers=A2).status_code == 401
        assert client.get("/api/v2/users/me",
                          headers=basic("a2@a.example", NEW_PASSWORD)).status_code == 200
        _json(client.post("/api/v2/auth/accept", json={"token": secret,
                                                       "password": "another-one-123"}), 400)
    finally:
        close_app(app)
    assert [r[1] for r in _audit(link_world, "user.reset_request")] == ["link"]
    assert [r[2]["tokens_revoked"] for r in _audit(link_world, "user.password_reset")] == [1]


def test_an_administrator_makes_a_reset_link_for_a_member(link_world: World,
                                                         plain: FlaskClient) -> None:
    made = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}/reset-link",
                            headers=A1), 201)
    assert made["user_id"] == str(link_world.a2)
    older = _secret(made["link"])
    reset_path = f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}/reset-link"
    newer = _secret(_json(plain.post(reset_path, headers=A1), 201)["link"])
    _json(plain.post("/api/v2/auth/accept", json={"token": older, "password": NEW_PASSWORD}),
          400)  # the newer link replaced it
    _json(plain.post("/api/v2/auth/accept", json={"token": newer, "password": NEW_PASSWORD}),
          200)
    assert plain.get("/api/v2/users/me",
                     headers=basic("a2@a.example", NEW_PASSWORD)).status_code == 200
    # Another organisation's member is the same 404 as a missing one.
    assert plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.b1}/reset-link",
                      headers=A1).status_code == 404


ORACLE_PAIRS = 80
"""Paired requests (an account's, no account's) per phase of the oracle test."""


def _paired_gap(ask: Callable[[str], tuple[float, Any]], pairs: int, tag: str
                ) -> tuple[float, float]:
    """(median of an account's time minus no account's, over `pairs` adjacent pairs in
    alternating order; median time of one request), each pair's two answers equal."""
    diffs, durations = [], []
    for i in range(pairs):
        known, unknown = ("a2@a.example", f"nobody-{tag}{i}@a.example")
        order = (known, unknown) if i % 2 else (unknown, known)
        first, second = ask(order[0]), ask(order[1])
        assert first[1] == second[1]
        t_known, t_unknown = (first[0], second[0]) if order[0] == known else (second[0],
                                                                             first[0])
        diffs.append(t_known - t_unknown)
        durations.append(t_unknown)
    return statistics.median(diffs), statistics.median(durations)


def test_reset_requests_are_no_account_oracle(link_world: World, sink: Receiver,
                                              figures: Any) -> None:
    """The same answer (status, headers, body) for an account and for no account, and the
    same time: the median of 80 paired differences stays under a quarter of one request, alone
    and again while a thread asks for other resets (accounts and not) on the same app. The
    request queues one row either way; the deliverer makes the links and mails them (the
    database's side, without the HTTP stack's noise: tests/access/test_reset_queue.py)."""
    app = _app(link_world, sink, login_max_failures=10_000, login_address_max_failures=10_000)
    try:
        client = app.test_client()

        def ask(email: str) -> tuple[float, tuple[int, list[tuple[str, str]], bytes]]:
            start = time.perf_counter()
            r = client.post("/api/v2/auth/password-reset", json={"email": email})
            took = time.perf_counter() - start
            return took, (r.status_code, sorted(r.headers.items()), r.get_data())

        for _ in range(10):  # warm up both paths
            ask("a2@a.example")
            ask("nobody@a.example")
        gap, typical = _paired_gap(ask, ORACLE_PAIRS, "alone")
        stop, load_known = threading.Event(), [0]

        def load() -> None:
            other = app.test_client()
            n = 0
            while not stop.is_set():
                known = n % 2 == 0
                r = other.post("/api/v2/auth/password-reset", json={
                    "email": "a1@a.example" if known else f"load{n}@a.example"})
                assert r.status_code == 202
                load_known[0] += known
                n += 1

        loader = threading.Thread(target=load, name="reset-load", daemon=True)
        loader.start()
        try:
            loaded_gap, loaded_typical = _paired_gap(ask, ORACLE_PAIRS, "loaded")
        finally:
            stop.set()
            loader.join(30)
        assert not loader.is_alive()
        figures.record("s8_reset_request_gap_ms", round(gap * 1e3, 2), section="security",
                       title="Password-reset request: median time of an account's minus "
                             "no account's (80 pairs)", target="< 25% of one request",
                       source="tests/access/test_invitations.py")
        figures.record("s8_reset_request_gap_loaded_ms", round(loaded_gap * 1e3, 2),
                       section="security",
                       title="Password-reset request: the same gap while a thread asks for "
                             "other resets", target="< 25% of one request",
                       source="tests/access/test_invitations.py")
        assert abs(gap) < 0.25 * typical, (gap, typical)
        assert abs(loaded_gap) < 0.25 * loaded_typical, (loaded_gap, loaded_typical)
        # The known emails' links were made and the deliverer mailed every one.
        mails = 10 + 2 * ORACLE_PAIRS + load_known[0]
        wait_for(lambda: len(sink.received()) == mails, 120, what=f"{mails} reset emails")
    finally:
        close_app(app)


def test_cli_prints_invitation_and_reset_links(link_world: World, plain: FlaskClient) -> None:
    env = {"SDS_DATABASE_URL": link_world.url, "SDS_PUBLIC_URL": "http://sds.example"}
    out = CliRunner().invoke(main, ["user", "invite", "cli@a.example", "--org", "Org A",
                                    "--role", "member"], env=env, catch_exceptions=False)
    assert out.exit_code == 0, out.output
    secret = _secret(out.output.strip().splitlines()[-1])
    _json(plain.post("/api/v2/auth/accept", json={"token": secret, "password": NEW_PASSWORD}),
          200)
    out = CliRunner().invoke(main, ["user", "reset-link", "a2@a.example"], env=env,
                             catch_exceptions=False)
    assert out.exit_code == 0, out.output
    secret = _secret(out.output.strip().splitlines()[-1])
    _json(plain.post("/api/v2/auth/accept", json={"token": secret, "password": NEW_PASSWORD}),
          200)
    assert [r[0] for r in _audit(link_world, "invite.create")] == ["operator"]
    assert [r[0] for r in _audit(link_world, "user.reset_link")] == ["operator"]


def test_the_dashboard_accept_page_sets_the_password_and_leads_to_sign_in(
        link_world: World, plain: FlaskClient) -> None:
    secret = _secret(_invite(plain, link_world, "page@a.example", "admin")["link"])
    page = plain.get(f"/dashboard/accept/{secret}")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "Org A" in html and "page@a.example" in html
    form = {"csrf": csrf_of(html), "name": "Paige", "password": NEW_PASSWORD,
            "again": NEW_PASSWORD + "x"}
    differ = plain.post(f"/dashboard/accept/{secret}", data=form)
    assert differ.status_code == 400 and "differ" in differ.get_data(as_text=True)
    no_csrf = plain.post(f"/dashboard/accept/{secret}", data={**form, "csrf": "forged"})
    assert no_csrf.status_code == 400
    done = plain.post(f"/dashboard/accept/{secret}", data={**form, "again": NEW_PASSWORD})
    assert done.status_code == 303 and "/dashboard/login" in done.headers["Location"]
    assert done.headers["Location"].endswith("accepted=page@a.example")
    login = plain.get(done.headers["Location"]).get_data(as_text=True)
    assert "Done. Sign in" in login and 'value="page@a.example"' in login
    me = _json(plain.get("/api/v2/users/me", headers=basic("page@a.example", NEW_PASSWORD)),
               200)
    assert (me["name"], me["role"]) == ("Paige", "admin")
    used = plain.get(f"/dashboard/accept/{secret}")  # spent: the one message, no form
    assert used.status_code == 400 and 'name="password"' not in used.get_data(as_text=True)
    assert links.REFUSED in used.get_data(as_text=True)


def test_another_of_the_callers_organisations_is_403_a_strangers_404(
        link_world: World, plain: FlaskClient) -> None:
    with psycopg.connect(link_world.url) as conn:  # a1 (admin of A) is also a viewer of B
        conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s,"
                     " 'viewer')", (link_world.a1, link_world.org_b))
    r = plain.get(f"/api/v2/orgs/{link_world.org_b}/invitations", headers=A1)
    assert r.status_code == 403 and "use a token for it" in r.get_json()["message"]
    r = plain.get(f"/api/v2/orgs/{link_world.org_b}/invitations", headers=basic("b1@b.example"))
    assert r.status_code == 200  # b1 administers B
    with psycopg.connect(link_world.url) as conn:
        conn.execute("DELETE FROM memberships WHERE user_id = %s AND org_id = %s",
                     (link_world.a1, link_world.org_b))
    assert plain.get(f"/api/v2/orgs/{link_world.org_b}/invitations", headers=A1).status_code == 404


def test_a_reset_ends_tokens_bound_to_every_organisation_of_the_user(
        link_world: World, plain: FlaskClient) -> None:
    """The API role reaches only the link organisation's token rows, but a password change
    ends every token issued before it (sds_auth_token's password_changed_at rule)."""
    with psycopg.connect(link_world.url) as conn:
        conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s,"
                     " 'viewer')", (link_world.a2, link_world.org_b))
        secret = credentials.new_token()
        conn.execute("INSERT INTO auth_tokens (user_id, org_id, digest, expires_at) VALUES"
                     " (%s, %s, %s, now() + interval '1 hour')",
                     (link_world.a2, link_world.org_b, secret.digest))
    in_b = bearer(secret.value)
    me = _json(plain.get("/api/v2/users/me", headers=in_b), 200)
    assert me["org_id"] == str(link_world.org_b)
    plain.post("/api/v2/auth/password-reset", json={"email": "a2@a.example"})
    assert resolve_resets(link_world) == 1  # the deliverer's step (no deliverer runs here)
    with psycopg.connect(link_world.url) as conn:
        assert conn.execute("SELECT count(*) FROM one_time_links WHERE user_id = %s"
                            " AND purpose = 'password_reset'", (link_world.a2,)).fetchone() == (1,)
    link = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}/reset-link",
                            headers=A1), 403)  # a2 belongs to org B too: not for A's admin
    assert "other organisations" in link["message"]
    out = CliRunner().invoke(main, ["user", "reset-link", "a2@a.example"], catch_exceptions=False,
                             env={"SDS_DATABASE_URL": link_world.url,
                                  "SDS_PUBLIC_URL": "http://sds.example"})
    token = _secret(out.output.strip().splitlines()[-1])
    _json(plain.post("/api/v2/auth/accept", json={"token": token, "password": NEW_PASSWORD}),
          200)
    assert plain.get("/api/v2/users/me", headers=in_b).status_code == 401
