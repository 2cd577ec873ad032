"""`sds team ...`: an organisation's teams and their members, devices and locations, with the
same rules and audit entries as `/api/v2/teams` (people/teams.py; docs/auth.md "Teams")."""

from __future__ import annotations

from uuid import UUID

import click
import psycopg

from admin.context import Context, pass_ctx
from people import accounts, teams
from shared import audit
from shared.errors import UnknownObject

_ORG = click.option("--org", "org_name", required=True, help="Organisation name or id.")


@click.group("team")
def team() -> None:
    """Teams: who of an organisation sees which devices and locations when limited to teams."""


@team.command("list")
@_ORG
@pass_ctx
def team_list(obj: Context, org_name: str) -> None:
    """List the organisation's teams: name, members, devices, locations, id."""
    with obj.conn() as conn:
        rows, _total = teams.team_page(conn, accounts.org_id(conn, org_name), 10000, 0)
    for r in rows:
        click.echo(f"{r['name']}\t{r['members']} member(s)\t{r['devices']} device(s)\t"
                   f"{r['locations']} location(s)\t{r['id']}")


@team.command("show")
@_ORG
@click.argument("team_ref", metavar="TEAM")
@pass_ctx
def team_show(obj: Context, org_name: str, team_ref: str) -> None:
    """Show TEAM (name or id): its members, devices and locations."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        tid = teams.team_by_name_or_id(conn, org, team_ref)
        row = teams.fetch_team(conn, org, tid)
        click.echo(f"team {row['name']} id {tid}")
        for m in teams.team_members(conn, tid):
            click.echo(f"member\t{m['email']}\t{m['id']}")
        for d in teams.team_devices(conn, tid):
            click.echo(f"device\t{d['name']}\t{d['id']}")
        for loc in teams.team_locations(conn, tid):
            click.echo(f"location\t{loc['name']}\t{loc['id']}")


def _record(conn: psycopg.Connection, org: UUID, action: str, team_id: UUID,
            **details: object) -> None:
    audit.record(conn, org=org, actor=audit.OPERATOR, action=action, target_type="team",
                 target_id=team_id, details=details)


@team.command("create")
@_ORG
@click.argument("name")
@pass_ctx
def team_create(obj: Context, org_name: str, name: str) -> None:
    """Create a team called NAME."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        row = teams.create_team(conn, org, name)
        _record(conn, org, "team.create", row["id"], name=row["name"])
    click.echo(f"team {row['name']} id {row['id']}")


@team.command("rename")
@_ORG
@click.argument("team_ref", metavar="TEAM")
@click.argument("name")
@pass_ctx
def team_rename(obj: Context, org_name: str, team_ref: str, name: str) -> None:
    """Rename TEAM (name or id) to NAME."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        tid = teams.team_by_name_or_id(conn, org, team_ref)
        before = teams.fetch_team(conn, org, tid)["name"]
        row = teams.rename_team(conn, org, tid, name)
        if row["name"] != before:
            _record(conn, org, "team.rename", tid, **{"from": before, "to": row["name"]})
    click.echo(f"team {row['name']} id {tid}")


@team.command("delete")
@_ORG
@click.argument("team_ref", metavar="TEAM")
@pass_ctx
def team_delete(obj: Context, org_name: str, team_ref: str) -> None:
    """Delete TEAM (its members, devices and locations stay)."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        tid = teams.team_by_name_or_id(conn, org, team_ref)
        name = teams.delete_team(conn, org, tid)
        _record(conn, org, "team.delete", tid, name=name)
    click.echo(f"team {name} deleted")


def _target(conn: psycopg.Connection, org: UUID, kind: str, ref: str) -> tuple[UUID, str]:
    """The id and label of a member (by email), device (by name) or location (by name or id)."""
    if kind == "member":
        uid = accounts.user_id(conn, ref)
        return uid, teams.member_of_org(conn, org, uid)
    if kind == "device":
        return teams.device_of_org(conn, org, ref), ref
    row = conn.execute("SELECT id, name FROM locations WHERE org_id = %s"
                       " AND (name = %s OR id::text = %s) ORDER BY id LIMIT 2",
                       (org, ref, ref)).fetchall()
    if len(row) != 1:
        raise UnknownObject(f"no single location {ref!r} in the organisation")
    return row[0][0], str(row[0][1])


def _link_commands(kind: str, metavar: str, what: str) -> None:
    """`sds team add-KIND` and `sds team remove-KIND`."""

    def change(obj: Context, org_name: str, team_ref: str, ref: str, add: bool) -> None:
        with obj.conn() as conn:
            org = accounts.org_id(conn, org_name)
            tid = teams.team_by_name_or_id(conn, org, team_ref)
            name = teams.fetch_team(conn, org, tid)["name"]
            target, label = _target(conn, org, kind, ref)
            if add:
                changed = teams.add_link(conn, org, tid, kind, target)
            else:
                changed = teams.remove_link(conn, tid, kind, target)
            if changed:
                _record(conn, org, f"team.{kind}_{'add' if add else 'remove'}", tid,
                        team=name, **{kind: label, f"{kind}_id": str(target)})
        verb = ("added to" if add else "removed from") if changed else (
            "already in" if add else "was not in")
        click.echo(f"{kind} {label} {verb} team {name}")

    def add_cmd(obj: Context, org_name: str, team_ref: str, ref: str) -> None:
        change(obj, org_name, team_ref, ref, True)

    def remove_cmd(obj: Context, org_name: str, team_ref: str, ref: str) -> None:
        change(obj, org_name, team_ref, ref, False)

    add_cmd.__doc__ = f"Add {metavar} ({what}) to TEAM."
    remove_cmd.__doc__ = f"Take {metavar} ({what}) out of TEAM."
    for verb, func in (("add", add_cmd), ("remove", remove_cmd)):
        command = pass_ctx(func)
        command = click.argument("ref", metavar=metavar)(command)
        command = click.argument("team_ref", metavar="TEAM")(command)
        command = _ORG(command)
        team.command(f"{verb}-{kind}")(command)


_link_commands("member", "EMAIL", "a member of the organisation")
_link_commands("device", "DEVICE", "a device name")
_link_commands("location", "LOCATION", "a location name or id")
