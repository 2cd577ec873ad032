"""`sds org|user|location|apikey`: organisations, users, locations and API keys, for
bootstrapping and scripts (users manage their own keys through the API)."""

from __future__ import annotations

import os
from datetime import date

import click

from admin.context import Context, audit_operator, pass_ctx
from people import accounts, members, roles
from shared import locations, places, sealing
from shared.config import Settings
from shared.errors import ServiceError
from shared.timeutil import parse_instant


@click.group("org")
def org() -> None:
    """Organisations and their members."""


@org.command("create")
@click.argument("name")
@pass_ctx
def org_create(obj: Context, name: str) -> None:
    """Create an organisation called NAME."""
    with obj.conn() as conn:
        oid = accounts.create_org(conn, name=name)
        audit_operator(conn, of="organisations", row=oid, action="org.create",
                       target_type="org", details={"name": name})
    click.echo(f"organisation {name} id {oid}")


@org.command("list")
@click.option("--user", "email", default=None, help="Only this user's organisations, with "
              "their role in each (as GET /users/{id}/orgs).")
@pass_ctx
def org_list(obj: Context, email: str | None) -> None:
    """List organisations: name, active members, id (and the user's role with --user)."""
    with obj.conn() as conn:
        if email is not None:
            for o in members.orgs_of(conn, accounts.user_id(conn, email)):
                only = "\tteams-only" if o["teams_only"] else ""
                click.echo(f"{o['name']}\t{o['role']}{only}\t{o['members']}\t{o['id']}")
            return
        rows = conn.execute(
            "SELECT o.name, o.id, (SELECT count(*) FROM memberships m JOIN users u"
            " ON u.id = m.user_id WHERE m.org_id = o.id AND u.active)"
            " FROM organisations o ORDER BY o.name").fetchall()
    for name, oid, count in rows:
        click.echo(f"{name}\t{count}\t{oid}")


@org.command("add-member")
@click.argument("org_name")
@click.argument("email")
@click.option("--role", type=click.Choice(roles.ROLES), default="member", show_default=True)
@click.option("--teams-only", is_flag=True, help="Sees only their teams' devices and "
              "locations (member and viewer only).")
@pass_ctx
def org_add_member(obj: Context, org_name: str, email: str, role: str, teams_only: bool) -> None:
    """Make the existing user EMAIL a member of ORG_NAME (name or id) with a role (as POST
    /orgs/{id}/users)."""
    with obj.conn() as conn:
        oid, uid = accounts.org_id(conn, org_name), accounts.user_id(conn, email)
        accounts.add_membership(conn, user=uid, org=oid, role=role, teams_only=teams_only)
        audit_operator(conn, of="organisations", row=oid, action="member.add",
                       target_type="user", target_id=uid,
                       details={"email": email, "role": role, "teams_only": teams_only})
    click.echo(f"{email}: {role} of {org_name}")


@org.command("set-role")
@click.argument("org_name")
@click.argument("email")
@click.argument("role", type=click.Choice(roles.ROLES))
@click.option("--teams-only/--all-devices", default=None,
              help="Limit to their teams' devices and locations, or lift it (default: keep).")
@pass_ctx
def org_set_role(obj: Context, org_name: str, email: str, role: str,
                 teams_only: bool | None) -> None:
    """Give EMAIL the ROLE in ORG_NAME (as PUT /orgs/{id}/users/{id})."""
    _set_role(obj, email, role, org_name, teams_only)


@org.command("remove-member")
@click.argument("org_name")
@click.argument("email")
@pass_ctx
def org_remove_member(obj: Context, org_name: str, email: str) -> None:
    """Remove EMAIL from ORG_NAME (as DELETE /orgs/{id}/users/{id})."""
    _remove(obj, email, org_name)


@click.group("user")
def user() -> None:
    """Users."""


@user.command("create")
@click.option("--org", "org_name", required=True, help="Organisation name or id (the home one).")
@click.option("--email", required=True)
@click.option("--name", default=None, help="Display name.")
@click.option("--role", type=click.Choice(roles.ROLES), default="member", show_default=True,
              help="Role in the organisation.")
