"""The fleet from the dashboard (issue 34): the device list as a fleet view (latest values, a
24-hour sparkline, "3 min ago", health; serve/web/fleetmodel.py), and for the organisation's
administrators the forms that add a device, give it a new broker password, move it, retire it
and create a location (with a map pick of its coordinates and the zone proposed from them).

Every write goes through the API as the signed-in user (serve/web/apicall.py), like the other
forms: `POST /api/v2/devices`, `.../devices/{name}/password`, `.../devices/{name}/retire`,
`.../devices/{name}/deployments` and `POST /api/v2/locations` (serve/api/devicewrites.py and
deployments.py, the same code as `sds device` and `sds location`). The API decides who may write
(its 403), validates (its 400 is shown on the form with what was typed kept) and audits. A new
password is shown in the answer to the POST only, never put in a URL or the session.
"""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import urlsplit

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve import preferences
from serve.pool import pool
from serve.web import apicall, charts, fleetmodel, model
from serve.web import session as web_session
from serve.web.alertpages import FIELD_MAX
from serve.web.peoplepages import answered, status_of
from serve.web.placepages import BASEMAP, _number
from serve.web.views import PREFIX, _html, _json, _settings, blp, signed_in
from shared import units
from shared.errors import Forbidden

HEALTH_RANK = {"ok": 0, "warn": 1, "bad": 2}  # the badge levels (serve/web/model.py), sorted
LOCATIONS_PAGE = 500  # locations offered in a form's list (the API's page; more: by id)


def _chosen(principal: Principal) -> tuple[dict[str, str], dict[str, units.Unit]]:
    with pool().connection() as conn:
        prefs = preferences.read(conn, user=principal.user_id, org=principal.org_id)
    codes = charts.chosen_units(preferences.chosen_units(request.args.to_dict(), prefs))
    return codes, {p: units.parse_unit(p, codes[p]) for p in ("temp", "ratio")}


@blp.route(f"{PREFIX}/")
@signed_in
def devices(principal: Principal) -> Response:
    """The organisation's devices as a fleet: health badges, state, location, the latest air
    temperature and humidity in the user's units, a 24-hour sparkline, when it was last
    heard from; sortable (static/fleet.js). Administrators also get the fleet's forms."""
    teams = None  # a teams-only member's teams, to say why the list is empty
    codes, chosen = _chosen(principal)
    now = datetime.now(UTC)
    with pool().connection() as conn:
        found = model.device_list(conn, org=principal.org_id, settings=_settings())
        if not found and principal.teams_only:
            teams = model.visible_teams(conn, org=principal.org_id)
        values = fleetmodel.fleet(conn, [d["name"] for d in found], now, chosen)
    for d in found:
        d["fleet"] = values.get(d["name"], {})
        seen = d.get("last_seen")
        d["ago"] = fleetmodel.ago(datetime.fromisoformat(seen) if seen else None, now)
        d["health_rank"] = max(HEALTH_RANK.get(b.level, 0) for b in d["badges"])
    return _html(render_template(
        "web/devices.html", devices=found, nav="devices", settings=_settings(), teams=teams,
        manage=web_session.is_admin(principal), dimensions=(fleetmodel.WIDTH, fleetmodel.HEIGHT),
        unit_text={p: charts.UNIT_TEXT[p][codes[p]] for p in ("temp", "ratio")},
        retired=request.args.get("retired")))


def _admin_only(principal: Principal) -> None:
    """Forms only administrators can submit are not shown to others (the API would 403)."""
    if not web_session.is_admin(principal):
        raise Forbidden("only the organisation's owners and administrators manage devices and "
                        "locations")


def _locations() -> list[dict[str, Any]]:
    page = answered(apicall.call("GET", "/api/v2/locations", query={"limit": LOCATIONS_PAGE}))
    return sorted(page["items"], key=lambda loc: loc["name"].lower())


def _instant(raw: str) -> str | None:
    """A form's `datetime-local` value (UTC) as the API's ISO 8601, or None when empty (the
    API then takes now). Anything else is passed on for the API to refuse by name."""
    raw = raw.strip()[:FIELD_MAX]
    if not raw:
        return None
    if len(raw) in (16, 19) and raw[10:11] == "T":  # 2026-11-28T10:05(:00), no zone
        return raw + ("" if len(raw) == 19 else ":00") + "Z"
    return raw


