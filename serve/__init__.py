"""The HTTP API (`/api/v2`): Flask app factory, served by gunicorn through `serve.wsgi:app`.

`create_app(settings)` wires one pool (`serve.pool`), the settings
(`app.extensions["settings"]`), flask-smorest with the OpenAPI 3 document at
`/api/v2/openapi.json` and Swagger UI at `/api/v2/doc` (assets from the swagger-ui-bundle
package, served by this app), the JSON error handlers, CORS headers, the blueprints of
`serve.api.BLUEPRINTS`, authentication (`serve.auth.init_app`) and the web dashboard
(`serve.web.init_app`: `/` and `/dashboard/`).

The pool is opened here, so run gunicorn without `preload_app`: every worker process must
build its own app and connections.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import Any

import swagger_ui_bundle
from apispec import BasePlugin
from flask import Flask, Response, g, has_request_context, redirect, request
from flask_smorest import Api
from psycopg_pool import ConnectionPool

from serve import auth, cursor, errors, fairshare, ids, metrics, web
from serve.api import BLUEPRINTS
from serve.pool import ReadRouter, attach, attach_reads
from shared import coldstore
from shared.config import Settings
from shared.db import ROLE_API, ROLE_AUTH, make_pool, role_for, set_request_scope
from shared.errors import Forbidden

log = logging.getLogger(__name__)

API_PREFIX = "/api/v2"
DOC_ASSETS = f"{API_PREFIX}/doc/assets"
# Response headers browser clients must be able to read (X-Cursor-Next drives paging).
EXPOSED_HEADERS = ("X-Cursor-Next, X-Units, X-Updated-Since-Next, X-Ignored-Parameters,"
                   " Content-Disposition, Retry-After, WWW-Authenticate, Deprecation, Sunset,"
                   " RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, X-Read-Source,"
                   " X-Aggregated-From, X-Aggregation-Interval")
ALLOWED_HEADERS = "Authorization, Accept, Content-Type"
ALLOWED_METHODS = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"


GETTING_STARTED = """Time series of field sensors: tables, schemas, data, devices, locations
and API keys.

**Getting started**

1. Click **Authorize**. Under **apikey**, paste your API key as it is (`sdsk_...`; the demo's
   is in `.state/demo-credentials.txt`) and click **Authorize**, then **Close**. Or use
   **basic** with your email address and password.
