"""`sds drill publish|check`: the operator's RPO drill (docs/operations.md "Measure the RPO").
`publish` sends QoS 1 readings as a drill device and writes each one the broker acknowledged
(PUBACK) to a ledger file as it is acknowledged; `check`, after a loss and a restore, counts
the acknowledged readings the database does not have and when they were acknowledged: the
data lost, and the window it was lost in."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import click

from admin.context import Context, pass_ctx
from shared import brokers
from shared.timeutil import format_utc_z, parse_instant


@click.group("drill")
def drill() -> None:
    """Measure the RPO: publish a ledger of QoS 1 readings, then check it against the
    database."""


def _slots(count: int) -> list[datetime]:
    now = datetime.now(UTC)
    top = now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    return [top - timedelta(minutes=5 * i) for i in range(count)]


@drill.command("publish")
@click.argument("device")
@click.option("--ledger", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="File the acknowledged readings are appended to (keep it off the machine "
                   "under drill, e.g. on the laptop running this).")
@click.option("--count", default=600, show_default=True, help="Readings to publish.")
@click.option("--rate", default=10.0, show_default=True, help="Readings per second.")
@pass_ctx
def publish(obj: Context, device: str, ledger: Path, count: int, rate: float) -> None:
    """Publish COUNT readings of DEVICE (a device kept for drills: its readings' times go back
    in 5-minute steps from now), recording each acknowledged one. The device's broker password
    comes from SDS_DEVICE_PASSWORD or a prompt. A reading that is not acknowledged is retried
    until it is (the broker is away during a drill's loss) or the drill is interrupted."""
    password = os.environ.get("SDS_DEVICE_PASSWORD") or click.prompt(
        f"MQTT password of {device}", hide_input=True)
    settings = obj.settings
    client = brokers.new_client(settings, f"{device}-drill", persistent=False,
                                username=device, password=password)
    client.reconnect_delay_set(1, 2)
    try:
        client.connect(settings.mqtt_host, settings.mqtt_port, keepalive=30)
    except OSError as exc:
        raise click.ClickException(f"cannot reach the broker: {exc}") from None
    client.loop_start()
    topic = f"{settings.topic_prefix}/{device}/readings"
    acked = 0
    try:
        with ledger.open("a") as out:
            for i, t in enumerate(_slots(count)):
                body = json.dumps({"time": format_utc_z(t), "tair": 10.0 + i % 7}).encode()
                while True:
                    info = client.publish(topic, body, qos=1)
                    try:
                        info.wait_for_publish(5)
                    except (RuntimeError, ValueError):
                        pass
                    if info.is_published():
                        break
                    time.sleep(0.2)
                out.write(json.dumps({"time": format_utc_z(t),
                                      "acked": format_utc_z(datetime.now(UTC))}) + "\n")
                out.flush()
                os.fsync(out.fileno())
                acked += 1
                time.sleep(1 / rate)
    finally:
        client.loop_stop()
        client.disconnect()
        click.echo(f"{acked} readings of {device} acknowledged; ledger {ledger}")


@drill.command("check")
@click.argument("device")
@click.option("--ledger", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              required=True, help="The ledger `sds drill publish` wrote.")
@pass_ctx
def check(obj: Context, device: str, ledger: Path) -> None:
    """Count the ledger's acknowledged readings of DEVICE missing from the database, and the
    window they were acknowledged in. Exit status 3 when any is missing."""
    entries = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    acked = {parse_instant(e["time"], name="time"): e["acked"] for e in entries}
    with obj.conn() as conn:
        stored = {r[0] for r in conn.execute(
            "SELECT time FROM calibrated WHERE device = %s AND time = ANY(%s)",
            (device, list(acked)))}
    lost = sorted(acked[t] for t in acked if t not in stored)
    click.echo(f"acknowledged {len(acked)}, stored {len(acked) - len(lost)}, lost {len(lost)}")
    if lost:
        first, last = parse_instant(lost[0], name="acked"), parse_instant(lost[-1], name="acked")
        click.echo(f"lost readings were acknowledged from {lost[0]} to {lost[-1]} "
                   f"({(last - first).total_seconds():.1f} s): the RPO of this loss")
        raise SystemExit(3)
