"""Request bodies: the JSON object (or form) a write endpoint was sent, validated by a
marshmallow schema into one 400 that names every rejected field.

JSON is parsed here, not by `request.get_json`: the standard library's parser recurses on the
C stack and raises RecursionError (not ValueError) for a body nested about 1,000 deep, which
Flask lets through as a 500 with a traceback in the log (issue 20 item 2: an unauthenticated
client could fill the disk that way). orjson parses without recursion, stops at 1,024 levels
with a ValueError, and no request body of this API is deeper than MAX_DEPTH.

One character rule for every string of every body, keys included, before any schema sees it
(issue 30 item 6.2: NUL reached PostgreSQL, which cannot hold it in text, as a 500 on half a
dozen routes): NUL and the other C0 control characters are refused with a 400 naming the
field, except tab, line feed and carriage return, which free text (notes, messages) may hold.
Fields that must be one line (names, emails) refuse those three in their own schemas.
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


# C0 controls but tab, line feed and carriage return (NUL first among them).
_REFUSED = frozenset(chr(c) for c in range(32)) - {"\t", "\n", "\r"}


def _refused_in(text: str) -> str | None:
    """The first refused character of `text` as U+XXXX, or None."""
    if _REFUSED.isdisjoint(text):
        return None
    return next(f"U+{ord(ch):04X}" for ch in text if ch in _REFUSED)


def refused_characters(body: dict[str, Any]) -> dict[str, list[str]]:
    """Messages per top-level field of `body` for strings (values at any depth, and keys)
    holding a refused control character; {} when there is none. Walked without recursion."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[str, str, Any]] = []
    for key, value in body.items():
        bad = _refused_in(key)
        field = key if bad is None else ascii(key)[1:-1]  # never echo a control character
        if bad is not None:
            found.setdefault(field, []).append(f"field name holds control character {bad}")
        stack.append((field, "", value))
    while stack:
        field, where, value = stack.pop()
        if isinstance(value, str):
            if (bad := _refused_in(value)) is not None:
                found.setdefault(field, []).append(
                    f"{where}holds control character {bad} (NUL and control characters other"
                    " than tab, line feed and carriage return are not accepted)")
        elif isinstance(value, dict):
            for key, item in value.items():
                if (bad := _refused_in(key)) is not None:
                    found.setdefault(field, []).append(
                        f"{where}key {ascii(key)} holds control character {bad}")
                stack.append((field, f"{where}{ascii(key)[1:-1]}: ", item))
        elif isinstance(value, list):
            stack.extend((field, f"{where}[{i}] ", item) for i, item in enumerate(value))
    return found


def _checked(body: dict[str, Any]) -> dict[str, Any]:
    found = refused_characters(body)
    if found:
        text = "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in sorted(found.items()))
        raise BadRequest(f"invalid body: {text}", errors={"json": found})
    return body


def request_body(*, form: bool) -> dict[str, Any]:
    """The request's JSON object (or form fields when `form`), every string of it free of
    refused control characters (the module docstring); 415 for other content types."""
    mimetype = request.mimetype
    if mimetype == "application/json" or mimetype.endswith("+json"):
        body = parse_json(request.get_data(cache=True))
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return _checked(body)
    if form and mimetype in FORM_TYPES:
        return _checked(request.form.to_dict())
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
