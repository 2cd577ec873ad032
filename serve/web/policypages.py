"""The dashboard's notification policy (docs/alerts.md "In the dashboard"): quiet hours (weekly
mute windows, for every rule or one, at every device or one), the silences and quiet hours in
place with Expire and Delete, and the organisation's daily digest by email.

`/dashboard/notifications/policy` reads and writes through the API (`/api/v2/silences`,
`/api/v2/digest`) as the signed-in user (serve/web/apicall.py): a refused form is shown again
with what was wrong in the form's own words. A viewer (no `notifications:write`) sees the lists
without any form or button. A rule's repeat interval is set on the rule form
(serve/web/alertpages.py).
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.args import MAX_LIMIT
from serve.web import apicall
from serve.web import session as web_session
from serve.web.inboxpages import FIELD_MAX, _answered
from serve.web.views import PREFIX, _html, blp, signed_in
from shared.errors import NotFound

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # 1 .. 7, as the API numbers them
HOURS = range(24)
# The API's fields, said as the forms ask for them.
QUIET_WORDS = {
    "weekdays": "Days: tick at least one day, Monday to Sunday.",
    "from": "From: a time of day, like 22:00.",
    "to": "Until: a time of day other than From, like 06:00 (earlier than From runs over "
          "midnight).",
    "time_zone": "Time zone: not a time zone name; write one like Europe/Paris or UTC.",
    "rule": "Rule: not one of this organisation's rules.",
    "device": "Device: not one of this organisation's devices.",
    "comment": "Note: at most 500 characters, on one line."}
DIGEST_WORDS = {
    "hour": "Hour: a whole hour from 0 to 23.",
    "time_zone": "Time zone: not a time zone name; write one like Europe/Paris or UTC.",
    "active": "Send it: tick or untick the box."}


def quiet_body(form: Any) -> dict[str, Any]:
    """The API body of the quiet-hours form: a `mute` with the ticked days, the window, the
    zone, and the rule and device chosen (none: every one)."""
    days = [int(d) for d in form.getlist("weekdays") if d.isdigit() and len(d) == 1]
    body: dict[str, Any] = {"kind": "mute", "weekdays": days,
                            "from": form.get("from", "").strip()[:FIELD_MAX],
                            "to": form.get("to", "").strip()[:FIELD_MAX],
                            "time_zone": form.get("time_zone", "").strip()[:FIELD_MAX]}
    for key in ("rule", "device"):
        value = form.get(key, "").strip()[:FIELD_MAX]
        if value:
            body[key] = value
    comment = form.get("comment", "").strip()[:FIELD_MAX * 3]
    if comment:
        body["comment"] = comment
    return body


def digest_body(form: Any) -> dict[str, Any]:
    """The API body of the digest form (the box unticked turns it off)."""
    hour = form.get("hour", "").strip()[:FIELD_MAX]
    return {"active": form.get("active") == "1",
            "hour": int(hour) if hour.isdigit() else hour,
            "time_zone": form.get("time_zone", "").strip()[:FIELD_MAX]}


def _page(principal: Principal, *, quiet_error: str | None = None,
          digest_error: str | None = None, form: dict[str, Any] | None = None,
          digest_form: dict[str, Any] | None = None, status: int = 200) -> Response:
    silences = _answered(apicall.call("GET", "/api/v2/silences",
                                      query={"limit": MAX_LIMIT}))["items"]
    rules = _answered(apicall.call("GET", "/api/v2/alerts", query={"limit": 1000}))["items"]
    devices = _answered(apicall.call("GET", "/api/v2/devices",
                                     query={"limit": MAX_LIMIT}))["items"]
    digest = _answered(apicall.call("GET", "/api/v2/digest"))
    rule_names = {r["id"]: r["name"] for r in rules}
    shown = [s for s in silences if s["state"] != "expired"]
    form = form or {"weekdays": ["1", "2", "3", "4", "5", "6", "7"], "from": "22:00",
                    "to": "06:00", "time_zone": digest["time_zone"]}
    return _html(render_template(
        "web/policy.html", mutes=[s for s in shown if s["kind"] == "mute"],
        silences=[s for s in shown if s["kind"] == "silence"], rules=rules,
        rule_names=rule_names, devices=[d["name"] for d in devices], digest=digest,
        weekdays=WEEKDAYS, hours=HOURS, form=form, quiet_error=quiet_error,
        dform=digest_form or {**digest, "active": "1" if digest["active"] else ""},
        digest_error=digest_error, here=url_for("web.notification_policy"),
        can_write=principal.allows("notifications:write"), nav="notifications"), status)


@blp.route(f"{PREFIX}/notifications/policy", methods=["GET"])
@signed_in
def notification_policy(principal: Principal) -> Response:
    """Quiet hours, the silences in place, and the daily digest."""
    return _page(principal)


@blp.route(f"{PREFIX}/notifications/policy/quiet-hours", methods=["POST"])
@signed_in
def quiet_hours_create(principal: Principal) -> Response:
    """Add quiet hours (POST /api/v2/silences with `kind: mute`); a refusal is shown on the
    page with the form as it was sent."""
    web_session.check_csrf()
    body = quiet_body(request.form)
    answer = apicall.call("POST", "/api/v2/silences", json=body)
    if not answer.ok:
        form = {**request.form.to_dict(), "weekdays": request.form.getlist("weekdays")}
        return _page(principal, quiet_error=answer.in_words(QUIET_WORDS), form=form,
                     status=answer.page_status)
    return cast(Response, redirect(url_for("web.notification_policy") + "#quiet-hours",
                                   code=303))


@blp.route(f"{PREFIX}/notifications/policy/digest", methods=["POST"])
@signed_in
def digest_change(principal: Principal) -> Response:
    """Turn the daily digest on or off, or change its hour and zone (PUT /api/v2/digest)."""
    web_session.check_csrf()
    answer = apicall.call("PUT", "/api/v2/digest", json=digest_body(request.form))
    if not answer.ok:
        return _page(principal, digest_error=answer.in_words(DIGEST_WORDS),
                     digest_form=request.form.to_dict(), status=answer.page_status)
    return cast(Response, redirect(url_for("web.notification_policy") + "#digest", code=303))


@blp.route(f"{PREFIX}/silences/<objid('silence'):silence_id>/delete", methods=["POST"])
@signed_in
def silence_delete(principal: Principal, silence_id: UUID) -> Response:
    """Delete quiet hours or a silence (DELETE /api/v2/silences/{id})."""
    web_session.check_csrf()
    answer = apicall.call("DELETE", f"/api/v2/silences/{silence_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _page(principal, quiet_error=answer.message, status=answer.page_status)
    return cast(Response, redirect(url_for("web.notification_policy") + "#quiet-hours",
                                   code=303))
