"""`sds simulate`: devices at their deployed locations publishing realistic 5-minute weather.

Each device publishes to its own topics with its own broker credentials, as a real logger does:
single-reading messages every 5 minutes (in real time, or faster when replaying from a past
`--start`), an hourly health report, and optionally a catch-up backlog of past days as JSON
arrays. `--bad-ratio` mixes in malformed or implausible messages to exercise the quarantine.

The weather is a deterministic function of (device, time): the same device and instant always
give the same reading, so a backfill and a live run agree, and reruns are reproducible. It is
plausible rather than physical: a solar curve from latitude, longitude and day of year, a
diurnal temperature wave with seasonal mean, humidity from a slowly varying dew point, rain in
multi-hour events, wind with a daytime boost, long-wave radiation from air temperature and cloud.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import random
import signal
import struct
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import click
import paho.mqtt.client as mqtt

from admin.context import connection
from ingest.derive import saturation_vapour_pressure
from ingest.topics import HEALTH, READINGS, topic_for
from shared import brokers
from shared.columns import HEALTH_INPUTS, READING_INPUTS
from shared.config import Settings
from shared.timeutil import FIVE_MINUTES, floor_5min, format_utc_z, parse_instant

log = logging.getLogger(__name__)

SIGMA = 5.670374419e-8  # Stefan-Boltzmann, W m-2 K-4
SOLAR_CONSTANT = 1361.0  # W/m2
FIRMWARE = "1.4.2"
BAD_KINDS = ("bad_json", "not_finite", "out_of_range", "off_grid", "future_time", "wrong_type",
             "device_mismatch", "too_old", "unknown_field")
_RANGES = {c.name: c.valid_range for c in (*READING_INPUTS, *HEALTH_INPUTS) if c.valid_range}


@dataclass(frozen=True, slots=True)
class Site:
    """Where a simulated device stands."""

    device: str
    lat: float
    lon: float
    elev: float


def _unit(*key: object) -> float:
    """A deterministic pseudo-random number in [0, 1) for `key`."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return struct.unpack("<Q", digest)[0] / 2.0**64


def _smooth(device: str, name: str, t: datetime, period_h: float) -> float:
    """Smooth noise in [0, 1): cosine interpolation between knots every `period_h` hours."""
    x = t.timestamp() / 3600.0 / period_h
    k = math.floor(x)
    f = (1 - math.cos(math.pi * (x - k))) / 2
    return _unit(device, name, k) * (1 - f) + _unit(device, name, k + 1) * f


def solar_elevation_sin(lat: float, lon: float, t: datetime) -> float:
    """Sine of the sun's elevation (negative at night) at `t` for a site."""
    doy = t.timetuple().tm_yday
    decl = math.radians(23.44) * math.sin(2 * math.pi * (284 + doy) / 365)
    solar_hour = (t.hour + t.minute / 60 + lon / 15) % 24
    hour_angle = math.radians(15 * (solar_hour - 12))
    phi = math.radians(lat)
    return (math.sin(phi) * math.sin(decl)
            + math.cos(phi) * math.cos(decl) * math.cos(hour_angle))


