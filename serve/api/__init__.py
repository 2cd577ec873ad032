"""The API's blueprints, registered in this order by `serve.create_app`."""

from __future__ import annotations

from serve.api import (
    alerts,
    apikeys,
    channels,
    data,
    devices,
    health,
    index,
    locations,
    notifications,
    schemas,
    tokens,
)

BLUEPRINTS = [
    schemas.blp,
    data.blp,
    devices.blp,
    locations.blp,
    tokens.blp,
    apikeys.blp,
    alerts.blp,
    notifications.blp,
    channels.blp,
    health.blp,
    index.blp,
]