@pass_ctx
def user_create(obj: Context, org_name: str, email: str, name: str | None, role: str) -> None:
    """Create a user. The password comes from SDS_USER_PASSWORD or a prompt, never argv."""
    password = os.environ.get("SDS_USER_PASSWORD") or click.prompt(
        "Password", hide_input=True, confirmation_prompt=True)
    with obj.conn() as conn:
        uid = accounts.create_user(conn, org=accounts.org_id(conn, org_name), email=email,
                                   password=password, name=name, role=role)
        audit_operator(conn, of="users", row=uid, action="user.create", target_type="user",
                       details={"email": email, "name": name, "role": role})
    click.echo(f"user {email} id {uid}")


@user.command("verify")
@click.argument("email")
@pass_ctx
def user_verify(obj: Context, email: str) -> None:
    """Vouch for EMAIL's address: the account's email counts as proven from now on (it may
    accept invitations into other organisations; docs/auth.md "Proven emails")."""
    with obj.conn() as conn:
        uid = accounts.user_id(conn, email)
        conn.execute("UPDATE users SET email_verified_at = coalesce(email_verified_at, now())"
                     " WHERE id = %s", (uid,))
        audit_operator(conn, of="users", row=uid, action="user.verify", target_type="user",
                       details={"email": email})
    click.echo(f"{email}: email proven (vouched by the operator)")


@user.command("list")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@pass_ctx
def user_list(obj: Context, org_name: str) -> None:
    """List an organisation's members: email, role, active, id."""
    with obj.conn() as conn:
        oid = accounts.org_id(conn, org_name)
        rows, _total = members.user_page(conn, oid, 10000, 0, active_only=False)
    for r in rows:
        only = " (teams only)" if r["teams_only"] else ""
        click.echo(f"{r['email']}\t{r['role']}{only}\t"
                   f"{'active' if r['active'] else 'inactive'}\t{r['id']}")


def _set_role(obj: Context, email: str, role: str, org_name: str | None,
              teams_only: bool | None) -> None:
    """The role change of `sds user role` and `sds org set-role` (the operator counts as an
    owner: it may make or unmake owners; the last-owner rule still holds)."""
    with obj.conn() as conn:
        uid = accounts.user_id(conn, email)
        oid = accounts.org_id(conn, org_name) if org_name else members.org_of(conn, uid)
        before = members.fetch_user(conn, uid, oid)
        row = members.set_role(conn, org=oid, user=uid, role=role, teams_only=teams_only,
                               by_owner=True)
        if (before["role"], before["teams_only"]) != (row["role"], row["teams_only"]):
            audit_operator(conn, of="organisations", row=oid, action="member.role",
                           target_type="user", target_id=uid,
                           details={"email": email, "from": before["role"], "to": role,
                                    "teams_only": row["teams_only"]})
    click.echo(f"{email}: {role}{' (teams only)' if row['teams_only'] else ''}")


def _remove(obj: Context, email: str, org_name: str | None) -> None:
    """The removal of `sds user remove` and `sds org remove-member`."""
    with obj.conn() as conn:
        uid = accounts.user_id(conn, email)
        oid = accounts.org_id(conn, org_name) if org_name else members.org_of(conn, uid)
        role = members.fetch_user(conn, uid, oid)["role"]
        done = members.remove_member(conn, org=oid, user=uid, by_owner=True)
        audit_operator(conn, of="organisations", row=oid, action="member.remove",
                       target_type="user", target_id=uid,
                       details={"email": email, "role": role, **done})
    click.echo(f"{email}: removed; {done['tokens_revoked']} token(s) revoked, "
               f"{done['keys_deactivated']} key(s) deactivated")


@user.command("role")
@click.argument("email")
@click.argument("role", type=click.Choice(roles.ROLES))
@click.option("--org", "org_name", default=None, help="Organisation name or id (default: the "
              "user's home organisation).")
@click.option("--teams-only/--all-devices", default=None,
              help="Limit to their teams' devices and locations, or lift it (default: keep).")
@pass_ctx
def user_role(obj: Context, email: str, role: str, org_name: str | None,
              teams_only: bool | None) -> None:
    """Give the user EMAIL the ROLE in an organisation (as PUT /orgs/{id}/users/{id})."""
    _set_role(obj, email, role, org_name, teams_only)