def weather(site: Site, t: datetime) -> dict[str, float]:
    """The reading of `site` at the 5-minute slot `t`, in stored units, within valid ranges."""
    d = site.device
    doy = t.timetuple().tm_yday
    sin_el = solar_elevation_sin(site.lat, site.lon, t)
    cloud = _smooth(d, "cloud", t, 3.0) ** 1.5
    block = math.floor(t.timestamp() / 10800)  # 3-hour rain blocks
    rain_on = _unit(d, "rain", block) < 0.08 + 0.15 * cloud
    if rain_on:
        cloud = max(cloud, 0.8)

    clear = SOLAR_CONSTANT * 0.75 * max(0.0, sin_el)
    swdw = clear * (1 - 0.75 * cloud**3)
    peak_doy = 200 if site.lat >= 0 else 17
    season = 0.25 * abs(site.lat) * math.cos(2 * math.pi * (doy - peak_doy) / 365)
    t_mean = 27 - 0.4 * abs(site.lat) + season - 0.0065 * site.elev
    solar_hour = (t.hour + t.minute / 60 + site.lon / 15) % 24
    amplitude = 6.0 * (1 - 0.5 * cloud)
    tair = (t_mean + amplitude * math.cos(2 * math.pi * (solar_hour - 15) / 24)
            + 3.0 * (_smooth(d, "tair", t, 1.0) - 0.5) - (2.0 if rain_on else 0.0))
    tdew = min(tair, t_mean - 3 - 8 * _smooth(d, "dry", t, 12.0))
    rh = saturation_vapour_pressure(tdew) / saturation_vapour_pressure(tair)
    if rain_on:
        rh = max(rh, 0.93 + 0.06 * _unit(d, "rh", t))
    precip = (0.1 + 2.0 * _unit(d, "precip", t) ** 3) if rain_on else 0.0

    p_sea = 101.3 + 2.0 * (_smooth(d, "p", t, 12.0) - 0.5) - (0.6 if rain_on else 0.0)
    p = p_sea * ((293 - 0.0065 * site.elev) / 293) ** 5.26
    wind = 0.5 + 4.0 * _smooth(d, "wind", t, 1.0) + 2.0 * max(0.0, sin_el) + (2 if rain_on else 0)
    gust = wind * (1.3 + 0.6 * _unit(d, "gust", t))
    direction = (360 * _smooth(d, "dir", t, 6.0) * 2) % 360

    tk = tair + 273.15
    ea_hpa = 10 * saturation_vapour_pressure(tdew)
    emissivity = min(1.0, 1.24 * (ea_hpa / tk) ** (1 / 7) * (1 + 0.22 * cloud**2))
    lwdw = emissivity * SIGMA * tk**4
    tbelow = tair + 0.004 * swdw - (1.5 if swdw == 0 else 0.0)
    lwuw = 0.98 * SIGMA * (tbelow + 273.15) ** 4
    wet = 5.0 if rain_on or rh > 0.95 else max(0.0, 5.0 * (rh - 0.85) / 0.1)
    values = {
        "tair": tair, "rh": rh, "p": p, "precip": precip, "swdw": swdw, "swuw": 0.23 * swdw,
        "lwdw": lwdw, "lwuw": lwuw, "pardw": 2.05 * swdw, "paruw": 0.1 * 2.05 * swdw,
        "wind_speed": wind, "wind_gust": gust, "wind_direction": direction,
        "tabove": (lwdw / SIGMA) ** 0.25 - 273.15, "tbelow": tbelow, "lfw": wet,
    }
    return {k: round(_clamp(k, v), 3) for k, v in values.items()}


def health(site: Site, t: datetime) -> dict[str, Any]:
    """An hourly health report: battery charged by the sun, signal, board temperature."""
    sun = max(0.0, solar_elevation_sin(site.lat, site.lon, t))
    batt = 70 + 25 * sun - 5 * _unit(site.device, "batt", t)
    return {"batt_pct": round(_clamp("batt_pct", batt), 1),
            "batt_volt": round(3.4 + 0.008 * batt, 3),
            "rssi": round(-55 - 30 * _smooth(site.device, "rssi", t, 6.0)),
            "sys_temp": round(weather(site, floor_5min(t))["tair"] + 4 + 12 * sun, 1),
            "fw": FIRMWARE}


def _clamp(name: str, value: float) -> float:
    lo, hi = _RANGES.get(name, (-math.inf, math.inf))
    return min(hi, max(lo, value))


def reading_body(site: Site, t: datetime) -> dict[str, Any]:
    """The JSON object of one reading, as a device sends it."""
    return {"time": format_utc_z(t), "device": site.device, **weather(site, t)}


