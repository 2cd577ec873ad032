"""The dashboard's notifications inbox (docs/alerts.md "In the dashboard"): events newest
first, filtered; values in the signed-in user's units with the column's name; each event
links to its device's chart at that moment with the rule's threshold drawn; acknowledge one,
the ticked ones, or every open event of a rule; who acknowledged each.

Reads and writes go through the API (`/api/v2/notifications`, its bulk `/ack`) as the
signed-in user, in-process (serve/web/apicall.py); forms are POSTs carrying the session's CSRF
value, and a viewer (no `notifications:write`) sees no acknowledge buttons.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.args import MAX_LIMIT
from serve.web import apicall
from serve.web import session as web_session
from serve.web.alertwords import event_view
from serve.web.views import PREFIX, _html, blp, signed_in
from shared.errors import BadRequest, NotFound

EVENT_KINDS = ("firing", "resolved", "test", "channel_disabled")
INBOX_PAGE = 50
FIELD_MAX = 200


def _answered(answer: apicall.Answer) -> Any:
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        raise BadRequest(answer.message)
    return answer.body


def _inbox_query() -> dict[str, str]:
    """The inbox's filters from the page's URL, only those the API knows."""
    query = {k: request.args.get(k, "").strip()[:FIELD_MAX]
             for k in ("kind", "acknowledged", "device", "rule", "page")}
    return {k: v for k, v in query.items() if v}


def _people(org_id: str) -> dict[str, str]:
    """User id -> name (or email) of the organisation's members, for "acknowledged by"."""
    answer = apicall.call("GET", f"/api/v2/orgs/{org_id}/users", query={"limit": MAX_LIMIT})
    if not answer.ok:
        return {}
    return {p["id"]: p.get("name") or p["email"] for p in answer.body["items"]}


@blp.route(f"{PREFIX}/notifications", methods=["GET"])
@signed_in
def notifications(principal: Principal) -> Response:
    """The inbox: events newest first (firing, resolved, test, channel disabled), filtered by
    kind, acknowledged, device and rule."""
    query = _inbox_query()
    page = _answered(apicall.call("GET", "/api/v2/notifications",
                                  query={**query, "limit": INBOX_PAGE}))
    me = _answered(apicall.call("GET", "/api/v2/users/me"))
    chosen = (me.get("preferences") or {}).get("units") or {}
    people = _people(str(principal.org_id))
    events = [event_view(e, chosen, people) for e in page["items"]]
    for e in events:
        if e["chart"]:
            e["chart_url"] = (url_for("web.device", name=e["device"]) + "?"
                              + urlencode(e["chart"]))
    base = {k: v for k, v in query.items() if k != "page"}
    links = {n: f"{url_for('web.notifications')}?{urlencode({**base, 'page': n})}"
             for n in (page["page"] - 1, page["page"] + 1) if 1 <= n <= page["pages"]}
    silences = _answered(apicall.call("GET", "/api/v2/silences",
                                      query={"active": "true", "limit": MAX_LIMIT}))["items"]
    return _html(render_template(
        "web/notifications.html", events=events, page=page, query=query, kinds=EVENT_KINDS,
        silences=silences, rule_names={e["rule_id"]: e["body"]["rule"]["name"] for e in events
                                       if e["rule_id"] and isinstance(e.get("body"), dict)
                                       and isinstance(e["body"].get("rule"), dict)
                                       and "name" in e["body"]["rule"]},
        links=links, here=request.full_path.rstrip("?"),
        can_write=principal.allows("notifications:write"), nav="notifications"))


def _back() -> str:
    back = request.form.get("back", "")
    if not back.startswith(f"{PREFIX}/notifications") or "\\" in back or not back.isprintable():
        back = url_for("web.notifications")
    return back


@blp.route(f"{PREFIX}/notifications/<objid('notification'):event_id>/ack", methods=["POST"])
@signed_in
def notification_ack(principal: Principal, event_id: UUID) -> Response:
    """Acknowledge an event (through POST /api/v2/notifications/{id}/ack)."""
    web_session.check_csrf()
    _answered(apicall.call("POST", f"/api/v2/notifications/{event_id}/ack", json={}))
    return cast(Response, redirect(_back(), code=303))


@blp.route(f"{PREFIX}/notifications/ack", methods=["POST"])
@signed_in
def notification_ack_many(principal: Principal) -> Response:
    """Acknowledge the ticked events (`ids`), or with the `rule` button every open event of
    that rule (through POST /api/v2/notifications/ack)."""
    web_session.check_csrf()
    rule = request.form.get("rule", "").strip()[:FIELD_MAX]
    ids = [i.strip()[:FIELD_MAX] for i in request.form.getlist("ids")][:MAX_LIMIT]
    if not rule and not ids:
        raise BadRequest("ids: tick the events to acknowledge")
    body: dict[str, Any] = {"rule": rule} if rule else {"ids": ids}
    _answered(apicall.call("POST", "/api/v2/notifications/ack", json=body))
    return cast(Response, redirect(_back(), code=303))
