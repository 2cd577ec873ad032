"""The dashboard's pages: landing page, sign-in/out, device, bad data, locations (the
device list is serve/web/fleetpages.py's).

Server-rendered Jinja pages; the device and bad-data pages draw their charts with uPlot from
the API's own JSON (the session cookie authenticates those GETs, serve.web.session). Every
page but the landing page and the sign-in form needs a signed-in session; a page of another
organisation's object answers 404 exactly like a missing one.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime
from functools import cache, wraps
from typing import Any, TypeVar, cast
from urllib.parse import urlencode, urlsplit
from uuid import UUID

import psycopg
import psycopg_pool
from flask import (
    Blueprint,
    Response,
    current_app,
    g,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from werkzeug.exceptions import HTTPException

from people.principal import Principal
from serve import coldtier, counts, ids, preferences
from serve.args import MAX_LIMIT
from serve.auth import public
from serve.pool import pool
from serve.readmodels import location_summary, summary_page
from serve.web import assets, charts, model
from serve.web import session as web_session
from shared import coldfiles, quarantinecodes, units
from shared.config import Settings
from shared.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    ServiceError,
    TooManyRequests,
    Unauthorized,
)
from shared.quarantinecodes import REASONS
from shared.timeutil import format_utc_z_exact

log = logging.getLogger(__name__)

STATIC = assets.STATIC
PREFIX = "/dashboard"
F = TypeVar("F", bound=Callable[..., Any])

blp = Blueprint("web", __name__, template_folder="templates")


def _settings() -> Settings:
    return cast(Settings, current_app.extensions["settings"])


def signed_in(view: F) -> F:
    """A page for signed-in users: the principal is the view's first argument; without a
    session the browser goes to the sign-in form (and back afterwards)."""

    @wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            principal = web_session.current()
        except Unauthorized:
            # Expired, revoked (signed out elsewhere, password changed) or user deactivated.
            session.clear()
            return redirect(url_for("web.login", next=_here(), ended=1))
        if principal is None:
            return redirect(url_for("web.login", next=_here()))
        ids.refuse()  # a malformed id (serve/ids.py): the unknown object's 404, once signed in
        return view(principal, *args, **kwargs)

    # The API's authentication hook lets it through; the wrapper does the dashboard's own,
    # then the id check the API's hook does before the view.
    setattr(wrapper, ids.JUDGED_IN_VIEW, True)
    return cast(F, public(wrapper))


def _here() -> str:
    return request.full_path.rstrip("?")


def _safe_next(target: str | None) -> str:
    """Where to go after signing in: a dashboard path of this site only (no open redirect)."""
    if target:
        parts = urlsplit(target)
        # No backslash (browsers read it as /) and no control character: CR/LF would make
        # the Location header invalid (a 500 after a successful sign-in, issue 20 item 5).
        if (not parts.scheme and not parts.netloc and parts.path.startswith(PREFIX + "/")
                and "\\" not in target and target.isprintable()):
            return target
    return url_for("web.devices")


def _html(body: str, status: int = 200) -> Response:
    response = Response(body, status=status, mimetype="text/html")
    return response


# ---- public pages ------------------------------------------------------------------------


@blp.route("/")
@public
def landing() -> Response:
    """The landing page: the dashboard, the API docs and the OpenAPI document."""
    return _html(render_template("web/landing.html", signed_in="token" in session))


@blp.route(f"{PREFIX}/static/v-<version>/<path:filename>")
@public
def static(version: str, filename: str) -> Response:
    """The dashboard's scripts, styles and vendored libraries, versioned (serve.web.assets)."""
    return assets.send(filename, version)


@blp.route(f"{PREFIX}/static/<path:filename>")
@public
def static_unversioned(filename: str) -> Response:
    """The same files at their old unversioned URLs (links from before versioning)."""
    return assets.send(filename, None)


blp.url_defaults(assets.versioned)


