"""The API's blueprints, registered in this order by `serve.create_app`."""

from __future__ import annotations

from serve.api import (
    apikeys,
    audit,
    data,
    devices,
    health,
    index,
    locations,
    orgs,
    schemas,
    tokens,
    users,
)

BLUEPRINTS = [
    schemas.blp,
    data.blp,
    devices.blp,
    locations.blp,
    tokens.blp,
    apikeys.blp,
    audit.blp,
    users.blp,
    orgs.blp,
    health.blp,
    index.blp,
]