def snippet(mqtt: dict[str, Any]) -> str:
    """One line that publishes a reading as the device with mosquitto_pub: its host, port,
    client id, user name, password and topic, and a reading timed on the 5-minute grid."""
    now = '$(date -u -d @$(( $(date +%s) / 300 * 300 )) +%FT%TZ)'
    message = '"{\\"time\\":\\"' + now + '\\",\\"tair\\":21.5}"'
    return " ".join([
        "mosquitto_pub", "-h", shlex.quote(str(mqtt["host"])), "-p", str(int(mqtt["port"])),
        "-i", shlex.quote(mqtt["client_id"]), "-u", shlex.quote(mqtt["username"]),
        "-P", shlex.quote(mqtt["password"]), "-q", "1", "-t", shlex.quote(mqtt["topic"]),
        "-m", message])


def _secret_page(device: str, answer: dict[str, Any], what: str) -> Response:
    mqtt = answer["mqtt"]
    if not _settings().device_mqtt_address:
        # The API was called in-process (its host is a placeholder): the host the admin
        # reached the dashboard at is the broker's, as the API's rule says for a client.
        mqtt = {**mqtt, "host": urlsplit(request.host_url).hostname or mqtt["host"]}
    return _html(render_template("web/fleet_secret.html", device=device, mqtt=mqtt, what=what,
                                 snippet=snippet(mqtt), broker=answer.get("broker"),
                                 nav="devices"))


# ---- adding a device ---------------------------------------------------------------------


def _add_page(error: str | None = None, form: dict[str, str] | None = None,
              status: int = 200) -> Response:
    return _html(render_template("web/fleet_add.html", locations=_locations(), error=error,
                                 form=form or {}, nav="devices"), status)


@blp.route(f"{PREFIX}/fleet/add", methods=["GET"])
@signed_in
def fleet_add(principal: Principal) -> Response:
    """The form that adds a device (administrators)."""
    _admin_only(principal)
    return _add_page()


@blp.route(f"{PREFIX}/fleet/add", methods=["POST"])
@signed_in
def fleet_add_post(principal: Principal) -> Response:
    """Add the device through POST /api/v2/devices; the answer shows its broker password and
    a configuration line once."""
    web_session.check_csrf()
    _admin_only(principal)
    form = {k: request.form.get(k, "").strip()[:FIELD_MAX]
            for k in ("name", "model", "location", "from")}
    body: dict[str, Any] = {"name": form["name"], "location": form["location"],
                            "model": form["model"] or None}
    start = _instant(form["from"])
    if start:
        body["from"] = start
    if not form["name"] or not form["location"]:
        return _add_page("Give the device a name and choose its location.", form, 400)
    answer = apicall.call("POST", "/api/v2/devices", json=body)
    if not answer.ok:
        return _add_page(answer.message, form, status_of(answer))
    return _secret_page(form["name"], answer.body, "added")


# ---- one device: password, move, retire ----------------------------------------------------


def _manage_page(principal: Principal, name: str, *, error: str | None = None,
                 moved: str | None = None, status: int = 200) -> Response:
    _admin_only(principal)
    device = answered(apicall.call("GET", f"/api/v2/devices/{name}"))
    history = answered(apicall.call("GET", f"/api/v2/devices/{name}/deployments"))["items"]
    return _html(render_template("web/fleet_device.html", device=device, history=history,
                                 locations=_locations(), error=error, moved=moved,
                                 nav="devices"), status)


@blp.route(f"{PREFIX}/fleet/<name>", methods=["GET"])
@signed_in
def fleet_device(principal: Principal, name: str) -> Response:
    """One device's administration: where it stood, move it, a new password, retire it."""
    return _manage_page(principal, name, moved=request.args.get("moved"))


@blp.route(f"{PREFIX}/fleet/<name>/password", methods=["POST"])
@signed_in
def fleet_password(principal: Principal, name: str) -> Response:
    """A new broker password (POST /api/v2/devices/{name}/password), shown once."""
    web_session.check_csrf()
    _admin_only(principal)
    answer = apicall.call("POST", f"/api/v2/devices/{name}/password")
    if not answer.ok:
        if answer.status == 404:
            answered(answer)
        return _manage_page(principal, name, error=answer.message, status=status_of(answer))
    return _secret_page(name, answer.body, "rotated")