@blp.route(f"{PREFIX}/login", methods=["GET"])
@public
def login() -> Response:
    """The sign-in form (signed-in users go straight on)."""
    if "token" in session and request.args.get("ended") is None:
        try:
            if web_session.current() is not None:
                return cast(Response, redirect(_safe_next(request.args.get("next"))))
        except Unauthorized:
            session.clear()
    message = ("Your session has ended (signed out elsewhere, expired or password changed). "
               "Sign in again." if request.args.get("ended") else None)
    if request.args.get("out"):
        message = "You are signed out."
    if request.args.get("everywhere"):
        message = ("You are signed out everywhere: every session, token and API key of your "
                   "account has ended. Sign in again.")
    accepted = request.args.get("accepted", "")[:320]  # from the accept page (acceptpage.py)
    if accepted:
        message = "Done. Sign in with your email and password."
    return _html(render_template("web/login.html", next=request.args.get("next", ""),
                                 message=message, error=None, email=accepted))


@blp.route(f"{PREFIX}/login", methods=["POST"])
@public
def login_post() -> Response:
    """Sign in: CSRF check, password check (throttled like every login), session cookie."""
    web_session.check_csrf()
    email = request.form.get("email", "").strip()
    password = request.form.get("password", "")
    nxt = request.form.get("next", "")
    if not email or not password or len(email) > 320 or len(password) > 1024:
        return _html(render_template("web/login.html", next=nxt, message=None, email=email,
                                     error="Enter your email and password."), 400)
    try:
        web_session.sign_in(email, password)
    except Unauthorized:
        return _html(render_template("web/login.html", next=nxt, message=None, email=email,
                                     error="Wrong email or password."), 401)
    except TooManyRequests as exc:
        response = _html(render_template("web/login.html", next=nxt, message=None,
                                         email=email, error=exc.message), 429)
        response.headers["Retry-After"] = str(exc.retry_after)
        return response
    return cast(Response, redirect(_safe_next(nxt), code=303))


@blp.route(f"{PREFIX}/logout", methods=["POST"])
@public
def logout() -> Response:
    """Sign out: CSRF check, the session's token revoked, the cookie emptied."""
    web_session.check_csrf()
    try:
        web_session.current()
    except Unauthorized:
        pass  # already dead: forgetting the session is all there is to do
    web_session.sign_out()
    return cast(Response, redirect(url_for("web.login", out=1), code=303))


# ---- signed-in pages ---------------------------------------------------------------------


def _latest_time(conn: psycopg.Connection, org: UUID, device: str) -> datetime | None:
    """Time of the device's newest 5-minute reading (where the charts' default range ends),
    hot or, for a device with none hot, in the cold tier."""
    row = conn.execute("SELECT time FROM calibrated WHERE device = %s ORDER BY time DESC"
                       " LIMIT 1", (device,)).fetchone()
    return row[0] if row else coldtier.latest_time(conn, org, device, _settings().cold_path)


@blp.route(f"{PREFIX}/devices/<name>")
@signed_in
def device(principal: Principal, name: str) -> Response:
    """One device: its record, health, charts of calibrated/hourly/daily, water and growth."""
    with pool().connection() as conn:
        record = model.device(conn, org=principal.org_id, name=name)
        if record is None:
            raise NotFound(f"unknown device {name!r}")
        latest = _latest_time(conn, principal.org_id, name)
        quarantined = conn.execute(
            "SELECT count(*) FROM org_quarantine WHERE device = %s AND received_at > now() - %s",
            (name, model.RECENT)).fetchone()
        prefs = preferences.read(conn, user=principal.user_id, org=principal.org_id)
        chosen = charts.chosen_units(preferences.chosen_units(request.args.to_dict(), prefs))
        location = record.get("current_location")
        # Today's ET: the location's summary, the very figure of the Locations page.
        today = None if location is None else location_summary(
            conn, principal.org_id, UUID(location["id"]),
            {"temp": units.parse_unit("temp", chosen["temp"]),
             "ratio": units.parse_unit("ratio", chosen["ratio"]),
             "size": units.parse_unit("size", chosen["size"])})
    count = int(quarantined[0]) if quarantined else 0
    record["badges"] = model.badges(record, count, _settings(), datetime.now(UTC))
    zone = location["tz_name"] if location else None
    end = (latest or datetime.now(UTC)).astimezone(UTC)
    config = charts.config(device=name, zone=zone, end=format_utc_z_exact(end), chosen=chosen)
    config["preferences"] = prefs
    return _html(render_template(
        "web/device.html", device=record, quarantined=count, latest=latest, config=config,
        today=today and today["today"], size_text=charts.UNIT_TEXT["size"][chosen["size"]],
        unit_choices=charts.unit_choices(), nav="devices", modules=_modules(),
        chart_asset=(STATIC / "vendor" / "uPlot.iife.min.js").is_file()))


