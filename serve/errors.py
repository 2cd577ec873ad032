"""One JSON error body for every 4xx/5xx answer, and the exception -> status table.

Body (docs/spec/reference-facts.md decision 7, the shape of flask-smorest's ErrorSchema):
`{"code": 400, "status": "Bad Request", "message": "...", "errors": {...}}`, `errors` only where
field details help. Domain errors (`shared.errors.ServiceError`), werkzeug HTTP errors (404 for
unknown routes, 405, 413, ...), argument validation failures, database timeouts and unexpected
exceptions all leave through here, always with `Content-Type: application/json`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import flask_smorest
import orjson
import psycopg
import psycopg_pool
from flask import Flask, Response
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import HTTPException, InternalServerError

from serve.fairshare import Busy
from shared.errors import (
    BadRequest,
    ColdTierUnavailable,
    Conflict,
    Forbidden,
    NotFound,
    ServiceError,
    TooManyRequests,
    Unauthorized,
)

log = logging.getLogger(__name__)

# Most specific class first is not needed: the lookup walks the raised class's MRO.
STATUS: dict[type[ServiceError], int] = {
    BadRequest: 400,
    Unauthorized: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    TooManyRequests: 429,
    Busy: 503,  # the server's heavy-page pool is full, not the caller's budget
    ColdTierUnavailable: 503,  # a cold-tier file missing or unreadable (serve.coldguard)
}


class Parser(FlaskParser):
    """webargs parser answering 400 (not webargs' default 422) to invalid parameters."""

    DEFAULT_VALIDATION_STATUS = 400


class Blueprint(flask_smorest.Blueprint):
    """flask-smorest Blueprint whose argument errors are 400s in our error body."""

    ARGUMENTS_PARSER = Parser()


def status_of(exc: ServiceError) -> int:
    """HTTP status for a domain error (500 for a ServiceError subclass not in STATUS)."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_response(
    code: int, message: str, *, errors: Mapping[str, Any] | None = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    """The JSON error response: {code, status, message[, errors]}."""
    body: dict[str, Any] = {"code": code, "status": HTTPStatus(code).phrase, "message": message}
    if errors:
        body["errors"] = errors
    response = Response(orjson.dumps(body), status=code, mimetype="application/json")
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def _validation_errors(messages: Any) -> tuple[str, dict[str, Any]]:
    """Flatten webargs' {location: {field: [msg]}} into a message naming each field."""
    errors: dict[str, Any] = {}
    if isinstance(messages, Mapping):
        for location, fields in messages.items():
            if isinstance(fields, Mapping):
                errors.update(fields)
            else:
                errors[str(location)] = fields
    parts = []
    for field, msgs in errors.items():
        text = " ".join(str(m) for m in msgs) if isinstance(msgs, list | tuple) else str(msgs)
        parts.append(f"{field}: {text}" if field != "_schema" else text)
    return "; ".join(parts) or "invalid parameters", errors


def handle_service_error(exc: ServiceError) -> Response:
    """Domain error -> status from STATUS, message from the exception."""
    code = status_of(exc)
    headers: dict[str, str] = {}
    if isinstance(exc, Unauthorized):
        challenge = f'{exc.scheme} realm="sds"'
        if exc.error:
            challenge += f', error="{exc.error}"'
        headers["WWW-Authenticate"] = challenge
    if isinstance(exc, TooManyRequests):
        headers["Retry-After"] = str(exc.retry_after)
    if code == 500:
        log.error("unmapped service error %s: %s", type(exc).__name__, exc.message)
    return error_response(code, exc.message, errors=exc.errors, headers=headers)


def handle_http_exception(exc: HTTPException) -> Response:
    """werkzeug/flask HTTP errors (routing 404/405, abort(), webargs validation) as JSON."""
    code = exc.code or 500
    if isinstance(exc, InternalServerError):
        return handle_unexpected(exc.original_exception or exc)
    data = getattr(exc, "data", None) or {}
    errors = data.get("errors")
    message = data.get("message")
    if "messages" in data:
        message, errors = _validation_errors(data["messages"])
    if not message:
        message = exc.description or HTTPStatus(code).phrase
    headers = {}
    # Keep headers werkzeug computed (Allow on 405, WWW-Authenticate on 401, Retry-After...).
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            headers[name] = value
    headers.update(data.get("headers") or {})
    return error_response(code, message, errors=errors, headers=headers)


def handle_unexpected(exc: BaseException) -> Response:
    """Anything else: a generic 500 (never a traceback); overload and timeouts are 503."""
    if isinstance(exc, psycopg.errors.QueryCanceled):
        log.warning("query cancelled (statement_timeout): %s", exc)
        return error_response(
            503, "the query took too long and was cancelled; narrow the time range, lower "
            "limit or retry later", headers={"Retry-After": "5"})
    if isinstance(exc, psycopg_pool.PoolTimeout | psycopg.OperationalError):
        log.error("database unavailable: %s", exc)
        return error_response(503, "the database is unavailable; retry later",
                              headers={"Retry-After": "5"})
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal server error")


def init_app(app: Flask) -> None:
    """Register the handlers; call after flask_smorest.Api(app) so ours replace its own."""
    app.register_error_handler(ServiceError, handle_service_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(psycopg.Error, handle_unexpected)
    app.register_error_handler(psycopg_pool.PoolTimeout, handle_unexpected)
    app.register_error_handler(InternalServerError, handle_http_exception)
