"""The dashboard's water page of a location (issue 35): the depletion chart (Dr with RAW and
TAW drawn, irrigation and rain as bars), the "irrigate in N days, X mm" line, the soil and
root settings and the irrigation event form.

Everything comes through the API as the signed-in user (serve/web/apicall.py):
`GET /api/v2/locations/{id}/water` (settings, events, forecast), `GET
/api/v2/data/water_balance` (the last 60 days) and `POST /api/v2/locations/{id}/irrigation`
(administrators; the API's 400 and 403 are shown). The chart is an inline SVG drawn here, so
the page needs no script.
"""

from __future__ import annotations

from typing import Any, cast
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.peoplepages import answered, status_of
from serve.web.views import PREFIX, _html, blp, signed_in

CHART_DAYS = 60
WIDTH, HEIGHT, PAD = 640, 240, 32


def chart(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """SVG geometry of the depletion chart: depletion as a line going down as the soil dries
    (0 at the top: field capacity), RAW and TAW as lines, rain and irrigation as bars from the
    top; every number in mm of the rows (oldest first)."""
    if not rows:
        return {"points": "", "days": []}
    top = max(max((r.get("taw") or 0) for r in rows), 1.0)
    step = (WIDTH - 2 * PAD) / max(len(rows) - 1, 1)

    def y(mm: float | None) -> float:
        return round(PAD + (HEIGHT - 2 * PAD) * min(max(mm or 0.0, 0.0), top) / top, 1)

    days = []
    for i, r in enumerate(rows):
        x = round(PAD + i * step, 1)
        days.append({"x": x, "day": r["time"][:10], "depletion": r.get("depletion"),
                     "y": y(r.get("depletion")), "raw_y": y(r.get("raw")), "taw_y": y(r.get("taw")),
                     "rain_h": round(y(r.get("precip")) - PAD, 1),
                     "irr_h": round(y(r.get("irrigation")) - PAD, 1)})
    return {"points": " ".join(f"{d['x']},{d['y']}" for d in days), "days": days,
            "raw": " ".join(f"{d['x']},{d['raw_y']}" for d in days),
            "taw": " ".join(f"{d['x']},{d['taw_y']}" for d in days), "top": round(top, 1),
            "width": WIDTH, "height": HEIGHT, "pad": PAD, "bar": max(step / 3, 2)}


def _page(principal: Principal, location_id: UUID, *, error: str | None = None,
          status: int = 200, form: dict[str, str] | None = None) -> Response:
    location = answered(apicall.call("GET", f"/api/v2/locations/{location_id}"))
    water = answered(apicall.call("GET", f"/api/v2/locations/{location_id}/water"))
    rows: list[dict[str, Any]] = []
    device = water["forecast"][0]["device"] if water["forecast"] else None
    if device is not None:
        page = answered(apicall.call("GET", "/api/v2/data/water_balance", query={
            "device": device, "location": str(location_id), "order": "desc",
            "limit": CHART_DAYS}))
        rows = list(reversed(page))
    return _html(render_template(
        "web/water.html", location=location, water=water, chart=chart(rows),
        forecast=water["forecast"][0] if water["forecast"] else None, error=error,
        form=form or {}, manage=web_session.is_admin(principal), nav="locations",
        recorded=request.args.get("recorded") == "1"), status)


@blp.route(f"{PREFIX}/locations/<objid('location'):location_id>/water", methods=["GET"])
@signed_in
def water(principal: Principal, location_id: UUID) -> Response:
    """The location's root-zone water balance."""
    return _page(principal, location_id)


@blp.route(f"{PREFIX}/locations/<objid('location'):location_id>/water", methods=["POST"])
@signed_in
def water_irrigate(principal: Principal, location_id: UUID) -> Response:
    """Record an irrigation event through POST /api/v2/locations/{id}/irrigation."""
    web_session.check_csrf()
    form = {k: v[:500] for k, v in request.form.items() if k != "csrf"}
    depth: Any = form.get("depth_mm", "").strip()
    try:
        depth = float(depth)
    except ValueError:
        pass  # the API's 400 names the field
    body = {"day": form.get("day", "").strip(), "depth_mm": depth,
            "status": form.get("status", "applied"), "note": form.get("note") or None}
    answer = apicall.call("POST", f"/api/v2/locations/{location_id}/irrigation", json=body)
    if not answer.ok:
        if answer.status == 404:
            answered(answer)
        return _page(principal, location_id, error=answer.message, status=status_of(answer),
                     form=form)
    return cast(Response, redirect(url_for("web.water", location_id=location_id, recorded=1),
                                   code=303))
