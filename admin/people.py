"""`sds org|user|location|apikey`: organisations, users, locations and API keys, for
bootstrapping and scripts (users manage their own keys through the API)."""

from __future__ import annotations

import os
from datetime import date

import click

from admin.context import Context, audit_operator, pass_ctx
from serve import members
from shared import accounts, locations, sealing
from shared.config import Settings
from shared.errors import ServiceError
from shared.timeutil import parse_instant


@click.group("org")
def org() -> None:
    """Organisations."""


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


@click.group("user")
def user() -> None:
    """Users."""


@user.command("create")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@click.option("--email", required=True)
@click.option("--name", default=None, help="Display name.")
@click.option("--admin", is_flag=True, help="Organisation administrator.")
@pass_ctx
def user_create(obj: Context, org_name: str, email: str, name: str | None, admin: bool) -> None:
    """Create a user. The password comes from SDS_USER_PASSWORD or a prompt, never argv."""
    password = os.environ.get("SDS_USER_PASSWORD") or click.prompt(
        "Password", hide_input=True, confirmation_prompt=True)
    with obj.conn() as conn:
        uid = accounts.create_user(conn, org=accounts.org_id(conn, org_name), email=email,
                                   password=password, name=name, is_admin=admin)
        audit_operator(conn, of="users", row=uid, action="user.create", target_type="user",
                       details={"email": email, "name": name, "admin": admin})
    click.echo(f"user {email} id {uid}")


@user.command("list")
@click.option("--org", "org_name", required=True, help="Organisation name or id.")
@pass_ctx
def user_list(obj: Context, org_name: str) -> None:
    """List an organisation's users: email, role, active."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name)
        rows, _total = members.user_page(conn, org, 10000, 0, active_only=False)
    for r in rows:
        click.echo(f"{r['email']}\t{members.role_of(r['is_admin'])}\t"
                   f"{'active' if r['active'] else 'removed'}\t{r['id']}")


@user.command("role")
@click.argument("email")
@click.argument("role", type=click.Choice(members.ROLES))
@pass_ctx
def user_role(obj: Context, email: str, role: str) -> None:
    """Give the user EMAIL the ROLE in their organisation (as PUT /orgs/{id}/users/{id})."""
    with obj.conn() as conn:
        uid = accounts.user_id(conn, email)
        org = members.org_of(conn, uid)
        before = members.fetch_user(conn, uid, org)
        members.set_role(conn, org=org, user=uid, role=role)
        if members.role_of(before["is_admin"]) != role:
            audit_operator(conn, of="users", row=uid, action="member.role", target_type="user",
                           details={"email": email, "from": members.role_of(before["is_admin"]),
                                    "to": role})
    click.echo(f"{email}: {role}")


@user.command("remove")
@click.argument("email")
@pass_ctx
def user_remove(obj: Context, email: str) -> None:
    """Remove the user EMAIL from their organisation: the account is deactivated, its bearer
    tokens revoked and its API keys deactivated at once (as DELETE /orgs/{id}/users/{id})."""
    with obj.conn() as conn:
        uid = accounts.user_id(conn, email)
        org = members.org_of(conn, uid)
        done = members.remove_member(conn, org=org, user=uid)
        audit_operator(conn, of="users", row=uid, action="member.remove", target_type="user",
                       details={"email": email, **done})
    click.echo(f"{email}: removed; {done['tokens_revoked']} token(s) revoked, "
               f"{done['keys_deactivated']} key(s) deactivated")


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
    loc = accounts.LocationInput(name=name, tz_name=tz_name, lat=lat, lon=lon, elev=elev, kc=kc,
                                 sensor_height=sensor_height)
    with obj.conn() as conn:
        lid = accounts.create_location(conn, org=accounts.org_id(conn, org_name), loc=loc)
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
        loc = accounts.location_id(conn, location_name, org=org)
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
@pass_ctx
def apikey_create(obj: Context, email: str, scopes: tuple[str, ...], name: str,
                  exp: str | None) -> None:
    """Create an API key and print it (it is shown only this once)."""
    with obj.conn() as conn:
        try:
            expiry = parse_instant(exp, name="--exp") if exp else None
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        owner = accounts.user_id(conn, email)
        rec = accounts.create_api_key(conn, user=owner, scopes=list(scopes), name=name,
                                      exp=expiry, sealer=sealer(obj.settings))
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
    """Seal every retrievable API key again with the first key of SDS_APIKEY_SEAL_KEYS.

    Run after putting a new key first in the list; afterwards the older keys can be removed.
    Keys no seal key opens are reported (their owners see them masked; they still work).
    """
    keys = sealer(obj.settings)
    if keys is None:
        raise click.ClickException(
            "key retrieval is off (SDS_APIKEY_RETRIEVABLE=false or no SDS_APIKEY_SEAL_KEYS)")
    done = current = lost = 0
    with obj.conn() as conn:
        rows = conn.execute(
            "SELECT id, sealed FROM api_keys WHERE sealed IS NOT NULL FOR UPDATE").fetchall()
        for key_id, sealed in rows:
            if not keys.needs_reseal(sealed):
                current += 1
                continue
            if keys.open(sealed) is None:
                lost += 1
                continue
            conn.execute("UPDATE api_keys SET sealed = %s WHERE id = %s",
                         (keys.reseal(sealed), key_id))
            done += 1
    click.echo(f"resealed {done}, already under the first key {current}, "
               f"opened by no key {lost}")
    if lost:
        raise click.ClickException(
            f"{lost} sealed key(s) open with none of SDS_APIKEY_SEAL_KEYS: was a key removed "
            "before resealing? Put it back (after the first) and run reseal again")
