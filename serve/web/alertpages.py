"""The dashboard's alert rules page: the rules in words, a form that creates one (from a
template, or a copy of a rule), edits, pauses, resumes and deletes one (docs/alerts.md "In
the dashboard"). The inbox is serve/web/inboxpages.py, the preview serve/web/alertpreview.py.

Every read and write goes through the API (`/api/v2/alerts`) as the signed-in user, in-process
(serve/web/apicall.py): the API's validation, scopes and tenancy decide, and a refused form
shows the API's own message. Forms are POSTs carrying the session's CSRF value; a viewer (no
`notifications:write`) is shown the rules without the forms.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.args import MAX_LIMIT
from serve.web import apicall, charts
from serve.web import session as web_session
from serve.web.alertwords import TEMPLATES, column_choices, form_of, rule_view
from serve.web.views import PREFIX, _html, blp, signed_in
from shared import alertrules, units
from shared.columns import TABLES
from shared.errors import BadRequest, NotFound

KINDS = alertrules.KINDS
# Kinds the preview (serve/web/alertpreview.py) runs: their values are rows of a table the
# API serves (threshold: the rule's table; battery: health; depletion: water_balance);
# `silent` and `quarantine` watch the device's state now.
PREVIEWABLE = ("threshold", "battery", "depletion")
OPS = alertrules.OPS
FIELD_MAX = 200  # longer form values are cut before they reach the API (which bounds them too)
KIND_WORDS = {"threshold": "a measured value crosses a threshold", "silent": "a device stops "
              "reporting", "battery": "a battery runs low", "quarantine": "a device sends bad "
              "data", "depletion": "the root zone dries out (water balance)"}


def _text(form: dict[str, str], name: str) -> str:
    return form.get(name, "").strip()[:FIELD_MAX]


def _number(form: dict[str, str], name: str) -> Any:
    """A typed number as a float; text that is not one is passed on as typed, so the API's
    400 names the field."""
    raw = _text(form, name)
    try:
        return float(raw) if raw else None
    except ValueError:
        return raw


def _seconds(form: dict[str, str], name: str) -> Any:
    minutes = _number(form, name)
    return round(minutes * 60) if isinstance(minutes, float) else (minutes or 0)


def _repeat(form: dict[str, str]) -> Any:
    """The repeat interval in seconds from the form's minutes; empty: announce once (null)."""
    minutes = _number(form, "repeat_minutes")
    return round(minutes * 60) if isinstance(minutes, float) else minutes


def rule_body(form: dict[str, str]) -> dict[str, Any]:
    """The API body of a rule from the form's fields. A built-in kind sends no comparison (its
    own is fixed); the clear comparison defaults to the opposite of the firing one, and one
    pointing the same way as the firing one is turned round (the form offers only those), so
    the defaults are always a valid rule. Thresholds are in the unit chosen for the column."""
    kind = _text(form, "kind") or "threshold"
    scope_kind = _text(form, "scope") or "device"
    scope: dict[str, Any] = ({"organisation": True} if scope_kind == "organisation"
                             else {scope_kind: _text(form, scope_kind)})
    fixed = alertrules.BUILTINS[kind].op if kind in alertrules.BUILTINS else None
    op = fixed or _text(form, "op") or "<"
    condition: dict[str, Any] = {"threshold": _number(form, "threshold")}
    if fixed is None:
        condition["op"] = op
    body: dict[str, Any] = {"name": _text(form, "name"), "kind": kind, "scope": scope,
                            "condition": condition, "for": _seconds(form, "for_minutes"),
                            "clear_for": _seconds(form, "clear_for_minutes"), "clear": None,
                            "repeat_interval": _repeat(form)}
    if kind == "threshold":
        body["table"] = _text(form, "table") or "calibrated"
        body["column"] = _text(form, "column")
        body["units"] = _units(body["table"], body["column"], _text(form, "unit"))
    if _text(form, "clear_threshold") and op in alertrules.NEGATION:
        clear_op = _text(form, "clear_op")
        if clear_op not in OPS or (clear_op in alertrules.BELOW) == (op in alertrules.BELOW):
            clear_op = alertrules.NEGATION[op]
        body["clear"] = {"op": clear_op, "threshold": _number(form, "clear_threshold")}
    return body


def _units(table: str, column: str, code: str) -> dict[str, str]:
    """The unit parameter of the column with the chosen code (none for an unknown column or
    code: the API names the column, the defaults apply)."""
    try:
        col = TABLES[table].column(column)
    except (KeyError, ValueError):
        return {}
    if col.measure is None or not code:
        return {}
    param = units.param_for(col.measure)
    return {param: code} if code in units.UNITS[param] else {}


def _answered(answer: apicall.Answer) -> Any:
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        raise BadRequest(answer.message)
    return answer.body


