"""Issue 30 section 3, "An admin of one organisation can get into another": the pre-account
hijack (Sudhodanan and Paverd, USENIX Security 2022) through the real app on a real
PostgreSQL with the API's database roles, and a real SMTP server process where mail is on.

With SMTP off an invitation link is shown to the inviter, so the account it makes has an
unproven email. Org B's admin makes one for someone else's address; when org A (the issue's
"C") later invites its real new hire there, the account must not join A: not by the link, not
by POST /orgs/{id}/users, and not by the account's own consent while its email is unproven.
The email's owner recovers the account with a mailed reset, which ends every credential the
earlier holder made; anyone can sign out everywhere in one step (API, CLI).
"""

from __future__ import annotations

from typing import Any

import psycopg
from click.testing import CliRunner
from flask.testing import FlaskClient

from admin.cli import main
from people import consent, links
from testbed.receivers import Receiver
from tests.support.access_world import (
    PASSWORDS,
    World,
    apikey,
    basic,
    bearer,
)
from tests.support.apps import close_app
from tests.support.dashboard import csrf_of, sign_in
from tests.support.ingesting import wait_for
from tests.support.invites import A1, NEW_PASSWORD
from tests.support.invites import answer as _json
from tests.support.invites import link_app as _app
from tests.support.invites import link_in as _link_in
from tests.support.invites import secret_of as _secret

VICTIM = "newhire@victim.example"
PLANTED = "b-admins-own-passphrase"  # the password org B's admin gave the account
B1 = basic("b1@b.example")


def _plant(client: FlaskClient, link_world: World) -> tuple[str, dict[str, str]]:
    """Org B's admin invites VICTIM into B (SMTP off: the link is shown to her) and accepts
    it herself: (the account's id, her Basic header for it)."""
    made = _json(client.post(f"/api/v2/orgs/{link_world.org_b}/invitations", headers=B1,
                             json={"email": VICTIM, "role": "viewer"}), 201)
    assert made["mailed"] is False
    done = _json(client.post("/api/v2/auth/accept", json={"token": _secret(made["link"]),
                                                          "password": PLANTED}), 200)
    assert done["account"] == "created"
    return done["user_id"], basic(VICTIM, PLANTED)


def _proven(link_world: World, user: str) -> bool:
    with psycopg.connect(link_world.url) as conn:
        row = conn.execute("SELECT email_verified_at IS NOT NULL FROM users WHERE id = %s",
                           (user,)).fetchone()
    return bool(row and row[0])


def _pending(client: FlaskClient, link_world: World) -> list[Any]:
    return _json(client.get(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1),
                 200)["items"]


def test_an_admin_of_one_organisation_cannot_ride_an_invitation_into_another(
        link_world: World, plain: FlaskClient) -> None:
    """The chain of the issue, step by step; today's main lets every step through."""
    user, planted = _plant(plain, link_world)
    assert not _proven(link_world, user)  # a shown link proves nothing about the email
    # Org A invites its real new hire at that address; the link is shown to A's admin, who
    # passes it on. Accepting it asks no password on main ("account: existing") and joins
    # B's admin's account to A. Here: 409, and the invitation stays pending.
    invited = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                               json={"email": VICTIM, "role": "member"}), 201)
    r = plain.post("/api/v2/auth/accept", json={"token": _secret(invited["link"])})
    assert r.status_code == 409, r.get_data(as_text=True)
    assert r.get_json()["message"] == links.EXISTING_ACCOUNT
    assert [i["id"] for i in _pending(plain, link_world)] == [invited["id"]]
    # Signed in as the account, B's admin sees the invitation but cannot consent to it: the
    # account's email is not proven.
    mine = _json(plain.get("/api/v2/users/me/invitations", headers=planted), 200)
    assert [(i["id"], i["org_id"], i["role"]) for i in mine] == [
        (invited["id"], str(link_world.org_a), "member")]
    r = plain.post(f"/api/v2/users/me/invitations/{invited['id']}/accept", headers=planted)
    assert r.status_code == 409 and r.get_json()["message"] == consent.UNPROVEN
    # Nothing of A's is reachable: no token for A, so no data of A's and no key acting in A.
    r = plain.post("/api/v2/auth/token", json={"email": VICTIM, "password": PLANTED,
                                               "org": str(link_world.org_a)})
    assert r.status_code in (401, 403), r.get_data(as_text=True)
    with psycopg.connect(link_world.url) as conn:
        assert conn.execute("SELECT count(*) FROM memberships WHERE user_id = %s AND org_id"
                            " = %s", (user, link_world.org_a)).fetchone() == (0,)
    assert plain.get(f"/api/v2/devices/{link_world.dev_a}", headers=planted).status_code == 404
    key = _json(plain.post("/api/v2/apikeys", headers=planted,
                           json={"scopes": ["devices:read"], "name": "planted"}), 200)
    assert plain.get(f"/api/v2/devices/{link_world.dev_a}",
                     headers=apikey(key["apikey"])).status_code == 404  # acts in B only
    # The invitation is still there for the real new hire, and for A's admin to revoke.
    assert [i["id"] for i in _pending(plain, link_world)] == [invited["id"]]


