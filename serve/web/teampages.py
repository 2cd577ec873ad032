"""The dashboard's teams pages (issue 23, docs/auth.md "Teams"): the organisation's teams,
and a team's page with its members, devices and locations.

Like the people pages (serve/web/peoplepages.py), every read and write goes through the API
as the signed-in user, in-process (serve/web/apicall.py): a form POSTs to a dashboard route
with the session's CSRF value and the route calls `/api/v2/teams...`. Who may change a team
(administrators, `teams:write`), what a teams-only member sees (their own teams) and which
names are taken are the API's rules; a refusal shows the API's own message on the page.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import quote
from uuid import UUID

from flask import Response, redirect, render_template, request, url_for

from people.principal import Principal
from serve.args import MAX_LIMIT
from serve.web import apicall
from serve.web import session as web_session
from serve.web.alertpages import FIELD_MAX
from serve.web.peoplepages import answered, me, status_of
from serve.web.views import PREFIX, _html, blp, signed_in
from shared.errors import NotFound

# The team's three lists: the dashboard's word -> the API's list key and the path segment.
KINDS = {"members": "member_list", "devices": "device_list", "locations": "location_list"}


def _path(*parts: str | UUID) -> str:
    """An API path under /api/v2/teams, each part quoted (a device name is typed by people)."""
    return "/api/v2/teams" + "".join("/" + quote(str(p), safe="") for p in parts)


def _teams_page(principal: Principal, *, error: str | None = None, typed: str = "",
                status: int = 200) -> Response:
    answer = apicall.call("GET", "/api/v2/teams", query={"limit": MAX_LIMIT})
    if not answer.ok:  # a key-less role without teams:read: the API's message, no list
        return _html(render_template("web/teams.html", teams=[], refused=answer.message,
                                     manage=False, error=None, typed="", nav="teams"),
                     status_of(answer))
    return _html(render_template(
        "web/teams.html", teams=answer.body["items"], refused=None, error=error, typed=typed,
        manage=web_session.is_admin(principal), nav="teams"), status)


@blp.route(f"{PREFIX}/teams", methods=["GET"])
@signed_in
def teams(principal: Principal) -> Response:
    """The organisation's teams (a teams-only member: their own) and, for administrators,
    the form that makes one."""
    return _teams_page(principal)


@blp.route(f"{PREFIX}/teams", methods=["POST"])
@signed_in
def team_create(principal: Principal) -> Response:
    """Make a team (POST /api/v2/teams) and open its page."""
    web_session.check_csrf()
    name = request.form.get("name", "").strip()[:FIELD_MAX]
    answer = apicall.call("POST", "/api/v2/teams", json={"name": name})
    if not answer.ok:
        return _teams_page(principal, error=answer.message, typed=name,
                           status=status_of(answer))
    return cast(Response, redirect(url_for("web.team", team_id=answer.body["id"]), code=303))


def _choices(team: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """What an administrator may add: the organisation's members, devices and locations not
    in the team yet, each as {"value": path segment, "label": shown}."""
    user = me()
    people = answered(apicall.call("GET", f"/api/v2/orgs/{user['org_id']}/users",
                                   query={"limit": MAX_LIMIT}))["items"]
    devices = answered(apicall.call("GET", "/api/v2/devices",
                                    query={"limit": MAX_LIMIT}))["items"]
    places = answered(apicall.call("GET", "/api/v2/locations",
                                   query={"limit": MAX_LIMIT}))["items"]
    held = {kind: {str(r["id"]) for r in team[key]} for kind, key in KINDS.items()}
    return {
        "members": [{"value": p["id"], "label": p["email"]} for p in people
                    if p["id"] not in held["members"]],
        "devices": [{"value": d["name"], "label": d["name"]} for d in devices
                    if d["id"] not in held["devices"]],
        "locations": [{"value": str(loc["id"]), "label": loc["name"]} for loc in places
                      if str(loc["id"]) not in held["locations"]],
    }


def _team_page(principal: Principal, team_id: UUID, *, error: str | None = None,
               status: int = 200) -> Response:
    team = answered(apicall.call("GET", _path(team_id)))
    manage = web_session.is_admin(principal)
    # Each row's removal route: devices go by name in the API, the rest by id.
    for kind, key in KINDS.items():
        arg = REMOVE_ARGS[kind].rpartition(":")[2]
        for row in team[key]:
            row["remove"] = url_for(f"web.team_remove_{kind}", team_id=team_id,
                                    **{arg: row["name" if kind == "devices" else "id"]})
    return _html(render_template(
        "web/team.html", team=team, manage=manage, kinds=KINDS,
        choices=_choices(team) if manage else {}, error=error,
        renamed=request.args.get("renamed") == "1", nav="teams"), status)


@blp.route(f"{PREFIX}/teams/<objid('team'):team_id>", methods=["GET"])
@signed_in
def team(principal: Principal, team_id: UUID) -> Response:
    """A team's members, devices and locations; administrators add, remove, rename, delete."""
    return _team_page(principal, team_id)