def _rules_page(principal: Principal, *, error: str | None = None,
                form: dict[str, str] | None = None, editing: str | None = None,
                status: int = 200) -> Response:
    rules = _answered(apicall.call("GET", "/api/v2/alerts", query={"limit": 1000}))
    devices = _answered(apicall.call("GET", "/api/v2/devices", query={"limit": MAX_LIMIT}))
    places = _answered(apicall.call("GET", "/api/v2/locations", query={"limit": MAX_LIMIT}))
    names = {str(p["id"]): p["name"] for p in places["items"]}
    if form is None:
        form = dict(TEMPLATES["frost"]["form"])
        form["name"] = ""
    device_names = [d["name"] for d in devices["items"]]
    # A rule's device or location missing from the lists the user is given (a teams-only
    # member's view) stays chosen: saving the form must not move the rule to the first listed.
    if form.get("device") and form["device"] not in device_names:
        device_names.insert(0, form["device"])
    if form.get("location") and form["location"] not in names:
        names[form["location"]] = form["location"]
    return _html(render_template(
        "web/alerts.html", rules=[rule_view(r, names) for r in rules["items"]],
        total=rules["total"], error=error, form=form, editing=editing, kinds=KINDS,
        kind_words=KIND_WORDS, ops=OPS, tables=alertrules.THRESHOLD_TABLES,
        columns=column_choices(), unit_choices=charts.unit_choices(),
        builtins=list(alertrules.BUILTINS), previewable=PREVIEWABLE,
        colours=charts.ALERT_COLOURS,
        devices=device_names,
        locations=sorted(names.items(), key=lambda kv: kv[1].lower()), templates=TEMPLATES,
        can_write=principal.allows("notifications:write"), nav="alerts"), status)


# The API's fields the form asks for in other terms, said as the form asks for them.
RULE_WORDS = {"repeat_interval": f"Remind again every: from {alertrules.REPEAT_MIN // 60} "
              f"minutes to {alertrules.REPEAT_MAX // 86400} days "
              f"({alertrules.REPEAT_MAX // 60:,} minutes), or empty to announce a firing rule "
              "once."}


def _refused(principal: Principal, answer: apicall.Answer, form: dict[str, str],
             editing: str | None = None) -> Response:
    error = answer.in_words(RULE_WORDS) if answer.refused("repeat_interval") else answer.message
    return _rules_page(principal, error=error, form=form, editing=editing,
                       status=answer.page_status)


@blp.route(f"{PREFIX}/alerts", methods=["GET"])
@signed_in
def alert_rules(principal: Principal) -> Response:
    """The organisation's alert rules in words and the form to add one: empty, from a template
    (`?template=frost`) or holding a copy of a rule (`?copy=<id>`)."""
    form = None
    template = request.args.get("template", "")
    if template:
        if template not in TEMPLATES:
            raise BadRequest(f"template: one of {', '.join(TEMPLATES)}")
        form = dict(TEMPLATES[template]["form"])
    elif request.args.get("copy"):
        record = _answered(apicall.call("GET", f"/api/v2/alerts/{request.args['copy']}"))
        form = form_of(record) | {"name": f"Copy of {record['name']}"[:alertrules.NAME_MAX]}
    return _rules_page(principal, form=form)


@blp.route(f"{PREFIX}/alerts", methods=["POST"])
@signed_in
def alert_rule_create(principal: Principal) -> Response:
    """Create a rule from the form (through POST /api/v2/alerts); the API's 400 is shown."""
    web_session.check_csrf()
    form = request.form.to_dict()
    answer = apicall.call("POST", "/api/v2/alerts", json=rule_body(form))
    if not answer.ok:
        return _refused(principal, answer, form)
    return cast(Response, redirect(url_for("web.alert_rules", created=answer.body.get("id")),
                                   code=303))


@blp.route(f"{PREFIX}/alerts/<objid('alert rule'):rule_id>/edit", methods=["GET"])
@signed_in
def alert_rule_edit(principal: Principal, rule_id: UUID) -> Response:
    """The form holding one rule, to change it."""
    record = _answered(apicall.call("GET", f"/api/v2/alerts/{rule_id}"))
    return _rules_page(principal, form=form_of(record), editing=record["id"])


@blp.route(f"{PREFIX}/alerts/<objid('alert rule'):rule_id>", methods=["POST"])
@signed_in
def alert_rule_change(principal: Principal, rule_id: UUID) -> Response:
    """Change a rule from the form (through PATCH /api/v2/alerts/{id})."""
    web_session.check_csrf()
    form = request.form.to_dict()
    answer = apicall.call("PATCH", f"/api/v2/alerts/{rule_id}", json=rule_body(form))
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _refused(principal, answer, form, editing=str(rule_id))
    return cast(Response, redirect(url_for("web.alert_rules"), code=303))


@blp.route(f"{PREFIX}/alerts/<objid('alert rule'):rule_id>/active", methods=["POST"])
@signed_in
def alert_rule_pause(principal: Principal, rule_id: UUID) -> Response:
    """Pause (`active=0`) or resume (`active=1`) a rule; its states are kept."""
    web_session.check_csrf()
    active = request.form.get("active", "")
    if active not in ("0", "1"):
        raise BadRequest("active: 0 (pause) or 1 (resume)")
    answer = apicall.call("PATCH", f"/api/v2/alerts/{rule_id}", json={"active": active == "1"})
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _rules_page(principal, error=answer.message, status=answer.status)
    return cast(Response, redirect(url_for("web.alert_rules"), code=303))


@blp.route(f"{PREFIX}/alerts/<objid('alert rule'):rule_id>/delete", methods=["POST"])
@signed_in
def alert_rule_delete(principal: Principal, rule_id: UUID) -> Response:
    """Delete a rule (through DELETE /api/v2/alerts/{id}) once the page's confirmation was
    pressed; its events stay."""
    web_session.check_csrf()
    if request.form.get("confirm") != "yes":
        raise BadRequest("confirm: press \u201cYes, delete\u201d to delete the rule")
    answer = apicall.call("DELETE", f"/api/v2/alerts/{rule_id}")
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _rules_page(principal, error=answer.message, status=answer.status)
    return cast(Response, redirect(url_for("web.alert_rules"), code=303))
