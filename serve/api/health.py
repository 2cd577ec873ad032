"""`/api/v2/health`: liveness of an API worker, without credentials and without the database.

A constant answer: load balancers and deploy scripts poll it, and the serve benchmark uses it
as the cheapest request the server can answer (its requests/s baseline).
"""

from __future__ import annotations

from flask import Response

from serve.auth import public
from serve.errors import Blueprint

blp = Blueprint("health", __name__, url_prefix="/api/v2/health",
                description="Liveness of the API process.")

_OK = b'{"status":"ok"}'


@blp.route("")
@public
@blp.doc(security=[], responses={"200": {
    "description": "The worker answers",
    "content": {"application/json": {"example": {"status": "ok"}}}}})
def health() -> Response:
    """Always {"status": "ok"} while the worker runs; no credentials, no database access."""
    return Response(_OK, mimetype="application/json")
