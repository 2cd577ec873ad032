"""`/api/v2/teams`: the organisation's teams, their members, devices and locations (issue 23).

- `GET /teams` (paged), `GET /teams/{id}` (with its members, devices and locations) and
  `GET /teams/{id}/members|devices|locations` need `teams:read` for a key.
- `POST /teams`, `PATCH /teams/{id}` (rename), `DELETE /teams/{id}`, and
  `PUT`/`DELETE /teams/{id}/members/{user_id}`, `/devices/{name}`, `/locations/{id}` are for
  the organisation's administrators; a key needs `teams:write` (administrators only,
  people/keypolicy.py). PUT of a link already there is 200 with no change (idempotent).
Another organisation's team, user, device or location is the same 404 as a missing one (after
the administrator check, so a member learns nothing either way). A teams-only member reads
only their own teams: the database's policies (migration 0155) decide. Every change is in the
audit log. The rules live in people/teams.py.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg
from marshmallow import Schema, fields

from people import keypolicy, teams
from people.principal import Principal
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.paging import PageArgsSchema, PageSchema, check_page, envelope, offset
from serve.pool import pool
from serve.records import stamp
from shared import audit
from shared.errors import Forbidden, UnknownDevice, UnknownObject

blp = Blueprint("teams", __name__, url_prefix="/api/v2/teams",
                description="Teams of the caller's organisation: members, devices, locations.")

READ_ONLY = ("id", "created", "members", "devices", "locations")


class TeamSchema(Schema):
    """Body of POST /teams and PATCH /teams/{id}."""

    name = fields.String(required=True, metadata={"description": "1 to 200 characters, "
                                                                  "unique in the organisation"})


def team_record(row: dict[str, Any]) -> dict[str, Any]:
    """A served team with the sizes of its three lists."""
    return {"id": str(row["id"]), "name": row["name"], "created": stamp(row["created"]),
            "members": row["members"], "devices": row["devices"],
            "locations": row["locations"]}


def _member_record(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(row["id"]), "email": row["email"], "name": row["name"],
            "added": stamp(row["added"])}


def _named_record(row: dict[str, Any]) -> dict[str, Any]:
    return {"id": str(row["id"]), "name": row["name"], "added": stamp(row["added"])}


def _admin(conn: psycopg.Connection, principal: Principal, what: str) -> None:
    if not keypolicy.is_admin(conn, principal):
        raise Forbidden(f"{what} is for administrators of the organisation")


def _team(conn: psycopg.Connection, principal: Principal, wanted: UUID) -> dict[str, Any]:
    return teams.fetch_team(conn, principal.org_id, wanted)


@blp.route("", methods=["GET"])
@blp.arguments(PageArgsSchema, location="query", as_kwargs=True)
@blp.response(200, PageSchema)
@requires("teams:read")
def list_teams(limit: int, page: int) -> Any:
    """The organisation's teams by name (a teams-only member: their own), with their sizes."""
    principal = current_principal()
    with pool().connection() as conn:
        rows, total = teams.team_page(conn, principal.org_id, limit, offset(limit, page))
    pages = check_page(total, limit, page)
    return envelope([team_record(r) for r in rows], total=total, limit=limit, page=page,
                    pages=pages)


@blp.route("", methods=["POST"])
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": TeamSchema}}})
@blp.response(201)
@requires("teams:write")
def create_team() -> Any:
    """Create a team (administrators; a name taken in the organisation is 409)."""
    principal = current_principal()
    body = load(TeamSchema(), request_body(form=False), read_only=READ_ONLY)
    with pool().connection() as conn:
        _admin(conn, principal, "creating a team")
        row = teams.create_team(conn, principal.org_id, body["name"])
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="team.create",
                     target_type="team", target_id=row["id"], details={"name": row["name"]})
    return team_record(row), 201


@blp.route("/<objid('team'):team_id>", methods=["GET"])
@blp.response(200)
@requires("teams:read")
def get_team(team_id: UUID) -> Any:
    """One team with its members, devices and locations listed."""
    principal = current_principal()
    with pool().connection() as conn:
        row = _team(conn, principal, team_id)
        record = team_record(row)
        record["member_list"] = [_member_record(r) for r in teams.team_members(conn, row["id"])]
        record["device_list"] = [_named_record(r) for r in teams.team_devices(conn, row["id"])]
        record["location_list"] = [_named_record(r)
                                   for r in teams.team_locations(conn, row["id"])]
    return record


