"""Ending a device's broker session (issue 20): what `sds device rotate-password` and
`sds device retire` (and their API routes, serve/api/devicewrites.py) do after the broker has
the account change.

A password change alone leaves the device's MQTT session on the broker: a persistent session
(with its subscriptions, such as a `$share` group membership) outlives the password, online or
offline, until it expires. mosquitto has no administrative "kick" without its dynamic-security
plugin, but the MQTT rules give the account's owner one: a CONNECT with Clean Start under the
session's client id discards the old session (an online holder is disconnected, "session taken
over"), and a DISCONNECT with Session Expiry 0 leaves nothing behind. The shipped broker uses
the user name as client id (`use_username_as_clientid`), so logging in as the device with its
new password reaches exactly that session. Retiring a device first gives it a throwaway password
to do this, then removes the login.
"""

from __future__ import annotations

import time

from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from shared import brokers
from shared.config import Settings

# The broker applies a SIGHUP reload on its next loop pass; a connect that races it is refused
# with the old password file, so refusals are retried for this long.
RELOAD_GRACE = 10.0


class SessionNotEnded(Exception):
    """The broker could not be reached, or kept refusing the device's new credentials."""


def end_session(settings: Settings, name: str, password: str, *,
                timeout: float = RELOAD_GRACE) -> str:
    """Connect as device `name` with Clean Start and Session Expiry 0, then disconnect: the
    broker drops whatever session the device had. What was done, in words; SessionNotEnded
    when it could not be done within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while True:
        reason = _clean_connect(settings, name, password)
        if reason is None:
            return f"broker session of {name} ended (clean start, session expiry 0)"
        last = reason
        if time.monotonic() >= deadline:
            raise SessionNotEnded(
                f"could not end the broker session of {name}: {last}; it ends when it expires "
                f"(persistent_client_expiration) or with a clean start under that client id")
        time.sleep(0.25)


def _clean_connect(settings: Settings, name: str, password: str) -> str | None:
    """One clean-start connect and disconnect; None on success, else why it failed."""
    # MQTT 5 (the mosquitto profile): Clean Start and Session Expiry 0 end the session.
    client = brokers.new_client(settings.replace(mqtt_protocol="5"), name, persistent=False,
                                username=name, password=password)
    props = Properties(PacketTypes.CONNECT)  # type: ignore[no-untyped-call]  # paho
    props.SessionExpiryInterval = 0
    with brokers.connected(client, settings, timeout=5, keepalive=30, clean_start=True,
                           properties=props) as connack:
        return connack.problem
