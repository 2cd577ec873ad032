"""The web dashboard (docs/dashboard.md): server-rendered pages on the API's app, with the
same accounts, tenancy and login throttling.

`init_app(app, settings)` sets up the session cookie (serve.web.session) and registers the
pages (serve.web.views): `/` (landing page) and `/dashboard/...`. Call it after the API's
authentication (`serve.auth.init_app`) and once the cursor key is loaded (it signs sessions).
"""

from __future__ import annotations

from flask import Flask

from serve.web import (
    acceptpage,
    alertpages,
    alertpreview,
    channelpages,
    fleetpages,
    inboxpages,
    notepages,
    peoplepages,
    placepages,
    policypages,
    session,
    silencepages,
    teampages,
    views,
    waterpages,
)
from shared.config import Settings

# Modules whose routes are on `views.blp`: imported before it is registered.
PAGE_MODULES = (views, alertpages, alertpreview, inboxpages, notepages, channelpages, peoplepages,
                placepages, acceptpage, teampages, waterpages, fleetpages, silencepages,
                policypages)


def init_app(app: Flask, settings: Settings) -> None:
    """Add the dashboard to the API app."""
    session.init_app(app, settings)
    app.register_blueprint(views.blp)


__all__ = ["init_app"]
