"""The byte-level JSON framer of an MQTT payload; pure (no I/O, no clock).

`frame(payload, max_payload)` turns a payload into a JSON value without letting one bad part
spoil the rest: orjson parses the common case; when it refuses a payload, or when the payload
may repeat a key (which orjson would silently resolve to the last value), an array is split into
its elements at the byte level (`_split_array`, a string-aware bracket scan) and each element is
parsed on its own by the standard library, which reports repeated keys. An element that is not
UTF-8, not JSON or nested too deeply becomes an `Unparsed` marker in place; NaN/Infinity and
integers of more than MAX_INT_DIGITS digits become `NonFinite` and `HugeInt` markers, which the
validation (ingest/payload.py) rejects with their own reasons.

Only framing lives here; what a reading must hold is ingest/payload.py's business.
"""

from __future__ import annotations

import json
import re
from typing import Any, NamedTuple

import orjson

# Whole-message and per-element reason codes found while framing (the quarantine `reason`;
# defined and described with every other code in shared/quarantinecodes.py).
from shared.quarantinecodes import BAD_JSON, NOT_UTF8, PAYLOAD_TOO_LARGE

# Integers longer than this are not converted (Python refuses > 4300 digits, and no measurement
# needs more than a few): they become a marker that the range check rejects.
MAX_INT_DIGITS = 400
# What a JSON key looks like in the bytes: a string's closing quote, optional blanks, a colon.
# Every key matches once; a `"` escaped inside a string may add a match, never remove one.
_KEY_TOKEN = re.compile(rb'"[ \t\r\n]*:')
_JSON_BLANKS = b" \t\r\n"


class NonFinite(str):
    """Marker for NaN/Infinity literals, which Python's json accepts and JSON does not."""


class HugeInt(str):
    """Marker for an integer literal longer than MAX_INT_DIGITS (kept as its text)."""


class Unparsed(NamedTuple):
    """An array element that could not be parsed on its own: its reason and detail."""

    code: str
    detail: str



class Framed(NamedTuple):
    """What `frame` found in a payload.

    `value` is the JSON value (an array holds an `Unparsed` in place of each element that could
    not be parsed); `problem` is a whole-message (code, detail), value None; `repeated` lists
    the keys repeated in each element (index None: the top-level object); `raws` holds each
    array element's bytes when the careful path split them (else None).
    """

    value: Any
    problem: tuple[str, str] | None
    repeated: dict[int | None, list[str]]
    raws: list[bytes] | None


def frame(payload: bytes, max_payload: int) -> Framed:
    """Parse `payload` into a `Framed` (see there); the size is checked before any parsing, so
    an oversized payload costs no memory beyond its bytes."""
    if len(payload) > max_payload:
        return Framed(None, (PAYLOAD_TOO_LARGE,
                             f"payload is {len(payload)} bytes; the limit is {max_payload}"),
                      {}, None)
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return _parse_exact(payload)
    if isinstance(value, (dict, list)) and _may_repeat_keys(payload, value):
        return _parse_exact(payload)
    return Framed(value, None, {}, None)


def _may_repeat_keys(payload: bytes, value: dict[str, Any] | list[Any]) -> bool:
    """False when no object in `value` can have lost a repeated key to orjson.

    Every key in the bytes matches `_KEY_TOKEN` once (escaped quotes in strings may add
    matches); the parsed value holds one key per distinct key. Equal counts: nothing repeated.
    """
    if type(value) is dict and payload.count(b"{") == 1 and b"[" not in payload:
        return _key_tokens(payload) != len(value)  # one flat object: the common message
    return _key_tokens(payload) != _count_keys(payload, value)


def _key_tokens(payload: bytes) -> int:
    """How many times `_KEY_TOKEN` matches `payload`.

    Without a blank before any colon (what every JSON encoder writes) each match is the two
    bytes `":`, which `bytes.count` finds in a tenth of the regular expression's time (most of
    that is building the list of matches: thousands per catch-up message)."""
    if b" :" in payload or b"\n:" in payload or b"\t:" in payload or b"\r:" in payload:
        return len(_KEY_TOKEN.findall(payload))
    return payload.count(b'":')


