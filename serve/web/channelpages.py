"""The dashboard's channel pages (issue 33): where alert events go, set up without the API.

`/dashboard/channels` lists the organisation's channels (kind and format, target, active,
paused or disabled with why, the newest delivery with the receiver's answer or the error, the
rules that use each) with a form that creates one, and the organisation's email (SMTP) settings,
which an owner changes there. `/dashboard/channels/<id>` edits one (its name, target, and a
web service's format with that format's own fields), sends it a test (the page then shows
what the receiver or the SMTP server answered: static/js/channeltest.js), pauses or enables
it, and deletes it after a confirmation page.

Every read and write goes through the API (`/api/v2/channels`, `/api/v2/email-settings`,
`/api/v2/alerts`) as the signed-in user (serve/web/apicall.py): a refused form shows the API's
own message. Members who may not write (`notifications:write`; the email settings: owners) see
no forms. Forms are POSTs carrying the session's CSRF value.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.views import PREFIX, _html, blp, signed_in
from shared.channelformats import FORMATS, OPTIONS
from shared.errors import BadRequest, NotFound

FIELD_MAX = 2000  # a URL may be long (netguard.URL_MAX); the API bounds every field too
KINDS = ("webhook", "email", "mqtt")
FORMAT_NAMES = {"standard": "Signed webhook (Standard Webhooks)",
                "slack": "Slack / Mattermost / Rocket.Chat", "teams": "Microsoft Teams",
                "telegram": "Telegram bot", "ntfy": "ntfy", "pagerduty": "PagerDuty Events v2"}
SECURITY = ("starttls", "tls", "none")
# The API's fields as the channel forms label them (a refusal is said with these).
LABELS = {"url": "URL", "format": "Service", "options": "Chat id or key", "name": "Name",
          "recipients": "Recipients", "kind": "Kind"}


def _text(form: dict[str, str], name: str) -> str:
    return form.get(name, "").strip()[:FIELD_MAX]


def recipients(raw: str) -> list[str]:
    """The addresses of a recipients field: separated by commas, semicolons or new lines."""
    return [a.strip() for a in raw.replace(";", ",").replace("\n", ",").split(",") if a.strip()]


def channel_body(form: dict[str, str], *, kind: str | None = None) -> dict[str, Any]:
    """The API body of a channel from the form's fields: for creation (`kind` None: the
    form's), or a change of a channel of `kind` (only the fields that kind has)."""
    creating = kind is None
    kind = kind or _text(form, "kind") or "webhook"
    body: dict[str, Any] = {"name": _text(form, "name")}
    if creating:
        body["kind"] = kind
    if kind == "webhook":
        body["url"] = _text(form, "url")
        fmt = _text(form, "format") or "standard"
        if creating and fmt != "standard":
            body["format"] = fmt
        options = {key: _text(form, key) for key in OPTIONS.get(fmt, ())}
        if options:
            body["options"] = options
    elif kind == "email":
        body["recipients"] = recipients(form.get("recipients", "")[:FIELD_MAX * 4])
    return body


def email_body(form: dict[str, str]) -> dict[str, Any]:
    """The API body of the email settings form (an empty password keeps the stored one)."""
    port = _text(form, "port")
    body: dict[str, Any] = {"host": _text(form, "host"),
                            "port": int(port) if port.isdigit() else port or 587,
                            "security": _text(form, "security") or "starttls",
                            "username": _text(form, "username") or None,
                            "from": _text(form, "from")}
    if form.get("password"):
        body["password"] = form["password"][:FIELD_MAX]
    return body


def rules_using(rules: list[dict[str, Any]], channel_id: str) -> list[dict[str, Any]]:
    """The rules whose events go to the channel: those naming it, and those naming none
    (every active channel)."""
    return [r for r in rules if r.get("channels") is None or channel_id in r["channels"]]


def _get(path: str, **query: Any) -> dict[str, Any]:
    answer = apicall.call("GET", path, query=query or None)
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        raise BadRequest(answer.message)
    return cast(dict[str, Any], answer.body)


def _rules() -> list[dict[str, Any]]:
    answer = apicall.call("GET", "/api/v2/alerts", query={"limit": 1000})
    return list(answer.body["items"]) if answer.ok else []


def _list_page(principal: Principal, *, error: str | None = None,
               form: dict[str, str] | None = None, email_error: str | None = None,
               status: int = 200) -> Response:
    channels = _get("/api/v2/channels", limit=1000)["items"]
    rules = _rules()
    used = {c["id"]: rules_using(rules, c["id"]) for c in channels}
    return _html(render_template(
        "web/channels.html", channels=channels, used=used, error=error, form=form or {},
        email=_get("/api/v2/email-settings"), email_error=email_error, kinds=KINDS,
        formats=FORMATS, format_names=FORMAT_NAMES, options=OPTIONS, security=SECURITY,
        can_write=principal.allows("notifications:write"),
        owner=principal.owns and principal.allows("notifications:write"),
        nav="channels"), status)


def _channel_page(principal: Principal, channel_id: UUID, *, error: str | None = None,
                  secret: str | None = None, status: int = 200) -> Response:
    channel = _get(f"/api/v2/channels/{channel_id}")
    test_event = request.args.get("test", "")[:64]
    return _html(render_template(
        "web/channel.html", c=channel, rules=rules_using(_rules(), channel["id"]),
        error=error, secret=secret, test_event=test_event, format_names=FORMAT_NAMES,
        formats=FORMATS, options=OPTIONS, can_write=principal.allows("notifications:write"),
        nav="channels"), status)


