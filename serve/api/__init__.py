"""The API's blueprints, registered in this order by `serve.create_app`."""

from __future__ import annotations

from serve.api import (
    alerts,
    apikeys,
    audit,
    channels,
    data,
    deployments,
    devices,
    devicewrites,
    digest,
    emailsettings,
    health,
    index,
    invitations,
    locations,
    notifications,
    orgs,
    schemas,
    silences,
    teams,
    tokens,
    users,
    water,
)

# By its blueprint: `from __future__ import annotations` has taken the module's name here.
from serve.api.annotations import blp as annotations_blp
from serve.api.quarantine import blp as quarantine_blp

BLUEPRINTS = [
    schemas.blp,
    data.blp,
    devices.blp,
    deployments.blp,
    devicewrites.blp,
    locations.blp,
    water.blp,
    tokens.blp,
    apikeys.blp,
    alerts.blp,
    notifications.blp,
    audit.blp,
    users.blp,
    orgs.blp,
    teams.blp,
    invitations.blp,
    channels.blp,
    emailsettings.blp,
    silences.blp,
    digest.blp,
    annotations_blp,
    quarantine_blp,
    health.blp,
    index.blp,
]