def spoil(body: dict[str, Any], kind: str) -> dict[str, Any] | bytes:
    """A bad variant of a reading (`kind` in BAD_KINDS); bytes when it is not even JSON."""
    t = parse_instant(body["time"])
    fmt = "%Y-%m-%dT%H:%M:%SZ"
    if kind == "bad_json":
        return json.dumps(body).encode()[:-7]
    if kind == "not_finite":
        return json.dumps({**body, "tair": math.nan}).encode()  # json writes NaN
    if kind == "out_of_range":
        return {**body, "rh": 1.7}
    if kind == "off_grid":
        return {**body, "time": (t + timedelta(minutes=2)).strftime(fmt)}
    if kind == "future_time":
        return {**body, "time": (t + timedelta(days=1)).strftime(fmt)}
    if kind == "wrong_type":
        return {**body, "tair": f"{body['tair']}C"}
    if kind == "device_mismatch":
        return {**body, "device": body["device"] + "X"}
    if kind == "too_old":
        return {**body, "time": (t - timedelta(days=5000)).strftime(fmt)}
    return {**body, "firmware_note": "extra"}  # unknown_field: ignored and counted, not bad


# ---- the command ---------------------------------------------------------------------------------

def load_sites(settings: Settings, names: tuple[str, ...], limit: int | None) -> list[Site]:
    """Devices with a current deployment, with their location's coordinates and elevation."""
    with connection(settings, name="sds-simulate", connect_timeout=10) as conn:
        rows = conn.execute(
            "SELECT d.name, coalesce(l.lat, 0), coalesce(l.lon, 0), coalesce(l.elev, 0)"
            " FROM devices d JOIN deployments dep ON dep.device_id = d.id"
            "  AND dep.during @> now() JOIN locations l ON l.id = dep.location_id"
            " WHERE cardinality(%s::text[]) = 0 OR d.name = ANY(%s::text[])"
            " ORDER BY d.name", (list(names), list(names))).fetchall()
    sites = [Site(r[0], float(r[1]), float(r[2]), float(r[3])) for r in rows]
    missing = set(names) - {s.device for s in sites}
    if missing:
        raise click.ClickException("not registered or not deployed now: "
                                   + ", ".join(sorted(missing)))
    return sites[:limit] if limit else sites