def _back(channel_id: UUID | str, test: str | None = None) -> Response:
    target = url_for("web.channel", channel_id=channel_id)
    return cast(Response, redirect(target + (f"?test={test}" if test else ""), code=303))


@blp.route(f"{PREFIX}/channels", methods=["GET"])
@signed_in
def channels(principal: Principal) -> Response:
    """The organisation's channels, the form to add one, and the email settings."""
    return _list_page(principal)


@blp.route(f"{PREFIX}/channels", methods=["POST"])
@signed_in
def channel_create(principal: Principal) -> Response:
    """Create a channel (POST /api/v2/channels); a signed webhook's secret is shown once on
    the page that follows; the API's refusal is shown on the list page."""
    web_session.check_csrf()
    form = request.form.to_dict()
    answer = apicall.call("POST", "/api/v2/channels", json=channel_body(form))
    if not answer.ok:
        return _list_page(principal, error=answer.message, form=form, status=answer.page_status)
    made = answer.body
    if made.get("secret"):
        return _channel_page(principal, made["id"], secret=made["secret"], status=201)
    return _back(made["id"])


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>", methods=["GET"])
@signed_in
def channel(principal: Principal, channel_id: UUID) -> Response:
    """One channel: its state, newest delivery, rules, and (writers) its forms."""
    return _channel_page(principal, channel_id)


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>", methods=["POST"])
@signed_in
def channel_update(principal: Principal, channel_id: UUID) -> Response:
    """Change a channel's name and target (PATCH /api/v2/channels/{id})."""
    web_session.check_csrf()
    current = _get(f"/api/v2/channels/{channel_id}")
    form = request.form.to_dict()
    fmt = _text(form, "format") or current.get("format", "standard")
    body = channel_body({**form, "format": fmt}, kind=current["kind"])
    if current["kind"] == "webhook" and fmt != current.get("format"):
        body["format"] = fmt
        body.setdefault("options", {})
    answer = apicall.call("PATCH", f"/api/v2/channels/{channel_id}", json=body)
    if not answer.ok:
        return _channel_page(principal, channel_id, error=answer.in_words({}, LABELS),
                             status=answer.page_status)
    if answer.body.get("secret"):  # changed to a signed webhook: its new secret, shown once
        return _channel_page(principal, channel_id, secret=answer.body["secret"])
    return _back(channel_id)


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>/active", methods=["POST"])
@signed_in
def channel_active(principal: Principal, channel_id: UUID) -> Response:
    """Pause (`active=false`) or enable (`active=true`, also after the deliverer disabled it)."""
    web_session.check_csrf()
    active = request.form.get("active") == "true"
    answer = apicall.call("PATCH", f"/api/v2/channels/{channel_id}", json={"active": active})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _channel_page(principal, channel_id, error=answer.message,
                             status=answer.page_status)
    return _back(channel_id)


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>/test", methods=["POST"])
@signed_in
def channel_test(principal: Principal, channel_id: UUID) -> Response:
    """Send a test event (POST /api/v2/channels/{id}/test); the page that follows waits for
    its outcome and shows the receiver's answer."""
    web_session.check_csrf()
    answer = apicall.call("POST", f"/api/v2/channels/{channel_id}/test", json={})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _channel_page(principal, channel_id, error=answer.message,
                             status=answer.page_status)
    return _back(channel_id, test=str(answer.body["event_id"]))


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>/delete", methods=["GET"])
@signed_in
def channel_delete_confirm(principal: Principal, channel_id: UUID) -> Response:
    """The confirmation page of a deletion."""
    channel = _get(f"/api/v2/channels/{channel_id}")
    return _html(render_template("web/channel_delete.html", c=channel,
                                 rules=rules_using(_rules(), channel["id"]),
                                 can_write=principal.allows("notifications:write"),
                                 nav="channels"))


@blp.route(f"{PREFIX}/channels/<objid('channel'):channel_id>/delete", methods=["POST"])
@signed_in
def channel_delete(principal: Principal, channel_id: UUID) -> Response:
    """Delete a channel (DELETE /api/v2/channels/{id}) after the confirmation page."""
    web_session.check_csrf()
    answer = apicall.call("DELETE", f"/api/v2/channels/{channel_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _channel_page(principal, channel_id, error=answer.message,
                             status=answer.page_status)
    return cast(Response, redirect(url_for("web.channels", deleted=1), code=303))


@blp.route(f"{PREFIX}/channels/email-settings", methods=["POST"])
@signed_in
def email_settings(principal: Principal) -> Response:
    """Set the organisation's SMTP settings (PUT /api/v2/email-settings; owners)."""
    web_session.check_csrf()
    answer = apicall.call("PUT", "/api/v2/email-settings", json=email_body(request.form.to_dict()))
    if not answer.ok:
        return _list_page(principal, email_error=answer.message, status=answer.page_status)
    return cast(Response, redirect(url_for("web.channels", email="saved") + "#email",
                                   code=303))


@blp.route(f"{PREFIX}/channels/email-settings/delete", methods=["POST"])
@signed_in
def email_settings_delete(principal: Principal) -> Response:
    """Remove the organisation's own SMTP settings (DELETE /api/v2/email-settings)."""
    web_session.check_csrf()
    answer = apicall.call("DELETE", "/api/v2/email-settings")
    if not answer.ok:
        return _list_page(principal, email_error=answer.message, status=answer.page_status)
    return cast(Response, redirect(url_for("web.channels") + "#email", code=303))