@blp.route("/<objid('team'):team_id>", methods=["PATCH"])
@blp.doc(requestBody={"required": True, "content": {"application/json": {"schema": TeamSchema}}})
@blp.response(200)
@requires("teams:write")
def rename_team(team_id: UUID) -> Any:
    """Rename a team (administrators; 409 for a name taken in the organisation)."""
    principal = current_principal()
    body = load(TeamSchema(), request_body(form=False), read_only=READ_ONLY)
    with pool().connection() as conn:
        _admin(conn, principal, "renaming a team")
        before = _team(conn, principal, team_id)
        row = teams.rename_team(conn, principal.org_id, before["id"], body["name"])
        if row["name"] != before["name"]:
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action="team.rename", target_type="team", target_id=row["id"],
                         details={"from": before["name"], "to": row["name"]})
    return team_record(row)


@blp.route("/<objid('team'):team_id>", methods=["DELETE"])
@blp.response(204)
@requires("teams:write")
def delete_team(team_id: UUID) -> Any:
    """Delete a team; its members, devices and locations stay (administrators)."""
    principal = current_principal()
    with pool().connection() as conn:
        _admin(conn, principal, "deleting a team")
        name = teams.delete_team(conn, principal.org_id, team_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="team.delete",
                     target_type="team", target_id=team_id, details={"name": name})
    return None


# ---- the three lists: read, add (PUT), remove (DELETE) -----------------------------------------

_LISTS = {"members": (teams.team_members, _member_record),
          "devices": (teams.team_devices, _named_record),
          "locations": (teams.team_locations, _named_record)}


def _list(team_id: UUID, which: str) -> Any:
    principal = current_principal()
    fetch, record = _LISTS[which]
    with pool().connection() as conn:
        row = _team(conn, principal, team_id)
        items = [record(r) for r in fetch(conn, row["id"])]
    return {"items": items, "total": len(items)}


def _resolve(conn: psycopg.Connection, org: UUID, kind: str, raw: UUID | str
             ) -> tuple[UUID, str]:
    """The id and label of the user, device (a name) or location named in the path, of
    `org` (ids parsed by serve.ids)."""
    if kind == "member":
        assert isinstance(raw, UUID)
        return raw, teams.member_of_org(conn, org, raw)
    if kind == "device":
        assert isinstance(raw, str)
        if "\x00" in raw:  # PostgreSQL text cannot hold NUL; no device is called that
            raise UnknownDevice(f"unknown device {raw!r}")
        return teams.device_of_org(conn, org, raw), raw
    assert isinstance(raw, UUID)
    return raw, teams.location_of_org(conn, org, raw)


def _change(team_id: UUID, kind: str, raw: UUID | str, *, add: bool) -> Any:
    principal = current_principal()
    with pool().connection() as conn:
        _admin(conn, principal, "changing a team")
        team = _team(conn, principal, team_id)
        target, label = _resolve(conn, principal.org_id, kind, raw)
        if add:
            changed = teams.add_link(conn, principal.org_id, team["id"], kind, target)
        else:
            changed = teams.remove_link(conn, team["id"], kind, target)
            if not changed:
                raise UnknownObject(f"{kind} {str(raw)!r} is not in team {team['name']!r}")
        if changed:
            audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                         action=f"team.{kind}_{'add' if add else 'remove'}", target_type="team",
                         target_id=team["id"],
                         details={"team": team["name"], kind: label, f"{kind}_id": target})
    return ({"team": str(team["id"]), kind: {"id": str(target), "label": label},
             "added": changed}, 200) if add else (None, 204)


def _routes(plural: str, kind: str, arg: str, converter: str = "") -> None:
    """GET /teams/{id}/<plural>, PUT and DELETE /teams/{id}/<plural>/<arg> (`converter`: the
    arg's, e.g. an object id's `objid('user'):`)."""

    def read(team_id: UUID) -> Any:
        return _list(team_id, plural)

    def add(team_id: UUID, **path: UUID | str) -> Any:
        return _change(team_id, kind, path[arg], add=True)

    def remove(team_id: UUID, **path: UUID | str) -> Any:
        return _change(team_id, kind, path[arg], add=False)

    # The docstrings become the OpenAPI summaries, so they are set before decorating.
    read.__doc__ = f"The team's {plural}."
    add.__doc__ = f"Add a {kind} of the organisation to the team (administrators)."
    remove.__doc__ = f"Take a {kind} out of the team (administrators; 404 if not in it)."
    team = "<objid('team'):team_id>"
    blp.route(f"/{team}/{plural}", methods=["GET"], endpoint=f"list_{plural}")(
        blp.response(200)(requires("teams:read")(read)))
    item = f"/{team}/{plural}/<{converter}{arg}>"
    blp.route(item, methods=["PUT"], endpoint=f"add_{kind}")(
        blp.response(200)(requires("teams:write")(add)))
    blp.route(item, methods=["DELETE"], endpoint=f"remove_{kind}")(
        blp.response(204)(requires("teams:write")(remove)))


_routes("members", "member", "user_id", "objid('user'):")
_routes("devices", "device", "device_name")
_routes("locations", "location", "location_id", "objid('location'):")
