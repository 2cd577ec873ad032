"""Adding an annotation from a device chart (docs/alerts.md "Annotations"): the page's script
posts the note form with the CSRF value; it is passed to POST /api/v2/annotations as the
signed-in user, and the API's answer (record or error) comes back as is."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Response, request

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.views import PREFIX, blp, signed_in


@blp.route(f"{PREFIX}/annotations", methods=["POST"])
@signed_in
def annotation_create(principal: Principal) -> Response:
    """Add an annotation from a chart through POST /api/v2/annotations."""
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
