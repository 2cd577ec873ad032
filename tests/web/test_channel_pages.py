"""The dashboard's channel pages in-process (serve/web/channelpages.py): create, edit, pause,
enable, test and delete (after a confirmation page) through /api/v2/channels; the API's refusal
shown with its own message; an email channel refused while there are no SMTP settings, then the
owner's SMTP form; members who may not write see no forms; every POST needs the CSRF value;
another organisation's channel is a 404 like a missing one."""

from __future__ import annotations

import re
from typing import Any

import psycopg
import pytest
from flask.testing import FlaskClient

from people import accounts
from tests.support.dashboard import World, csrf_of, sign_in
from tests.support.delivery import SEAL_KEY

VIEWER = "viewer@a.example"
VIEWER_PASSWORD = "viewer-a-password"


@pytest.fixture(scope="module")
def app_overrides() -> dict[str, Any]:
    return {"apikey_seal_keys": SEAL_KEY, "webhook_allow_private": True}


def _text(response: Any) -> str:
    return str(response.get_data(as_text=True))


def _create(client: FlaskClient, **fields: str) -> Any:
    csrf = csrf_of(_text(client.get("/dashboard/channels")))
    return client.post("/dashboard/channels", data={"csrf": csrf, **fields})


def _form_ids(html: str) -> set[str]:
    return set(re.findall(r'<form[^>]* id="([^"]+)"', html)) | set(
        re.findall(r'<button[^>]* id="([^"]+)"', html))


def test_create_edit_pause_enable_and_delete(client: FlaskClient) -> None:
    sign_in(client, "admin@a.example")
    page = client.get("/dashboard/channels")
    assert page.status_code == 200 and 'id="new-channel"' in _text(page)
    made = _create(client, name="Farm chat", kind="webhook", format="slack",
                   url="http://127.0.0.1:9/slack/hook")
    assert made.status_code == 303, _text(made)
    where = made.headers["Location"]
    cid = where.rsplit("/", 1)[1]
    page = _text(client.get(where))
    assert "Slack / Mattermost / Rocket.Chat" in page and 'data-state="active"' in page
    assert "Send a test" in page and "nothing sent yet" in page
    # The API's 400 on the form, with its own message; the typed name is kept.
    bad = _create(client, name="Broken", kind="webhook", format="telegram",
                  url="http://127.0.0.1:9/other", chat_id="42")
    assert bad.status_code == 400 and "sendMessage" in _text(bad)
    assert 'value="Broken"' in _text(bad)
    csrf = csrf_of(page)
    edited = client.post(where, data={"csrf": csrf, "name": "Farm chat 2",
                                      "url": "http://127.0.0.1:9/slack/other"})
    assert edited.status_code == 303
    assert client.get(f"/api/v2/channels/{cid}").get_json()["name"] == "Farm chat 2"
    # Pause: no test button, and a test is refused (a paused channel receives nothing).
    assert client.post(f"{where}/active", data={"csrf": csrf, "active": "false"}).status_code \
        == 303
    page = _text(client.get(where))
    assert 'data-state="paused"' in page and 'id="channel-test"' not in page
    refused = client.post(f"{where}/test", data={"csrf": csrf})
    assert refused.status_code == 409 and "receives nothing" in _text(refused)
    assert client.post(f"{where}/active", data={"csrf": csrf, "active": "true"}).status_code \
        == 303
    sent = client.post(f"{where}/test", data={"csrf": csrf})
    assert sent.status_code == 303 and "?test=" in sent.headers["Location"]
    page = _text(client.get(sent.headers["Location"]))
    assert 'id="test-result"' in page
    # Delete: a confirmation page first; the POST needs the CSRF value.
    confirm = _text(client.get(f"{where}/delete"))
    assert "Delete the channel Farm chat 2?" in confirm
    assert client.post(f"{where}/delete").status_code == 400
    gone = client.post(f"{where}/delete", data={"csrf": csrf_of(confirm)})
    assert gone.status_code == 303
    assert client.get(f"/api/v2/channels/{cid}").status_code == 404