_IMPORT = re.compile(r'^import\b[^"\n]*"\./(?:js/)?([\w-]+\.js)";', re.MULTILINE)


@cache
def _modules(entry: str = "device.js") -> list[str]:
    """The modules (static/js/) that page script `entry` imports, directly or through each
    other, for the page's modulepreload links: read from the import lines, so the list never
    goes stale or preloads what the page does not use."""
    found: set[str] = set()
    todo = [STATIC / entry]
    while todo:
        for name in _IMPORT.findall(todo.pop().read_text()):
            if name not in found:
                found.add(name)
                todo.append(STATIC / "js" / name)
    return sorted(found)


def _int_arg(name: str, default: int | None, low: int, high: int) -> int | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    value = counts.plain(raw)
    if value is None or not low <= value <= high:
        raise BadRequest(f"{name}: {counts.rule(low, high)}")
    return value


@blp.route(f"{PREFIX}/quarantine")
@signed_in
def quarantine(principal: Principal) -> Response:
    """Bad data of the organisation, or of one device (?device=): reasons, counts per day
    over the last `days` (default 30), the rows newest first (paged with ?before=<id>)."""
    device_name = request.args.get("device") or None
    days = cast(int, _int_arg("days", 30, 1, 366))
    before = _int_arg("before", None, 1, 2**62)
    admin = web_session.is_admin(principal)
    with pool().connection() as conn:
        if device_name is not None and model.device(
                conn, org=principal.org_id, name=device_name) is None:
            raise NotFound(f"unknown device {device_name!r}")
        rows = model.quarantine_rows(conn, device=device_name, before=before, with_payload=False)
        if not admin:
            # Details quote what the device sent; those quotes are payload, shown to admins only.
            rows = [{**r, "detail": quarantinecodes.without_quotes(r["detail"])} for r in rows]
        day_list, reasons, counts = model.quarantine_counts(conn, device=device_name, days=days)
        total = model.quarantine_total(conn, device=device_name)
    more = None
    if len(rows) == model.QUARANTINE_PAGE:
        query = {k: v for k, v in (("device", device_name), ("days", str(days)),
                                   ("before", str(rows[-1]["id"]))) if v}
        more = f"{url_for('web.quarantine')}?{urlencode(query)}"
    counts_json = {"days": day_list, "reasons": reasons, "counts": counts,
                   "colours": list(charts.COLOURS)}
    return _html(render_template(
        "web/quarantine.html", rows=rows, device=device_name, days=days, total=total,
        reasons=reasons, sums={r: sum(counts[r]) for r in reasons}, counts=counts_json,
        admin=admin, more=more, nav="quarantine", explained=REASONS,
        chart_asset=(STATIC / "vendor" / "uPlot.iife.min.js").is_file()))


def _payload_row(principal: Principal, row_id: int) -> dict[str, Any]:
    if not web_session.is_admin(principal):
        raise Forbidden("raw payloads are shown to administrators of the organisation only")
    with pool().connection() as conn:
        row = model.quarantine_payload(conn, row_id=row_id)
    if row is None:
        raise NotFound(f"unknown quarantine row {row_id}")
    return row


