"""The Authorization header, parsed (pure): which scheme (Basic, Bearer, Apikey, or a bare API
key) and the secret part, and the email and password of a Basic credential. What the credentials
are worth is serve/authenticator.py's business."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from people import credentials
from shared.errors import (
    BadRequest,
    Unauthorized,
)


@dataclass(frozen=True, slots=True)
class Credentials:
    """Credentials as sent: scheme ('basic' | 'bearer' | 'apikey') and the secret part."""

    scheme: str
    value: str
    via_query: bool = False


_SCHEMES = {"basic": "basic", "bearer": "bearer", "apikey": "apikey"}


def parse_authorization(header: str) -> Credentials:
    """Split an Authorization header into scheme and value; scheme names are case-insensitive
    and any run of spaces or tabs separates them. Unauthorized for anything else."""
    parts = header.strip().split(None, 1)
    if not parts:
        raise Unauthorized("empty Authorization header", scheme="Basic")
    if len(parts) == 1 and parts[0].startswith(credentials.API_KEY_PREFIX):
        # A bare API key (what Swagger UI's apiKey scheme sends when the key is pasted as
        # it is): the sdsk_ prefix and its check suffix say what it is, no scheme needed.
        if "," in parts[0]:
            raise BadRequest("send one Authorization header holding one credential")
        return Credentials("apikey", parts[0])
    scheme = _SCHEMES.get(parts[0].lower())
    if scheme is None:
        raise Unauthorized(
            "unsupported authorization scheme; use Basic, Bearer or Apikey", scheme="Basic")
    value = parts[1].strip() if len(parts) == 2 else ""
    if not value:
        raise Unauthorized(f"{parts[0]} credentials are empty", scheme=challenge(scheme))
    if any(c == "," or c.isspace() for c in value):
        # Servers join repeated Authorization headers with ", ": two credentials, ambiguous.
        raise BadRequest("send one Authorization header holding one credential")
    return Credentials(scheme, value)


def decode_basic(value: str) -> tuple[str, str]:
    """(email, password) from the Base64 part of a Basic header; the password may hold ':'."""
    try:
        text = base64.b64decode(value, validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise Unauthorized("Basic credentials are not valid Base64 of email:password",
                           scheme="Basic") from None
    email, sep, password = text.partition(":")
    if not sep or not email or not password:
        raise Unauthorized("Basic credentials must be email:password", scheme="Basic")
    return email.strip(), password


def challenge(scheme: str) -> str:
    """The WWW-Authenticate scheme name of a credential scheme."""
    return {"basic": "Basic", "bearer": "Bearer", "apikey": "Apikey"}[scheme]
