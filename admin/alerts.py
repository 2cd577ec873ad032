"""`sds alert list|create|delete`: alert rules for scripts and bootstrapping, as the database
owner (the rule model is shared/alertrules.py, the writes shared/alertstore.py; the same
validation as `POST /api/v2/alerts`)."""

from __future__ import annotations

import json
from uuid import UUID

import click

from admin.context import Context, pass_ctx
from people import accounts
from shared import alertrules, alertstore
from shared.errors import ServiceError


@click.group("alert")
def alert() -> None:
    """Alert rules (docs/alerts.md): list, create, delete."""


@alert.command("list")
@click.option("--org", "org_name", default=None, help="Only this organisation (name or id).")
@click.option("--json", "as_json", is_flag=True, help="One JSON record per line.")
@pass_ctx
def alert_list(obj: Context, org_name: str | None, as_json: bool) -> None:
    """List rules: id, organisation, name, condition, scope, active."""
    with obj.conn() as conn:
        org = accounts.org_id(conn, org_name) if org_name else None
        rows = conn.execute(
            f"SELECT {alertstore.COLUMNS}, o.name{alertstore.FROM}"
            " JOIN organisations o ON o.id = r.org_id"
            " WHERE (%s::uuid IS NULL OR r.org_id = %s) ORDER BY o.name, r.created_at, r.id",
            (org, org)).fetchall()
    for row in rows:
        rule, _created, _updated = alertstore.rule_of(row[:-1])
        record = alertrules.record(rule)
        if as_json:
            click.echo(json.dumps(record | {"organisation": row[-1]}))
            continue
        scope = next(iter(record["scope"].items()))
        click.echo(f"{rule.id}  {row[-1][:20]:20} {rule.name[:24]:24} {record['description']}"
                   f"  [{scope[0]}={scope[1]}]{'' if rule.active else ' (paused)'}")
    if not as_json:
        click.echo(f"{len(rows)} rule(s)")


@alert.command("create")
@click.option("--org", "org_name", required=True, help="Organisation (name or id).")
@click.argument("body")
@pass_ctx
def alert_create(obj: Context, org_name: str, body: str) -> None:
    """Create a rule from BODY, the JSON of POST /api/v2/alerts, e.g.

    '{"name": "Frost", "table": "calibrated", "column": "tair", "scope": {"organisation":
    true}, "condition": {"op": "<", "threshold": 0}, "for": 900}'
    """
    try:
        parsed = json.loads(body)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="BODY") from None
    if not isinstance(parsed, dict):
        raise click.BadParameter("must be a JSON object", param_hint="BODY")
    try:
        rule = alertrules.parse(parsed)
        with obj.conn() as conn:
            org = accounts.org_id(conn, org_name)
            rid = alertstore.create(conn, org, rule)
    except ServiceError as exc:
        raise click.ClickException(exc.message) from None
    click.echo(f"created rule {rid}: {alertrules.describe(rule)}")


@alert.command("delete")
@click.argument("rule_id", type=click.UUID)
@pass_ctx
def alert_delete(obj: Context, rule_id: UUID) -> None:
    """Delete a rule (its events stay in the history)."""
    with obj.conn() as conn:
        if not alertstore.delete(conn, None, rule_id):
            raise click.ClickException(f"no alert rule {rule_id}")
    click.echo(f"deleted rule {rule_id}")
