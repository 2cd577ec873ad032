"""The rules form's preview: the rule being written, run over the last days of one device's
data with the evaluator's own state machine (shared/alertmachine.py `advance`: hysteresis,
`for`, `clear_for`), so "would have fired 3 times" is what the evaluator would have done on
the same values (docs/alerts.md "In the dashboard").

The rule is validated by shared/alertrules.parse like the API does, and the data is read
through `/api/v2/data` as the signed-in user (the API's tenancy decides which devices may be
previewed). Values are read in the stored units (the rule's thresholds are canonical) and shown
in the rule's own. Threshold, battery (the health reports) and depletion (the water balance)
rules; `silent` and `quarantine` watch device state the data tables do not hold (last
contact, quarantine counts).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from flask import Response, request

from people.principal import Principal
from serve.args import MAX_LIMIT
from serve.web import apicall
from serve.web import session as web_session
from serve.web.alertpages import PREVIEWABLE, rule_body
from serve.web.alertwords import rule_unit
from serve.web.views import PREFIX, blp, signed_in
from shared import alertrules
from shared.alertmachine import State, advance
from shared.alertrules import Rule
from shared.errors import BadParameter, BadRequest
from shared.timeutil import format_utc_z, parse_instant

PREVIEW_DAYS = 7
# The unit codes whose conversion is the identity: /data answers in the stored units.
STORED_UNITS = {"temp": "c", "pres": "kp", "size": "mm", "ratio": "dec", "speed": "mps"}


def _json(body: dict[str, Any], status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def samples_of(rows: list[dict[str, Any]], column: str) -> list[tuple[datetime, float | None]]:
    """(time, value) of /data rows in time order, as the evaluator steps them."""
    found = [(datetime.fromisoformat(r["time"].replace("Z", "+00:00")), r.get(column))
             for r in rows]
    return sorted(found, key=lambda s: s[0])


def preview(rule: Rule, samples: list[tuple[datetime, float | None]]) -> dict[str, Any]:
    """What the rule would have done over `samples` (canonical values), from `ok`: the
    transitions, counts and the series in the rule's own units for the chart."""
    _state, transitions = advance(rule, State(), samples)
    fired = sum(1 for t in transitions if t.kind == "firing")

    def show(value: float | None) -> float | None:
        return None if value is None else alertrules.shown(rule, value)

    times = "once" if fired == 1 else f"{fired} times"
    return {
        "times": [int(at.timestamp()) for at, _v in samples],
        "values": [show(v) for _at, v in samples],
        "threshold": show(rule.threshold), "clear_threshold": show(rule.clear_threshold),
        "unit": rule_unit(alertrules.record(rule)),
        "events": [{"kind": t.kind, "at": int(t.at.timestamp()), "value": show(t.value)}
                   for t in transitions],
        "fired": fired, "resolved": sum(1 for t in transitions if t.kind == "resolved"),
        "summary": (f"would have fired {times} in the last {PREVIEW_DAYS} days"
                    if fired else f"would not have fired in the last {PREVIEW_DAYS} days"),
    }


def _end(raw: str) -> datetime:
    """The end of the previewed days: `preview_end` (an ISO time or date, to look at a past
    season), else now."""
    if not raw.strip():
        return datetime.now(UTC).replace(microsecond=0)
    try:
        return parse_instant(raw.strip()[:64], name="preview_end")
    except BadParameter as exc:
        raise BadRequest(exc.message, errors={"form": {"preview_end": [exc.message]}}) from None


def _device(form: dict[str, str], rule: Rule) -> str:
    device = rule.device or form.get("preview_device", "").strip()
    if not device:
        raise BadRequest("preview_device: choose a device to preview the rule on",
                         errors={"form": {"preview_device": ["a device name"]}})
    return device


@blp.route(f"{PREFIX}/alerts/preview", methods=["POST"])
@signed_in
def alert_rule_preview(principal: Principal) -> Response:
    """The form's rule over the last days of a device: JSON for the page's chart, or the
    API's 400 (a bad field, an unknown device) as JSON."""
    web_session.check_csrf()
    form = request.form.to_dict()
    try:
        rule = alertrules.parse(rule_body(form))
        device, end = _device(form, rule), _end(form.get("preview_end", ""))
    except BadRequest as exc:
        return _json({"code": 400, "message": exc.message, "errors": exc.errors}, 400)
    if rule.kind not in PREVIEWABLE:
        return _json({"code": 400, "message": f"kind: the preview covers rules on stored "
                      f"values ({', '.join(PREVIEWABLE)}); a {rule.kind!r} rule watches the "
                      "device's state now", "errors": {"form": {"kind": list(PREVIEWABLE)}}},
                     400)
    query = {"device": device, "select": f"time,{rule.column}", "limit": MAX_LIMIT,
             "start_time": format_utc_z(end - timedelta(days=PREVIEW_DAYS)),
             "end_time": format_utc_z(end), **STORED_UNITS}
    answer = apicall.call("GET", f"/api/v2/data/{rule.source}", query=query)
    if not answer.ok:
        return _json({"code": answer.status, "message": answer.message,
                      "errors": (answer.body or {}).get("errors") if isinstance(
                          answer.body, dict) else None}, answer.status)
    return _json({"device": device, "column": rule.column, "table": rule.source,
                  "days": PREVIEW_DAYS} | preview(rule, samples_of(answer.body, rule.column)))