def test_a_signed_webhook_shows_its_secret_once(client: FlaskClient) -> None:
    sign_in(client, "admin@a.example")
    made = _create(client, name="Own server", kind="webhook", format="standard",
                   url="http://127.0.0.1:9/hook")
    assert made.status_code == 201, _text(made)
    secret = re.search(r"(whsec_[A-Za-z0-9+/=]+)", _text(made))
    assert secret
    cid = re.search(r'id="channel-facts" data-id="([0-9a-f-]{36})"', _text(made)).group(1)
    assert secret.group(1) not in _text(client.get(f"/dashboard/channels/{cid}"))


def test_the_edit_page_changes_the_service(client: FlaskClient) -> None:
    """The channel page's Service menu changes a webhook's format (fixed at creation until
    issue 33), with the new format's own fields checked and a refusal said in the form's
    labels; a change to a signed webhook shows its new secret once."""
    sign_in(client, "admin@a.example")
    made = _create(client, name="Field chat", kind="webhook", format="slack",
                   url="http://127.0.0.1:9/slack/field")
    where = made.headers["Location"]
    cid = where.rsplit("/", 1)[1]
    page = _text(client.get(where))
    assert re.search(r'<option value="slack" selected>Slack / Mattermost', page)
    assert 'id="edit-chat-id"' in page and 'id="edit-routing-key"' in page
    csrf = csrf_of(page)
    telegram = "http://127.0.0.1:9/bot123:abc/sendMessage"
    bad = client.post(where, data={"csrf": csrf, "name": "Field chat", "format": "telegram",
                                   "url": telegram, "chat_id": "not a chat"})
    assert bad.status_code == 400
    error = re.search(r'<p class="error" id="channel-error">(.*?)</p>', _text(bad), re.S)
    assert error and error.group(1).replace("&#39;", "'") == (
        "Chat id or key: chat_id must be a chat's number or @channelusername.")
    assert client.get(f"/api/v2/channels/{cid}").get_json()["format"] == "slack"
    done = client.post(where, data={"csrf": csrf, "name": "Field chat", "format": "telegram",
                                    "url": telegram, "chat_id": "-100123"})
    assert done.status_code == 303, _text(done)
    got = client.get(f"/api/v2/channels/{cid}").get_json()
    assert (got["format"], got["options"]) == ("telegram", {"chat_id": "-100123"})
    assert 'value="-100123"' in _text(client.get(where))
    signed = client.post(where, data={"csrf": csrf, "name": "Field chat", "format": "standard",
                                      "url": "http://127.0.0.1:9/hook", "chat_id": "-100123"})
    assert signed.status_code == 200
    secret = re.search(r'id="channel-secret">.*?(whsec_[A-Za-z0-9+/=]+)', _text(signed), re.S)
    assert secret and secret.group(1) not in _text(client.get(where))
    assert client.get(f"/api/v2/channels/{cid}").get_json()["format"] == "standard"


def test_email_is_refused_without_smtp_then_the_owner_sets_it(client: FlaskClient) -> None:
    sign_in(client, "user@a.example")  # a member: may make channels, not change SMTP
    page = _text(client.get("/dashboard/channels"))
    assert 'data-source="none"' in page and 'id="email-settings"' not in page
    refused = _create(client, name="Grower", kind="email", recipients="g@farm.example")
    assert refused.status_code == 409 and "email is off" in _text(refused)
    csrf = csrf_of(page)
    assert client.post("/dashboard/channels/email-settings", data={
        "csrf": csrf, "host": "127.0.0.1", "port": "2525", "security": "none",
        "from": "alerts@a.example"}).status_code == 403
    owner = client.application.test_client()
    sign_in(owner, "admin@a.example")
    page = _text(owner.get("/dashboard/channels"))
    assert 'id="email-settings"' in page
    bad = owner.post("/dashboard/channels/email-settings", data={
        "csrf": csrf_of(page), "host": "127.0.0.1", "port": "99999", "security": "none",
        "from": "alerts@a.example"})
    assert bad.status_code == 400 and "port" in _text(bad)
    saved = owner.post("/dashboard/channels/email-settings", data={
        "csrf": csrf_of(page), "host": "127.0.0.1", "port": "2525", "security": "none",
        "from": "alerts@a.example", "password": "pw-never-shown"})
    assert saved.status_code == 303
    page = _text(owner.get("/dashboard/channels"))
    assert 'data-source="organisation"' in page and "pw-never-shown" not in page
    made = _create(client, name="Grower", kind="email", recipients="g@farm.example, h@farm.example")
    assert made.status_code == 303, _text(made)
    removed = owner.post("/dashboard/channels/email-settings/delete",
                         data={"csrf": csrf_of(page)})
    assert removed.status_code == 303


