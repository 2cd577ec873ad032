"""`sds water`: a location's root-zone water balance settings, its irrigation events and the
forecast, as the API's /locations/{id}/water and /irrigation do (shared/irrigation.py);
every change audited as the operator's."""

from __future__ import annotations

import click

from admin.context import Context, audit_operator, pass_ctx
from people import accounts
from shared import irrigation, places
from shared import waterbalance as wb
from shared.errors import ServiceError


@click.group("water")
def water() -> None:
    """Root-zone water balance (FAO-56): soil, roots, irrigation events, forecast."""


def _location(conn, name: str, org_name: str | None):  # type: ignore[no-untyped-def]
    org = accounts.org_id(conn, org_name) if org_name else None
    return places.location_id(conn, name, org=org)


@water.command("set")
@click.argument("location_name")
@click.option("--org", "org_name", default=None, help="Organisation name or id.")
@click.option("--soil", type=click.Choice(list(wb.SOILS)), default=None,
              help="FAO-56 Table 19 soil class.")
@click.option("--theta-fc", type=float, default=None, help="Measured field capacity, m3/m3.")
@click.option("--theta-wp", type=float, default=None, help="Measured wilting point, m3/m3.")
@click.option("--root-depth", type=float, required=True, help="Root depth, m.")
@click.option("--root-depth-end", type=float, default=None, help="Root depth at --root-end.")
@click.option("--root-start", type=click.DateTime(["%Y-%m-%d"]), default=None)
@click.option("--root-end", type=click.DateTime(["%Y-%m-%d"]), default=None)
@click.option("--crop", type=click.Choice(list(wb.CROP_P)), default=None,
              help="FAO-56 Table 22 crop (gives p).")
@click.option("--p", "p", type=float, default=None, help="Depletion fraction 0..1.")
@pass_ctx
def water_set(obj: Context, location_name: str, org_name: str | None, **values: object
              ) -> None:
    """Set LOCATION's soil, roots and p; the scheduler recomputes its balance."""
    for k in ("root_start", "root_end"):
        if values[k] is not None:
            values[k] = values[k].date()  # type: ignore[attr-defined]
    with obj.conn() as conn:
        loc = _location(conn, location_name, org_name)
        try:
            stored = irrigation.put_settings(conn, loc, values)
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        audit_operator(conn, of="locations", row=loc, action="location.water_settings",
                       target_type="location", details={k: str(v) for k, v in stored.items()})
    taw = 1000 * (stored["theta_fc"] - stored["theta_wp"]) * stored["root_depth"]
    click.echo(f"location {loc}: TAW {taw:.1f} mm at the first root depth, p {stored['p']}")


@water.command("irrigate")
@click.argument("location_name")
@click.option("--org", "org_name", default=None, help="Organisation name or id.")
@click.option("--day", type=click.DateTime(["%Y-%m-%d"]), required=True, help="Local date.")
@click.option("--mm", "depth", type=float, required=True, help="Depth applied, mm.")
@click.option("--planned", is_flag=True, help="A planned event (not yet in the balance).")
@click.option("--note", default=None)
@pass_ctx
def water_irrigate(obj: Context, location_name: str, org_name: str | None, day: object,
                   depth: float, planned: bool, note: str | None) -> None:
    """Record an irrigation event at LOCATION."""
    with obj.conn() as conn:
        loc = _location(conn, location_name, org_name)
        try:
            event = irrigation.add_event(conn, loc, day.date(), depth,  # type: ignore[attr-defined]
                                         "planned" if planned else "applied", note)
        except ServiceError as exc:
            raise click.ClickException(exc.message) from None
        audit_operator(conn, of="locations", row=loc, action="irrigation.create",
                       target_type="location", details={"id": str(event.id),
                                                        "day": event.day.isoformat(),
                                                        "depth_mm": depth,
                                                        "status": event.status})
    click.echo(f"irrigation {event.id}: {depth} mm on {event.day} ({event.status})")


@water.command("status")
@click.argument("location_name")
@click.option("--org", "org_name", default=None, help="Organisation name or id.")
@pass_ctx
def water_status(obj: Context, location_name: str, org_name: str | None) -> None:
    """LOCATION's settings, events and, per device, the forecast."""
    with obj.conn() as conn:
        loc = _location(conn, location_name, org_name)
        settings = irrigation.get_settings(conn, loc)
        if settings is None:
            raise click.ClickException(f"location {loc} has no water settings (sds water set)")
        click.echo(f"soil {settings['soil'] or 'measured'} theta_fc {settings['theta_fc']}"
                   f" theta_wp {settings['theta_wp']}, roots {settings['root_depth']} m,"
                   f" p {settings['p']}")
        for e in irrigation.list_events(conn, loc):
            click.echo(f"  {e.day} {e.depth_mm:6.1f} mm {e.status}")
        devices = [r[0] for r in conn.execute(
            "SELECT DISTINCT device FROM water_balance WHERE location = %s ORDER BY device",
            (loc,)).fetchall()]
        for device in devices:
            history = irrigation.balance_history(conn, device, loc)
            f = wb.forecast(history)
            if f is None:
                continue
            last = history[-1]
            when = ("now" if f.days_to_raw == 0 else "unknown (no recent ETc)"
                    if f.days_to_raw is None else f"in {f.days_to_raw} days")
            click.echo(f"{device} {last.day}: depletion {last.dr:.1f} mm of RAW {last.raw:.1f}"
                       f" / TAW {last.taw:.1f}; irrigate {when}, {f.refill_mm:.1f} mm")
