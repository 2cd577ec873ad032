"""The dashboard's alert pages: rules (list, create, delete), the notifications inbox (filter,
acknowledge), and the dashboard's way to add an annotation from a chart.

Every read and write goes through the API (`/api/v2/alerts`, `/api/v2/notifications`,
`/api/v2/annotations`) as the signed-in user, in-process (serve/web/apicall.py): the API's
validation, scopes and tenancy decide, and a refused form shows the API's own message. Forms are
POSTs carrying the session's CSRF value. The disabled-channel banner is a script on every page
(static/js/banner.js) reading `/api/v2/channels` with the cookie.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode

import orjson
from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.views import PREFIX, _html, blp, signed_in
from shared import alertrules
from shared.columns import TABLES
from shared.errors import BadRequest, NotFound

RULE_TABLES = ("calibrated", "hourly", "daily")  # the tables rules may watch (docs/alerts.md)
KINDS = alertrules.KINDS
OPS = ("<", "<=", ">", ">=")
EVENT_KINDS = ("firing", "resolved", "test", "channel_disabled")
INBOX_PAGE = 50
FIELD_MAX = 200  # longer form values are cut before they reach the API (which bounds them too)


def numeric_columns() -> dict[str, list[str]]:
    """The numeric columns a threshold rule may watch, per table."""
    return {t: [c.name for c in TABLES[t].columns if c.is_numeric] for t in RULE_TABLES}


def rule_body(form: dict[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The API body of a rule from the form's fields, and the unit parameters for the query
    string. Values are passed on as typed; the API judges them (a number field that is not a
    number is sent as text, and the API's 400 names it)."""
    def text(name: str) -> str:
        return form.get(name, "").strip()[:FIELD_MAX]

    def number(name: str) -> Any:
        raw = text(name)
        try:
            return float(raw) if raw else None
        except ValueError:
            return raw

    kind = text("kind") or "threshold"
    scope_kind = text("scope") or "device"
    scope: dict[str, Any] = ({"organisation": True} if scope_kind == "organisation"
                             else {scope_kind: text("target")})
    body: dict[str, Any] = {"name": text("name"), "kind": kind, "scope": scope,
                            "condition": {"op": text("op") or "<",
                                          "threshold": number("threshold")}}
    if kind == "threshold":
        body["table"] = text("table") or "calibrated"
        body["column"] = text("column")
    minutes = number("for_minutes")
    if minutes is not None:
        body["for"] = round(minutes * 60) if isinstance(minutes, float) else minutes
    if text("clear_threshold"):
        body["clear"] = {"op": text("clear_op") or ">=", "threshold": number("clear_threshold")}
    units = {p: text(p) for p in ("temp", "pres", "size", "ratio", "speed") if text(p)}
    return body, units


def _rules_page(error: str | None = None, form: dict[str, str] | None = None,
                status: int = 200) -> Response:
    answer = apicall.call("GET", "/api/v2/alerts", query={"limit": 1000})
    if not answer.ok:
        raise BadRequest(answer.message)
    return _html(render_template(
        "web/alerts.html", rules=answer.body["items"], total=answer.body["total"],
        error=error, form=form or {}, kinds=KINDS, ops=OPS, tables=RULE_TABLES,
        columns=numeric_columns(), nav="alerts"), status)


@blp.route(f"{PREFIX}/alerts", methods=["GET"])
@signed_in
def alert_rules(principal: Principal) -> Response:
    """The organisation's alert rules and the form to add one."""
    return _rules_page()


@blp.route(f"{PREFIX}/alerts", methods=["POST"])
@signed_in
def alert_rule_create(principal: Principal) -> Response:
    """Create a rule from the form (through POST /api/v2/alerts); the API's 400 is shown."""
    web_session.check_csrf()
    form = request.form.to_dict()
    body, units = rule_body(form)
    answer = apicall.call("POST", "/api/v2/alerts", json=body, query=units)
    if not answer.ok:
        return _rules_page(error=answer.message, form=form,
                           status=answer.status if 400 <= answer.status < 500 else 502)
    target = url_for("web.alert_rules", created=answer.body.get("id"))
    return cast(Response, redirect(target, code=303))


@blp.route(f"{PREFIX}/alerts/<rule_id>/delete", methods=["POST"])
@signed_in
def alert_rule_delete(principal: Principal, rule_id: str) -> Response:
    """Delete a rule (through DELETE /api/v2/alerts/{id}); its events stay."""
    web_session.check_csrf()
    answer = apicall.call("DELETE", f"/api/v2/alerts/{rule_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _rules_page(error=answer.message, status=answer.status)
    return cast(Response, redirect(url_for("web.alert_rules"), code=303))


def _inbox_query() -> dict[str, str]:
    """The inbox's filters from the page's URL, only those the API knows."""
    query = {k: request.args.get(k, "").strip()[:FIELD_MAX]
             for k in ("kind", "acknowledged", "device", "page")}
    return {k: v for k, v in query.items() if v}


@blp.route(f"{PREFIX}/notifications", methods=["GET"])
@signed_in
def notifications(principal: Principal) -> Response:
    """The inbox: events newest first (firing, resolved, test, channel disabled), filtered by
    kind, acknowledged and device, with an acknowledge button on each open one."""
    query = _inbox_query()
    answer = apicall.call("GET", "/api/v2/notifications",
                          query={**query, "limit": INBOX_PAGE})
    if answer.status in (400, 404):
        raise BadRequest(answer.message) if answer.status == 400 else NotFound(answer.message)
    if not answer.ok:
        raise BadRequest(answer.message)
    page = answer.body
    base = {k: v for k, v in query.items() if k != "page"}
    links = {n: f"{url_for('web.notifications')}?{urlencode({**base, 'page': n})}"
             for n in (page["page"] - 1, page["page"] + 1) if 1 <= n <= page["pages"]}
    return _html(render_template(
        "web/notifications.html", events=page["items"], page=page, query=query,
        kinds=EVENT_KINDS, links=links, here=request.full_path.rstrip("?"),
        nav="notifications"))


@blp.route(f"{PREFIX}/notifications/<event_id>/ack", methods=["POST"])
@signed_in
def notification_ack(principal: Principal, event_id: str) -> Response:
    """Acknowledge an event (through POST /api/v2/notifications/{id}/ack)."""
    web_session.check_csrf()
    answer = apicall.call("POST", f"/api/v2/notifications/{event_id}/ack", json={})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        raise BadRequest(answer.message)
    back = request.form.get("back", "")
    if not back.startswith(f"{PREFIX}/notifications") or "\\" in back or not back.isprintable():
        back = url_for("web.notifications")
    return cast(Response, redirect(back, code=303))


@blp.route(f"{PREFIX}/annotations", methods=["POST"])
@signed_in
def annotation_create(principal: Principal) -> Response:
    """Add an annotation from a chart (the page's script posts the form with the CSRF value):
    passed to POST /api/v2/annotations; the API's answer (record or error) comes back as is."""
    web_session.check_csrf()
    form = request.form
    body: dict[str, Any] = {
        "device": form.get("device") or None, "start_time": form.get("start_time", ""),
        "text": form.get("text", ""),
        "tags": [t.strip() for t in form.get("tags", "").split(",") if t.strip()][:50]}
    if form.get("end_time"):
        body["end_time"] = form["end_time"]
    answer = apicall.call("POST", "/api/v2/annotations", json=body)
    return Response(response=orjson.dumps(answer.body), status=answer.status,
                    mimetype="application/json")
