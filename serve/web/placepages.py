"""The dashboard's location page (read, and for administrators the form that changes it) and
the organisation's audit log (issue 23).

Both go through the API as the signed-in user (serve/web/apicall.py), like the alert pages:
`GET`/`PATCH /api/v2/locations/{id}` and `GET /api/v2/audit`. The API decides who may change a
location and read the log (its 403 is shown), validates every value (its 400 is shown on the
form with what was typed kept) and says how many rollup buckets a change queued
(`X-Rollups-Marked`), which the page reports after saving.
"""

from __future__ import annotations

import json
from typing import Any, cast
from urllib.parse import urlencode
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.web import apicall
from serve.web import session as web_session
from serve.web.alertpages import FIELD_MAX
from serve.web.peoplepages import answered, status_of
from serve.web.views import PREFIX, _html, blp, signed_in
from shared.errors import BadRequest

BASEMAP = "vendor/countries-110m.json"  # the map pick's basemap (the Locations map's)
TEXT_MAX = 2000  # the longest value the location form sends (notes; the API bounds each field)
AUDIT_PAGE = 50
AUDIT_FILTERS = ("action", "target_type", "since", "until", "page")
# Fields of the location form, in the API's names (docs/auth.md "Changing a location").
FIELDS = ("name", "gps", "elev", "tz_name", "crop", "kc", "kc_schedule", "notes")


def _number(raw: str) -> Any:
    """A typed number, or what was typed (the API's 400 names the field), or None when empty."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return raw


def schedule_text(schedule: list[dict[str, Any]] | None) -> str:
    """The kc schedule as the form's lines: `YYYY-MM-DD kc`, oldest first."""
    return "\n".join(f"{e['start_date']} {e['kc']:g}" for e in schedule or [])


def parse_schedule(text: str) -> list[dict[str, Any]]:
    """The form's kc lines (`YYYY-MM-DD kc`, blank lines skipped) as the API's entries;
    BadRequest naming a line that is not a date and a value. Dates and values are the API's
    to judge."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        parts = line.replace(",", " ").replace("=", " ").split()
        if not parts:
            continue
        if len(parts) != 2:
            raise BadRequest(f"kc schedule line {number}: expected a date and a kc, e.g. "
                             f"'2026-05-01 0.3', not {line.strip()[:60]!r}")
        out.append({"start_date": parts[0], "kc": _number(parts[1])})
    return out


def location_body(form: dict[str, str], current: dict[str, Any]) -> dict[str, Any]:
    """The PATCH body of the location form: only the fields whose value differs from the
    location's (so an unchanged zone marks no rollups and the audit names real changes)."""
    def text(name: str) -> str | None:
        value = form.get(name, "").strip()[:TEXT_MAX]
        return value or None

    lat, lon = _number(form.get("lat", "")), _number(form.get("lon", ""))
    wanted: dict[str, Any] = {
        "name": text("name") or "", "tz_name": text("tz_name") or "",
        "gps": None if lat is None and lon is None else [lon, lat],
        "elev": _number(form.get("elev", "")), "kc": _number(form.get("kc", "")),
        "crop": text("crop"), "notes": text("notes"),
        "kc_schedule": parse_schedule(form.get("kc_schedule", "")[:TEXT_MAX * 10]),
    }
    return {k: v for k, v in wanted.items() if v != current.get(k)}


def _location_page(principal: Principal, location: dict[str, Any], *, error: str | None = None,
                   form: dict[str, str] | None = None, marked: str | None = None,
                   saved: bool = False, status: int = 200) -> Response:
    gps = location.get("gps") or [None, None]
    shown = {"name": location["name"], "tz_name": location["tz_name"],
             "lon": "" if gps[0] is None else gps[0], "lat": "" if gps[1] is None else gps[1],
             "elev": "" if location.get("elev") is None else location["elev"],
             "kc": "" if location.get("kc") is None else location["kc"],
             "crop": location.get("crop") or "", "notes": location.get("notes") or "",
             "kc_schedule": schedule_text(location.get("kc_schedule"))}
    return _html(render_template(
        "web/location.html", location=location, shown={**shown, **(form or {})},
        manage=web_session.is_admin(principal), error=error,
        marked=marked, saved=saved, nav="locations",
        basemap=url_for("web.static", filename=BASEMAP)), status)


