"""Running the fleet through the API (issue 34): `POST /api/v2/devices` adds a device (registered
and deployed in one step, with a broker password shown in this answer only),
`POST /api/v2/devices/{name}/password` gives it a new one, `POST /api/v2/devices/{name}/retire`
retires it, and `POST /api/v2/locations` creates a location. The dashboard's fleet forms
(serve/web/fleetpages.py) call exactly these.

The rules are those of `sds device add|rotate-password|retire` and `sds location create`: the
same functions (shared/places.py for the rows, shared/brokeraccounts.py for the mosquitto
password file and the reload, shared/brokersession.py for ending the device's broker session).
The server writes logins only when it is told where the broker's password file is
(`SDS_BROKER_PASSWD_FILE`; deploy/run.sh sets it for the mosquitto profile): otherwise the
device writes are a 409 that changes nothing. Administrators of the organisation only (403
otherwise), with `locations:write` (the scope that also moves a device); each write is audited.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit
from uuid import UUID

import psycopg
from flask import current_app, request
from marshmallow import Schema, fields
from marshmallow.validate import Length

from people import keypolicy
from serve.auth import audit_actor, current_principal, requires
from serve.body import load, request_body
from serve.errors import Blueprint
from serve.pool import pool
from serve.readmodels import device_by_name, device_record, location_by_id, location_record
from shared import audit, brokeraccounts, brokersession, places, recovery
from shared.config import Settings
from shared.errors import Conflict, Forbidden, UnknownDevice, UnknownLocation
from shared.timeutil import parse_instant

log = logging.getLogger(__name__)

blp = Blueprint("devicewrites", __name__, url_prefix="/api/v2",
                description="Adding, re-keying and retiring devices; creating locations.")


class AddDeviceSchema(Schema):
    """Body of POST /devices."""

    name = fields.String(required=True, metadata={
        "description": f"device name, also its broker user name: {places.DEVICE_NAME_RULE}"})
    location = fields.String(required=True, metadata={"description": "the location's id"})
    start = fields.String(data_key="from", metadata={
        "description": "ISO 8601 start of its deployment (default now): readings from then on "
                       "belong to the location"})
    model = fields.String(allow_none=True, validate=Length(max=100))
    type = fields.String(allow_none=True, validate=Length(max=100))


class RetireSchema(Schema):
    """Body of POST /devices/{name}/retire (may be empty)."""

    at = fields.String(metadata={"description": "ISO 8601 instant it stopped (default now)"})


class NewLocationSchema(Schema):
    """Body of POST /locations."""

    name = fields.String(required=True, metadata={"description": "1 to 200 characters, unique"})
    tz_name = fields.String(required=True, metadata={"description": "IANA zone"})
    gps = fields.List(fields.Float(), validate=Length(equal=2), allow_none=True,
                      metadata={"description": "[lon, lat]"})
    elev = fields.Float(allow_none=True, metadata={"description": "metres, -500..9000"})
    kc = fields.Float(allow_none=True, metadata={"description": "crop coefficient 0..3"})
    sensor_height = fields.Float(load_default=2.0, metadata={"description": "wind sensor, m"})


def _settings() -> Settings:
    return cast(Settings, current_app.extensions["settings"])


def _passwd_file() -> Path:
    """Where the broker's logins are; NoBrokerAccounts (409) when this server was not told."""
    name = _settings().broker_passwd_file
    if not name:
        raise brokeraccounts.NoBrokerAccounts(
            "this server does not manage the broker's logins (SDS_BROKER_PASSWD_FILE is "
            "unset): use sds device add|rotate-password|retire on the server")
    return Path(name)


def _pid_file() -> Path | None:
    name = _settings().broker_pid_file
    return Path(name) if name else None


def _admin(conn: psycopg.Connection, what: str) -> None:
    if not keypolicy.is_admin(conn, current_principal()):
        raise Forbidden(f"{what} needs an administrator of the organisation")


def mqtt_login(name: str, password: str) -> dict[str, Any]:
    """What a device needs to publish: where, as whom, to which topic."""
    settings = _settings()
    host, port = urlsplit(request.host_url).hostname or "127.0.0.1", settings.mqtt_port
    if settings.device_mqtt_address:
        address = urlsplit(f"//{settings.device_mqtt_address}")
        host, port = address.hostname or host, address.port or port
    return {"host": host, "port": port, "username": name, "client_id": name,
            "password": password, "topic": f"{settings.topic_prefix}/{name}/readings"}


def _device(conn: psycopg.Connection, name: str) -> dict[str, Any]:
    row = device_by_name(conn, org=current_principal().org_id, name=name)
    if row is None:
        raise UnknownDevice(f"unknown device {name!r}")
    return row


def _keep_logins(passwd: Path) -> str:
    """Seal the changed password file into the recovery kit (shared/recovery.py), so a
    whole-machine loss keeps this login; in words. Skipped where the deployment keeps no kit
    (SDS_STATE_DIR or SDS_RECOVERY_KEY unset); a failure is said, not raised: the login
    change is done and the next `deploy/run.sh` start saves the kit."""
    settings = _settings()
    if not (settings.state_dir and settings.recovery_key):
        return "no recovery kit on this server"
    try:
        with pool().connection() as conn:
            recovery.keep_broker_logins(conn, passwd, settings.recovery_key)
    except (psycopg.Error, recovery.RecoveryError, OSError) as exc:
        log.warning("the recovery kit was not saved after a login change: %s", exc)
        return "the recovery kit was NOT saved (run: sds recovery save)"
    return "recovery kit saved"


