"""`/api/v2/`: a short JSON index of the API (what a person or a client finds at the root)
instead of a 404. Public: it names endpoints, not anyone's data."""

from __future__ import annotations

from typing import Any

from serve.auth import public
from serve.errors import Blueprint

blp = Blueprint("index", __name__, url_prefix="/api/v2",
                description="Where to start: documentation and the endpoints.")

INDEX = {
    "name": "Environmental sensor data service",
    "version": "v2",
    "documentation": "/api/v2/doc",
    "openapi": "/api/v2/openapi.json",
    "dashboard": "/dashboard/",
    "health": "/api/v2/health",
    "authentication": "Authorization: Basic <email:password>, Bearer <token from POST "
                      "/api/v2/auth/token> or Apikey <key>",
    "endpoints": {
        "tables": "/api/v2/schemas",
        "table": "/api/v2/schemas/{table}",
        "data": "/api/v2/data/{table}?device={name}",
        "devices": "/api/v2/devices",
        "device": "/api/v2/devices/{name}",
        "locations": "/api/v2/locations",
        "location": "/api/v2/locations/{id}",
        "summary": "/api/v2/locations/summary",
        "apikeys": "/api/v2/apikeys",
        "token": "/api/v2/auth/token",
    },
}


@blp.route("/")
@public
@blp.doc(security=[], responses={"200": {
    "description": "Links to the documentation, the OpenAPI document and the endpoints",
    "content": {"application/json": {"example": INDEX}}}})
def index() -> Any:
    """Where to start: links to the documentation, the OpenAPI document, the dashboard and
    every endpoint. No credentials needed."""
    return INDEX