def test_a_viewer_sees_no_forms_and_another_org_gets_404(client: FlaskClient,
                                                         world: World) -> None:
    with psycopg.connect(world.url) as conn:
        accounts.create_user(conn, org=world.org_a, email=VIEWER, password=VIEWER_PASSWORD,
                             role="viewer")
    sign_in(client, "admin@a.example")
    made = _create(client, name="Valve", kind="mqtt")
    assert made.status_code == 303
    where = made.headers["Location"]
    viewer = client.application.test_client()
    sign_in(viewer, VIEWER, VIEWER_PASSWORD)
    listing = _text(viewer.get("/dashboard/channels"))
    assert "Valve" in listing and not _form_ids(listing) - {"sign-out"}
    page = _text(viewer.get(where))
    assert "alerts/" in page and not _form_ids(page) - {"sign-out"}
    other = client.application.test_client()
    sign_in(other, "user@b.example")
    assert other.get(where).status_code == 404
    assert other.get("/dashboard/channels/00000000-0000-4000-8000-000000000000").status_code \
        == 404
    csrf = csrf_of(_text(other.get("/dashboard/channels")))
    assert other.post(f"{where}/delete", data={"csrf": csrf}).status_code == 404


def test_form_to_api_bodies() -> None:
    from serve.web.channelpages import channel_body, email_body, recipients, rules_using

    assert recipients("a@x.example; b@x.example\nc@x.example,, ") == [
        "a@x.example", "b@x.example", "c@x.example"]
    assert channel_body({"name": " Chat ", "kind": "webhook", "format": "telegram",
                         "url": "https://api.telegram.org/botX/sendMessage", "chat_id": "42",
                         "recipients": "ignored@x.example"}) == {
        "name": "Chat", "kind": "webhook", "format": "telegram",
        "url": "https://api.telegram.org/botX/sendMessage", "options": {"chat_id": "42"}}
    assert channel_body({"name": "Own", "kind": "webhook", "format": "standard",
                         "url": "https://h/x"}) == {"name": "Own", "kind": "webhook",
                                                    "url": "https://h/x"}
    # A change keeps to the channel's kind: no kind, no format, only its own fields.
    assert channel_body({"name": "M", "recipients": "a@x.example", "url": "https://h"},
                        kind="email") == {"name": "M", "recipients": ["a@x.example"]}
    assert channel_body({"name": "V"}, kind="mqtt") == {"name": "V"}
    # Numbers as typed: a port that is not one goes to the API, whose 400 names it.
    assert email_body({"host": "h", "port": "x25", "from": "a@x.example"})["port"] == "x25"
    body = email_body({"host": "h", "port": "2525", "security": "none", "from": "a@x.example"})
    assert body == {"host": "h", "port": 2525, "security": "none", "username": None,
                    "from": "a@x.example"}  # no password: the stored one is kept
    rules = [{"name": "all", "channels": None}, {"name": "mine", "channels": ["c1"]},
             {"name": "other", "channels": ["c2"]}]
    assert [r["name"] for r in rules_using(rules, "c1")] == ["all", "mine"]


def test_every_channel_form_needs_the_csrf_value(client: FlaskClient) -> None:
    sign_in(client, "admin@a.example")
    made = _create(client, name="Csrf valve", kind="mqtt")
    where = made.headers["Location"]
    for path, data in ((where, {"name": "x"}), (f"{where}/active", {"active": "false"}),
                       (f"{where}/test", {}), (f"{where}/delete", {}),
                       ("/dashboard/channels", {"name": "y", "kind": "mqtt"}),
                       ("/dashboard/channels/email-settings", {"host": "h", "from": "a@b.c"}),
                       ("/dashboard/channels/email-settings/delete", {})):
        assert client.post(path, data=data).status_code == 400, path
        assert client.post(path, data={**data, "csrf": "forged"}).status_code == 400, path
    page = _text(client.get(where))
    assert "Csrf valve" in page and 'data-state="active"' in page