@user.command("remove")
@click.argument("email")
@click.option("--org", "org_name", default=None, help="Organisation name or id (default: the "
              "user's home organisation).")
@pass_ctx
def user_remove(obj: Context, email: str, org_name: str | None) -> None:
    """Remove the user EMAIL from an organisation: their bearer tokens and API keys for it stop
    at once; an account with no membership left is deactivated (as DELETE
    /orgs/{id}/users/{id})."""
    _remove(obj, email, org_name)


@click.group("location")
def location() -> None:
    """Locations."""


@location.command("create")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--name", required=True)
@click.option("--tz", "tz_name", required=True, help="IANA time zone, e.g. America/Chicago.")
@click.option("--lat", type=float, default=None)
@click.option("--lon", type=float, default=None)
@click.option("--elev", type=float, default=None, help="Elevation (m).")
@click.option("--kc", type=float, default=None, help="Crop coefficient.")
@click.option("--sensor-height", type=float, default=2.0, show_default=True,
              help="Wind sensor height (m).")
@pass_ctx
def location_create(obj: Context, org_name: str, name: str, tz_name: str, lat: float | None,
                    lon: float | None, elev: float | None, kc: float | None,
                    sensor_height: float) -> None:
    """Create a location."""
    loc = places.LocationInput(name=name, tz_name=tz_name, lat=lat, lon=lon, elev=elev, kc=kc,
                                 sensor_height=sensor_height)
    with obj.conn() as conn:
        lid = places.create_location(conn, org=accounts.org_id(conn, org_name), loc=loc)
        audit_operator(conn, of="locations", row=lid, action="location.create",
                       target_type="location", details={"name": name, "tz_name": tz_name})
    click.echo(f"location {name} id {lid}")


def _schedule_entry(text: str) -> tuple[date, float]:
    """`YYYY-MM-DD=KC` as (start date, kc)."""
    day, sep, kc = text.partition("=")
    try:
        if not sep:
            raise ValueError
        return date.fromisoformat(day), float(kc)
    except ValueError:
        raise click.BadParameter(f"{text!r}: use YYYY-MM-DD=KC, e.g. 2026-04-01=0.3",
                                 param_hint="--kc-from") from None


@location.command("update")
@click.argument("location_name")
@click.option("--org", "org_name", default=None, help="Organisation name or id (when the "
              "location is given by a name used in several organisations).")
@click.option("--name", default=None, help="New name.")
@click.option("--tz", "tz_name", default=None, help="New IANA zone: re-cuts local hours and days.")
@click.option("--lat", type=float, default=None)
@click.option("--lon", type=float, default=None)
@click.option("--elev", type=float, default=None, help="Elevation (m).")
@click.option("--kc", type=float, default=None, help="Crop coefficient outside the schedule.")
@click.option("--kc-from", "kc_from", multiple=True, metavar="YYYY-MM-DD=KC",
              help="Dated kc schedule entry (repeat); replaces the whole schedule.")
@click.option("--clear-kc-schedule", is_flag=True, help="Remove the dated kc schedule.")
@click.option("--sensor-height", type=float, default=None, help="Wind sensor height (m).")
@click.option("--state", type=click.Choice(locations.STATES), default=None)
@click.option("--crop", default=None)
@click.option("--notes", default=None)
@click.option("--clear", "cleared", multiple=True, type=click.Choice(sorted(locations.NULLABLE)),
              help="Clear a field (repeat).")
@pass_ctx
def location_update(obj: Context, location_name: str, org_name: str | None,
                    kc_from: tuple[str, ...], clear_kc_schedule: bool, cleared: tuple[str, ...],
                    **fields: object) -> None:
    """Change LOCATION (name or id), as PATCH /api/v2/locations/{id} does; the rollups the
    change affects are marked and the scheduler's next run recomputes them."""
    values = {k: v for k, v in fields.items() if v is not None}
    values.update({field: None for field in cleared})
    schedule = [_schedule_entry(e) for e in kc_from] if kc_from else None
    if clear_kc_schedule:
        schedule = []
    if not values and schedule is None:
        raise click.UsageError("nothing to change: give at least one option")
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name) if org_name else None
        loc = places.location_id(conn, location_name, org=org)
        outcome = locations.update_location(conn, loc, values, schedule)
        if outcome.changed:
            audit_operator(conn, of="locations", row=loc, action="location.update",
                           target_type="location",
                           details={"changed": list(outcome.changed), "values": values,
                                    "kc_schedule": schedule,
                                    "rollup_buckets_marked": outcome.marked})
    changed = ", ".join(outcome.changed) or "nothing (values already set)"
    click.echo(f"location {loc}: changed {changed}; {outcome.marked} rollup buckets marked")