def _end_session(name: str, password: str) -> str:
    """Reload the broker, then end the device's old session (as sds device does); in words."""
    words = brokeraccounts.reload_broker(_passwd_file(), _pid_file())
    if not brokeraccounts.reloaded(words):
        return words
    try:
        return f"{words}; " + brokersession.end_session(_settings(), name, password)
    except brokersession.SessionNotEnded as exc:
        return f"{words}; {exc}"


@blp.route("/devices", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": AddDeviceSchema}}})
@blp.response(201)
@requires("locations:write")
def add_device() -> Any:
    """Add a device: registered, deployed at `location` from `from` (default now), and given a
    broker password, returned in `mqtt` in this answer only (the server keeps a hash). 409
    when the name is taken or this server does not manage broker logins."""
    body = load(AddDeviceSchema(), request_body(form=False))
    start = parse_instant(body["start"], name="from") if body.get("start") else \
        datetime.now(UTC).replace(microsecond=0)
    try:
        location = UUID(body["location"])
    except ValueError:
        raise UnknownLocation(f"unknown location {body['location']!r}") from None
    principal = current_principal()
    password = brokeraccounts.new_password()
    name = body["name"]
    with pool().connection() as conn:
        _admin(conn, "adding a device")
        passwd = _passwd_file()
        did, dep = places.add_device(conn, org=principal.org_id, name=name, location=location,
                                     start=start, type=body.get("type"), model=body.get("model"))
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn), action="device.add",
                     target_type="device", target_id=did,
                     details={"name": name, "model": body.get("model"),
                              "type": body.get("type"), "location": str(location),
                              "from": start.isoformat(), "deployment": dep})
        # Last in the transaction: a file that cannot be written leaves no device behind.
        brokeraccounts.set_mqtt_passwords(passwd, {name: password})
        record = device_record(_device(conn, name))
    words = brokeraccounts.reload_broker(passwd, _pid_file()) + "; " + _keep_logins(passwd)
    return {"device": record, "mqtt": mqtt_login(name, password), "broker": words}, 201


@blp.route("/devices/<name>/password", methods=["POST"])
@blp.response(200)
@requires("locations:write")
def rotate_password(name: str) -> Any:
    """A new broker password for the device (in `mqtt`, this answer only); the old one stops
    at the broker's reload, and the device's broker session is ended."""
    principal = current_principal()
    password = brokeraccounts.new_password()
    with pool().connection() as conn:
        row = _device(conn, name)  # first: another organisation's device is a 404
        _admin(conn, "a new device password")
        passwd = _passwd_file()
        if row["state"] == "Retired":
            raise Conflict(f"device {name!r} is retired")
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="device.rotate_password", target_type="device",
                     target_id=row["id"], details={"name": name})
        brokeraccounts.set_mqtt_passwords(passwd, {name: password})
    words = _end_session(name, password) + "; " + _keep_logins(passwd)
    return {"mqtt": mqtt_login(name, password), "broker": words}


@blp.route("/devices/<name>/retire", methods=["POST"])
@blp.doc(requestBody={"required": False,
                      "content": {"application/json": {"schema": RetireSchema}}})
@blp.response(200)
@requires("locations:write")
def retire_device(name: str) -> Any:
    """Retire the device at `at` (default now): state Retired, its deployment ended there,
    its broker login removed (its session ended first). Its data stays."""
    body = load(RetireSchema(), request_body(form=False)) if request.content_length else {}
    # Not rounded down: a device moved or added a moment ago can be retired now.
    at = parse_instant(body["at"], name="at") if body.get("at") else datetime.now(UTC)
    principal = current_principal()
    throwaway = brokeraccounts.new_password()
    with pool().connection() as conn:
        _device(conn, name)  # first: another organisation's device is a 404
        _admin(conn, "retiring a device")
        passwd = _passwd_file()
        did, ended = places.retire_device(conn, name=name, at=at, org=principal.org_id)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="device.retire", target_type="device", target_id=did,
                     details={"name": name, "at": at.isoformat(), "deployment_ended": ended})
        had_login = brokeraccounts.has_mqtt_user(passwd, name)
        if had_login:  # the session is ended with a throwaway password, then the login goes
            brokeraccounts.set_mqtt_passwords(passwd, {name: throwaway})
        record = device_record(_device(conn, name))
    words = "no broker login to remove"
    if had_login:
        try:
            words = _end_session(name, throwaway)
        finally:
            brokeraccounts.remove_mqtt_user(passwd, name)
        words += "; " + brokeraccounts.reload_broker(passwd, _pid_file())
        words += "; " + _keep_logins(passwd)
    return {"device": record, "broker": words}


@blp.route("/locations", methods=["POST"])
@blp.doc(requestBody={"required": True,
                      "content": {"application/json": {"schema": NewLocationSchema}}})
@blp.response(201)
@requires("locations:write")
def create_location() -> Any:
    """Create a location of the caller's organisation (its zone re-cuts nothing: it has no
    readings yet). 409 when the name is taken."""
    body = load(NewLocationSchema(), request_body(form=False))
    lon, lat = body.get("gps") or (None, None)
    principal = current_principal()
    loc = places.LocationInput(name=body["name"].strip(), tz_name=body["tz_name"], lat=lat,
                               lon=lon, elev=body.get("elev"), kc=body.get("kc"),
                               sensor_height=body["sensor_height"])
    with pool().connection() as conn:
        _admin(conn, "creating a location")
        lid = places.create_location(conn, org=principal.org_id, loc=loc)
        audit.record(conn, org=principal.org_id, actor=audit_actor(conn),
                     action="location.create", target_type="location", target_id=lid,
                     details={"name": loc.name, "tz_name": loc.tz_name, "gps": body.get("gps"),
                              "elev": loc.elev, "kc": loc.kc})
        row, devices = location_by_id(conn, org=principal.org_id, location=lid)
    assert row is not None
    return location_record(row, devices), 201
