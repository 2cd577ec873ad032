"""The dashboard's silences (docs/alerts.md "Silences and quiet hours"): from an event of the
inbox, "Silence 1 h" or "1 d" silences its rule at its device; the inbox lists the silences in
effect with an Expire button. Through the API (`/api/v2/silences`) as the signed-in user, with
the session's CSRF value; a viewer is shown neither button (the API refuses them anyway).
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, redirect, request

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.inboxpages import FIELD_MAX, _answered, _back
from serve.web.views import PREFIX, blp, signed_in
from shared.errors import BadRequest

DURATIONS = {"3600": "1 h", "86400": "1 d"}  # what the inbox offers, seconds -> label


@blp.route(f"{PREFIX}/silences", methods=["POST"])
@signed_in
def silence_create(principal: Principal) -> Response:
    """Silence a rule at a device for 1 h or 1 d: the button's `silence` value is
    "<rule id> <device> <seconds>" (either of rule and device may be "-")."""
    web_session.check_csrf()
    parts = request.form.get("silence", "").strip()[:FIELD_MAX].split(" ")
    if len(parts) != 3 or parts[2] not in DURATIONS or parts[:2] == ["-", "-"]:
        raise BadRequest("silence: choose a rule or device and 1 h or 1 d")
    body: dict[str, Any] = {"duration": int(parts[2]), "comment": "from the inbox"}
    if parts[0] != "-":
        body["rule"] = parts[0]
    if parts[1] != "-":
        body["device"] = parts[1]
    _answered(apicall.call("POST", "/api/v2/silences", json=body))
    return cast(Response, redirect(_back(), code=303))


@blp.route(f"{PREFIX}/silences/<objid('silence'):silence_id>/expire", methods=["POST"])
@signed_in
def silence_expire(principal: Principal, silence_id: UUID) -> Response:
    """End a silence now (through POST /api/v2/silences/{id}/expire)."""
    web_session.check_csrf()
    _answered(apicall.call("POST", f"/api/v2/silences/{silence_id}/expire", json={}))
    return cast(Response, redirect(_back(), code=303))
