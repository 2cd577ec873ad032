"""Opaque, tamper-evident keyset cursors for `/data` (`X-Cursor-Next` / `cursor=`).

A cursor names the first row of the next page by its key (time, device) and carries the
resolved time window of the first request, so every page of one listing reads the same window
even when `end_time` defaulted to "now". It is bound to the parameters that decide which rows
the listing holds (table, device, location, order, start_time, end_time and the caller's
organisation; `interval` or `points` when aggregated): replayed with others it is a 400, as is
any garbled or altered cursor.

Layout before base64url (no padding): version (1 byte) | next time | window start | window end
(each int64 microseconds since the epoch, big-endian) | parameter fingerprint (8 bytes) | device
name (UTF-8) | HMAC-SHA256 tag over all of it, truncated to 16 bytes. Version 2, used only by
`updated_since` listings, adds the listing's update_time bound (int64 microseconds) after the
window end, so every page reads the same changes and repeats the same watermark.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import re
import secrets
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from shared.errors import BadCursor

log = logging.getLogger(__name__)

VERSION = 1
VERSION_BOUNDED = 2
_HEAD = struct.Struct(">Bqqq8s")
_HEAD_BOUNDED = struct.Struct(">Bqqqq8s")
_TAG_BYTES = 16
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECRET_NAME = "cursor_hmac_key"
_MAX_DEVICE_BYTES = 256
_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")


@dataclass(frozen=True, slots=True)
class Position:
    """Key of a row in listing order: (time, device)."""

    time: datetime
    device: str


@dataclass(frozen=True, slots=True)
class CursorState:
    """What a cursor carries: where the next page starts and the listing's window."""

    position: Position
    start: datetime
    end: datetime
    bound: datetime | None = None  # updated_since listings: update_time < bound


def derive_key(secret: str | bytes) -> bytes:
    """The HMAC key for cursors, derived from a configured or stored secret."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return hashlib.sha256(b"sds cursor v1\x00" + raw).digest()


def load_key(conn: psycopg.Connection, configured: str | None) -> bytes:
    """The cursor key: from the configured secret, else from a random one kept in the database.

    Every gunicorn worker (and every host of one deployment) must verify the cursors the others
    issued, so a per-process random key would not do. The first process inserts a random value;
    all read back the same row. Commits on `conn`.
    """
    if configured:
        return derive_key(configured)
    with conn.transaction():
        conn.execute(
            "INSERT INTO service_secrets (name, value) VALUES (%s, %s)"
            " ON CONFLICT (name) DO NOTHING", (_SECRET_NAME, secrets.token_bytes(32)))
        row = conn.execute(
            "SELECT value FROM service_secrets WHERE name = %s", (_SECRET_NAME,)).fetchone()
    assert row is not None
    log.info("cursor key taken from the database (SDS_CURSOR_SECRET is not set)")
    return derive_key(bytes(row[0]))


def fingerprint(binding: Mapping[str, object]) -> bytes:
    """8 bytes identifying the parameters a cursor is bound to (order-independent)."""
    canonical = "\x1e".join(f"{k}\x1f{'' if v is None else v}" for k, v in sorted(binding.items()))
    return hashlib.sha256(canonical.encode()).digest()[:8]


def _micros(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1)


def _instant(us: int) -> datetime:
    return _EPOCH + timedelta(microseconds=us)


def _tag(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()[:_TAG_BYTES]


def encode(state: CursorState, *, key: bytes, binding: Mapping[str, object]) -> str:
    """The opaque cursor string for `state`, bound to `binding`."""
    device = state.position.device.encode()
    if state.bound is None:
        body = _HEAD.pack(VERSION, _micros(state.position.time), _micros(state.start),
                          _micros(state.end), fingerprint(binding)) + device
    else:
        body = _HEAD_BOUNDED.pack(VERSION_BOUNDED, _micros(state.position.time),
                                  _micros(state.start), _micros(state.end),
                                  _micros(state.bound), fingerprint(binding)) + device
    return base64.urlsafe_b64encode(body + _tag(key, body)).rstrip(b"=").decode("ascii")


_GARBLED = ("cursor: not a cursor issued by this service (garbled or altered); send the "
            "X-Cursor-Next value unchanged, or start again without cursor")


def decode(token: str, *, key: bytes, binding: Mapping[str, object]) -> CursorState:
    """The state inside `token`; BadCursor when garbled, altered, or bound to other parameters."""
    text = token.strip().rstrip("=")
    if not _ALPHABET.fullmatch(text) or len(text) > 1024:
        raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]})
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]}) from None
    if (len(raw) < _HEAD.size + 1 + _TAG_BYTES
            or len(raw) > _HEAD_BOUNDED.size + _MAX_DEVICE_BYTES + _TAG_BYTES):
        raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]})
    body, tag = raw[:-_TAG_BYTES], raw[-_TAG_BYTES:]
    if not hmac.compare_digest(tag, _tag(key, body)):
        raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]})
    bound_us: int | None = None
    if body[0] == VERSION_BOUNDED:
        if len(body) < _HEAD_BOUNDED.size + 1:
            raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]})
        head_size = _HEAD_BOUNDED.size
        version, t_us, start_us, end_us, bound_us, bound = _HEAD_BOUNDED.unpack_from(body)
    else:
        head_size = _HEAD.size
        version, t_us, start_us, end_us, bound = _HEAD.unpack_from(body)
    if version not in (VERSION, VERSION_BOUNDED):
        raise BadCursor("cursor: issued by another version of the service; start again "
                        "without cursor", errors={"cursor": ["unsupported cursor version"]})
    if not hmac.compare_digest(bound, fingerprint(binding)):
        raise BadCursor(
            "cursor: it belongs to a listing with other parameters (table, device, location, "
            "order, start_time, end_time, updated_since, interval or points differ); send it "
            "with the parameters of the request that returned it", errors={"cursor": ["issued for other parameters"]})
    try:
        device = body[head_size:].decode()
        return CursorState(Position(_instant(t_us), device), _instant(start_us),
                           _instant(end_us), None if bound_us is None else _instant(bound_us))
    except (UnicodeDecodeError, OverflowError):  # only reachable with a leaked key
        raise BadCursor(_GARBLED, errors={"cursor": ["invalid cursor"]}) from None