@blp.route(f"{PREFIX}/quarantine/<int:row_id>")
@signed_in
def quarantine_row(principal: Principal, row_id: int) -> Response:
    """One quarantined message with its raw payload, or the prefix the quarantine kept of a
    large one (administrators only)."""
    row = _payload_row(principal, row_id)
    payload = bytes(row["payload"])
    text = payload[:65536].decode("utf-8", errors="replace")
    sha = bytes(row["payload_sha256"]).hex() if row["payload_sha256"] is not None else None
    return _html(render_template("web/quarantine_row.html", row=row, text=text, sha=sha,
                                 cut=len(payload) > 65536, nav="quarantine"))


@blp.route(f"{PREFIX}/quarantine/<int:row_id>/payload")
@signed_in
def quarantine_payload(principal: Principal, row_id: int) -> Response:
    """The raw payload bytes as received (only the kept prefix of a truncated one), as a
    download (administrators only)."""
    row = _payload_row(principal, row_id)
    response = Response(bytes(row["payload"]), mimetype="application/octet-stream")
    response.headers["Content-Disposition"] = (
        f'attachment; filename="quarantine-{row["id"]}.bin"')
    return response


@blp.route(f"{PREFIX}/locations")
@signed_in
def locations(principal: Principal) -> Response:
    """Locations with the devices standing there now and the latest conditions (the API's
    summary), in the units chosen on the page."""
    with pool().connection() as conn:
        prefs = preferences.read(conn, user=principal.user_id, org=principal.org_id)
        chosen_codes = charts.chosen_units(preferences.chosen_units(request.args.to_dict(),
                                                                    prefs))
        chosen = {p: units.parse_unit(p, chosen_codes[p]) for p in ("temp", "ratio", "size")}
        items, _total, _pages = summary_page(conn, principal.org_id, MAX_LIMIT, 1, chosen)
        all_devices = model.device_list(conn, org=principal.org_id, settings=_settings())
    at: dict[str, list[dict[str, Any]]] = {}
    for d in all_devices:
        if d["current_location"] is not None:
            at.setdefault(d["current_location"]["id"], []).append(d)
    text = {p: charts.UNIT_TEXT[p][chosen_codes[p]] for p in ("temp", "ratio", "size")}
    map_data = {"unit_text": text,
                "basemap": {k: url_for("web.static", filename=f"vendor/{f}")
                            for k, f in assets.BASEMAPS.items()},
                "locations": [{"id": i["id"], "name": i["name"], "gps": i["gps"],
                               "url": url_for("web.location", location_id=i["id"]),
                               "conditions": i["conditions"], "today": i["today"],
                               "devices": [{"name": d["name"], "badges": [
                                   {"label": b.label, "level": b.level} for b in d["badges"]],
                                   "url": url_for("web.device", name=d["name"])}
                                   for d in at.get(i["id"], [])]} for i in items]}
    return _html(render_template("web/locations.html", items=items, at=at, unit_text=text,
                                 map_data=map_data,
                                 chosen=chosen_codes, unit_choices=charts.unit_choices(),
                                 nav="locations"))


@blp.route(f"{PREFIX}/compare")
@signed_in
def compare(principal: Principal) -> Response:
    """One column of several devices (or a location's devices) on one chart."""
    with pool().connection() as conn:
        prefs = preferences.read(conn, user=principal.user_id, org=principal.org_id)
        found = model.device_list(conn, org=principal.org_id, settings=_settings())
        row = conn.execute(  # the newest reading, hot or cold (serve.coldtier)
            "SELECT greatest((SELECT max(time) FROM calibrated), (SELECT max(last_time)"
            " FROM cold_files WHERE org_id = %s AND state = ANY(%s)))",
            (principal.org_id, list(coldfiles.READABLE))).fetchone()
    end = (row[0] if row and row[0] else datetime.now(UTC)).astimezone(UTC)
    config = charts.config(device="", zone=None, end=format_utc_z_exact(end),
                           chosen=charts.chosen_units(preferences.chosen_units(
                               request.args.to_dict(), prefs)))
    here = [d["current_location"] or {} for d in found]
    config["devices"] = [{"name": d["name"], "location": h.get("id"), "zone": h.get("tz_name")}
                         for d, h in zip(found, here, strict=True)]
    locations = {h["id"]: h["name"] for h in here if h}
    config["locations"] = [{"id": k, "name": v} for k, v in sorted(locations.items(),
                                                                   key=lambda kv: kv[1])]
    return _html(render_template("web/compare.html", config=config, nav="compare",
                                 unit_choices=charts.unit_choices(),
                                 chart_asset=(STATIC / "vendor" / "uPlot.iife.min.js").is_file()))