@click.group("apikey")
def apikey() -> None:
    """API keys (for bootstrapping; users manage keys through the API)."""


@apikey.command("create")
@click.option("--email", required=True, help="Owner of the key.")
@click.option("--scope", "scopes", multiple=True, required=True,
              help="Scope, repeatable (e.g. data:read).")
@click.option("--name", default="")
@click.option("--exp", default=None, help="ISO 8601 expiry.")
@click.option("--org", "org_name", default=None, help="Organisation the key acts in (name or "
              "id; default: the owner's home organisation).")
@pass_ctx
def apikey_create(obj: Context, email: str, scopes: tuple[str, ...], name: str,
                  exp: str | None, org_name: str | None) -> None:
    """Create an API key and print it (it is shown only this once)."""
    with obj.conn() as conn:
        try:
            expiry = parse_instant(exp, name="--exp") if exp else None
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        owner = accounts.user_id(conn, email)
        oid = accounts.org_id(conn, org_name) if org_name else None
        if oid is not None:
            members.fetch_user(conn, owner, oid)  # a member there, or UnknownObject
        rec = accounts.create_api_key(conn, user=owner, scopes=list(scopes), name=name,
                                      exp=expiry, sealer=sealer(obj.settings), org=oid)
        audit_operator(conn, of="users", row=owner, action="apikey.create", target_type="apikey",
                       target_id=rec["id"], details={"owner": email, "name": name,
                                                     "scopes": sorted(set(scopes))})
    click.echo(f"apikey {rec['apikey']} id {rec['id']} scopes {','.join(rec['scopes'])}")


def sealer(settings: Settings) -> sealing.Sealer | None:
    """The API-key sealer of the settings (None when retrieval is off); ClickException when
    the seal keys are bad."""
    # Quiet: scripts read these commands' output; `sds config` shows the setting.
    try:
        return sealing.from_settings(settings, warn=False)
    except sealing.SealError as exc:
        raise click.ClickException(str(exc)) from None


@apikey.command("new-seal-key")
def apikey_new_seal_key() -> None:
    """Print a new key for SDS_APIKEY_SEAL_KEYS (rotation: put it first, then `reseal`)."""
    click.echo(sealing.new_key())


@apikey.command("reseal")
@pass_ctx
def apikey_reseal(obj: Context) -> None:
    """Seal every sealed value again with the first key of SDS_APIKEY_SEAL_KEYS: retrievable
    API keys, webhook signing secrets and organisations' SMTP passwords (shared.sealing.SEALED).

    Run after putting a new key first in the list; afterwards the older keys can be removed.
    Values no seal key opens are reported (keys then show masked; they still work).
    """
    api = sealer(obj.settings)
    try:
        secrets_ = sealing.secret_sealer(obj.settings)
    except sealing.SealError as exc:
        raise click.ClickException(str(exc)) from None
    if secrets_ is None:
        raise click.ClickException("no SDS_APIKEY_SEAL_KEYS: nothing is sealed")
    lost = 0
    with obj.conn() as conn:
        for col in sealing.SEALED:
            if col.retrievable_only and api is None:
                click.echo(f"{col.what}: not resealed, key retrieval is off "
                           "(SDS_APIKEY_RETRIEVABLE=false)")
                continue
            done, current, gone = sealing.reseal_column(conn, col, secrets_)
            lost += gone
            click.echo(f"{col.what}: resealed {done}, already under the first key {current}, "
                       f"opened by no key {gone}")
    if lost:
        raise click.ClickException(
            f"{lost} sealed value(s) open with none of SDS_APIKEY_SEAL_KEYS: was a key removed "
            "before resealing? Put it back (after the first) and run reseal again")