def _write(principal: Principal, team_id: UUID, method: str, path: str,
           body: Any = None) -> apicall.Answer | Response:
    """Call the API; a 404 is the page's 404, another refusal the team page with its message."""
    answer = apicall.call(method, path, json=body)
    if answer.status == 404:
        raise NotFound(answer.message)
    if not answer.ok:
        return _team_page(principal, team_id, error=answer.message, status=status_of(answer))
    return answer


@blp.route(f"{PREFIX}/teams/<objid('team'):team_id>/rename", methods=["POST"])
@signed_in
def team_rename(principal: Principal, team_id: UUID) -> Response:
    """Rename a team (PATCH /api/v2/teams/{id})."""
    web_session.check_csrf()
    name = request.form.get("name", "").strip()[:FIELD_MAX]
    done = _write(principal, team_id, "PATCH", _path(team_id), {"name": name})
    if isinstance(done, Response):
        return done
    return cast(Response, redirect(url_for("web.team", team_id=team_id, renamed=1), code=303))


@blp.route(f"{PREFIX}/teams/<objid('team'):team_id>/delete", methods=["POST"])
@signed_in
def team_delete(principal: Principal, team_id: UUID) -> Response:
    """Delete a team (DELETE /api/v2/teams/{id}); its members, devices and locations stay."""
    web_session.check_csrf()
    done = _write(principal, team_id, "DELETE", _path(team_id))
    if isinstance(done, Response):
        return done
    return cast(Response, redirect(url_for("web.teams", deleted=1), code=303))


def _add(principal: Principal, team_id: UUID, kind: str) -> Response:
    """Add a member, device or location to the team (PUT /api/v2/teams/{id}/{kind}/{which});
    the form's `target` goes to the API, whose converter judges an id (serve/ids.py)."""
    web_session.check_csrf()
    which = request.form.get("target", "").strip()[:FIELD_MAX]
    if not which:
        return _team_page(principal, team_id, status=400,
                          error=f"target: choose one of the organisation's {kind}")
    done = _write(principal, team_id, "PUT", _path(team_id, kind, which))
    if isinstance(done, Response):
        return done
    return cast(Response, redirect(url_for("web.team", team_id=team_id), code=303))


def _remove(principal: Principal, team_id: UUID, kind: str, which: str | UUID) -> Response:
    """Take a member, device or location out of the team (DELETE
    /api/v2/teams/{id}/{kind}/{which}): a teams-only member loses sight of it at once."""
    web_session.check_csrf()
    done = _write(principal, team_id, "DELETE", _path(team_id, kind, which))
    if isinstance(done, Response):
        return done
    return cast(Response, redirect(url_for("web.team", team_id=team_id), code=303))


def _routes(kind: str, target: str) -> None:
    """The add and remove routes of one list: the list is a literal segment, and what is
    removed is named as the API names it (`target`: an id through the `objid` converter, so
    a malformed one is the unknown object's 404 once the visitor is signed in; a device goes
    by its name)."""
    arg = target.rpartition(":")[2]
    team = f"{PREFIX}/teams/<objid('team'):team_id>/{kind}"

    def add(principal: Principal, team_id: UUID) -> Response:
        return _add(principal, team_id, kind)

    def remove(principal: Principal, team_id: UUID, **which: str | UUID) -> Response:
        return _remove(principal, team_id, kind, which[arg])

    for view, name in ((add, f"team_add_{kind}"), (remove, f"team_remove_{kind}")):
        view.__name__ = view.__qualname__ = name
        view.__doc__ = (_add if view is add else _remove).__doc__
    blp.route(f"{team}/add", methods=["POST"], endpoint=f"team_add_{kind}")(signed_in(add))
    blp.route(f"{team}/<{target}>/remove", methods=["POST"],
              endpoint=f"team_remove_{kind}")(signed_in(remove))


REMOVE_ARGS = {"members": "objid('user'):user_id", "devices": "device_name",
               "locations": "objid('location'):location_id"}
"""Each list's removal argument, as the API's team routes take it (serve/api/teams.py)."""
for _kind_name, _target in REMOVE_ARGS.items():
    _routes(_kind_name, _target)


@blp.route(f"{PREFIX}/teams/<objid('team'):team_id>/<kind>/add", methods=["POST"])
@blp.route(f"{PREFIX}/teams/<objid('team'):team_id>/<kind>/<name>/remove", methods=["POST"])
@signed_in
def team_other_list(principal: Principal, team_id: UUID, kind: str, name: str = "") -> Response:
    """A list a team does not have (the three above are literal routes, which win): 404."""
    raise NotFound(f"unknown list {kind[:80]!r}: members, devices or locations")