class _Device:
    """One simulated logger: its own MQTT connection and credentials."""

    def __init__(self, site: Site, settings: Settings, password: str | None, rng: random.Random,
                 bad_ratio: float, counts: Counter[str]) -> None:
        self.site = site
        self.settings = settings
        self.rng = rng
        self.bad_ratio = bad_ratio
        self.counts = counts
        # Client id = device name: the RabbitMQ cluster profile lets a device's clean session
        # start only under its own name (admin/rabbit.py).
        self.client = brokers.new_client(settings, site.device, persistent=False,
                                         username=site.device if password is not None else None,
                                         password=password)
        self.client.reconnect_delay_set(1, 30)
        self.refused: str | None = None
        self.client.on_connect = self._on_connect
        rotation = brokers.Rotation(settings)  # several cluster nodes: the next on reconnect

        def next_node(client: mqtt.Client, _userdata: Any) -> None:
            rotation.advance(client)

        self.client.on_pre_connect = next_node
        brokers.connect_async(self.client, settings, keepalive=60)
        self.client.loop_start()
        self.pending: list[mqtt.MQTTMessageInfo] = []

    def _on_connect(self, _c: mqtt.Client, _u: object, _f: mqtt.ConnectFlags, reason: Any,
                    _p: object) -> None:
        self.refused = str(reason) if reason.is_failure else None

    def wait_connected(self, timeout: float) -> bool:
        """Wait (bounded) until the broker accepted the connection; False when it refused."""
        deadline = time.monotonic() + timeout
        while not self.client.is_connected():
            if self.refused or time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    def _publish(self, kind: str, payload: bytes) -> None:
        info = self.client.publish(topic_for(self.settings.topic_prefix, self.site.device, kind),
                                   payload, qos=1)
        # While the connection is down paho keeps QoS 1 messages and sends them on reconnect;
        # only acknowledged ones leave the pending list.
        self.pending.append(info)
        if len(self.pending) > 1000:
            self.pending = [i for i in self.pending if not _acked(i)]

    def _maybe_spoil(self, body: dict[str, Any]) -> dict[str, Any] | bytes:
        if self.bad_ratio and self.rng.random() < self.bad_ratio:
            kind = self.rng.choice(BAD_KINDS)
            self.counts["bad:" + kind] += 1
            return spoil(body, kind)
        return body

    def send_readings(self, times: list[datetime]) -> None:
        """One message: a single object for one slot, an array for a catch-up."""
        items = [self._maybe_spoil(reading_body(self.site, t)) for t in times]
        if len(items) == 1:
            payload = items[0] if isinstance(items[0], bytes) else json.dumps(items[0]).encode()
        else:
            parts = []
            for item in items:
                if isinstance(item, bytes):
                    # A truncated object would break the whole array: inside an array it is
                    # sent as a string (one bad_shape reading); NaN text is kept as it is.
                    parts.append(item if item.endswith(b"}") else json.dumps(item.decode())
                                 .encode())
                else:
                    parts.append(json.dumps(item).encode())
            payload = b"[" + b",".join(parts) + b"]"
        self._publish(READINGS, payload)
        self.counts["readings"] += len(times)
        self.counts["messages"] += 1

    def send_health(self, t: datetime) -> None:
        body = {"time": format_utc_z(t), **health(self.site, t)}
        self._publish(HEALTH, json.dumps(body).encode())
        self.counts["health"] += 1

    def close(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        for info in self.pending:
            while not _acked(info) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.client.disconnect()
        self.client.loop_stop()


@click.command("simulate")
@click.option("--devices", "limit", type=click.IntRange(min=1), default=None,
              help="Simulate the first N deployed devices (default: all).")
@click.option("--device", "names", multiple=True, help="Simulate this device (repeatable).")
@click.option("--credentials", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="JSON {device: mqtt password}; the user name is the device.")
@click.option("--speed", type=click.FloatRange(min=1.0), default=1.0, show_default=True,
              help="Simulated seconds per real second while replaying from a past --start.")
@click.option("--start", default=None,
              help="Simulated clock start (ISO 8601, default now); never runs ahead of now.")
@click.option("--backfill-days", type=click.FloatRange(min=0), default=0.0,
              help="First send D days before the start as catch-up arrays.")
@click.option("--batch", type=click.IntRange(1, 2016), default=288, show_default=True,
              help="Readings per catch-up message.")
@click.option("--bad-ratio", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Share of readings replaced by bad ones (quarantine demo).")
@click.option("--duration", type=click.FloatRange(min=0), default=None,
              help="Stop after this many seconds (default: until SIGTERM or Ctrl-C).")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed for --bad-ratio.")
@click.option("--keep-running", is_flag=True,
              help="With nothing to simulate (no deployed device with a password in "
                   "--credentials, or the broker refuses them all), say so and wait until "
                   "stopped (or --duration) instead of failing: a supervisor would restart a "
                   "failure in a loop (deploy/run.sh).")
def simulate(limit: int | None, names: tuple[str, ...], credentials: Path | None, speed: float,
             start: str | None, backfill_days: float, batch: int, bad_ratio: float,
             duration: float | None, seed: int, keep_running: bool) -> None:
    """Publish simulated 5-minute weather from deployed devices to the broker.

    With --credentials only the devices it has a password for are simulated (the others, e.g.
    real devices added with `sds device add`, are skipped with one line), and devices the
    broker refuses are skipped the same way; the command fails when none is left, unless
    --keep-running."""
    settings = Settings.from_env(os.environ)
    passwords: dict[str, str] = json.loads(credentials.read_text()) if credentials else {}
    sites = load_sites(settings, names, limit)
    if credentials:
        sites, unknown = split_by_credentials(sites, passwords)
        if unknown:
            click.echo(f"skipping {len(unknown)} deployed device(s) without a password in "
                       f"{credentials}: {', '.join(unknown)}")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    counts: Counter[str] = Counter()
    try:
        devices = _connect(sites, settings, passwords, random.Random(seed), bad_ratio, counts)
        if not devices:
            if sites:
                what = "the broker refused every device"
            else:
                what = ("no deployed devices to simulate"
                        + (" with a password in --credentials" if credentials else "")
                        + " (try `sds demo`)")
            if not keep_running:
                raise click.ClickException(what)
            click.echo(f"{what}: nothing to simulate, waiting until stopped")
            stop.wait(duration)
            return
        _run(devices, stop, counts, start=start, speed=speed, backfill_days=backfill_days,
             batch=batch, duration=duration)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def split_by_credentials(sites: list[Site], passwords: dict[str, str]
                         ) -> tuple[list[Site], list[str]]:
    """The sites with a password, and the names of those without one."""
    return ([s for s in sites if s.device in passwords],
            [s.device for s in sites if s.device not in passwords])


def _connect(sites: list[Site], settings: Settings, passwords: dict[str, str],
             rng: random.Random, bad_ratio: float, counts: Counter[str]) -> list[_Device]:
    """A connected _Device per site; those the broker refuses are closed and skipped with one
    line. No answer at all (the broker is down) is an error: a restart will retry."""
    devices = [_Device(s, settings, passwords.get(s.device), rng, bad_ratio, counts)
               for s in sites]
    failed = [d for d in devices if not d.wait_connected(15.0)]
    if any(d.refused is None for d in failed):
        for dev in devices:
            dev.close(0)
        raise click.ClickException(
            f"could not connect to the broker at {settings.mqtt_host}:{settings.mqtt_port} as "
            + ", ".join(f"{d.site.device} ({d.refused or 'no answer'})" for d in failed))
    if failed:
        for dev in failed:
            dev.close(0)
        click.echo(f"could not connect to the broker at {settings.mqtt_host}:"
                   f"{settings.mqtt_port} as {len(failed)} device(s), skipping them: "
                   + ", ".join(f"{d.site.device} ({d.refused})" for d in failed))
    return [d for d in devices if d not in failed]


def _run(devices: list[_Device], stop: threading.Event, counts: Counter[str], *,
         start: str | None, speed: float, backfill_days: float, batch: int,
         duration: float | None) -> None:
    """Publish from the connected devices until `stop` or the duration: the backfill, then
    each 5-minute slot as the (simulated) clock reaches it."""
    sites = [d.site for d in devices]
    began = time.monotonic()
    clock0 = floor_5min(parse_instant(start, name="--start") if start else datetime.now(UTC))
    click.echo(f"simulating {len(devices)} devices from {clock0:%Y-%m-%d %H:%M}Z at x{speed:g}: "
               + ", ".join(s.device for s in sites))
    try:
        if backfill_days:
            first = clock0 - timedelta(days=backfill_days)
            slots = _slots(floor_5min(first), clock0)
            for dev in devices:
                for i in range(0, len(slots), batch):
                    if stop.is_set():
                        break
                    dev.send_readings(slots[i:i + batch])
                for hour in _slots(floor_5min(first), clock0, timedelta(hours=1)):
                    dev.send_health(hour)
            click.echo(f"backfill sent: {counts['readings']} readings in "
                       f"{counts['messages']} messages")
        sent_until = clock0 - FIVE_MINUTES
        while not stop.is_set():
            if duration is not None and time.monotonic() - began >= duration:
                break
            sim_now = min(datetime.now(UTC),
                          clock0 + timedelta(seconds=(time.monotonic() - began) * speed))
            due = _slots(sent_until + FIVE_MINUTES, floor_5min(sim_now) + FIVE_MINUTES)
            for t in due:
                for dev in devices:
                    dev.send_readings([t])
                    if t.minute == 0:
                        dev.send_health(t)
                sent_until = t
            stop.wait(0.2 if speed > 1 else 1.0)
    finally:
        for dev in devices:
            dev.close()
        bad = sum(v for k, v in counts.items() if k.startswith("bad:"))
        click.echo(f"sent {counts['readings']} readings in {counts['messages']} messages, "
                   f"{counts['health']} health reports, {bad} bad readings")


def _acked(info: mqtt.MQTTMessageInfo) -> bool:
    try:
        return info.is_published()
    except (RuntimeError, ValueError):  # publish failed while disconnected; paho resends
        return False


def _slots(first: datetime, end: datetime, step: timedelta = FIVE_MINUTES) -> list[datetime]:
    out = []
    t = first
    while t < end:
        out.append(t)
        t += step
    return out
