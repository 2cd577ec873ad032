"""Request bodies: the JSON object (or form) a write endpoint was sent, validated by a
marshmallow schema into one 400 that names every rejected field."""

from __future__ import annotations

from typing import Any

from flask import request
from marshmallow import Schema, ValidationError
from werkzeug.exceptions import UnsupportedMediaType

from shared.errors import BadRequest

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")


def request_body(*, form: bool) -> dict[str, Any]:
    """The request's JSON object (or form fields when `form`); 415 for other content types."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        body = request.get_json(silent=True)
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body
    if form and mimetype in FORM_TYPES:
        return request.form.to_dict()
    accepted = "application/json" + (" or application/x-www-form-urlencoded" if form else "")
    raise UnsupportedMediaType(
        f"Content-Type {mimetype or '(none)'!r} is not supported; send {accepted}")


def _plain(messages: Any) -> Any:
    """marshmallow messages with every key a string (list errors are keyed by index)."""
    if isinstance(messages, dict):
        return {str(k): _plain(v) for k, v in messages.items()}
    if isinstance(messages, list | tuple):
        return [_plain(m) for m in messages]
    return str(messages)


def _flatten(messages: Any) -> str:
    if isinstance(messages, dict):
        return " ".join(f"[{k}] {_flatten(v)}" if k.isdigit() else _flatten(v)
                        for k, v in messages.items())
    if isinstance(messages, list):
        return " ".join(_flatten(m) for m in messages)
    return str(messages)


def load(schema: Schema, body: dict[str, Any], *, read_only: tuple[str, ...] = ()
         ) -> dict[str, Any]:
    """`body` validated by `schema`; one BadRequest naming every rejected field and why:
    read-only fields (named in `read_only`), unknown fields and invalid values alike."""
    messages: dict[str, Any] = {k: ["read-only field"] for k in body if k in read_only}
    try:
        loaded = dict(schema.load({k: v for k, v in body.items() if k not in messages}))
    except ValidationError as exc:
        found = _plain(exc.normalized_messages())
        messages.update(found if isinstance(found, dict) else {"_schema": found})
    if not messages:
        return loaded
    text = "; ".join(f"{field}: {_flatten(msgs)}" if field != "_schema" else _flatten(msgs)
                     for field, msgs in sorted(messages.items()))
    raise BadRequest(f"invalid body: {text}", errors={"json": messages})