def test_adding_an_existing_user_by_email_waits_for_their_signed_in_consent(
        link_world: World, plain: FlaskClient) -> None:
    """POST /orgs/{id}/users took the same path without any invitation on main: the account
    became a member at once. Now it is a pending invitation (202) that only the account,
    signed in with a password or token and with a proven email, accepts."""
    user, planted = _plant(plain, link_world)
    r = plain.post(f"/api/v2/orgs/{link_world.org_a}/users", headers=A1,
                   json={"email": VICTIM, "role": "admin"})
    assert r.status_code == 202, r.get_data(as_text=True)
    pending = r.get_json()
    assert (pending["pending"], pending["email"], pending["role"]) == (True, VICTIM, "admin")
    assert "link" not in pending
    r = plain.post("/api/v2/auth/token", json={"email": VICTIM, "password": PLANTED,
                                               "org": str(link_world.org_a)})
    assert r.status_code in (401, 403)
    r = plain.post(f"/api/v2/users/me/invitations/{pending['id']}/accept", headers=planted)
    assert r.status_code == 409 and r.get_json()["message"] == consent.UNPROVEN
    # A user whose email is proven (b1, made by the operator) joins only by accepting it.
    added = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/users", headers=A1,
                             json={"email": "b1@b.example", "role": "viewer"}), 202)
    r = plain.post("/api/v2/auth/token", json={"email": "b1@b.example",
                                               "password": PASSWORDS["b1@b.example"],
                                               "org": str(link_world.org_a)})
    assert r.status_code in (401, 403)
    b1_key = _json(plain.post("/api/v2/apikeys", headers=B1,
                              json={"scopes": ["users:read", "users:write"]}), 200)["apikey"]
    # An API key cannot consent for its user (403), and nobody accepts another's (404).
    assert plain.post(f"/api/v2/users/me/invitations/{added['id']}/accept",
                      headers=apikey(b1_key)).status_code == 403
    assert plain.post(f"/api/v2/users/me/invitations/{added['id']}/accept",
                      headers=planted).status_code == 404
    done = _json(plain.post(f"/api/v2/users/me/invitations/{added['id']}/accept",
                            headers=B1), 200)
    assert (done["org_id"], done["role"], done["account"]) == (str(link_world.org_a), "viewer",
                                                               "existing")
    token = _json(plain.post("/api/v2/auth/token", json={
        "email": "b1@b.example", "password": PASSWORDS["b1@b.example"],
        "org": str(link_world.org_a)}), 200)["token"]
    assert _json(plain.get("/api/v2/users/me", headers=bearer(token)), 200)["role"] == "viewer"
    assert _json(plain.get("/api/v2/users/me/invitations", headers=B1), 200) == []