@blp.route(f"{PREFIX}/locations/<objid('location'):location_id>", methods=["GET"])
@signed_in
def location(principal: Principal, location_id: UUID) -> Response:
    """One location: its record, and for administrators the form that changes it."""
    found = answered(apicall.call("GET", f"/api/v2/locations/{location_id}"))
    return _location_page(principal, found, saved=request.args.get("saved") == "1",
                          marked=request.args.get("marked"))


@blp.route(f"{PREFIX}/locations/<objid('location'):location_id>", methods=["POST"])
@signed_in
def location_save(principal: Principal, location_id: UUID) -> Response:
    """Save the location form through PATCH /api/v2/locations/{id}; after a change of zone,
    coordinates, elevation or kc the page says how many rollup buckets will be recomputed."""
    web_session.check_csrf()
    current = answered(apicall.call("GET", f"/api/v2/locations/{location_id}"))
    form = {k: v[:TEXT_MAX * 10] for k, v in request.form.items() if k != "csrf"}
    try:
        body = location_body(form, current)
    except BadRequest as exc:
        return _location_page(principal, current, error=exc.message, form=form, status=400)
    if not body:
        return cast(Response, redirect(url_for("web.location", location_id=location_id,
                                               saved=1), code=303))
    answer = apicall.call("PATCH", f"/api/v2/locations/{location_id}", json=body)
    if not answer.ok:
        if answer.status == 404:
            answered(answer)
        return _location_page(principal, current, error=answer.message, form=form,
                              status=status_of(answer))
    marked = answer.headers.get("X-Rollups-Marked", "0")
    return cast(Response, redirect(url_for("web.location", location_id=location_id, saved=1,
                                           marked=marked), code=303))


# ---- audit log ---------------------------------------------------------------------------


def audit_query(args: dict[str, str]) -> dict[str, str]:
    """The audit page's filters from its URL, only those the API knows, as typed."""
    query = {k: args.get(k, "").strip()[:FIELD_MAX] for k in AUDIT_FILTERS}
    return {k: v for k, v in query.items() if v}


@blp.route(f"{PREFIX}/audit", methods=["GET"])
@signed_in
def audit(principal: Principal) -> Response:
    """The organisation's audit log, newest first, paged, filtered by action (an exact action
    or a prefix ending in a dot), target type and time; for administrators (the API's 403)."""
    query = audit_query(request.args.to_dict())
    answer = apicall.call("GET", "/api/v2/audit", query={**query, "limit": AUDIT_PAGE})
    if answer.status == 403:
        return _html(render_template("web/audit.html", refused=answer.message, query=query,
                                     nav="audit"), 403)
    page = answered(answer)
    for entry in page["items"]:
        entry["details_text"] = json.dumps(entry.get("details") or {}, ensure_ascii=False,
                                           sort_keys=True)
    base = {k: v for k, v in query.items() if k != "page"}
    links = {n: f"{url_for('web.audit')}?{urlencode({**base, 'page': n})}"
             for n in (page["page"] - 1, page["page"] + 1) if 1 <= n <= page["pages"]}
    # The filter's suggestions: the kinds of action on this page (`member.`, `apikey.`...),
    # from the entries themselves, so actions the API adds show up without a change here.
    prefixes = sorted({e["action"].split(".", 1)[0] + "." for e in page["items"]})
    return _html(render_template("web/audit.html", page=page, query=query, links=links,
                                 prefixes=prefixes, refused=None, nav="audit"))
