"""The one id parser of object routes, the API's and the dashboard's (issue 31): `objid`.

A route names its object id as `<objid("channel"):channel_id>`; the view receives a `UUID`.
A malformed id is the same 404 as an unknown one ("unknown channel 'x'"), decided here once:
the converter lets the route match (so credentials and scopes are judged first, as for any
id) and `refuse_malformed` answers the 404 right after authentication, before the view runs.
The dashboard's pages use the same converter; a page judges its visitor in its own wrapper
(serve/web/views.py `signed_in`: a signed-out visitor goes to the sign-in form whatever the
id), so it is marked `judged_in_view` and calls `refuse` itself once the visitor is known.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from flask import Flask, current_app, request
from werkzeug.routing import BaseConverter, Map

from shared.errors import UnknownObject

NAME = "objid"
"""The converter's name in route rules."""


def unknown(kind: str, raw: object) -> UnknownObject:
    """The 404 of an id that names no object of `kind` the caller may see (malformed, missing
    or another organisation's: one answer)."""
    return UnknownObject(f"unknown {kind} {str(raw)[:200]!r}")


class Malformed(str):
    """A path segment that is not a UUID, kept with the kind of object it was to name."""

    kind: str

    def __new__(cls, raw: str, kind: str) -> Malformed:
        made = super().__new__(cls, raw)
        made.kind = kind
        return made


class ObjectId(BaseConverter):
    """`<objid("kind"):name>`: a UUID, or a `Malformed` that `refuse_malformed` answers."""

    def __init__(self, url_map: Map, kind: str = "object") -> None:
        super().__init__(url_map)
        self.kind = kind

    def to_python(self, value: str) -> Any:
        """The UUID the segment spells, else Malformed (never a routing failure: an
        unauthenticated caller still gets 401 first)."""
        try:
            return UUID(value)
        except ValueError:
            return Malformed(value, self.kind)

    def to_url(self, value: Any) -> str:
        """The id as it appears in a URL."""
        return str(value)


JUDGED_IN_VIEW = "judged_in_view"
"""The attribute of a view that judges its caller itself, then calls `refuse`."""


def refuse() -> None:
    """A malformed id in the request's path is the 404 of an unknown object."""
    for value in (request.view_args or {}).values():
        if isinstance(value, Malformed):
            raise unknown(value.kind, value)


def refuse_malformed() -> None:
    """Before the view: `refuse`, unless the view judges its caller itself (and then
    refuses)."""
    view = current_app.view_functions.get(request.endpoint or "")
    if not getattr(view, JUDGED_IN_VIEW, False):
        refuse()


def register(app: Flask) -> None:
    """Make `objid` known to the app's rules; call before the blueprints are registered."""
    app.url_map.converters[NAME] = ObjectId


def init_app(app: Flask) -> None:
    """Answer malformed ids; call right after serve.auth.init_app (the caller is judged
    first, as for a well-formed id)."""
    app.before_request(refuse_malformed)