def test_the_owner_of_the_email_recovers_the_account_and_ends_what_was_planted(
        link_world: World, sink: Receiver, plain: FlaskClient) -> None:
    """With SMTP on, a reset mailed to the address proves it: the earlier holder's tokens and
    keys, in every organisation, stop; then the owner accepts A's invitation signed in."""
    user, planted = _plant(plain, link_world)
    token = _json(plain.post("/api/v2/auth/token", json={"email": VICTIM,
                                                         "password": PLANTED}), 200)["token"]
    key = _json(plain.post("/api/v2/apikeys", headers=planted,
                           json={"scopes": ["devices:read"]}), 200)["apikey"]
    app = _app(link_world, sink)
    try:
        client = app.test_client()
        invited = _json(client.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                                    json={"email": VICTIM, "role": "member"}), 201)
        assert invited["mailed"] is True
        mailed = _link_in(wait_for(sink.received, 20, what="the invitation")[0])
        assert client.post("/api/v2/auth/accept", json={"token": mailed}).status_code == 409
        client.post("/api/v2/auth/password-reset", json={"email": VICTIM})
        mails = wait_for(lambda: sink.received()[1:], 20, what="the reset email")
        done = _json(client.post("/api/v2/auth/accept", json={
            "token": _link_in(mails[0]), "password": NEW_PASSWORD}), 200)
        assert done["signed_out_everywhere"] is True and done["keys_deactivated"] == 1
        assert _proven(link_world, user)
        for headers in (bearer(token), apikey(key), planted):
            assert client.get("/api/v2/users/me", headers=headers).status_code == 401
        owner = basic(VICTIM, NEW_PASSWORD)
        joined = _json(client.post(f"/api/v2/users/me/invitations/{invited['id']}/accept",
                                   headers=owner), 200)
        assert joined["org_id"] == str(link_world.org_a)
    finally:
        close_app(app)


def test_a_mailed_invitation_proves_the_email_of_its_signed_in_acceptor(
        link_world: World, sink: Receiver, plain: FlaskClient) -> None:
    """An honest account made from a shown link is unproven; presenting the link that A's
    invitation mailed to it, signed in, proves the email and joins."""
    user, own = _plant(plain, link_world)
    app = _app(link_world, sink)
    try:
        client = app.test_client()
        invited = _json(client.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                                    json={"email": VICTIM, "role": "member"}), 201)
        mailed = _link_in(wait_for(sink.received, 20, what="the invitation")[0])
        path = f"/api/v2/users/me/invitations/{invited['id']}/accept"
        r = client.post(path, headers=own, json={"token": "sdsl_not-the-link"})
        assert r.status_code == 409  # a wrong secret proves nothing
        done = _json(client.post(path, headers=own, json={"token": mailed}), 200)
        assert done["org_id"] == str(link_world.org_a) and _proven(link_world, user)
    finally:
        close_app(app)


def test_a_reset_link_shown_to_a_manager_leaves_the_email_unproven(
        link_world: World, plain: FlaskClient) -> None:
    """Whoever a manager hands a reset link to holds the account without having shown that
    the address is theirs: the email is unproven again, so the account cannot then be taken
    into another organisation."""
    assert _proven(link_world, str(link_world.a2))
    link = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/users/{link_world.a2}/reset-link",
                            headers=A1), 201)["link"]
    _json(plain.post("/api/v2/auth/accept", json={"token": _secret(link),
                                                  "password": NEW_PASSWORD}), 200)
    assert not _proven(link_world, str(link_world.a2))
    pending = _json(plain.post(f"/api/v2/orgs/{link_world.org_b}/users", headers=B1,
                               json={"email": "a2@a.example", "role": "viewer"}), 202)
    r = plain.post(f"/api/v2/users/me/invitations/{pending['id']}/accept",
                   headers=basic("a2@a.example", NEW_PASSWORD))
    assert r.status_code == 409 and r.get_json()["message"] == consent.UNPROVEN