@blp.route(f"{PREFIX}/fleet/<name>/move", methods=["POST"])
@signed_in
def fleet_move(principal: Principal, name: str) -> Response:
    """Deploy the device at another location (POST /api/v2/devices/{name}/deployments)."""
    web_session.check_csrf()
    _admin_only(principal)
    body: dict[str, Any] = {"location": request.form.get("location", "").strip()[:FIELD_MAX]}
    start = _instant(request.form.get("from", ""))
    if start:
        body["from"] = start
    answer = apicall.call("POST", f"/api/v2/devices/{name}/deployments", json=body)
    if not answer.ok:
        if answer.status == 404 and "device" in answer.message:
            answered(answer)
        return _manage_page(principal, name, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.fleet_device", name=name,
                                           moved=answer.body["location"]["name"]), code=303))


@blp.route(f"{PREFIX}/fleet/<name>/retire", methods=["POST"])
@signed_in
def fleet_retire(principal: Principal, name: str) -> Response:
    """Retire the device (POST /api/v2/devices/{name}/retire) once confirmed (`confirm=yes`;
    without it the page asks first)."""
    web_session.check_csrf()
    _admin_only(principal)
    if request.form.get("confirm") != "yes":
        device = answered(apicall.call("GET", f"/api/v2/devices/{name}"))
        return _html(render_template("web/fleet_retire.html", device=device, nav="devices"))
    answer = apicall.call("POST", f"/api/v2/devices/{name}/retire", json={})
    if not answer.ok:
        if answer.status == 404:
            answered(answer)
        return _manage_page(principal, name, error=answer.message, status=status_of(answer))
    return cast(Response, redirect(url_for("web.devices", retired=name), code=303))


# ---- a new location, and the zone of a place -----------------------------------------------


def location_body(form: dict[str, str]) -> dict[str, Any]:
    """The POST /api/v2/locations body of the new-location form (numbers typed, or passed on
    as typed for the API to refuse by name; empty fields left out)."""
    lat, lon = _number(form.get("lat", "")), _number(form.get("lon", ""))
    body: dict[str, Any] = {"name": form.get("name", ""), "tz_name": form.get("tz_name", "")}
    if lat is not None or lon is not None:
        body["gps"] = [lon, lat]
    for field in ("elev", "kc"):
        value = _number(form.get(field, ""))
        if value is not None:
            body[field] = value
    return body


def _new_location_page(error: str | None = None, form: dict[str, str] | None = None,
                       status: int = 200) -> Response:
    return _html(render_template("web/location_new.html", error=error, form=form or {},
                                 basemap=url_for("web.static", filename=BASEMAP),
                                 nav="locations"), status)


@blp.route(f"{PREFIX}/locations/new", methods=["GET"])
@signed_in
def location_new(principal: Principal) -> Response:
    """The form that creates a location (administrators)."""
    _admin_only(principal)
    return _new_location_page()


@blp.route(f"{PREFIX}/locations/new", methods=["POST"])
@signed_in
def location_create(principal: Principal) -> Response:
    """Create the location through POST /api/v2/locations, then show its page."""
    web_session.check_csrf()
    _admin_only(principal)
    form = {k: request.form.get(k, "").strip()[:FIELD_MAX]
            for k in ("name", "lat", "lon", "tz_name", "elev", "kc")}
    answer = apicall.call("POST", "/api/v2/locations", json=location_body(form))
    if not answer.ok:
        return _new_location_page(answer.message, form, status_of(answer))
    return cast(Response, redirect(url_for("web.location", location_id=answer.body["id"],
                                           saved=1), code=303))


def zone_at(lat: float, lon: float) -> str | None:
    """The IANA zone of a point (tzfpy's offline polygons of timezone-boundary-builder), or
    None at sea where no zone's land is ("Etc/GMT+3" and the like are not proposed)."""
    import tzfpy  # noqa: PLC0415  loaded on the first proposal, not with every worker

    found = tzfpy.get_tz(lon, lat)
    return found if found and not found.startswith("Etc/") else None


@blp.route(f"{PREFIX}/zone", methods=["GET"])
@signed_in
def zone(principal: Principal) -> Response:
    """`{"tz_name": ...}`: the zone proposed for `lat`/`lon` (the location forms' map pick);
    400 naming a coordinate that is not a number in range."""
    point: dict[str, float] = {}
    for name, bound in (("lat", 90.0), ("lon", 180.0)):
        value = _number(request.args.get(name, "")[:40])
        if not isinstance(value, float) or not -bound <= value <= bound:
            return _json({"message": f"{name}: a number from {-bound:g} to {bound:g}"}, 400)
        point[name] = value
    return _json({"tz_name": zone_at(point["lat"], point["lon"])}, 200)