def _count_keys(payload: bytes, value: dict[str, Any] | list[Any]) -> int:
    top = [value] if isinstance(value, dict) else value
    dicts = [d for d in top if type(d) is dict]
    # Common case, checked in C: no object or array below the top level (the count of brackets
    # in the bytes can only exceed the number of containers, through brackets in strings).
    if payload.count(b"{") == len(dicts) and payload.count(b"[") == (
            1 if isinstance(value, list) else 0):
        return sum(map(len, dicts))
    count = 0
    stack: list[Any] = [value]  # iterative: values may nest a thousand levels deep
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += len(item)
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return count


def _parse_exact(payload: bytes) -> Framed:
    """The careful path: an array is parsed element by element, so one element that is not
    JSON, not UTF-8 or too deep rejects that element only; repeated keys are reported."""
    elements = _split_array(payload)
    if elements is None:  # not an array (or not a well-formed one): one value or nothing
        value, dups = _parse_one(payload)
        if isinstance(value, Unparsed):
            return Framed(None, (value.code, "payload " + value.detail), {}, None)
        return Framed(value, None, ({None: dups} if dups else {}), None)
    out: list[Any] = []
    repeated: dict[int | None, list[str]] = {}
    for index, raw in enumerate(elements):
        try:  # orjson first (fast), the standard library where it refuses or keys may repeat
            value, dups = orjson.loads(raw), []
            if isinstance(value, (dict, list)) and _may_repeat_keys(raw, value):
                value, dups = _parse_one(raw)
        except orjson.JSONDecodeError:
            value, dups = _parse_one(raw)
        out.append(value)
        if dups:
            repeated[index] = dups
    return Framed(out, None, repeated, elements)


def _parse_one(raw: bytes) -> tuple[Any, list[str]]:
    """One JSON text with the standard library: (value or `_Unparsed`, repeated keys)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Unparsed(NOT_UTF8, f"is not UTF-8: byte {exc.start} "
                         f"({raw[exc.start:exc.start + 1]!r}) {exc.reason}"), []
    repeated: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        obj = dict(items)
        if len(obj) != len(items):
            seen: set[str] = set()
            repeated.extend(k for k, _ in items if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        return obj

    try:
        value = json.loads(text, parse_constant=NonFinite, parse_int=_parse_int,
                           object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        return Unparsed(BAD_JSON, f"is not JSON: {exc.msg} at line {exc.lineno} column "
                         f"{exc.colno}"), []
    except RecursionError:
        return Unparsed(BAD_JSON, "is not JSON this service accepts: nested too deeply"), []
    return value, repeated


def _parse_int(text: str) -> int | HugeInt:
    return int(text) if len(text) <= MAX_INT_DIGITS else HugeInt(text)


_STRUCTURE = re.compile(rb'[\[\]{},"]')
_STRING_END = re.compile(rb'["\\]')


def _split_array(payload: bytes) -> list[bytes] | None:
    """The raw bytes of each element of a top-level JSON array, or None when `payload` is not
    a well-framed array (a string-aware bracket scan; elements are not validated here).

    Works on bytes: JSON's structural characters are ASCII, which never occurs inside a UTF-8
    multi-byte sequence, so an element that is not UTF-8 is still cut out correctly.
    """
    body = payload.strip(_JSON_BLANKS)
    if not body.startswith(b"["):
        return None
    parts: list[bytes] = []
    depth, start, pos = 0, 1, 0
    while True:
        m = _STRUCTURE.search(body, pos)
        if m is None:
            return None  # unterminated
        i = m.start()
        c = body[i]
        if c == 0x22:  # a string: skip to its closing quote, over escapes
            j = i + 1
            while True:
                e = _STRING_END.search(body, j)
                if e is None:
                    return None
                if body[e.start()] == 0x5C:  # backslash: skip the escaped character
                    j = e.start() + 2
                    continue
                pos = e.start() + 1
                break
            continue
        pos = i + 1
        if c in b"[{":
            depth += 1
        elif c in b"]}":
            depth -= 1
            if depth == 0:
                if c != 0x5D or body[i + 1:].strip(_JSON_BLANKS):
                    return None  # the array closed with '}' or is followed by more
                last = body[start:i]
                if parts or last.strip(_JSON_BLANKS):
                    parts.append(last)
                return parts
        elif depth == 1:  # a comma between top-level elements
            parts.append(body[start:i])
            start = i + 1
