"""The dashboard's writes (and the reads of its alert pages) go through the API itself: a
request to this app's `/api/v2`, made in-process, as the signed-in user.

The session cookie never authorizes an API write (serve/web/session.py): a dashboard form posts
to a dashboard route, which checks the form's CSRF value and then calls the API here with the
session's bearer token in `Authorization`, exactly as any client would. The API's own
authentication, scopes, validation, row-level security, rate limits and error bodies apply; the
page shows the API's answer. No API rule is repeated in the dashboard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from flask import current_app, g, request
from werkzeug.test import EnvironBuilder, run_wsgi_app

from serve.web import session as web_session
from shared.errors import Unauthorized


@dataclass(frozen=True, slots=True)
class Answer:
    """The API's answer: status, parsed JSON body (None when empty or not JSON), headers."""

    status: int
    body: Any
    headers: dict[str, str]

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return 200 <= self.status < 300

    @property
    def page_status(self) -> int:
        """The page's status for a refused call: the API's 4xx, else 502 (never a 5xx that
        looks like the dashboard's own failure for client input)."""
        return self.status if 400 <= self.status < 500 else 502

    @property
    def message(self) -> str:
        """The error body's message (what the API said was wrong), or the status."""
        if isinstance(self.body, dict) and isinstance(self.body.get("message"), str):
            return str(self.body["message"])
        return f"the API answered {self.status}"

    def _fields(self) -> dict[str, Any]:
        errors = self.body.get("errors") if isinstance(self.body, dict) else None
        fields = errors.get("json") if isinstance(errors, dict) else None
        return fields if isinstance(fields, dict) else {}

    def refused(self, field: str) -> bool:
        """Whether the API's 400 names `field` among the refused ones."""
        return field in self._fields()

    def in_words(self, words: dict[str, str], labels: dict[str, str] | None = None) -> str:
        """What was wrong, for the form that sent the body: each refused field the form
        names in `words` (API field -> the form's sentence about it) said that way, any
        other field as the API said it after its label on the form (`labels`, else its
        name); the API's message when it named no field."""
        fields = self._fields()
        if not fields:
            return self.message
        said = []
        for name, why in fields.items():
            if name in words:
                said.append(words[name])
            else:
                text = "; ".join(map(str, why)) if isinstance(why, list) else str(why)
                said.append(f"{(labels or {}).get(name, name)}: {text}")
        return " ".join(s if s.endswith(".") else s + "." for s in said)


def call(method: str, path: str, *, json: Any = None, query: dict[str, Any] | None = None
         ) -> Answer:
    """`method path` on this app's API as the signed-in user; Unauthorized without a
    session. The caller's address goes along, so throttling sees the real client."""
    token = web_session.session_token()
    if token is None:
        raise Unauthorized("sign in first", scheme="Basic")
    headers = [("Authorization", f"Bearer {token}"), ("Accept", "application/json"),
               ("User-Agent", "sds-dashboard")]
    # The same peer and forwarding chain as the page's request: the API sees the same client.
    headers += [("X-Forwarded-For", v) for v in request.headers.getlist("X-Forwarded-For")]
    builder = EnvironBuilder(
        path=path, method=method, query_string=query, json=json, headers=headers,
        environ_base={"REMOTE_ADDR": request.remote_addr or "127.0.0.1"})
    try:
        environ = builder.get_environ()
    finally:
        builder.close()
    # The inner request shares this app context, so its `g` (the principal, the database
    # role of its connections) is this page's: put the page's back afterwards, or a public
    # route called here (the OpenAPI document) leaves the page's connections without a tenant.
    page_g = dict(vars(g))
    try:
        app_iter, status, answered = run_wsgi_app(current_app.wsgi_app, environ, buffered=True)
        try:
            data = b"".join(app_iter)
        finally:
            close = getattr(app_iter, "close", None)
            if close is not None:
                close()
    finally:
        vars(g).clear()
        vars(g).update(page_g)
    code = int(status.split(" ", 1)[0])
    try:
        body = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        body = None
    return Answer(code, body, dict(answered))