def test_signing_out_everywhere_ends_every_token_and_key(link_world: World,
                                                         plain: FlaskClient) -> None:
    """POST /users/me/credentials/revoke: every token and API key of the caller, in every
    organisation, in one step; and `sds access logout EMAIL --everything`."""
    with psycopg.connect(link_world.url) as conn:
        conn.execute("INSERT INTO memberships (user_id, org_id, role) VALUES (%s, %s,"
                     " 'member')", (link_world.a2, link_world.org_b))
    a2 = {"email": "a2@a.example", "password": PASSWORDS["a2@a.example"]}
    in_a = _json(plain.post("/api/v2/auth/token", json=a2), 200)["token"]
    in_b = _json(plain.post("/api/v2/auth/token", json={**a2, "org": str(link_world.org_b)}),
                 200)["token"]
    key_a = _json(plain.post("/api/v2/apikeys", headers=bearer(in_a),
                             json={"scopes": ["devices:read"]}), 200)["apikey"]
    key_b = _json(plain.post("/api/v2/apikeys", headers=bearer(in_b),
                             json={"scopes": ["devices:read"]}), 200)["apikey"]
    made = [bearer(in_a), bearer(in_b), apikey(key_a), apikey(key_b)]
    for headers in made:
        assert plain.get("/api/v2/devices", headers=headers).status_code == 200
    assert plain.post("/api/v2/users/me/credentials/revoke",
                      headers=apikey(key_a)).status_code == 403  # a key cannot
    with psycopg.connect(link_world.url) as conn:  # the link_world's own key of a2's, and the two
        keys = conn.execute("SELECT count(*) FROM api_keys WHERE user_id = %s AND active",
                            (link_world.a2,)).fetchone()
    done = _json(plain.post("/api/v2/users/me/credentials/revoke", headers=bearer(in_b)), 200)
    assert done == {"tokens_revoked": 2, "keys_deactivated": keys[0]} and keys[0] >= 2
    for headers in made:
        assert plain.get("/api/v2/devices", headers=headers).status_code == 401
    # The password still signs in; the operator's command does the same for b1.
    assert plain.get("/api/v2/users/me", headers=basic("a2@a.example")).status_code == 200
    b1_key = _json(plain.post("/api/v2/apikeys", headers=B1,
                              json={"scopes": ["devices:read"]}), 200)["apikey"]
    out = CliRunner().invoke(main, ["access", "logout", "b1@b.example", "--everything"],
                             env={"SDS_DATABASE_URL": link_world.url}, catch_exceptions=False)
    assert out.exit_code == 0 and "API key(s) deactivated" in out.output, out.output
    assert plain.get("/api/v2/devices", headers=apikey(b1_key)).status_code == 401


def test_the_dashboard_asks_for_consent_and_signs_out_everywhere(link_world: World,
                                                                 plain: FlaskClient) -> None:
    """The accept page of a link for an existing account shows no form; the account page
    lists the account's invitations to accept, and its button ends every credential."""
    made = _json(plain.post(f"/api/v2/orgs/{link_world.org_a}/invitations", headers=A1,
                            json={"email": "b1@b.example", "role": "viewer"}), 201)
    page = plain.get(f"/dashboard/accept/{_secret(made['link'])}").get_data(as_text=True)
    assert 'id="accept-existing"' in page and 'name="password"' not in page
    assert sign_in(plain, "b1@b.example", PASSWORDS["b1@b.example"]).status_code == 303
    account = plain.get("/dashboard/account").get_data(as_text=True)
    assert 'id="my-invitations"' in account and "Org A" in account
    action = f"/dashboard/account/invitations/{made['id']}/accept"
    assert action in account
    done = plain.post(action, data={"csrf": csrf_of(account)})
    assert done.status_code == 303 and done.headers["Location"].endswith("joined=1")
    with psycopg.connect(link_world.url) as conn:
        assert conn.execute("SELECT role FROM memberships WHERE user_id = %s AND org_id = %s",
                            (link_world.b1, link_world.org_a)).fetchone() == ("viewer",)
    account = plain.get("/dashboard/account").get_data(as_text=True)
    assert 'id="no-invitations"' in account and 'id="account-joined"' not in account
    key = _json(plain.post("/api/v2/apikeys", headers=B1,
                           json={"scopes": ["devices:read"]}), 200)["apikey"]
    out = plain.post("/dashboard/account/sign-out-everywhere", data={"csrf": csrf_of(account)})
    assert out.status_code == 303 and "everywhere=1" in out.headers["Location"]
    assert "signed out everywhere" in plain.get(out.headers["Location"]).get_data(as_text=True)
    assert plain.get("/api/v2/devices", headers=apikey(key)).status_code == 401
    assert plain.get("/dashboard/account").status_code == 302  # the session ended too
