"""The MQTT alerts topic of an organisation: `alerts/<organisation id>/<kind>`.

One home for the name: the deliverer publishes there (alerts.delivery.mqttpub), the channels
API shows it, `sds alert-reader add` prints it; deploy/mosquitto/acl and the broker plugin
(deploy/mosquitto/sds_plugin.c, ALERTS_ROOT) spell the same root for the broker.
"""

from __future__ import annotations

ROOT = "alerts"


def topic(org: object, kind: str) -> str:
    """Where an event of `kind` of organisation `org` is published."""
    return f"{ROOT}/{org}/{kind}"


def subscription(org: object) -> str:
    """The filter an organisation's alert reader subscribes to."""
    return f"{ROOT}/{org}/#"