2. Open **GET /api/v2/data/{table}**, set `table` to `hourly` and `device` to a device name
   (the demo's are `A000101` to `A000105`; your devices: **GET /api/v2/devices**), then
   **Execute**.
3. The newest rows first: `order=desc`, `limit=24`. Local time: `local_time=America/Chicago`.
   Fahrenheit: `temp=f`. CSV: `format=csv`. Several devices: `device=A000101,A000102`.
4. When the answer has an `X-Cursor-Next` header, put it in `cursor` (same other parameters)
   for the next page. Only what changed since last time: `updated_since` with the
   `X-Updated-Since-Next` of the previous answer.

Tables and their columns: **GET /api/v2/schemas** and **/api/v2/schemas/{table}**. From
Python, the `sds_client` package does the paging, pandas DataFrames and incremental sync
(docs/client.md)."""


def create_app(settings: Settings | None = None) -> Flask:
    """Build the API app: settings from the environment unless given (tests pass their own)."""
    settings = settings if settings is not None else Settings.from_env(os.environ)
    coldstore.configure(settings)  # the cold tier's S3 access (serve.coldread)
    # Flask's own static route serves the Swagger UI files from the installed package: no CDN.
    app = Flask(__name__, static_folder=swagger_ui_bundle.swagger_ui_path,
                static_url_path=DOC_ASSETS)
    app.config.update(
        # Flask.__init__ reads FLASK_DEBUG from the environment; debug mode would let
        # exceptions bypass our JSON 500 handler. Configuration comes from Settings only.
        DEBUG=False,
        API_TITLE="Environmental sensor data service",
        API_VERSION="v2",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX=API_PREFIX,
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="doc",
        OPENAPI_SWAGGER_UI_URL=DOC_ASSETS + "/",
        API_SPEC_OPTIONS={
            "info": {"description": GETTING_STARTED},
            "components": {"securitySchemes": {
                "apikey": {"type": "apiKey", "in": "header", "name": "Authorization",
                           "description": "Paste the API key as it is (sdsk_...). Scripts "
                                          "send `Authorization: Apikey <key>`; the bare key "
                                          "is accepted too."},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "Your email address and password."},
                "bearer": {"type": "http", "scheme": "bearer",
                           "description": "A token from POST /api/v2/auth/token."},
            }},
            "security": [{"apikey": []}, {"basic": []}, {"bearer": []}],
        },
        # Swagger UI: "Try it out" open from the start, request times shown. The key is not
        # persisted (persistAuthorization would keep it in the browser's localStorage).
        OPENAPI_SWAGGER_UI_CONFIG={"tryItOutEnabled": True, "displayRequestDuration": True,
                                   "deepLinking": True},
        MAX_CONTENT_LENGTH=1024 * 1024,
    )
    app.json.sort_keys = False  # type: ignore[attr-defined]  # keys keep their documented order
    app.extensions["settings"] = settings
    pool = make_pool(
        settings, name="sds-serve",
        # Every API statement is bounded; timestamps come back in UTC.
        options=f"-c statement_timeout={int(settings.statement_timeout_ms)} -c TimeZone=UTC",
        role=ROLE_API, checkout=_request_scope(settings),
    )
    attach(app, pool)
    standby = None
    try:
        if settings.database_read_url:
            # /data pages read here while the standby is current enough (serve.pool.ReadRouter).
            # Not waited for: a standby that is down sends reads to the primary, it does not
            # stop the API; each connection is checked as it is handed out, so one broken by a
            # standby restart is replaced rather than failing a request.
            standby = make_pool(
                settings, name="sds-serve-read", url=settings.database_read_url, wait=False,
                check=ConnectionPool.check_connection,
                options=f"-c statement_timeout={int(settings.statement_timeout_ms)}"
                        " -c TimeZone=UTC",
                role=ROLE_API, checkout=_request_scope(settings))
            attach_reads(app, ReadRouter(pool, standby, settings.read_max_staleness))
        # First: its middleware is the outermost, so the time it measures includes every hook.
        metrics.init_app(app, {"primary": pool, **({"standby": standby} if standby else {})})
        with pool.connection() as conn:
            app.extensions["cursor_key"] = cursor.load_key(conn, settings.cursor_secret)
        ids.register(app)  # before the blueprints: their object routes name `objid`
        api = Api(app, spec_kwargs={"extra_plugins": [PathParametersFirst()]})
        errors.init_app(app)  # after Api(): replaces smorest's HTTPException handler with ours
        for blueprint in BLUEPRINTS:
            api.register_blueprint(blueprint)
        # `/api/v2/doc/` (a trailing slash, as people type it) was a 404 (issue 26).
        app.add_url_rule(f"{API_PREFIX}/doc/", "doc_slash", _to_doc)
        auth.init_app(app)
        ids.init_app(app)  # a malformed id's 404, after the caller is judged
        fairshare.init_app(app, settings)  # after auth: its caps need the caller
        web.init_app(app, settings)  # the dashboard: `/` and `/dashboard/` (docs/dashboard.md)
        app.after_request(_cors(settings.cors_origin))
        app.after_request(_security_headers)
    except BaseException:
        pool.close()  # no half-built app keeps connections and pool threads
        if standby is not None:
            standby.close()
        raise
    log.info("API app ready (%d blueprints)", len(BLUEPRINTS))
    return app


@auth.public
def _to_doc() -> Response:
    """The Swagger UI page's one address: a permanent redirect there."""
    return redirect(f"{API_PREFIX}/doc", code=308)  # type: ignore[return-value]


class PathParametersFirst(BasePlugin):
    """Lists a path's parameters (`table` of /data/{table}) first in each of its operations
    instead of after them at path level, where Swagger UI shows them last."""

    def path_helper(self, path: str | None = None, operations: dict[str, Any] | None = None,
                    parameters: list[dict[str, Any]] | None = None, **kwargs: Any) -> None:
        if not parameters or not operations:
            return None
        for operation in operations.values():
            if isinstance(operation, dict):
                operation["parameters"] = [*parameters, *operation.get("parameters", [])]
        parameters.clear()
        return None


def _request_scope(settings: Settings) -> Callable[[Any], None]:
    """Pool checkout hook (docs/security.md "Database roles"): a request's connections work as
    sds_api limited by row-level security to the authenticated caller's organisation; before
    the caller is known (credential checks, POST /auth/token) they work as sds_auth, which
    reaches credentials only. Outside a request (start-up) as sds_api with no organisation."""
    api, auth_role = role_for(settings, ROLE_API), role_for(settings, ROLE_AUTH)

    def scope(conn: Any) -> None:
        if not has_request_context():
            set_request_scope(conn, api, None)
            return
        principal = g.get("principal")
        if principal is None:
            set_request_scope(conn, auth_role, None)
        else:
            if principal.teams_only and api is None:
                # Teams limit a member in the database's policies only (migration 0155); as
                # the login role (SDS_DB_ROLES=false) nothing would, so refuse, never show all.
                raise Forbidden("access limited to teams needs the database roles "
                                "(SDS_DB_ROLES=true); ask an administrator")
            set_request_scope(conn, api, principal.org_id, principal.user_id,
                              principal.teams_only)

    return scope


def _security_headers(response: Response) -> Response:
    """after_request hook: bodies that echo caller input must never be content-sniffed, and no
    page may be framed by another site. Swagger UI (`/api/v2/doc`) is a page whose "Try it
    out" sends requests with the user's credentials: framed, it could be clickjacked (issue 30
    item 6.5). The dashboard's pages set their own, fuller policy (serve/web/views.py)."""
    response.headers["X-Content-Type-Options"] = "nosniff"
    if response.mimetype == "text/html" and request.blueprint != "web":
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Content-Security-Policy", "frame-ancestors 'none'")
    return response


def _cors(origin: str) -> Callable[[Response], Response]:
    """after_request hook adding CORS headers to every answer, errors included."""

    def add_cors(response: Response) -> Response:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = EXPOSED_HEADERS
        if origin != "*":
            response.vary.add("Origin")
        if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
            response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
            response.headers["Access-Control-Allow-Methods"] = ALLOWED_METHODS
            response.headers["Access-Control-Max-Age"] = "600"
        return response

    return add_cors


__all__ = ["create_app"]
