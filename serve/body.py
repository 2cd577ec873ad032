"""Request bodies: the JSON object (or form) a write endpoint was sent, validated by a
marshmallow schema into one 400 that names every rejected field.

JSON is parsed here, not by `request.get_json`: the standard library's parser recurses on the
C stack and raises RecursionError (not ValueError) for a body nested about 1,000 deep, which
Flask lets through as a 500 with a traceback in the log (issue 20 item 2: an unauthenticated
client could fill the disk that way). orjson parses without recursion, stops at 1,024 levels
with a ValueError, and no request body of this API is deeper than MAX_DEPTH.
"""

from __future__ import annotations

from typing import Any

import orjson
from flask import request
from marshmallow import Schema, ValidationError
from werkzeug.exceptions import UnsupportedMediaType

from shared.errors import BadRequest

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
# The deepest body any route takes is an object holding a list of strings (depth 2); a margin.
MAX_DEPTH = 16


def depth_of(value: Any) -> int:
    """How deeply `value` nests lists and objects (a scalar is 0), walked without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_json(data: bytes) -> Any:
    """The JSON value of `data`; BadRequest for anything that is not JSON (invalid UTF-8,
    NaN, trailing bytes) or nests deeper than MAX_DEPTH."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        # orjson's message names the line and column, never the body's contents.
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if depth_of(value) > MAX_DEPTH:
        raise BadRequest(f"the body nests lists or objects deeper than {MAX_DEPTH} levels")
    return value


def request_body(*, form: bool) -> dict[str, Any]:
    """The request's JSON object (or form fields when `form`); 415 for other content types."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        body = parse_json(request.get_data(cache=True))
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