@blp.route(f"{PREFIX}/preferences", methods=["GET", "PUT"])
@signed_in
def user_preferences(principal: Principal) -> Response:
    """The signed-in user's preferences as JSON; PUT merges the keys sent (a JSON object,
    with the session's CSRF value in X-CSRF-Token) and answers the result. Bad input is a
    400 JSON body saying what was wrong."""
    try:
        if request.method == "PUT":
            web_session.check_csrf_header()
            if not request.is_json:
                raise BadRequest("send the preferences as a JSON object (Content-Type: "
                                 "application/json)")
            changes = preferences.check(request.get_json(silent=True))
    except BadRequest as exc:
        return _json({"message": exc.message}, 400)
    with pool().connection() as conn:
        if request.method == "PUT":
            stored = preferences.write(conn, user=principal.user_id, org=principal.org_id,
                                       changes=changes)
        else:
            stored = preferences.read(conn, user=principal.user_id, org=principal.org_id)
    return _json(stored, 200)


def _json(body: dict[str, Any], status: int) -> Response:
    return Response(json.dumps(body), status=status, mimetype="application/json")


# ---- errors as pages ---------------------------------------------------------------------


@blp.route(f"{PREFIX}/<path:rest>")
@public
def unknown_page(rest: str) -> Response:
    """Any other `/dashboard/...` address: the dashboard's 404 page, not the API's JSON
    (issue 26). The most general rule, so every page's own rule wins over it."""
    raise NotFound("There is no such page in the dashboard.")


@blp.errorhandler(ServiceError)
def _service_error(exc: ServiceError) -> Response:
    from serve.errors import status_of

    status = status_of(exc)
    response = _html(render_template("web/error.html", status=status, message=exc.message),
                     status)
    if isinstance(exc, TooManyRequests):
        response.headers["Retry-After"] = str(exc.retry_after)
    return response


@blp.errorhandler(HTTPException)
def _http_error(exc: HTTPException) -> Response:
    status = exc.code or 500
    return _html(render_template("web/error.html", status=status,
                                 message=exc.description or exc.name), status)


@blp.errorhandler(psycopg.Error)
@blp.errorhandler(psycopg_pool.PoolTimeout)
@blp.errorhandler(Exception)
def _unexpected(exc: BaseException) -> Response:
    # The detail goes to the log, never to the page (as the API's JSON 500).
    log.error("dashboard page failed: %s %s", request.method, request.path,
              exc_info=(type(exc), exc, exc.__traceback__))
    return _html(render_template("web/error.html", status=500,
                                 message="Something went wrong on our side; it was logged."),
                 500)


@blp.after_app_request
def _page_headers(response: Response) -> Response:
    """Pages (not the API): no framing, scripts and styles from this site only, no caching of
    pages that show an organisation's data."""
    if request.blueprint != "web":
        return response
    response.headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none';"
        " object-src 'none'")
    response.headers.setdefault("X-Frame-Options", "DENY")
    response.headers.setdefault("Referrer-Policy", "same-origin")
    if request.endpoint not in ("web.static", "web.static_unversioned"):
        response.headers["Cache-Control"] = "no-store"
    return response


@blp.app_context_processor
def _globals() -> dict[str, Any]:
    return {**web_session.template_globals(),
            "signed_in_user": g.get("principal") is not None}
