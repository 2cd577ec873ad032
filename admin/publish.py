"""`sds device publish-test`: publish once as a device and show where the message landed (the
stored row or the quarantine reason); the exit status is 1 when anything was quarantined."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime

import click
import psycopg
from psycopg import sql

from admin import rabbit
from admin.context import Context, pass_ctx
from shared import brokers
from shared.config import Settings
from shared.errors import ServiceError
from shared.timeutil import format_utc_z, parse_instant


@click.command("publish-test")
@click.argument("name")
@click.option("--reading", default=None,
              help="Send this JSON reading to the readings topic instead of a health report "
                   "(it is stored like any reading: use a real one).")
@click.option("--timeout", type=float, default=15.0, show_default=True,
              help="Seconds to wait for the message to land.")
@pass_ctx
def publish_test(obj: Context, name: str, reading: str | None, timeout: float) -> None:
    """Publish as device NAME and show where the message landed: the stored row, or the
    quarantine reason. The device's broker password comes from SDS_DEVICE_PASSWORD or a
    prompt. By default it sends a health report stamped now, with the firmware version the
    device last reported (health times need not be on the 5-minute grid, so no reading slot
    is taken)."""
    password = os.environ.get("SDS_DEVICE_PASSWORD") or click.prompt(
        f"MQTT password of {name}", hide_input=True)
    settings = obj.settings
    sent_at = datetime.now(UTC).replace(microsecond=0)
    with obj.conn() as conn:
        since = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]
        known = conn.execute("SELECT reported_fw FROM devices WHERE name = %s",
                             (name,)).fetchone()
    if known is None:
        raise click.ClickException(f"unknown device {name!r}")
    if reading is None:
        # A health report needs one field: the firmware the device last reported, which
        # changes nothing (or a marker until the device reports its own).
        kind, body = "health", json.dumps({"time": format_utc_z(sent_at),
                                           "fw": known[0] or "publish-test"})
    else:
        kind, body = "readings", reading
    topic = f"{settings.topic_prefix}/{name}/{kind}"
    _publish_as_device(settings, name, password, topic, body.encode())
    click.echo(f"published to {topic}: {body}")
    deadline = time.monotonic() + timeout
    while True:
        with obj.conn() as conn:
            landed = _where_it_landed(conn, name, kind, body, since)
        if landed:
            for line in landed:
                click.echo(line)
            quarantined = sum(line.startswith("quarantined:") for line in landed)
            if quarantined:
                # A script checks the exit status: a test publish that was refused failed.
                raise click.ClickException(
                    f"{quarantined} of the message's readings went to quarantine (above)")
            return
        if time.monotonic() > deadline:
            raise click.ClickException(
                f"nothing stored or quarantined within {timeout:.0f} s: is the ingester "
                "running and connected (sds aggregate status, .state/logs/ingest.log)?")
        time.sleep(0.25)


def _publish_as_device(settings: Settings, name: str, password: str, topic: str,
                       body: bytes) -> None:
    """Publish once with QoS 1 as the device; ClickException when the broker refuses."""
    # The RabbitMQ cluster profile speaks MQTT 3.1.1 and lets a device start a clean session
    # only under client ids of its own (admin/rabbit.py allows this one).
    client = brokers.new_client(settings, f"{name}{rabbit.PUBLISH_TEST_SUFFIX}",
                                persistent=False, username=name, password=password)
    with brokers.connected(client, settings, timeout=10, keepalive=30) as connack:
        if connack.refused is not None:
            raise click.ClickException(
                f"the broker refused {name}: {connack.refused} (wrong password, or the "
                "device has no broker login: sds device rotate-password)")
        if connack.problem is not None:
            raise click.ClickException(connack.problem)
        info = client.publish(topic, body, qos=1)
        info.wait_for_publish(10)
        if not info.is_published():
            raise click.ClickException("the broker did not acknowledge the message within 10 s")


def _where_it_landed(conn: psycopg.Connection, name: str, kind: str, body: str,
                     since: datetime) -> list[str]:
    """Lines describing the row(s) or quarantine entries the published message made."""
    lines = []
    for reason, detail in conn.execute(
            "SELECT reason, detail FROM quarantine WHERE device = %s AND received_at >= %s"
            " AND payload = %s ORDER BY id", (name, since, body.encode())):
        lines.append(f"quarantined: {reason}: {detail}")
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    items = parsed if isinstance(parsed, list) else [parsed]
    times = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("time"), str):
            try:
                times.append(parse_instant(item["time"], name="time"))
            except ServiceError:
                pass
    table = "health" if kind == "health" else "calibrated"
    if times:
        stmt = sql.SQL("SELECT time, location FROM {} WHERE device = %s AND time = ANY(%s)"
                       " ORDER BY time").format(sql.Identifier(table))
        for t, loc in conn.execute(stmt, (name, times)):
            where = "no location (not deployed at that time)"
            if loc is not None:
                found = conn.execute("SELECT name FROM locations WHERE id = %s",
                                     (loc,)).fetchone()
                where = f"location {found[0] if found else loc}"
            lines.append(f"stored: {table} row {name} {t.isoformat()} at {where}")
    return lines
